"""Run options shared by every layer: :class:`SimParams` (how to simulate).

The one spelling of the simulator backend is ``SimParams(backend="numpy" | "jax" | "auto")``;
``backend=None`` leaves the choice to ``NKI_WORKBENCH_SIM_BACKEND`` (default auto). The older
``backend=`` / ``sim_backend=`` keywords of the run functions still work through
:func:`legacy_backend`, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from typing import Literal

from .errors import NkiError

__all__ = ["SimParams", "BACKENDS", "DEFAULT_MAX_BYTES", "SIM_BACKEND_ENV", "selected_backend",
           "legacy_backend", "legacy_target", "NUMERICS", "NUMERICS_ENV", "selected_numerics"]

BACKENDS = ("numpy", "jax", "auto")
DEFAULT_MAX_BYTES = 1 << 30
"""Default :attr:`SimParams.max_bytes`: 1 GiB of tensors per simulation."""
SIM_BACKEND_ENV = "NKI_WORKBENCH_SIM_BACKEND"
NUMERICS = ("hardware", "nki-simulator")
NUMERICS_ENV = "NKI_WORKBENCH_NUMERICS"


def selected_numerics(params: SimParams | None = None) -> str:
    """The numerics to simulate with: ``params.numerics``, else ``NKI_WORKBENCH_NUMERICS``.

    The environment variable lets unmodified upstream tests (which pass no params) run with
    ``"nki-simulator"`` numerics; the default is ``"hardware"``.

    Raises:
        NkiError: ``wb_bad_numerics`` when the environment names no numerics.
    """
    if params is not None and params.numerics is not None:
        return params.numerics
    value = os.environ.get(NUMERICS_ENV, "").strip().lower() or "hardware"
    if value not in NUMERICS:
        raise NkiError("wb_bad_numerics", f"{NUMERICS_ENV}={value!r} is not a numerics mode",
                       hint=f"use one of {', '.join(NUMERICS)}")
    return value


def selected_backend(params: SimParams | None = None) -> str:
    """The simulator backend to use: ``params.backend``, else ``NKI_WORKBENCH_SIM_BACKEND``.

    Raises:
        NkiError: ``wb_bad_sim_backend`` when the environment names no backend.
    """
    if params is not None and params.backend is not None:
        return params.backend
    value = os.environ.get(SIM_BACKEND_ENV, "").strip().lower() or "auto"
    if value not in BACKENDS:
        raise NkiError("wb_bad_sim_backend",
                       f"{SIM_BACKEND_ENV}={value!r} is not a simulator backend",
                       hint=f"use one of {', '.join(BACKENDS)}")
    return value


@dataclass(frozen=True, kw_only=True)
class SimParams:
    """How to simulate.

    Attributes:
        uninitialized: ``"warn"`` (NaN-poison and warn) or ``"error"`` (raise) on reads of
            memory nothing wrote.
        shuffle_affine: run ``affine_range`` iterations (and SPMD programs) in a random (seeded)
            order.
        detect_races: check ``affine_range`` iterations and SPMD programs for races: a value
            one iteration reads that another wrote, elements two iterations (or two programs)
            write when the result is seen afterwards.
        races: ``"warn"`` (:class:`LoopCarriedDependencyWarning` / :class:`SpmdRaceWarning`)
            or ``"error"`` (``NkiError`` ``wb_race``) when a race is found.
        max_bytes: most bytes of tensors one simulation may allocate (checked before anything
            is allocated: ``NkiError`` ``wb_memory_budget`` naming the largest tensor); ``None``
            lifts the limit. Default 1 GiB, so nothing large is allocated without being asked.
        seed: seed of the random generator (``nl.rand``, ``dropout``, shuffling).
        collective_timeout: seconds a program waits at a collective before failing.
        backend: ``"numpy"`` (the interpreter), ``"jax"`` (the IR compiled to one jitted JAX
            program: same results), ``"auto"`` or ``None`` (``NKI_WORKBENCH_SIM_BACKEND``,
            default auto). Runs with an instruction observer always interpret.

            ``"auto"`` picks per call (:func:`~.execution.auto_backend`): the interpreter
            until the time it has spent on a kernel specialisation reaches the specialisation's
            estimated compile time (so a kernel called a few times never waits for a compile),
            the compiled program from then on, or already on the first call when the kernel's
            estimated interpreter time (:data:`~.execution.AUTO_COMPILE_FIRST_S`, from its
            static work estimate) is large. Kernels the compiled program cannot run
            (interpreter-only opcodes, ``shuffle_affine``, collectives) and machines without
            jax always interpret, silently (no ``CompiledFallbackWarning``: nothing compiled
            was asked for). Warnings and errors are the interpreter's either way; values
            differ between the two only where the executors do (transcendentals by a few
            float32 ulps, contracted matmuls by one bf16 ulp: ``docs/semantics.md``).
        numerics: ``"hardware"`` (every tile rounds to its dtype, as the engines do),
            ``"nki-simulator"`` (as NKI's own simulator: low-precision on-chip tiles are kept
            in float32, rounding happens only in HBM, ``nisa.dropout`` keeps every element;
            for comparing against upstream goldens computed that way) or ``None``
            (``NKI_WORKBENCH_NUMERICS``, default hardware).
    """

    uninitialized: Literal["warn", "error"] = "warn"
    shuffle_affine: bool = False
    detect_races: bool = True
    races: Literal["warn", "error"] = "warn"
    max_bytes: int | None = DEFAULT_MAX_BYTES
    seed: int = 0
    collective_timeout: float = 60.0
    backend: Literal["numpy", "jax", "auto"] | None = None
    numerics: Literal["hardware", "nki-simulator"] | None = None

    def __post_init__(self):
        if self.uninitialized not in ("warn", "error"):
            raise ValueError(f"SimParams.uninitialized must be 'warn' or 'error', got "
                             f"{self.uninitialized!r}")
        if self.max_bytes is not None and (not isinstance(self.max_bytes, int) or
                                           self.max_bytes <= 0):
            raise ValueError(f"SimParams.max_bytes must be a positive int or None, got "
                             f"{self.max_bytes!r}")
        if self.races not in ("warn", "error"):
            raise ValueError(f"SimParams.races must be 'warn' or 'error', got {self.races!r}")
        if self.numerics is not None and self.numerics not in NUMERICS:
            raise ValueError(f"SimParams.numerics must be 'hardware' or 'nki-simulator', got "
                             f"{self.numerics!r}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"SimParams.backend must be 'numpy', 'jax', 'auto' or None, "
                             f"got {self.backend!r}")


def legacy_backend(params: SimParams | None, backend: str | None, api: str,
                   keyword: str = "backend", stacklevel: int = 3) -> SimParams | None:
    """``params`` with an old-style ``backend=`` keyword folded in (warning when it is given).

    Args:
        params: the caller's :class:`SimParams` (or ``None``).
        backend: the deprecated keyword's value (``None``: not given).
        api: the function's public name, for the warning.
        keyword: the keyword's name (``"backend"`` or ``"sim_backend"``).
        stacklevel: where the warning points (the user's call).

    Returns:
        ``params`` unchanged when ``backend`` is ``None``, else a copy with ``backend`` set.
    """
    if backend is None:
        return params
    warnings.warn(f"{api}({keyword}=...) is deprecated; pass params=SimParams(backend="
                  f"{backend!r})", DeprecationWarning, stacklevel=stacklevel)
    return dataclasses.replace(params or SimParams(), backend=backend)


def legacy_target(platform_target: str | None, target: str | None, api: str,
                  stacklevel: int = 3) -> str | None:
    """``platform_target``, or the deprecated ``target=`` keyword's value (with a warning).

    ``platform_target=`` is the one spelling of the target in every public function.

    Raises:
        TypeError: both keywords given.
    """
    if target is None:
        return platform_target
    if platform_target is not None:
        raise TypeError(f"{api}() got both platform_target= and its deprecated spelling target=")
    warnings.warn(f"{api}(target=...) is deprecated; pass platform_target={target!r}",
                  DeprecationWarning, stacklevel=stacklevel)
    return target
