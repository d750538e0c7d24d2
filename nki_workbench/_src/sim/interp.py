"""The CPU simulator: executes the IR on numpy.

Steps:
  1. ``Program(kernel)`` compiles the statement tree once into closures (:mod:`.interp_plan`):
     each access into a :class:`~.access.CompiledAccess` (basic-slice fast path), each
     instruction into a runner (:mod:`.interp_inst`) that reads inputs, applies the opcode's
     value rule (:mod:`..semantics`, numpy numerics), rounds to the result dtype and writes
     (:mod:`.interp_mem`: mask, accumulation and initialisation tracking).
  2. ``Program.run(inputs, params)`` allocates buffers, runs every SPMD program of the grid
     (concurrently as threads when the kernel has collectives), and returns the outputs.

Memory semantics that keep results honest:
  * Uninitialised floating-point memory is NaN and integer memory holds a poison value
    (dtype min for signed, max for unsigned). Reading an element nothing wrote emits
    :class:`UninitializedReadWarning` naming the tensor and kernel line (or raises with
    ``SimParams(uninitialized="error")``), so no masked-out lane or forgotten write turns into
    a silent zero.
  * ``affine_range`` iterations must be independent: a tile declared outside the loop, written
    in one iteration and read in another (other than ``+=`` accumulation), or elements two
    iterations write when the result is seen after the loop, emit
    :class:`LoopCarriedDependencyWarning`; two SPMD programs writing the same shared element
    emit :class:`SpmdRaceWarning` (both raise with ``SimParams(races="error")``; see
    :mod:`.races`). ``SimParams(shuffle_affine=True)`` runs affine iterations and SPMD programs
    in a random order so such races change results.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, UninitializedReadWarning, warn
from ..ir import Access, Kernel
from ..options import SimParams
from ..platform import blas_single_threaded
from .access import CompiledAccess
from .analysis import fully_written_outputs, overlapping_writes, shared_overlaps
from .interp_plan import Planner
from .memory import LOW_FLOATS as _LOW_FLOATS
from .memory import Buf
from .memory import storage as _storage
from .memory import tune_malloc as _tune_malloc
from .specials import SPECIAL
from .spmd import Collective as _Collective

__all__ = ["SimParams", "Program", "Buf", "SPECIAL"]


COVERAGE_WRITES = 4096
"""Most executed output writes the interpreter enumerates to prove an output written whole."""


class _State:
    __slots__ = ("env", "bufs", "rng", "params", "shared", "races", "collective", "pid",
                 "regs", "observer", "poison", "param_names",
                 "iter_id", "loop_lo", "iter_start", "iters", "ordinal", "grid")

    def __init__(self, params: SimParams, shared: dict, collective, pid: tuple):
        self.env = {}
        self.bufs = dict(shared)
        self.shared = shared
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self.collective = collective
        self.pid = pid
        self.regs = {}  # per-engine accumulator registers (nki.isa reduce_cmd state)
        self.param_names = ()
        self.poison = shared.setdefault("__poison__", {})  # (tensor, line) of unwritten reads
        self.observer = None
        self.iter_id = 0
        self.loop_lo = {}
        self.iter_start = {}
        self.iters = {}  # affine loop var -> (iteration ids, values) of its current run
        self.ordinal = 0
        self.grid = (1,)

    def reseed(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def dyn(self, atom, env):
        buf = self.bufs[atom.tensor]
        ca = CompiledAccess(Access(atom.tensor, atom.index, None), buf.data.shape)
        v = ca.read(buf.data, env, self.dyn)
        return np.asarray(v).reshape(atom.shape).astype(np.int64)


class Program(Planner):
    """A kernel compiled for simulation; ``run`` it with numpy inputs."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.decls = kernel.decls()
        self.carried = {}   # loop var -> names of outer tensors written in that affine loop
        self.param_names = frozenset(d.name for d in kernel.params)
        self.waw = overlapping_writes(kernel)
        self.spmd = shared_overlaps(kernel)
        # why: an output proven written whole is allocated without its NaN fill and written
        # mask (a third of a 1024-squared elementwise kernel's run); the bound keeps the proof
        # well under a millisecond on kernels with many small stores
        self.covered = fully_written_outputs(kernel, max_writes=COVERAGE_WRITES)
        self.sites = []  # write site -> kernel line (race stamps name the writer)
        self.affine_now = ()
        self.body = self._block(kernel.body, outer=frozenset(d.name for d in kernel.params),
                                affine_vars=())

    # ------------------------------------------------------------------ run
    def run(self, inputs: dict, params: SimParams | None = None, observer=None,
            backend: str | None = None) -> dict:
        """Execute every SPMD program; ``inputs`` maps parameter names to arrays.

        ``observer(inst, state)``, when given, is called before each executed instruction
        (``state.env`` holds the loop-variable values, ``state.pid`` the program): the hook the
        cost model and timeline use to see the concrete instruction stream.

        ``backend``: ``"numpy"`` or ``None`` — this is the interpreter. The compiled program
        (``"jax"``) runs through ``execution.run`` / :func:`.jax_exec.run_compiled`, which sit
        above this module.

        Returns:
            dict: output tensor name -> numpy array (storage dtype).
        """
        if backend not in (None, "numpy"):
            raise NkiError("wb_bad_sim_backend", f"Program.run is the numpy interpreter; "
                           f"backend={backend!r} runs through nki_workbench's run path",
                           hint="use nki.simulate_kernel(..., params=SimParams(backend=...)) "
                           "or jax_exec.run_compiled(program, inputs)")
        params = params or SimParams()
        _tune_malloc()
        with blas_single_threaded():  # why: tile GEMMs; BLAS threads collapse under load
            return self._run(inputs, params, observer)

    def _run(self, inputs: dict, params: SimParams, observer) -> dict:
        k = self.kernel
        shared = {}
        for p in k.params:
            if p.name not in inputs:
                raise NkiError(None, f"missing input for kernel parameter '{p.name}'")
            arr = np.asarray(inputs[p.name])
            if tuple(arr.shape) != tuple(p.shape):
                raise NkiError(None, f"input '{p.name}' has shape {list(arr.shape)}, the trace "
                               f"expects {list(p.shape)}")
            if p.kind == "input" and arr.dtype == _storage(p.dtype):
                buf = Buf(p.name, arr.view())  # read-only view below: the caller's array is safe
            else:
                buf = Buf(p.name, D.cast(arr, p.dtype))  # cast always copies
            if p.kind == "input":
                # why: inputs are never written, so loads may share their memory (zero-copy)
                # and low-precision inputs are widened to float32 once, not at every use
                buf.data.flags.writeable = False
                if p.dtype in _LOW_FLOATS:
                    buf.f32 = D.to_f32(buf.data)
                    buf.f32.flags.writeable = False
            shared[p.name] = buf
        grid = tuple(k.grid) or (1,)
        pids = list(np.ndindex(*grid))
        if k.attr("has_collectives") and len(pids) > 1:
            coll = _Collective(grid, params.collective_timeout)
            errors = []

            def worker(pid):
                try:
                    # why: iteration ids stay unique across programs running side by side
                    start = int(np.ravel_multi_index(pid, grid)) << 32
                    self._run_one(params, shared, coll, pid, observer, start)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    errors.append(exc)
                    coll.abort()

            threads = [threading.Thread(target=worker, args=(pid,)) for pid in pids]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        else:
            if params.shuffle_affine and len(pids) > 1:
                # why: SPMD programs run in any order (on different cores) like affine iterations
                order = np.random.default_rng(params.seed).permutation(len(pids))
                pids = [pids[i] for i in order]
            start = 0
            for pid in pids:
                start = self._run_one(params, shared, None, pid, observer, start)
        out = {}
        shared.pop("__races__", None)
        poison = shared.pop("__poison__", {})
        for name in k.outputs:
            buf = shared.get(name)
            if buf is None:
                raise NkiError("err_tensor_output_not_written_to",
                               f"output '{name}' was never written")
            if buf.init is not None and not buf.init.all():
                missing = int(buf.init.size - np.count_nonzero(buf.init))
                sources = [f"'{t}' at {where}" for t, where in list(poison)[:3]]
                origin = ("; they hold NaN/poison computed from unwritten elements of "
                          + ", ".join(sources)) if sources else "; they hold NaN/poison"
                msg = (f"output '{name}': {missing} of {buf.init.size} elements were never "
                       f"written{origin}")
                hint = ("store every element of the output and initialise the tiles it is "
                        "computed from (check loop bounds and masks)")
                if params.uninitialized == "error":
                    raise NkiError("wb_uninitialized_read", msg, self.decls[name].loc, hint)
                warn(UninitializedReadWarning, msg, self.decls[name].loc, hint)
            out[name] = buf.data
        return out

    def _run_one(self, params, shared, coll, pid, observer=None, start=0):
        """Run program ``pid``; returns its last affine iteration id (the next one's start)."""
        st = _State(params, shared, coll, pid)
        st.observer = observer
        st.param_names = self.param_names
        st.iter_id = start
        st.grid = tuple(self.kernel.grid) or (1,)
        st.ordinal = int(np.ravel_multi_index(pid, st.grid))
        for axis, v in enumerate(pid):
            st.env[f"pid{axis}"] = int(v)
        # why: inf/NaN are legitimate values here (poison, fp32.min...), never numpy warnings;
        # one context per program instead of one per instruction
        with np.errstate(all="ignore"):
            for f in self.body:
                f(st)
        return st.iter_id


SPECIAL["atomic_rmw"] = Program._atomic_rmw
SPECIAL["all_reduce"] = Program._all_reduce
from . import isa_exec as _isa_exec  # noqa: E402,F401,I001  (the nki.isa executor specials)
