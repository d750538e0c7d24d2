"""SimParams(backend="auto"): the interpreter until a specialisation's interpreted time reaches
its compile estimate (ski rental), then the compiled program, and after 2 warm-up and 5 timed
compiled calls the executor measured faster; a large kernel compiles on its first call; the
interpreter's warnings either way; with more than 2 CPUs the compile runs in a background
thread."""

import warnings

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import SimParams, nki
from nki_workbench._src import execution
from nki_workbench._src.errors import CompiledFallbackWarning, UninitializedReadWarning

AUTO = SimParams(backend="auto")
RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _fresh_calibration(monkeypatch):
    monkeypatch.setattr(execution, "_COMPILE_RATIOS", [])
    # the policy tests run the compile on the calling thread; the background ones say so
    monkeypatch.setattr(execution, "AUTO_BACKGROUND_COMPILE", False)


@pytest.fixture
def cheap_compiles(monkeypatch):
    """Every compile estimated at a nanosecond: the second call compiles."""
    monkeypatch.setattr(execution, "_COMPILE_S_PER_INST", 1e-9)


class _Clock:
    """A fake ``execution._clock``: each timed call takes ``step`` seconds."""

    def __init__(self, step):
        self.now, self.step, self.reads = 0.0, step, 0

    def __call__(self):
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.step
        return self.now


@pytest.fixture
def executors(monkeypatch):
    """The executor ``auto`` chose for each simulation, in order."""
    monkeypatch.delenv("NKI_WORKBENCH_SIM_BACKEND", raising=False)
    seen = []
    real = execution.auto_backend

    def choosing(prog, params):
        seen.append(real(prog, params))
        return seen[-1]
    monkeypatch.setattr(execution, "auto_backend", choosing)
    return seen


def _kernel():
    def scale(a):  # a new function each time: a cold specialisation
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(nl.multiply(t, 0.5)))
        return out
    return nki.jit(scale)


def test_first_call_interprets_a_repeat_call_compiles(executors, cheap_compiles):
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    outs = [nki.simulate_kernel(k, a, params=AUTO) for _ in range(3)]
    assert executors[:3] == ["numpy", "jax", "jax"]
    ref = np.exp(a * np.float32(0.5))
    for out in outs:
        np.testing.assert_allclose(out, ref, rtol=1e-6)
    b = RNG.standard_normal((384, 64)).astype(np.float32)  # a new shape: a new specialisation
    del executors[:]
    nki.simulate_kernel(k, b, params=AUTO)
    nki.simulate_kernel(k, b, params=AUTO)
    assert executors[:2] == ["numpy", "jax"]


def test_it_compiles_once_the_interpreted_time_reaches_the_compile_estimate(executors,
                                                                           monkeypatch):
    clock = _Clock(0.1)  # each interpreted call: 0.1 s
    monkeypatch.setattr(execution, "_clock", clock)
    monkeypatch.setattr(execution, "estimated_compile_seconds", lambda k: 0.35)
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    for _ in range(6):
        np.testing.assert_allclose(nki.simulate_kernel(k, a, params=AUTO),
                                   np.exp(a * np.float32(0.5)), rtol=1e-6)
    # 0.1, 0.2, 0.3 s interpreted: not yet; 0.4 s >= 0.35 s after the 4th call
    assert executors == ["numpy"] * 4 + ["jax"] * 2
    # the compile took 0.1 s (the fake clock) against 0.35 estimated: later kernels scale
    assert execution.compile_scale() == pytest.approx(0.1 / 0.35)
    execution._COMPILE_RATIOS[:] = [0.5]  # compiles took half their estimates
    del executors[:]
    k2 = _kernel()
    for _ in range(3):
        nki.simulate_kernel(k2, a, params=AUTO)
    assert executors == ["numpy", "numpy", "jax"]  # 0.2 s >= 0.35 s x 0.5


class _ByExecutor:
    """A fake ``execution._clock``: a timed call takes the seconds of the executor auto chose."""

    def __init__(self, executors, seconds):
        self.executors, self.seconds, self.now, self.reads = executors, seconds, 0.0, 0

    def __call__(self):
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.seconds[self.executors[-1]]
        return self.now


@pytest.mark.parametrize("compiled_s, settles", [(0.2, "numpy"), (0.05, "jax")])
def test_after_compiling_it_keeps_the_executor_measured_faster(executors, monkeypatch,
                                                               compiled_s, settles):
    # why: a small kernel's compiled call can cost more than interpreting it (a 1024^2 add:
    # 0.7 against 0.5 ms); auto must not stay slower than the interpreter once it has measured
    monkeypatch.setattr(execution, "_clock",
                        _ByExecutor(executors, {"numpy": 0.1, "jax": compiled_s}))
    monkeypatch.setattr(execution, "estimated_compile_seconds", lambda k: 0.25)
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    for _ in range(16):
        np.testing.assert_allclose(nki.simulate_kernel(k, a, params=AUTO),
                                   np.exp(a * np.float32(0.5)), rtol=1e-6)
    # 3 interpreted calls reach the 0.25 s estimate; the compile; 2 warm-up and 5 timed
    # compiled calls
    assert executors[:11] == ["numpy"] * 3 + ["jax"] * 8
    assert executors[11:] == [settles] * 5


@pytest.mark.parametrize("slow", [(4, 5), (6, 8, 9, 10)])
def test_warm_up_and_stalled_calls_do_not_decide(executors, monkeypatch, slow):
    # why: measured on the 1024^3 fp32 matmul: the compiled calls right after the compile took
    # 17.3, 10.3 and 13.2 ms against the interpreter's 13.2, then 7 ms; a median of those 3
    # settled on the interpreter, twice as slow from then on
    seconds = {"numpy": 0.1, "jax": 0.05}
    monkeypatch.setattr(execution, "_clock", _ByExecutor(executors, seconds))
    monkeypatch.setattr(execution, "estimated_compile_seconds", lambda k: 0.25)
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    for i in range(14):
        seconds["jax"] = 1.0 if i in slow else 0.05  # (calls 4, 5: the warm-up)
        nki.simulate_kernel(k, a, params=AUTO)
    assert executors[11:] == ["jax"] * 3  # the fastest of 5 timed calls decides


def test_the_fastest_interpreted_call_is_the_one_compared(executors, monkeypatch):
    # why: the interpreter's first calls run its GEMM governor's probes; once settled it may
    # beat the compiled program, and auto must see that
    seconds = {"numpy": 0.3, "jax": 0.12}
    monkeypatch.setattr(execution, "_clock", _ByExecutor(executors, seconds))
    monkeypatch.setattr(execution, "estimated_compile_seconds", lambda k: 0.5)
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    for i in range(12):
        seconds["numpy"] = 0.1 if i == 1 else 0.3
        nki.simulate_kernel(k, a, params=AUTO)
    # 3 interpreted calls reach 0.5 s (0.3 + 0.1 + 0.3); the compile; 2 + 5 compiled calls
    assert executors[:11] == ["numpy"] * 3 + ["jax"] * 8
    assert executors[11:] == ["numpy"]  # 0.1 s interpreted beats 0.12 s compiled


def test_the_calibration_is_clamped_and_a_median():
    ratios = execution._COMPILE_RATIOS
    assert execution.compile_scale() == 1.0
    ratios += [0.001, 0.002]
    assert execution.compile_scale() == 0.1
    ratios[:] = [50.0]
    assert execution.compile_scale() == 10.0
    ratios[:] = [0.5, 2.0, 0.8]
    assert execution.compile_scale() == 0.8


def test_a_large_kernel_compiles_on_its_first_call(executors, monkeypatch):
    # why: "large": its interpreter estimate beats both the threshold and the compile estimate
    monkeypatch.setattr(execution, "AUTO_COMPILE_FIRST_S", 0.0)
    monkeypatch.setattr(execution, "_COMPILE_S_PER_INST", 1e-9)
    k, a = _kernel(), RNG.standard_normal((128, 64)).astype(np.float32)
    traced = k.trace(a)
    assert execution.estimated_interpreter_seconds(traced.kernel) > \
        execution.estimated_compile_seconds(traced.kernel) > 0
    nki.simulate_kernel(k, a, params=AUTO)
    assert executors[0] == "jax"


def test_a_first_call_cheaper_than_its_compile_interprets(executors, monkeypatch):
    monkeypatch.setattr(execution, "AUTO_COMPILE_FIRST_S", 0.0)
    monkeypatch.setattr(execution, "_COMPILE_S_PER_INST", 1e3)  # compiling costs more
    k, a = _kernel(), RNG.standard_normal((128, 64)).astype(np.float32)
    monkeypatch.setattr(execution, "AUTO_MAX_COMPILE_S", 1e9)
    for _ in range(3):
        nki.simulate_kernel(k, a, params=AUTO)
    assert executors[:3] == ["numpy"] * 3  # a few calls never pay the compile


def test_a_kernel_too_large_to_compile_always_interprets(executors, monkeypatch):
    # why: a 20 k-instruction program compiles for minutes with a 17 GB peak (flash bwd at
    # 8192 tokens); auto must not start that for a result the interpreter gives
    monkeypatch.setattr(execution, "AUTO_MAX_COMPILE_S", 0.0)
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledFallbackWarning)
        outs = [nki.simulate_kernel(k, a, params=AUTO) for _ in range(3)]
    assert executors[:3] == ["numpy"] * 3
    for out in outs:
        np.testing.assert_allclose(out, np.exp(a * np.float32(0.5)), rtol=1e-6)


def test_the_compile_estimate_counts_unrolled_loops():
    def unrolled(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(t))
        return out
    small, big = (nki.jit(unrolled).trace(np.zeros((n, 8), np.float32)).kernel
                  for n in (128, 128 * 16))
    per = execution._COMPILE_S_PER_INST
    assert execution.estimated_compile_seconds(small) == pytest.approx(3 * per)
    # 16 trips x 3 instructions = 48 <= the unroll budget: every iteration counts
    assert execution.estimated_compile_seconds(big) == pytest.approx(48 * per)


def reads_half(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    t[:, 0:32] = nl.load(a[:, 0:32])
    nl.store(out, nl.add(t, 1.0))
    return out


def test_the_same_warnings_on_both_calls(executors, cheap_compiles):
    k, a = nki.jit(reads_half), np.ones((128, 64), np.float32)
    got = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = nki.simulate_kernel(k, a, params=AUTO)
        got.append(sorted({type(x.message).__name__ for x in w}))
        np.testing.assert_array_equal(out[:, :32], 2.0)
        assert np.isnan(out[:, 32:]).all()
    assert "jax" in executors
    assert got[0] == got[1] and UninitializedReadWarning.__name__ in got[0]


def draws(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.rand(a.shape, dtype=a.dtype)))
    return out


def test_interpreter_only_kernels_interpret_without_a_fallback_warning(executors):
    k, a = nki.jit(draws), np.zeros((128, 16), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledFallbackWarning)
        first = nki.simulate_kernel(k, a, params=AUTO)
        second = nki.simulate_kernel(k, a, params=AUTO)
    assert executors[:2] == ["numpy", "numpy"]
    np.testing.assert_array_equal(first, second)  # same seed, same interpreter draws
    assert ((0 <= first) & (first < 1)).all()


def test_auto_is_a_backend_name():
    assert SimParams(backend="auto").backend == "auto"
    with pytest.raises(ValueError, match="'auto'"):
        SimParams(backend="fast")


# ----------------------------------------------------------------------------- background
class _Held:
    """A stand-in for the compile thread: jobs wait until ``finish`` runs them."""

    def __init__(self, outcome=None):
        self.jobs, self.outcome = [], outcome

    def submit(self, fn):
        from concurrent.futures import Future
        self.jobs.append((fn, Future()))
        return self.jobs[-1][1]

    def finish(self):
        for fn, fut in self.jobs:
            if self.outcome is None:
                fut.set_result(fn())
            else:
                fut.set_exception(self.outcome)


@pytest.fixture
def held(monkeypatch, executors):
    monkeypatch.setattr(execution, "AUTO_BACKGROUND_COMPILE", True)
    monkeypatch.setattr(execution, "_clock", _Clock(0.1))  # each call: 0.1 s
    monkeypatch.setattr(execution, "estimated_compile_seconds", lambda k: 0.35)
    pool = _Held()
    monkeypatch.setattr(execution, "_compiler", lambda: pool)
    return pool


def test_the_compile_runs_in_the_background_while_calls_interpret(executors, held):
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    ref = np.exp(a * np.float32(0.5))

    def call():
        np.testing.assert_allclose(nki.simulate_kernel(k, a, params=AUTO), ref, rtol=1e-6)
    for _ in range(7):
        call()
    # 0.4 s interpreted after the 4th call: the 5th starts the compile and interprets
    assert executors == ["numpy"] * 7 and len(held.jobs) == 1
    entry = execution._AUTO.lookup(id(k.trace(a).kernel))
    assert entry.recent["numpy"] == pytest.approx([0.1] * 4)  # (none during the compile)
    held.finish()  # the compile: no call waited for it
    for _ in range(8):
        call()
    assert executors[7:] == ["jax"] * 8 and len(held.jobs) == 1
    assert len(execution._COMPILE_RATIOS) == 1  # the background compile calibrates later ones
    assert entry.settled is not None


@pytest.mark.parametrize("failure, then", [(None, "numpy"), (RuntimeError("boom"), "jax")])
def test_a_failed_background_compile(executors, held, monkeypatch, failure, then):
    from nki_workbench._src.semantics import Unsupported
    held.outcome = failure or Unsupported("no JAX rule for opcode 'x'")
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    for _ in range(5):
        nki.simulate_kernel(k, a, params=AUTO)
    held.finish()
    for _ in range(3):
        nki.simulate_kernel(k, a, params=AUTO)
    # without a JAX rule the kernel stays interpreted; any other failure compiles on the calling
    # thread, where an error would reach the caller as without the background
    assert executors[5:] == [then] * 3 and len(held.jobs) == 1


def test_a_real_background_compile_switches_to_the_program(executors, monkeypatch):
    import time
    monkeypatch.setattr(execution, "AUTO_BACKGROUND_COMPILE", True)
    monkeypatch.setattr(execution, "estimated_compile_seconds", lambda k: 1e-9)
    k, a = _kernel(), RNG.standard_normal((256, 64)).astype(np.float32)
    ref = np.exp(a * np.float32(0.5))
    deadline = time.monotonic() + 60
    while "jax" not in executors:
        assert time.monotonic() < deadline, "the background compile never finished"
        np.testing.assert_allclose(nki.simulate_kernel(k, a, params=AUTO), ref, rtol=1e-6)
        time.sleep(0.01)
    assert executors[:2] == ["numpy", "numpy"]  # (the 2nd call started the compile)
    np.testing.assert_allclose(nki.simulate_kernel(k, a, params=AUTO), ref, rtol=1e-6)
