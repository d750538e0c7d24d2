"""One setting of a kernel's compile-time constants, evaluated: shared by the explorer and sweeps.

:func:`evaluate_trial` traces and allocates one setting with :func:`nki_workbench.inspect` (no
simulation) and times it with the time model; :func:`check_params` validates a ``params`` sweep
against the kernel's signature. :mod:`.explorer` (sliders) and :mod:`.sweeps` (parallel runs)
both use them, so a sweep row and the explorer's trial of the same setting are the same numbers.
"""

from __future__ import annotations

import inspect as _pyinspect
from dataclasses import dataclass

from .._src.errors import NkiError
from . import mime
from .arguments import kernel_function

__all__ = ["Trial", "evaluate_trial", "check_params"]


@dataclass(frozen=True)
class Trial:
    """One evaluated setting.

    Attributes:
        setting: ``((name, value), ...)`` in parameter order.
        feasible: whether the kernel traced and fits in SBUF/PSUM.
        reason: why it is infeasible (error code and message), else ``None``.
        code: the error code (``err_...`` / ``wb_...``) when infeasible.
        latency_us: estimated latency (feasible settings).
        sbuf_peak: peak SBUF bytes per partition.
        psum_peak: peak PSUM bytes per partition.
        inspection: the Inspection (feasible settings).
    """

    setting: tuple
    feasible: bool
    reason: str | None = None
    code: str | None = None
    latency_us: float | None = None
    sbuf_peak: int | None = None
    psum_peak: int | None = None
    inspection: object = None

    def label(self) -> str:
        """``TILE_N=256, TILE_M=128``."""
        return ", ".join(f"{k}={v!r}" for k, v in self.setting)

    def status(self) -> str:
        """One line: latency and peaks, or the reason it is infeasible."""
        if not self.feasible:
            return f"{self.label()}: infeasible — {self.reason}"
        return (f"{self.label()}: {self.latency_us:.3f} us (estimate), SBUF peak "
                f"{self.sbuf_peak} B/partition, PSUM peak {self.psum_peak} B/partition")


def check_params(kernel, params) -> dict:
    """``params`` as ``{name: [values]}`` after checking it against the kernel's signature.

    Raises:
        ValueError: no params, an unknown parameter, or an empty / non-list value list.
    """
    if not params:
        raise ValueError("explore() needs params={'NAME': [values, ...]} with at least one "
                         "compile-time constant to vary")
    func = kernel_function(kernel)
    sig = _pyinspect.signature(func)
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    for name, values in params.items():
        if name not in sig.parameters and not takes_kwargs:
            raise ValueError(f"kernel '{func.__name__}' has no parameter '{name}' "
                             f"(parameters: {', '.join(sig.parameters)})")
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"params['{name}'] must be a non-empty list of values")
    return {k: list(v) for k, v in params.items()}


def evaluate_trial(kernel, args, kwargs, grid, platform_target, setting: tuple) -> Trial:
    """Trace, allocate and time one setting (``((name, value), ...)``).

    A setting the trace or the allocator rejects (or that over-subscribes SBUF/PSUM, code
    ``wb_alloc_oversubscribed``) is an infeasible :class:`Trial` with the reason.
    """
    from .._src.inspection import inspect
    try:
        insp = inspect(kernel, *args, grid=grid, platform_target=platform_target,
                       simulate=False, **kwargs, **dict(setting))
        mem = mime.memory_of(insp)
        for buf in (mem.sbuf, mem.psum):
            if buf.peak_bytes_per_partition > buf.capacity_bytes:
                raise NkiError("wb_alloc_oversubscribed", f"{buf.buffer.upper()} needs "
                               f"{buf.peak_bytes_per_partition} B per partition, capacity "
                               f"{buf.capacity_bytes} B")
        tl = mime.timeline_of(insp)
    except NkiError as exc:
        return Trial(setting, False, f"[{exc.code}] {exc.msg}" if exc.code else exc.msg,
                     exc.code)
    except Exception as exc:  # noqa: BLE001 - e.g. the kernel's own asserts on tile sizes
        return Trial(setting, False, f"{type(exc).__name__}: {exc}", None)
    return Trial(setting, True, None, None, tl.latency_us, mem.sbuf.peak_bytes_per_partition,
                 mem.psum.peak_bytes_per_partition, insp)
