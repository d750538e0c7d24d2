"""The numpy execution family: run a traced kernel on numpy inputs.

``simulate(kernel_fn, args, kwargs, grid=..., target=..., params=...)`` traces (through the
per-kernel cache), binds the concrete arrays to the kernel parameters, runs them through the
one run path (:func:`.execution.run`) and returns outputs the way NKI does: the returned tensors as
numpy arrays (a tuple/list when the kernel returns one), or — legacy convention — writes the
results into the numpy arrays passed as output arguments and returns ``None``.

The kernel classes ``nki.jit`` picks for numpy arguments (all share :class:`NumpyKernel`):

* :class:`SimulateKernel` — the CPU simulator (``mode="simulation"``).
* :class:`BaremetalKernel` — writes the IR to ``penguin.py``, compiles it with ``neuronx-cc``
  and runs the NEFF on a Neuron device. Workbench policy on machines without one: with no
  compiler or no device it runs in the simulator after a one-time :class:`NoNeuronDeviceWarning`;
  ``NKI_WORKBENCH_STRICT=1`` raises the error NKI would give instead.
* :class:`BenchmarkKernel` — latency percentiles; without a device they come from the cost model
  (``nki_workbench._src.sim.timing.estimate_latency_us``) and are marked as estimates.
* :class:`ProfileKernel` — writes a JSON summary (and, when the build has the time model, a
  Perfetto trace of the static timeline) into ``working_directory``.

Executing a NEFF goes through :class:`NeuronRuntime` (``libnrt`` via ctypes, in
:mod:`.neuron_device` with the compiler command line). No Neuron device
was available while writing it: that path is untested here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import warnings

import numpy as np

from . import dtypes as D
from .alloc.passes import trace_kernel
from .caching import lru_get, lru_put
from .encode import (
    check_grid,
    hardware_target,
    matmul_mac_count,
    resolve_platform_target,
    user_stacklevel,
)
from .errors import NkiError, NkiWarning
from .execution import SIM_HOOKS, package_outputs, run
from .neuron_device import NeuronRuntime, check_empty_dir, compile_command, write_tensorizer_ir
from .options import SimParams, legacy_backend
from .trace.kernel import Traced, flatten_args, specialisation_key

__all__ = ["simulate", "run_traced", "get_traced", "package_outputs", "SIM_HOOKS", "bind_inputs",
           "NumpyKernel", "SimulateKernel", "TraceKernel", "BaremetalKernel", "BenchmarkKernel",
           "ProfileKernel", "BenchmarkResult", "LatencyStats", "NeuronRuntime",
           "NoNeuronDeviceWarning", "write_tensorizer_ir", "compile_command", "STRICT_ENV"]

STRICT_ENV = "NKI_WORKBENCH_STRICT"
PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)

class NoNeuronDeviceWarning(NkiWarning):
    """A device mode ran in the CPU simulator because this machine has no Neuron device."""


def get_traced(func, args, kwargs, *, grid=(), target=None, cache=None) -> Traced:
    """Trace ``func`` for these arguments, reusing ``cache[key]`` when given.

    ``cache`` (a kernel object's own dict) keeps the most recently used traces, at most
    ``caching.DEFAULT_SIZE`` specialisations.
    """
    return _traced_and_flat(func, args, kwargs, grid, target, cache)[0]


def _traced_and_flat(func, args, kwargs, grid, target, cache):
    """``(traced, flat)``: :func:`get_traced`'s trace and the call's ``flatten_args``.

    why: binding the arguments (``inspect.signature``) is most of a steady call's Python
    time; the key and :func:`bind_inputs` share one binding (``flat`` is None on no cache).
    """
    if cache is None:
        return trace_kernel(func, args, kwargs, grid=grid, target=target), None
    flat = flatten_args(func, args, kwargs)
    key = specialisation_key(func, args, kwargs, grid=grid, target=target, flat=flat)
    traced = lru_get(cache, key)
    if traced is None:
        traced = lru_put(cache, key, trace_kernel(func, args, kwargs, grid=grid, target=target))
    return traced, flat


def bind_inputs(traced: Traced, func, args, kwargs, flat=None) -> list:
    """The numpy arrays of a call, in the order of the trace's tensor parameters.

    ``flat``: the call's ``flatten_args(func, args, kwargs)`` when the caller has it already.
    """
    _, leaves = flat or flatten_args(func, args, kwargs)
    k = traced.kernel
    if len(leaves) != len(k.params):
        raise NkiError(None, f"kernel '{k.name}' was traced with {len(k.params)} tensor "
                       f"arguments, called with {len(leaves)}")
    arrays = []
    for path, v in leaves:
        if not isinstance(v, np.ndarray):
            raise NkiError(None, f"simulation needs numpy arrays; argument '{path}' is "
                           f"{type(v).__name__}",
                           hint="placeholders (nt.tensor[...]) only trace; pass arrays to run")
        arrays.append(v)
    return arrays


def run_traced(traced: Traced, func, args, kwargs, params: SimParams | None = None,
               backend: str | None = None, *, flat=None):
    """Simulate an already traced kernel on concrete arguments.

    ``params.backend`` picks the simulator (``backend=`` is its deprecated spelling);
    ``flat``: the call's ``flatten_args`` when the caller has it (:func:`bind_inputs`).
    """
    params = legacy_backend(params, backend, "run_traced")
    arrays = bind_inputs(traced, func, args, kwargs, flat)
    k = traced.kernel
    outs = run(traced, {d.name: a for d, a in zip(k.params, arrays, strict=True)}, params)
    return package_outputs(k, outs, arrays, owned=True)


def simulate(func, args=(), kwargs=None, *, grid=(), target=None, params=None, cache=None,
             backend=None):
    """Trace (or reuse) and simulate ``func(*args, **kwargs)`` on numpy inputs.

    Returns:
        The kernel's outputs as numpy arrays (``None`` for legacy output-argument kernels).
    """
    kwargs = kwargs or {}
    params = legacy_backend(params, backend, "simulate")
    traced, flat = _traced_and_flat(func, args, kwargs, grid, target, cache)
    return run_traced(traced, func, args, kwargs, params, flat=flat)



# ----------------------------------------------------------------------------- kernel classes
class NumpyKernel:
    """Base of the numpy family: a kernel function, grid and options, traced per specialisation.

    Args:
        func: the kernel function.
        grid: SPMD launch grid.
        **options: the class's options (:attr:`OPTIONS`); others are rejected by name.
    """

    # ``kernel_return`` (NKI's flag for the returned-outputs convention) is accepted for
    # compatibility; the tracer detects the convention from what the kernel returns.
    # ``experimental_flags`` (e.g. ``"enable-mutable-parameter"``) names compiler feature
    # switches; the workbench's tracer has those features on, so it is accepted and kept.
    # ``disable_allocation_opt=True`` asks neuronx-cc to keep a directly allocated kernel's
    # placements as written; the workbench never moves a direct allocation, so it is accepted
    # (a bool) and kept.
    OPTIONS: dict = {"platform_target": None, "additional_compile_opt": None,
                     "kernel_return": None, "experimental_flags": None,
                     "disable_allocation_opt": False}

    def __init__(self, func, grid=(), **options):
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown option(s) {', '.join(unknown)}; "
                            f"it accepts {', '.join(sorted(self.OPTIONS))}")
        if options.get("kernel_return") not in (None, True, False):
            raise TypeError(f"kernel_return must be True or False, not "
                            f"{options['kernel_return']!r}")
        if not isinstance(options.get("disable_allocation_opt", False), bool):
            raise TypeError(f"disable_allocation_opt must be True or False, not "
                            f"{options['disable_allocation_opt']!r}")
        self.func = func
        self.grid = tuple(grid or ())
        self.options = {**self.OPTIONS, **options}
        self._cache: dict = {}

    @property
    def trace_cache(self) -> dict:
        """The traces of this kernel, by specialisation key (shared by ``k[grid]`` copies)."""
        return self._cache

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        k = type(self)(self.func, grid, **{n: self.options[n] for n in self.OPTIONS
                                           if self.options[n] != self.OPTIONS[n]})
        k._cache = self._cache
        return k

    def _target(self, warn: bool) -> tuple[str, bool]:
        return resolve_platform_target(self.options["platform_target"], warn=warn)

    def trace(self, args, kwargs, *, warn: bool = False) -> tuple[Traced, str]:
        """The traced kernel and its platform target for these arguments."""
        traced, target, _ = self._trace_flat(args, kwargs, warn)
        return traced, target

    def _trace_flat(self, args, kwargs, warn: bool):
        """``(traced, target, flat)``: :meth:`trace` and the call's bound arguments."""
        target, _ = self._target(warn)
        grid = check_grid(self.grid, target)
        traced, flat = _traced_and_flat(self.func, args, kwargs, grid, hardware_target(target),
                                        self._cache)
        return traced, target, flat

    def __call__(self, *args, **kwargs):
        # why: the base class only traces; each mode (SimulateKernel, BaremetalKernel...) runs
        raise NotImplementedError(f"{type(self).__name__} is abstract: use SimulateKernel, "
                                  "BaremetalKernel, BenchmarkKernel or ProfileKernel")

    def __repr__(self):
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<{type(self).__name__} {getattr(self.func, '__name__', '?')}{grid}>"


class SimulateKernel(NumpyKernel):
    """Runs the kernel in the CPU simulator (``mode="simulation"``); returns numpy outputs."""

    OPTIONS = {**NumpyKernel.OPTIONS, "params": None}

    def __call__(self, *args, **kwargs):
        traced, _, flat = self._trace_flat(args, kwargs, False)
        return run_traced(traced, self.func, args, kwargs, self.options["params"], flat=flat)


class TraceKernel(NumpyKernel):
    """A kernel that is only traced (``nki.jit(mode="trace")``), as NKI 2.x's trace mode.

    NKI uses this mode for helper kernels that other kernels call: inside another kernel's
    trace the call is inlined (its instructions become part of the caller), which
    :class:`~.dispatch.GenericKernel` does for every mode. Called on its own, it traces for
    the arguments and returns the :class:`~.trace.kernel.Traced` kernel without running it;
    ``nki.simulate_kernel`` (or ``inspect``) runs a trace-mode kernel like any other.
    """

    def __call__(self, *args, **kwargs):
        traced, _ = self.trace(args, kwargs)
        return traced


_warned_no_device = False


def _no_device(kernel: NumpyKernel, what: str, compiler: bool) -> None:
    """The workbench policy on machines without Neuron hardware (one warning, or strict)."""
    global _warned_no_device
    if os.environ.get(STRICT_ENV, "") not in ("", "0"):
        if not compiler:
            raise FileNotFoundError(2, "No such file or directory", "neuronx-cc")
        raise RuntimeError("NRT initialization failed: no Neuron device found on this machine "
                           "(/dev/neuron* missing)")
    if not _warned_no_device:
        _warned_no_device = True
        missing = "no Neuron device" if compiler else "no `neuronx-cc` compiler and no Neuron " \
            "device"
        warnings.warn(f"nki_workbench: {missing} on this machine; {what} kernel "
                      f"'{kernel.func.__name__}' runs in the CPU simulator instead (set "
                      f"{STRICT_ENV}=1 to make this an error, or use mode='simulation').",
                      NoNeuronDeviceWarning, stacklevel=user_stacklevel())


class BaremetalKernel(NumpyKernel):
    """Compile with ``neuronx-cc`` and run on a local Neuron device (``mode="baremetal"``).

    Options: ``save_neff_name`` (keep the NEFF there), ``save_trace_name`` (keep an NTFF trace;
    device only), ``artifacts_dir`` (compiler work directory; must be empty),
    ``additional_compile_opt`` (extra compiler flags), ``platform_target``.
    """

    OPTIONS = {**NumpyKernel.OPTIONS, "save_neff_name": None, "save_trace_name": None,
               "artifacts_dir": None}
    MODE = "baremetal"

    def compile(self, traced: Traced, target: str, save_neff: str | None = None) -> str:
        """Write ``penguin.py`` and run ``neuronx-cc``; returns the NEFF path.

        Args:
            traced: the kernel.
            target: the ``--target`` architecture.
            save_neff: where to copy the NEFF (default: the ``save_neff_name`` option).

        Raises:
            subprocess.CalledProcessError: the compiler failed.
        """
        opts = self.options
        workdir = check_empty_dir(opts["artifacts_dir"]) if opts["artifacts_dir"] \
            else tempfile.mkdtemp(prefix="nki_workbench_")
        write_tensorizer_ir(traced, os.path.join(workdir, "penguin.py"))
        subprocess.run(compile_command(target, opts["additional_compile_opt"]), cwd=workdir,
                       stdout=subprocess.DEVNULL, check=True)
        neff = os.path.join(workdir, "file.neff")
        if not os.path.exists(neff):
            raise NkiError(None, f"neuronx-cc finished but wrote no file.neff in {workdir}")
        save_neff = save_neff or opts["save_neff_name"]
        if save_neff:
            shutil.copyfile(neff, save_neff)
            return save_neff
        return neff

    def _prepare(self, args, kwargs):
        compiler = shutil.which("neuronx-cc") is not None
        traced, target = self.trace(args, kwargs, warn=compiler)
        neff = self.compile(traced, target) if compiler else None
        runtime = NeuronRuntime.load() if compiler else None
        return traced, target, neff, runtime

    def _device_io(self, traced, args, kwargs):
        k = traced.kernel
        decls = k.decls()
        arrays = bind_inputs(traced, self.func, args, kwargs)
        inputs = {d.name: np.ascontiguousarray(D.cast(a, d.dtype)) for d, a in
                  zip(k.params, arrays, strict=True)}
        outs = {n: (decls[n].shape, D.from_name(decls[n].dtype)) for n in k.outputs}
        return arrays, inputs, outs

    def __call__(self, *args, **kwargs):
        traced, _, neff, runtime = self._prepare(args, kwargs)
        if runtime is None:
            _no_device(self, self.MODE, neff is not None)
            if self.options["save_trace_name"]:
                warnings.warn(f"save_trace_name={self.options['save_trace_name']!r}: no NTFF "
                              "trace is written without a Neuron device", NoNeuronDeviceWarning,
                              stacklevel=2)
            return run_traced(traced, self.func, args, kwargs)
        arrays, inputs, outs = self._device_io(traced, args, kwargs)
        result, _ = runtime.execute(neff, inputs, outs, trace_path=self.options[
            "save_trace_name"])
        return package_outputs(traced.kernel, result, arrays)


class LatencyStats:
    """Latency samples of one NeuronCore, in microseconds.

    Attributes:
        samples_us: per-iteration latencies.
        is_estimate: true when they come from the cost model, not a device.
        source: where the numbers come from.
    """

    def __init__(self, samples_us, is_estimate: bool, source: str):
        self.samples_us = np.asarray(samples_us, dtype=np.float64)
        self.is_estimate = is_estimate
        self.source = source

    def get_latency_percentile(self, p) -> float:
        """Latency percentile ``p`` (one of 0, 1, 10, 25, 50, 90, 99, 100) in microseconds."""
        if p not in PERCENTILES:
            raise ValueError(f"latency percentile {p!r} is not recorded; use one of "
                             f"{', '.join(map(str, PERCENTILES))}")
        return float(np.percentile(self.samples_us, p))

    def __repr__(self):
        kind = "estimate" if self.is_estimate else "measured"
        return (f"<nc_latency p50={self.get_latency_percentile(50):.3f}us {kind} "
                f"({self.source})>")


class BenchmarkResult:
    """``benchmark_result`` of a benchmarked kernel: ``nc_latency`` plus the run settings."""

    def __init__(self, nc_latency: LatencyStats, warmup: int, iters: int):
        self.nc_latency = nc_latency
        self.warmup = warmup
        self.iters = iters

    def __repr__(self):
        return f"<BenchmarkResult warmup={self.warmup} iters={self.iters} {self.nc_latency!r}>"


def _estimate_latency_us(kernel) -> float:
    try:
        from .sim.timing import estimate_latency_us
    except ImportError:
        raise NkiError("wb_no_cost_model", "latency estimates need the cost model "
                       "(nki_workbench._src.sim.timing), which this build does not have",
                       hint="run on a Neuron device, or use nki.simulate_kernel for "
                            "numerics") from None
    value = float(estimate_latency_us(kernel, kernel.target))
    if not np.isfinite(value) or value <= 0:
        raise NkiError("wb_bad_latency_estimate",
                       f"the cost model estimated {value} us for kernel '{kernel.name}'")
    return value


class BenchmarkKernel(BaremetalKernel):
    """Latency of the kernel over ``iters`` runs after ``warmup`` (``nki.benchmark``).

    After a call, ``benchmark_result.nc_latency.get_latency_percentile(p)`` gives microseconds.
    Without a device the numbers are the cost model's deterministic estimate (every percentile
    equal) and ``nc_latency.is_estimate`` is true. Arguments may be ``nt.tensor[[shape], dtype]``
    placeholders; outputs are undefined (``None`` is returned), as on the device.
    """

    OPTIONS = {**BaremetalKernel.OPTIONS, "warmup": 10, "iters": 100}
    MODE = "benchmark"

    def __init__(self, func, grid=(), **options):
        super().__init__(func, grid, **options)
        for name in ("warmup", "iters"):
            v = self.options[name]
            if not isinstance(v, int) or isinstance(v, bool) or v < (name == "iters"):
                raise ValueError(f"nki.benchmark {name}={v!r} must be an integer >= "
                                 f"{int(name == 'iters')}")
        self.benchmark_result: BenchmarkResult | None = None

    def __call__(self, *args, **kwargs):
        compiler = shutil.which("neuronx-cc") is not None
        traced, target = self.trace(args, kwargs, warn=compiler)
        if traced.kernel.attr("has_collectives"):
            raise NkiError(None, "NKI not yet supports collective compute",
                           hint="benchmark single-core kernels; simulate collectives with "
                                "nki.simulate_kernel")
        warmup, iters = self.options["warmup"], self.options["iters"]
        neff = self.compile(traced, target) if compiler else None
        runtime = NeuronRuntime.load() if compiler else None
        if runtime is None:
            latency = _estimate_latency_us(traced.kernel)
            from .hw.calibration import accuracy_sentence
            stats = LatencyStats([latency] * iters, True,
                                 f"nki_workbench cost model; {accuracy_sentence()}")
        else:
            k = traced.kernel
            decls = k.decls()
            inputs = {d.name: np.zeros(d.shape, D.storage_dtype(D.from_name(d.dtype)))
                      for d in k.params}
            outs = {n: (decls[n].shape, D.from_name(decls[n].dtype)) for n in k.outputs}
            _, times = runtime.execute(neff, inputs, outs, repeat=warmup + iters,
                                       trace_path=self.options["save_trace_name"])
            stats = LatencyStats(np.array(times[warmup:]) * 1e6, False, "Neuron device")
        self.benchmark_result = BenchmarkResult(stats, warmup, iters)
        return None


class ProfileKernel(BaremetalKernel):
    """Compile, run and profile the kernel into ``working_directory`` (``nki.profile``).

    ``num_execs`` (executions on the device, default 1) and ``profile_nth`` (which of them is
    traced) are recorded in the summary; without a device the latency is the estimate.
    Writes ``<trace stem>_summary.json`` (kernel, target, grid, latency, MAC count,
    instruction counts; an estimate without a device) and, when the time model provides
    ``Inspection.to_perfetto``, ``<trace stem>.perfetto.json``; with ``neuronx-cc`` the NEFF as
    ``save_neff_name``; on a device the NTFF as ``save_trace_name``. Outputs are undefined.
    """

    OPTIONS = {**NumpyKernel.OPTIONS, "working_directory": None, "save_neff_name": "file.neff",
               "save_trace_name": "profile.ntff", "overwrite": False, "profile_nth": 1,
               "num_execs": 1}
    MODE = "profile"

    def __init__(self, func, grid=(), **options):
        super().__init__(func, grid, **options)
        wd, nth = self.options["working_directory"], self.options["profile_nth"]
        if not wd or not os.path.isabs(str(wd)):
            raise ValueError(f"nki.profile needs working_directory= as an absolute path, got "
                             f"{wd!r}")
        if not isinstance(nth, int) or isinstance(nth, bool) or nth < 1:
            raise ValueError(f"nki.profile profile_nth={nth!r} must be an integer >= 1")
        execs = self.options["num_execs"]
        if not isinstance(execs, int) or isinstance(execs, bool) or execs < 1:
            raise ValueError(f"nki.profile num_execs={execs!r} must be an integer >= 1")
        self.options["artifacts_dir"] = None

    def files(self) -> dict:
        """The files this profile writes, by role."""
        wd, o = self.options["working_directory"], self.options
        stem = os.path.splitext(os.path.basename(o["save_trace_name"]))[0]
        return {"neff": os.path.join(wd, o["save_neff_name"]),
                "ntff": os.path.join(wd, o["save_trace_name"]),
                "summary": os.path.join(wd, f"{stem}_summary.json"),
                "perfetto": os.path.join(wd, f"{stem}.perfetto.json")}

    def __call__(self, *args, **kwargs):
        from .ir import walk_insts
        from .ir.opcodes import OPCODES
        wd, files = self.options["working_directory"], self.files()
        os.makedirs(wd, exist_ok=True)
        if not self.options["overwrite"]:
            taken = [p for p in files.values() if os.path.exists(p)]
            if taken:
                raise FileExistsError(f"nki.profile would overwrite {', '.join(taken)}; pass "
                                      "overwrite=True or choose another working_directory")
        compiler = shutil.which("neuronx-cc") is not None
        traced, target = self.trace(args, kwargs, warn=compiler)
        k = traced.kernel
        if compiler:
            self.compile(traced, target, save_neff=files["neff"])
        runtime = NeuronRuntime.load() if compiler else None
        if runtime is not None:
            decls = k.decls()
            inputs = {d.name: np.zeros(d.shape, D.storage_dtype(D.from_name(d.dtype)))
                      for d in k.params}
            outs = {n: (decls[n].shape, D.from_name(decls[n].dtype)) for n in k.outputs}
            nth, execs = self.options["profile_nth"], self.options["num_execs"]
            runtime.execute(files["neff"], inputs, outs, repeat=nth - 1)
            _, times = runtime.execute(files["neff"], inputs, outs, trace_path=files["ntff"])
            if execs > nth:  # the remaining executions of the num_execs asked for
                runtime.execute(files["neff"], inputs, outs, repeat=execs - nth)
            latency, estimate = times[0] * 1e6, False
        else:
            latency, estimate = _estimate_latency_us(k), True
        engines: dict = {}
        for inst in walk_insts(k.body):
            eng = OPCODES[inst.op].engine if inst.op in OPCODES else "unknown"
            engines[eng] = engines.get(eng, 0) + 1
        summary = {"kernel": k.name, "platform_target": target, "grid": list(k.grid),
                   "profile_nth": self.options["profile_nth"],
                   "num_execs": self.options["num_execs"], "latency_us": latency,
                   "is_estimate": estimate, "matmul_mac_count": matmul_mac_count(k),
                   "static_instructions_by_engine": dict(sorted(engines.items())),
                   "files": {r: os.path.basename(p) for r, p in files.items()
                             if r == "summary" or os.path.exists(p)}}
        written = self._write_trace(traced, files["perfetto"])
        if written:
            summary["files"]["perfetto"] = os.path.basename(files["perfetto"])
        with open(files["summary"], "w") as f:
            json.dump(summary, f, indent=2, sort_keys=True)
        return None

    def _write_trace(self, traced, path) -> bool:
        # why: the static instruction stream's timeline (what an Inspection without a
        # simulation shows), exported for Perfetto
        try:
            from .sim.timing import timeline
        except ImportError:
            warnings.warn("nki.profile: no Perfetto trace written (the time model is not "
                          "part of this build)", NkiWarning, stacklevel=3)
            return False
        timeline(traced.kernel).to_perfetto(path)
        return True
