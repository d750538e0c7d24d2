"""Helpers of the tests that run one kernel in both simulator backends and compare them."""

import numpy as np

from nki_workbench import nki
from nki_workbench._src import dtypes as D


def trace_inputs(kernel, *args):
    """``(kernel IR, {parameter name: array})`` for ``kernel`` traced on ``args``."""
    k = nki.trace_kernel(kernel, *args).kernel
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    return k, {p.name: a for p, a in zip(k.params, arrays, strict=True)}


def lowered_text(k, inputs, races=True):
    """The compiled program of ``k`` for ``inputs``, as StableHLO text (nothing is run)."""
    from nki_workbench._src.sim import jax_exec, jax_static
    comp = jax_exec.compiled(k)
    args, offsets, cvals = comp.args(jax_static.checked_inputs(k, inputs))
    return comp.fn(False, races, offsets).lower(args, cvals, jax_exec._ZERO).as_text()


def ulps(a, b):
    """Largest distance in units of the last place (integers: absolute difference)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype.kind in "biu":
        return int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)), initial=0))
    nan_a, nan_b = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    assert np.array_equal(nan_a, nan_b), "NaN in different places"
    ia = a.view(f"i{a.dtype.itemsize}").astype(np.int64)
    ib = b.view(f"i{b.dtype.itemsize}").astype(np.int64)
    top = 1 << (8 * a.dtype.itemsize - 1)
    ia = np.where(ia < 0, -(ia + top), ia)  # sign-magnitude -> monotone integer line
    ib = np.where(ib < 0, -(ib + top), ib)
    return int(np.max(np.abs(ia - ib)[~nan_a], initial=0))


def err_in_ulps(out, ref):
    """Largest |out - ref| in ulps of the output dtype at ref's largest magnitude.

    Summation-order differences are absolute errors: relative ulps blow up near zero.
    """
    o, r = D.to_f32(out).astype(np.float64), D.to_f32(ref).astype(np.float64)
    assert np.array_equal(np.isnan(o), np.isnan(r))
    ok = ~np.isnan(r)
    scale = float(np.max(np.abs(r[ok]), initial=0.0))
    if scale == 0.0:
        return float(np.max(np.abs(o[ok]), initial=0.0))
    ulp = float(D.finfo(out.dtype).eps) * 2.0 ** np.floor(np.log2(scale))
    return float(np.max(np.abs(o[ok] - r[ok]))) / ulp


def run_both(kernel, *args):
    """``(IR, inputs, interpreter outputs, compiled outputs)``; no warning may be raised, and
    the compiled backend must really run compiled (no fallback to the interpreter)."""
    import warnings

    from nki_workbench._src.sim import jax_exec
    from nki_workbench._src.sim.interp import Program
    k, inputs = trace_inputs(kernel, *args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref = Program(k).run(inputs, backend="numpy")
        comp = jax_exec.compiled(k)
        runs = comp.runs
        out = jax_exec.run_compiled(k, inputs)
    assert comp.runs == runs + 1, "the kernel was not run compiled"
    return k, inputs, ref, out


def warns_alike(k, inputs):
    """``(interpreter outputs, compiled outputs)`` of a kernel that warns: both backends must
    emit the same, non-empty, list of warning messages."""
    import warnings

    from nki_workbench._src.sim import jax_exec
    from nki_workbench._src.sim.interp import Program
    with warnings.catch_warnings(record=True) as ref_rec:
        warnings.simplefilter("always")
        ref = Program(k).run(inputs, backend="numpy")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = jax_exec.run_compiled(k, inputs)
    assert ref_rec, "the interpreter warns"
    assert [str(w.message) for w in rec] == [str(w.message) for w in ref_rec]
    return ref, out


def pairwise_reference(row):
    """numpy's pairwise float32 sum of ``row`` (docs/semantics.md), element by element in Python
    float32: no arrays, no batching, so it checks the batched model independently."""
    f = np.float32

    def pw(v):
        if len(v) < 8:
            res = f(0.0)
            for t in v:
                res = f(res + t)
            return res
        if len(v) <= 128:
            r = list(v[:8])
            whole = len(v) - len(v) % 8
            for i in range(8, whole, 8):
                r = [f(r[j] + v[i + j]) for j in range(8)]
            res = f(f(f(r[0] + r[1]) + f(r[2] + r[3])) + f(f(r[4] + r[5]) + f(r[6] + r[7])))
            for t in v[whole:]:
                res = f(res + t)
            return res
        h = len(v) // 2
        h -= h % 8
        return f(pw(v[:h]) + pw(v[h:]))

    return f(f(0.0) + pw([f(t) for t in row]))
