"""``nki_workbench.inspect(kernel, *args) -> Inspection``: everything the views show about one call.

An :class:`Inspection` is a plain object first: the simulated outputs, the backend_config (the
base64 string and its decoded dict), the IR (text and nodes), the operand/output aliases, and
slots that other parts of the workbench fill:

* ``register_slot(name, fn)``: ``inspection.<name>`` is computed on first access as
  ``fn(inspection)`` and kept (``memory`` and ``timeline`` always exist and are ``None`` until a
  provider is registered; the memory and time models register theirs).
* ``register_custom_call(framework, fn)``: ``inspection.custom_call("jax" | "torchxla")`` returns
  ``fn(inspection)``, the custom-call text the bridge emits.
* ``register_summary_line(fn)``: ``fn(inspection) -> str | None`` adds a line to the text summary.

``repr()`` and ``_repr_mimebundle_`` give a short deterministic ``text/plain`` summary.
"""

from __future__ import annotations

import numpy as np

from .encode import DumpedConfig, UnifiedKernel, decode_backend_config, matmul_mac_count
from .errors import NkiError
from .ir import walk_insts
from .trace.kernel import TensorSpec, flatten_args

__all__ = ["Inspection", "inspect", "register_slot", "register_custom_call",
           "register_summary_line", "FRAMEWORKS"]

FRAMEWORKS = ("jax", "torchxla")

_SLOTS: dict = {"memory": None, "timeline": None}
_CUSTOM_CALLS: dict = {}
_SUMMARY_LINES: list = []


def register_slot(name: str, provider) -> None:
    """Make ``Inspection.<name>`` computed on first access as ``provider(inspection)``."""
    if name.startswith("_") or (name in Inspection.__dict__ and name not in _SLOTS):
        raise ValueError(f"'{name}' is not a free Inspection attribute name")
    _SLOTS[name] = provider


def register_custom_call(framework: str, builder) -> None:
    """Install the builder of ``Inspection.custom_call(framework)`` (a bridge does this)."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; one of {', '.join(FRAMEWORKS)}")
    _CUSTOM_CALLS[framework] = builder


def register_summary_line(fn) -> None:
    """Add ``fn(inspection) -> str | None`` to the text summary (in registration order)."""
    if fn not in _SUMMARY_LINES:
        _SUMMARY_LINES.append(fn)


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
        memory: SBUF/PSUM occupancy (filled by the memory model), or ``None``.
        timeline: per-engine events (filled by the time model), or ``None``.
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
        self._slot_values: dict = {}
        self._config = None

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

    def _slot(self, name):
        if name not in self._slot_values:
            provider = _SLOTS.get(name)
            self._slot_values[name] = None if provider is None else provider(self)
        return self._slot_values[name]

    memory = property(lambda self: self._slot("memory"),
                      lambda self, v: self._slot_values.__setitem__("memory", v),
                      doc="SBUF/PSUM occupancy (memory model), or None.")
    timeline = property(lambda self: self._slot("timeline"),
                        lambda self, v: self._slot_values.__setitem__("timeline", v),
                        doc="Per-engine timeline (time model), or None.")

    def __getattr__(self, name):
        # why: slots registered by other modules (e.g. 'sbuf') read like attributes
        if not name.startswith("_") and name in _SLOTS:
            return self._slot(name)
        raise AttributeError(f"'Inspection' object has no attribute '{name}'")

    def custom_call(self, framework: str) -> str:
        """The custom-call text the ``framework`` bridge emits for this kernel.

        Args:
            framework: ``"jax"`` (StableHLO) or ``"torchxla"`` (HLO).
        """
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {framework!r}; one of {', '.join(FRAMEWORKS)}")
        if framework not in _CUSTOM_CALLS:
            from .dispatch import _mode_class
            _mode_class(framework)  # imports the bridge, which registers its builder
        builder = _CUSTOM_CALLS.get(framework)
        if builder is None:
            raise NkiError("wb_bridge_missing", f"no custom-call builder for '{framework}': the "
                           f"{framework} bridge is not available in this build")
        return builder(self)

    def summary_lines(self) -> list:
        """The lines of the text summary."""
        k = self.kernel
        decls = k.decls()
        target = self.platform_target + (" (fallback)" if self.platform_target_is_fallback
                                          else "")
        engines: dict = {}
        from .ir.opcodes import OPCODES
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
        if self.aliases:
            lines.append("  aliases (operand -> output): " + ", ".join(
                f"{i} -> {j}" for i, j in sorted(self.aliases.items())))
        lines.append(f"  backend_config: {len(self.backend_config)} base64 characters")
        for fn in _SUMMARY_LINES:
            extra = fn(self)
            if extra:
                lines.append("  " + extra)
        return lines

    def __repr__(self):
        return "\n".join(self.summary_lines())

    def _repr_mimebundle_(self, include=None, exclude=None):
        # why: the html and JSON views (and their imports) live in the notebook layer
        from ..notebook.mime import mimebundle
        return mimebundle(self, include, exclude)

    def widget(self, **kwargs):
        """The Inspector widget: an ipywidgets ``Tab`` over this Inspection.

        Tabs: Summary | Config | IR | SBUF | PSUM | Timeline | HLO; keyword arguments go to
        :class:`nki_workbench.notebook.inspector.Inspector`.
        """
        from ..notebook.inspector import Inspector
        return Inspector(self, **kwargs)


def _kernel_parts(kernel):
    from .dispatch import GenericKernel
    from .runtime import NumpyKernel
    if isinstance(kernel, GenericKernel):
        return kernel.func, kernel.grid, dict(kernel.kwargs)
    if isinstance(kernel, NumpyKernel):
        opts = {n: kernel.options[n] for n in ("platform_target", "additional_compile_opt")
                if kernel.options.get(n)}
        return kernel.func, kernel.grid, opts
    if callable(kernel):
        return kernel, (), {}
    raise TypeError(f"inspect() needs an NKI kernel (a function or @nki.jit kernel), got "
                    f"{kernel!r}")


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
        params: :class:`~nki_workbench.SimParams` for the simulation.
        progress: ``progress(ir_kernel)`` returning a context manager whose value is the
            simulator's observer (``observer(inst, state)`` per executed instruction), e.g.
            ``nki_workbench.notebook.progress.SimulationProgress``.
        sim_backend: ``"numpy"`` (the interpreter), ``"jax"`` (the compiled program) or ``None``
            (``NKI_WORKBENCH_SIM_BACKEND``); with a ``progress`` observer it always interprets.
        **kwargs: keyword arguments of the kernel.

    Returns:
        Inspection
    """
    from .runtime import SIM_HOOKS, _program
    func, kgrid, opts = _kernel_parts(kernel)
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
        outs = _program(traced).run(inputs, params, backend=sim_backend)
    else:
        with progress(k) as observer:
            outs = _program(traced).run(inputs, params, observer=observer)
    for hook in SIM_HOOKS:
        hook(traced, inputs, params, outs, sim_backend if progress is None else "numpy")
    vals = [np.array(outs[n]) for n in k.outputs]
    if traced.returns == "single":
        result = vals[0]
    else:
        result = vals if traced.returns == "list" else tuple(vals)
    insp = Inspection(dumped, result)
    insp.inputs = inputs
    return insp


def _timeline(insp):
    # why: the time model runs on the call's own inputs, so run-time indices time correctly
    from .sim.timing import timeline
    return timeline(insp.kernel, inputs=insp.inputs)


# The time model's views on an Inspection (issue 8): computed on first access.
_SLOTS["timeline"] = _timeline
for _name, _get in {"latency_us": lambda i: i.timeline.latency_us,
                    "plot_timeline": lambda i: i.timeline.plot,
                    "to_perfetto": lambda i: i.timeline.to_perfetto,
                    "roofline": lambda i: i.timeline.roofline,
                    "critical_path": lambda i: i.timeline.critical_path,
                    "utilization": lambda i: i.timeline.utilization,
                    "busy_ns": lambda i: i.timeline.busy_ns}.items():
    register_slot(_name, _get)
