"""The workloads of ``bench/peers.py``, each four ways: an NKI kernel, a whole-array numpy
reference, the same tiling as a numpy loop, and a JAX Pallas kernel (run with
``interpret=True``). Our own kernels, in the style of the NKI tutorials."""

from __future__ import annotations

import numpy as np

import nki_workbench.nki.language as nl

P, F = 128, 512  # partition tile, moving free size of a matmul


# ----------------------------------------------------------------------------- NKI kernels
def matmul(lhsT, rhs):
    """``lhsT.T @ rhs`` in 128x512 output tiles, K accumulated in PSUM (float32)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // P):
        for n in nl.affine_range(N // F):
            acc = nl.zeros((P, F), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // P):
                lt = nl.load(lhsT[k * P:(k + 1) * P, m * P:(m + 1) * P])
                rt = nl.load(rhs[k * P:(k + 1) * P, n * F:(n + 1) * F])
                acc += nl.matmul(lt, rt, transpose_x=True)
            nl.store(out[m * P:(m + 1) * P, n * F:(n + 1) * F], value=nl.copy(acc))
    return out


def softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // P):
        t = nl.load(x[i * P:(i + 1) * P, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        nl.store(out[i * P:(i + 1) * P, :], value=nl.divide(e, nl.sum(e, axis=1, keepdims=True)))
    return out


def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        s = slice(i * P, (i + 1) * P)
        nl.store(out[s, :], value=nl.add(nl.load(a[s, :]), nl.load(b[s, :])))
    return out


def rmsnorm(a, g):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    g_tile = nl.load(g.reshape((1, g.shape[0])))
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.load(a[i * P:(i + 1) * P, :])
        r = nl.rsqrt(nl.sum(nl.square(t), axis=[1], keepdims=True) / a.shape[1])
        o = nl.multiply(nl.multiply(t, r), g_tile.broadcast_to((P, g.shape[0])))
        nl.store(out[i * P:(i + 1) * P, :], value=o)
    return out


def flash_attention(q, k, v, scale):
    """One head, online softmax: q, k [d, S] and v [S, d] -> [S, d]; 128-token blocks."""
    d, s_q = q.shape
    s_k = k.shape[1]
    out = nl.ndarray((s_q, d), dtype=nl.float32, buffer=nl.shared_hbm)
    for qi in nl.affine_range(s_q // P):
        q_tile = nl.load(q[:, qi * P:(qi + 1) * P])
        m_run = nl.full((P, 1), -1e30, dtype=nl.float32)
        l_run = nl.zeros((P, 1), dtype=nl.float32)
        o_run = nl.zeros((P, d), dtype=nl.float32)
        for j in nl.sequential_range(s_k // P):
            k_tile = nl.load(k[:, j * P:(j + 1) * P])
            v_tile = nl.load(v[j * P:(j + 1) * P, :])
            s = nl.multiply(nl.matmul(q_tile, k_tile, transpose_x=True), scale)
            m_new = nl.maximum(m_run, nl.max(s, axis=1, keepdims=True))
            p = nl.exp(nl.subtract(s, m_new))
            alpha = nl.exp(nl.subtract(m_run, m_new))
            l_run[...] = nl.add(nl.multiply(l_run, alpha), nl.sum(p, axis=1, keepdims=True))
            pv = nl.matmul(nl.transpose(p), v_tile, transpose_x=True)
            o_run[...] = nl.add(nl.multiply(o_run, alpha), pv)
            m_run[...] = m_new
        nl.store(out[qi * P:(qi + 1) * P, :], value=nl.divide(o_run, l_run))
    return out


# ----------------------------------------------------------------------------- numpy, whole array
def _f32(x):
    return np.asarray(x, dtype=np.float32)


def np_matmul(lhsT, rhs):
    return _f32(lhsT).T @ _f32(rhs)


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_add(a, b):
    return a + b


def np_rmsnorm(a, g):
    return a / np.sqrt(np.mean(np.square(a), axis=1, keepdims=True)) * g


def np_flash_attention(q, k, v, scale):
    s = (q.T @ k) * np.float32(scale)
    return np_softmax(s) @ v


# ----------------------------------------------------------------------------- numpy, tile loop
def tiles_matmul(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    lhsT, rhs = _f32(lhsT), _f32(rhs)
    out = np.empty((M, N), np.float32)
    for m in range(M // P):
        for n in range(N // F):
            acc = np.zeros((P, F), np.float32)
            for k in range(K // P):
                acc += lhsT[k * P:(k + 1) * P, m * P:(m + 1) * P].T @ rhs[k * P:(k + 1) * P,
                                                                           n * F:(n + 1) * F]
            out[m * P:(m + 1) * P, n * F:(n + 1) * F] = acc
    return out


def tiles_softmax(x):
    out = np.empty_like(x)
    for i in range(x.shape[0] // P):
        out[i * P:(i + 1) * P] = np_softmax(x[i * P:(i + 1) * P])
    return out


def tiles_add(a, b):
    out = np.empty_like(a)
    for i in range(a.shape[0] // P):
        out[i * P:(i + 1) * P] = a[i * P:(i + 1) * P] + b[i * P:(i + 1) * P]
    return out


def tiles_rmsnorm(a, g):
    out = np.empty_like(a)
    for i in range(a.shape[0] // P):
        out[i * P:(i + 1) * P] = np_rmsnorm(a[i * P:(i + 1) * P], g)
    return out


def tiles_flash_attention(q, k, v, scale):
    d, s_q = q.shape
    out = np.empty((s_q, d), np.float32)
    for qi in range(s_q // P):
        qt = q[:, qi * P:(qi + 1) * P]
        m = np.full((P, 1), -1e30, np.float32)
        l_run = np.zeros((P, 1), np.float32)
        o = np.zeros((P, d), np.float32)
        for j in range(k.shape[1] // P):
            s = (qt.T @ k[:, j * P:(j + 1) * P]) * np.float32(scale)
            m_new = np.maximum(m, s.max(axis=1, keepdims=True))
            p = np.exp(s - m_new)
            alpha = np.exp(m - m_new)
            l_run = l_run * alpha + p.sum(axis=1, keepdims=True)
            o = o * alpha + p @ v[j * P:(j + 1) * P]
            m = m_new
        out[qi * P:(qi + 1) * P] = o / l_run
    return out


# ----------------------------------------------------------------------------- JAX, whole array
def jax_whole(name):
    """The whole-array reference as one ``jax.jit`` program (XLA CPU): the floor of what the
    compiled simulator, which lowers to the same XLA, can reach on this machine."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    f32 = jnp.float32

    def softmax(x):
        e = jnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def matmul(lhsT, rhs):
        return lax.dot_general(lhsT.astype(f32), rhs.astype(f32), (((0,), (0,)), ((), ())),
                               precision=lax.Precision.HIGHEST)

    def flash(q, k, v, scale):
        return softmax(matmul(q, k) * f32(scale)) @ v

    fns = {"matmul": matmul, "softmax": softmax, "add": lambda a, b: a + b,
           "rmsnorm": lambda a, g: a / jnp.sqrt(jnp.mean(jnp.square(a), axis=1,
                                                          keepdims=True)) * g}
    if name == "flash":
        return jax.jit(flash, static_argnums=3)
    return jax.jit(fns[name])


# ----------------------------------------------------------------------------- JAX Pallas
def pallas(name, shapes):
    """A jitted ``pallas_call(..., interpret=True)`` for workload ``name`` on ``shapes``."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def call(kernel, out_shape, grid, in_specs, out_spec):
        return pl.pallas_call(kernel, out_shape=out_shape, grid=grid, in_specs=in_specs,
                              out_specs=out_spec, interpret=True)

    f32 = jnp.float32
    if name == "matmul":
        (K, M), (_, N) = shapes

        def mm(a_ref, b_ref, o_ref):
            o_ref[...] = jnp.dot(a_ref[...].astype(f32).T, b_ref[...].astype(f32),
                                 preferred_element_type=f32)
        fn = call(mm, jax.ShapeDtypeStruct((M, N), f32), (M // P, N // F),
                  [pl.BlockSpec((K, P), lambda i, j: (0, i)),
                   pl.BlockSpec((K, F), lambda i, j: (0, j))],
                  pl.BlockSpec((P, F), lambda i, j: (i, j)))
    elif name in ("softmax", "add", "rmsnorm"):
        n, d = shapes[0]
        row = pl.BlockSpec((P, d), lambda i: (i, 0))

        def sm(x_ref, o_ref):
            x = x_ref[...]
            e = jnp.exp(x - x.max(axis=1, keepdims=True))
            o_ref[...] = e / e.sum(axis=1, keepdims=True)

        def ad(a_ref, b_ref, o_ref):
            o_ref[...] = a_ref[...] + b_ref[...]

        def rn(a_ref, g_ref, o_ref):
            a = a_ref[...]
            o_ref[...] = a * jax.lax.rsqrt(jnp.mean(a * a, axis=1, keepdims=True)) * g_ref[...]
        kernel, specs = {"softmax": (sm, [row]), "add": (ad, [row, row]),
                         "rmsnorm": (rn, [row, pl.BlockSpec((1, d), lambda i: (0, 0))])}[name]
        fn = call(kernel, jax.ShapeDtypeStruct((n, d), f32), (n // P,), specs, row)
        if name == "rmsnorm":
            return jax.jit(lambda a, g: fn(a, g.reshape(1, -1)))
    else:  # flash attention: one q block per program, the kv blocks in a fori_loop
        d, s = shapes[0]

        def fa(q_ref, k_ref, v_ref, o_ref):
            qt = q_ref[...]

            def body(j, carry):
                m, l_run, o = carry
                kt = k_ref[:, pl.ds(j * P, P)]
                vt = v_ref[pl.ds(j * P, P), :]
                sc = (qt.T @ kt) * (1.0 / np.sqrt(d))
                m_new = jnp.maximum(m, sc.max(axis=1, keepdims=True))
                p = jnp.exp(sc - m_new)
                alpha = jnp.exp(m - m_new)
                return m_new, l_run * alpha + p.sum(axis=1, keepdims=True), o * alpha + p @ vt
            init = (jnp.full((P, 1), -1e30, f32), jnp.zeros((P, 1), f32), jnp.zeros((P, d), f32))
            _, l_run, o = jax.lax.fori_loop(0, s // P, body, init)
            o_ref[...] = o / l_run
        fn = call(fa, jax.ShapeDtypeStruct((s, d), f32), (s // P,),
                  [pl.BlockSpec((d, P), lambda i: (0, i)), pl.BlockSpec((d, s), lambda i: (0, 0)),
                   pl.BlockSpec((s, d), lambda i: (0, 0))],
                  pl.BlockSpec((P, d), lambda i: (i, 0)))
        return jax.jit(lambda q, k, v, scale: fn(q, k, v))
    return jax.jit(fn)
