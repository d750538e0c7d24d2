"""The interpreter's fast runner (one output, all lanes, every input written and unstamped) and
its one-variable access keys change no result, warning or error.

Each kernel runs twice on the numpy interpreter: as compiled, and compiled with every operand
reader sending the instruction down the general path. Outputs must be bit-identical, warnings
the same messages in the same order, errors the same message; the values are also checked
against numpy.
"""

import random
import warnings

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import NkiError, SimParams, nki
from nki_workbench._src.ir import Access
from nki_workbench._src.ir import expr as E
from nki_workbench._src.sim import interp_inst
from nki_workbench._src.sim.access import CompiledAccess, OOBError
from nki_workbench._src.sim.interp import Program

PARAMS = SimParams(backend="numpy")


def tiny_chain(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1]):
        t = nl.load(a[0:128, i:i + 1])
        s = nl.add(nl.exp(t), t)
        nl.store(out[0:128, i:i + 1], value=nl.copy(s))
    return out


def unrolled_chain(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(a.shape[1]):
        t = nl.load(a[0:128, i:i + 1])
        nl.store(out[0:128, i:i + 1], value=nl.multiply(t, 2.0))
    return out


def accumulate(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(a.shape[1]):
        acc[...] = nl.add(acc, nl.multiply(nl.load(a[:, i:i + 1]), 0.5))
    nl.store(out, value=acc)
    return out


def ragged_edge(a):
    """Tiles of 48 columns over 40: the mask is all-true on the first tile, partial on the last."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:24]
    for j in nl.affine_range(2):
        m = j * 24 + i_f < 40
        t = nl.load(a[i_p, j * 24 + i_f], mask=m)
        nl.store(out[i_p, j * 24 + i_f], value=nl.square(t, mask=m), mask=m)
    return out


def half_written_tile(a):
    """A tile written in half is read whole: the general path warns, the output is tainted."""
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    t[0:64, :] = nl.load(a[0:64, 0:8])
    nl.store(out, value=nl.exp(t))
    return out


def outer_tile_last_wins(a):
    out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        last[...] = nl.load(a[0:128, nl.ds(i * 8, 8)])
    nl.store(out, last)  # which iteration wrote it last?
    return out


def steps_out_of_bounds(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:1]
    for i in nl.sequential_range(a.shape[1] + 1):  # the last one reads past the last column
        # (an always-true mask: the trace leaves the bounds to the run, the fast runner takes it)
        nl.store(out, value=nl.load(a[i_p, i + i_f], mask=(i_p < 128)))
    return out


A = np.random.default_rng(3).standard_normal((128, 40), dtype=np.float32)


def _run(fn, general_only, monkeypatch):
    with monkeypatch.context() as mp:
        if general_only:
            mp.setattr(interp_inst, "_reader", lambda kind, x, in_affine: lambda st: None)
        kernel = nki.trace_kernel(fn, A).kernel
        prog = Program(kernel)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            out = prog.run({kernel.params[0].name: A}, PARAMS)
        except NkiError as exc:
            out = exc
    return out, [f"{w.category.__name__}: {w.message}" for w in rec]


def _same(fast, general):
    (a, wa), (b, wb) = fast, general
    assert wa == wb
    if isinstance(a, Exception):
        assert type(a) is type(b) and str(a) == str(b)
        return
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes()


def _out(res):
    (out, _), = [res]
    return next(iter(out.values()))


REFERENCE = {
    "tiny_chain": lambda: np.exp(A) + A,
    "unrolled_chain": lambda: A * np.float32(2),
    "accumulate": None,  # (a float32 running sum: checked for equality between paths only)
    "ragged_edge": lambda: A * A,
}


@pytest.mark.parametrize("fn", [tiny_chain, unrolled_chain, accumulate, ragged_edge],
                         ids=lambda f: f.__name__)
def test_results_match_the_general_path_and_numpy(fn, monkeypatch):
    fast, general = _run(fn, False, monkeypatch), _run(fn, True, monkeypatch)
    _same(fast, general)
    assert fast[1] == []
    ref = REFERENCE[fn.__name__]
    if ref is not None:
        np.testing.assert_allclose(_out(fast), ref(), rtol=1e-6)


def test_unwritten_reads_warn_the_same(monkeypatch):
    fast, general = _run(half_written_tile, False, monkeypatch), _run(half_written_tile, True,
                                                                      monkeypatch)
    _same(fast, general)
    assert any("UninitializedReadWarning" in w and "512 of 1024" in w for w in fast[1])
    got = _out(fast)
    np.testing.assert_allclose(got[0:64], np.exp(A[0:64, 0:8]), rtol=1e-6)
    assert np.isnan(got[64:]).all()


def test_races_warn_the_same(monkeypatch):
    fast, general = _run(outer_tile_last_wins, False, monkeypatch), _run(
        outer_tile_last_wins, True, monkeypatch)
    _same(fast, general)
    assert any(w.startswith("LoopCarriedDependencyWarning") for w in fast[1])


def test_out_of_bounds_raises_the_same(monkeypatch):
    fast, general = _run(steps_out_of_bounds, False, monkeypatch), _run(
        steps_out_of_bounds, True, monkeypatch)
    _same(fast, general)
    assert isinstance(fast[0], NkiError)
    assert "index range [40, 40] exceed dimension size of 40" in str(fast[0])


def test_one_var_keys_match_the_general_key_loop():
    rnd = random.Random(0)
    planned = 0
    for _ in range(1500):
        nd = rnd.choice([1, 2, 3])
        decl = tuple(rnd.choice([1, 3, 8, 16]) for _ in range(nd))
        index, axis, n_io = [], 0, rnd.randint(0, nd)
        for d in range(nd):
            e = E.const(rnd.randint(-2, decl[d] + 1))
            if d < n_io:
                e = E.add(e, E.mul(E.Iota(rnd.choice([1, 2, 4]), axis, n_io),
                                   rnd.choice([1, 2, -1, 3])))
                axis += 1
            if rnd.random() < 0.5:
                e = E.add(e, E.mul(E.Var(rnd.choice("ij")), rnd.choice([1, 2, -1, 4])))
            index.append(e)
        ca = CompiledAccess(Access("t", tuple(index), None), decl)
        if ca.one_var is None:
            continue
        planned += 1
        for i in range(-3, 20):
            env = {"i": i, "j": i + 1}
            got = []
            for plan in (ca.one_var, None):
                saved, ca.one_var = ca.one_var, plan
                try:
                    got.append(("key", ca._slices(env)))
                except OOBError as exc:
                    got.append(("oob", str(exc)))
                finally:
                    ca.one_var = saved
            assert got[0] == got[1], (index, decl, env)
    assert planned > 200


@pytest.mark.parametrize("name,fill", [("float32", np.nan), ("bfloat16", np.nan),
                                       ("float8_e4m3", np.nan), ("int32", -2 ** 31),
                                       ("uint8", 255), ("int8", -128), ("bool", False)])
def test_fresh_buffers_hold_the_poison_of_their_dtype(name, fill):
    from nki_workbench._src import dtypes as D
    from nki_workbench._src.sim.memory import poison
    st = D.storage_dtype(D.from_name(name))
    got, again = poison((4, 3), name), poison((4, 3), name)
    assert got is not again and got.dtype == st and got.shape == (4, 3)
    assert got.tobytes() == np.full((4, 3), fill, dtype=st).tobytes()
    got[0, 0] = 1  # a new array each time: writing one leaves the next untouched
    assert poison((4, 3), name).tobytes() == again.tobytes()


def broadcast_norm(a, g):
    """A [1, F] tile broadcast over the partitions (rmsnorm's gain) and a [P, 1] one over F."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    g_tile = nl.load(g.reshape((1, g.shape[0])))
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        r = nl.rsqrt(nl.sum(nl.square(t), axis=[1], keepdims=True))
        gb = g_tile.broadcast_to((128, g.shape[0]))
        rb = nl.copy(r).broadcast_to((128, g.shape[0]))
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(nl.multiply(t, rb), gb))
    return out


def transposed_scale(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.transpose(nl.load(a))
    nl.store(out, value=nl.multiply(t, 2.0))
    return out


@pytest.mark.parametrize("fn", [broadcast_norm, transposed_scale])
def test_materialised_tiles_are_row_major(fn):
    """A tile made from a broadcast or a transpose is laid out row-major: numpy's default order
    "K" put a stride-0 axis innermost, a transpose's copy was column-major, and every later op
    on such a tile ran 3-4x slower."""
    rng = np.random.default_rng(3)
    a, g = rng.standard_normal((256, 96), dtype=np.float32), rng.standard_normal(
        96, dtype=np.float32)
    if fn is transposed_scale:
        a = a[:96]
    args = (a, g) if fn is broadcast_norm else (a,)
    kernel = nki.trace_kernel(fn, *args).kernel
    layouts = {}

    def observer(inst, st):
        for name, buf in st.bufs.items():
            d = getattr(buf, "data", None)
            if isinstance(d, np.ndarray) and d.ndim == 2 and d.base is None and d.size > 1:
                layouts[name] = d.flags.c_contiguous
    out = Program(kernel).run({p.name: x for p, x in zip(kernel.params, args, strict=True)}, PARAMS,
                              observer=observer)
    assert len(layouts) >= 2 and all(layouts.values()), layouts
    want = a / np.sqrt(np.sum(a * a, axis=1, keepdims=True)) * g if fn is broadcast_norm \
        else a.T * 2
    np.testing.assert_allclose(next(iter(out.values())), want, rtol=1e-5, atol=1e-5)
