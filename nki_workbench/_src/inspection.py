"""``nki_workbench.inspect(kernel, *args) -> Inspection``: everything the views show about one call.

An :class:`Inspection` is a plain object: the simulated outputs, the backend_config (the base64
string and its decoded dict), the IR (text and nodes), the operand/output aliases, and explicit
properties over the models below it, each computed on first access and kept:

* ``memory`` / ``sbuf`` / ``psum``: SBUF/PSUM occupancy (the allocation pass's data), with ns
  live ranges from the timeline;
* ``timeline`` and its views ``latency_us``, ``plot_timeline``, ``to_perfetto``, ``roofline``,
  ``critical_path``, ``utilization``, ``busy_ns`` (the time model);
* ``custom_call("jax" | "torchxla")``: the custom-call text that framework's bridge emits;
* ``check``: the last ``nki_workbench.notebook.check`` result (``None`` until one ran).

Nothing registers into this module: it sits above the layers it reads. ``repr()`` and
``_repr_mimebundle_`` give a short deterministic ``text/plain`` summary (HTML in the notebook).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .alloc import occupancy
from .dispatch import bridge_module, kernel_parts
from .encode import (
    PLATFORM_ENV,
    DumpedConfig,
    UnifiedKernel,
    decode_backend_config,
    matmul_mac_count,
)
from .errors import NkiError
from .execution import run
from .ir import walk_insts
from .ir.opcodes import OPCODES
from .options import legacy_backend
from .trace.kernel import TensorSpec, flatten_args

__all__ = ["Inspection", "inspect", "FRAMEWORKS"]

FRAMEWORKS = ("jax", "torchxla")
_UNSET = object()


def _tensor_text(decl) -> str:
    return f"{decl.name} {decl.dtype}[{', '.join(map(str, decl.shape))}]"


class Inspection:
    """One traced (and simulated) kernel call.

    Attributes:
        kernel_name: the kernel function's name.
        platform_target: the resolved target.
        platform_target_is_fallback: whether it is the trn1 fallback.
        grid: the launch grid.
        outputs: simulated outputs in the kernel's convention (one array, or a tuple/list;
            legacy output-argument kernels: a tuple of the written outputs, the caller's arrays
            untouched); ``None`` when not simulated (see ``not_simulated``).
        not_simulated: why there are no outputs (``None`` when simulated).
        backend_config: the base64 config string.
        dumped: the full :class:`~nki_workbench._src.encode.DumpedConfig`.
        memory: SBUF/PSUM occupancy (computed on first access; assignable).
        timeline: per-engine events of the time model (computed on first access; assignable).
        check: the last ``notebook.check`` result, or ``None``.
    """

    def __init__(self, dumped: DumpedConfig, outputs=None, not_simulated: str | None = None):
        self.dumped = dumped
        cfg = dumped.config
        self.kernel_name = cfg["func_name"]
        self.platform_target = cfg["platform_target"]
        self.platform_target_is_fallback = cfg["platform_target_is_fallback"]
        self.grid = tuple(cfg["grid"])
        self.backend_config = dumped.backend_config
        self.outputs = outputs
        self.not_simulated = not_simulated
        self.inputs = None  # parameter name -> array of the simulated call (for the time model)
        self.check = None  # the last notebook.check result
        self._config = None
        self._memory = _UNSET
        self._timeline = _UNSET

    @property
    def config(self) -> dict:
        """The backend_config decoded (through :func:`decode_backend_config`)."""
        if self._config is None:
            self._config = decode_backend_config(self.backend_config)
        return self._config

    @property
    def ir(self) -> str:
        """The IR text (the config's ``serialize_ir_string``)."""
        return self.config["serialize_ir_string"]

    @property
    def kernel(self):
        """The IR (:class:`nki_workbench.ir.Kernel`)."""
        return self.dumped.traced.kernel

    @property
    def traced(self):
        """The trace: IR plus calling convention and constants."""
        return self.dumped.traced

    @property
    def aliases(self) -> dict:
        """``{operand index: output index}`` of outputs that are input buffers."""
        return dict(self.dumped.operand_output_aliases)

    # ------------------------------------------------------------------ time model
    @property
    def timeline(self):
        """Per-engine timeline of the call (the time model, on the call's own inputs)."""
        if self._timeline is _UNSET:
            # why: run-time indices time correctly only with the call's own inputs
            from .sim.timing import timeline
            self._timeline = timeline(self.kernel, inputs=self.inputs)
        return self._timeline

    @timeline.setter
    def timeline(self, value):
        self._timeline = value

    @property
    def latency_us(self) -> float:
        """Estimated latency of the call in microseconds (``timeline.latency_us``)."""
        return self.timeline.latency_us

    @property
    def plot_timeline(self):
        """The timeline's plot function (``timeline.plot``)."""
        return self.timeline.plot

    @property
    def to_perfetto(self):
        """The timeline's Perfetto exporter (``timeline.to_perfetto(path)``)."""
        return self.timeline.to_perfetto

    @property
    def roofline(self):
        """The timeline's roofline view (``timeline.roofline``)."""
        return self.timeline.roofline

    @property
    def critical_path(self):
        """The timeline's critical path (``timeline.critical_path``)."""
        return self.timeline.critical_path

    @property
    def utilization(self):
        """Per-engine utilisation (``timeline.utilization``)."""
        return self.timeline.utilization

    @property
    def busy_ns(self):
        """Per-engine busy time in ns (``timeline.busy_ns``)."""
        return self.timeline.busy_ns

    # ------------------------------------------------------------------ memory model
    @property
    def memory(self):
        """SBUF/PSUM occupancy; live ranges carry ns from the timeline when it exists."""
        if self._memory is _UNSET:
            self._memory = _memory_with_times(self)
        return self._memory

    @memory.setter
    def memory(self, value):
        self._memory = value

    @property
    def sbuf(self):
        """SBUF occupancy (``memory.sbuf``)."""
        return self.memory.sbuf

    @property
    def psum(self):
        """PSUM occupancy (``memory.psum``)."""
        return self.memory.psum

    # ------------------------------------------------------------------ bridges
    def custom_call(self, framework: str) -> str:
        """The custom-call text the ``framework`` bridge emits for this kernel.

        Args:
            framework: ``"jax"`` (StableHLO) or ``"torchxla"`` (HLO).
        """
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {framework!r}; one of {', '.join(FRAMEWORKS)}")
        bridge = bridge_module(framework)
        if bridge is None:
            raise NkiError("wb_bridge_missing", f"no custom-call builder for '{framework}': the "
                           f"{framework} bridge is not available in this build")
        return bridge.custom_call_text(self)

    def summary_lines(self) -> list:
        """The lines of the text summary."""
        k = self.kernel
        decls = k.decls()
        target = self.platform_target + (" (fallback)" if self.platform_target_is_fallback
                                          else "")
        engines: dict = {}
        for inst in walk_insts(k.body):
            eng = OPCODES[inst.op].engine if inst.op in OPCODES else "?"
            engines[eng] = engines.get(eng, 0) + 1
        n_inst = sum(engines.values())
        lines = [f"Inspection of kernel '{self.kernel_name}' on {target}, grid "
                 f"{list(self.grid)}",
                 "  inputs:  " + (", ".join(_tensor_text(d) for d in k.params) or "none"),
                 "  outputs: " + ", ".join(_tensor_text(decls[n]) for n in k.outputs)
                 + ("" if self.not_simulated is None
                    else f" (not simulated: {self.not_simulated})"),
                 f"  IR: {n_inst} instructions ("
                 + ", ".join(f"{e} {c}" for e, c in sorted(engines.items())) + ")",
                 f"  matmul MACs: {matmul_mac_count(k)}"]
        if self.platform_target_is_fallback:
            lines.append(f"  target: {self.platform_target} is the fallback (no platform_target "
                         f"option, {PLATFORM_ENV} or detected instance); set one to choose")
        if self.aliases:
            lines.append("  aliases (operand -> output): " + ", ".join(
                f"{i} -> {j}" for i, j in sorted(self.aliases.items())))
        lines.append(f"  backend_config: {len(self.backend_config)} base64 characters")
        mem = self.memory
        if mem is not None:
            lines.append(f"  memory: SBUF peak {mem.sbuf.peak_bytes_per_partition} / "
                         f"{mem.sbuf.capacity_bytes} B per partition ({mem.sbuf.strategy}), PSUM "
                         f"peak {mem.psum.peak_bytes_per_partition} / {mem.psum.capacity_bytes} B "
                         f"({mem.psum.strategy})")
        return lines

    def __repr__(self):
        return "\n".join(self.summary_lines())

    # The notebook views (``_repr_mimebundle_`` and ``widget()``) live in the notebook layer,
    # above this one: ``nki_workbench/__init__.py`` installs them on this class.


def _to_numpy(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # torch: no grad, on the host; bf16 goes through float32
        x = x.detach().cpu()
        try:
            return x.numpy()
        except TypeError:
            return np.asarray(x.float().numpy())
    return np.asarray(x)


def inspect(kernel, *args, grid=None, platform_target=None, simulate=True, params=None,
            progress=None, sim_backend=None, **kwargs) -> Inspection:
    """Trace ``kernel`` for these arguments, build its backend_config and simulate it.

    Args:
        kernel: an ``@nki.jit`` kernel (its grid and options are used) or a kernel function.
        *args: arrays (numpy, jax, torch) or ``nt.tensor[...]`` placeholders, and constants.
        grid: launch grid (default: the kernel's).
        platform_target: target (default: the kernel's, else the environment / fallback).
        simulate: run the simulator (needs concrete arrays; placeholders skip it).
        params: :class:`~nki_workbench.SimParams` for the simulation (``backend=`` picks the
            simulator; with a ``progress`` observer it always interprets).
        progress: ``progress(ir_kernel)`` returning a context manager whose value is the
            simulator's observer (``observer(inst, state)`` per executed instruction), e.g.
            ``nki_workbench.notebook.progress.SimulationProgress``.
        sim_backend: deprecated spelling of ``params=SimParams(backend=...)``.
        **kwargs: keyword arguments of the kernel.

    Returns:
        Inspection
    """
    params = legacy_backend(params, sim_backend, "inspect", "sim_backend")
    try:
        parts = kernel_parts(kernel)
    except TypeError:
        raise TypeError(f"inspect() needs an NKI kernel (a function or @nki.jit kernel), got "
                        f"{kernel!r}") from None
    func, kgrid, opts = parts.func, parts.grid, dict(parts.options)
    if grid is not None:
        kgrid = grid if isinstance(grid, tuple) else (grid,)
    if platform_target is not None:
        opts["platform_target"] = platform_target
    fk = UnifiedKernel(func, grid=kgrid, **opts)
    dumped = fk.dump_config(*args, **kwargs)
    if not simulate:
        return Inspection(dumped, None, "simulate=False")
    _, leaves = flatten_args(func, args, kwargs, hook=fk.is_framework_tensor)
    if any(isinstance(v, TensorSpec) for _, v in leaves):
        return Inspection(dumped, None, "placeholder arguments")
    traced = dumped.traced
    k = traced.kernel
    arrays = [_to_numpy(v) for _, v in leaves]
    inputs = {d.name: a for d, a in zip(k.params, arrays, strict=True)}
    if progress is None:
        outs = run(traced, inputs, params)
    else:
        with progress(k) as observer:
            outs = run(traced, inputs, params, observer=observer)
    vals = [np.array(outs[n]).reshape(s)
            for n, s in zip(k.outputs, k.result_shapes(), strict=True)]
    if traced.returns == "single":
        result = vals[0]
    else:
        result = vals if traced.returns == "list" else tuple(vals)
    insp = Inspection(dumped, result)
    insp.inputs = inputs
    return insp


def _memory_with_times(insp):
    """Occupancy whose live ranges also carry ns, from the Inspection's timeline."""
    occ = occupancy(insp.kernel)
    try:
        tl = insp.timeline
    except ImportError:  # why: a build without the time model keeps instruction-order ranges
        return occ
    if tl is None:
        return occ
    pos = {id(inst): p for p, inst in enumerate(walk_insts(insp.kernel.body))}
    times: dict = {}
    for ev in tl.events:
        p = pos.get(id(ev.inst))
        if p is not None:
            s, e = times.get(p, (ev.start_ns, ev.end_ns))
            times[p] = (min(s, ev.start_ns), max(e, ev.end_ns))
    return dataclasses.replace(occ, sbuf=occ.sbuf.with_times(times),
                               psum=occ.psum.with_times(times))
