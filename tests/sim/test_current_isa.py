"""Each instruction of today's ``nki.isa`` (destination first) against a numpy reference."""

import numpy as np
import pytest
from kernels_current import nisa, nki, nl

from nki_workbench import NkiError

RNG = np.random.default_rng(3)
X = RNG.standard_normal((128, 64)).astype(np.float32)
Y = RNG.standard_normal((128, 64)).astype(np.float32)
V = RNG.standard_normal((128, 1)).astype(np.float32)


def _load(src, shape=None, dtype=None):
    t = nl.ndarray(shape or src.shape, dtype or src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _tile(shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype, buffer=buffer)


def k_tensor_tensor(x, y):
    d = _tile(x.shape)
    nisa.tensor_tensor(dst=d, data1=_load(x), data2=_load(y), op=nl.multiply)
    return _store(d)


def k_tensor_scalar(x, v):
    d = _tile(x.shape)
    nisa.tensor_scalar(dst=d, data=_load(x), op0=nl.subtract, operand0=_load(v), op1=nl.maximum,
                       operand1=0.0)
    return _store(d)


def k_scalar_tensor_tensor(x, y):
    d = _tile(x.shape)
    nisa.scalar_tensor_tensor(dst=d, data=_load(x), op0=nl.multiply, operand0=2.0, op1=nl.add,
                              operand1=_load(y))
    return _store(d)


def k_activation(x, v):
    d, s = _tile(x.shape), _tile((128, 1))
    nisa.activation(dst=d, op=nl.tanh, data=_load(x), bias=_load(v), scale=0.5,
                    reduce_op=nl.add, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    both = _tile((128, 65))
    nisa.tensor_copy(dst=both[:, 0:64], src=d)
    nisa.tensor_copy(dst=both[:, 64:65], src=s)
    return _store(both)


def k_activation_reduce(x):
    d, s = _tile(x.shape), _tile((128, 1))
    nisa.activation_reduce(dst=d, op=nl.exp, data=_load(x), reduce_op=nl.add, reduce_res=s)
    return _store(s)


def k_tensor_reduce(x):
    d = _tile((128, 1))
    nisa.tensor_reduce(dst=d, op=nl.maximum, data=_load(x), axis=(1,))
    return _store(d)


def k_partition_reduce(x):
    d = _tile((1, 64))
    nisa.tensor_partition_reduce(dst=d, op=nl.add, data=_load(x))
    return _store(d)


def k_copy_cast(x):
    d = _tile(x.shape, nl.bfloat16)
    nisa.tensor_copy(dst=d, src=_load(x))
    f = _tile(x.shape)
    nisa.tensor_copy(dst=f, src=d, engine=nisa.engine.gpsimd)
    return _store(f)


def k_memset_iota(x):
    m = _tile((128, 64), nl.int32)
    nisa.memset(dst=m, value=7)
    i = _tile((128, 64), nl.int32)
    nisa.iota(dst=i, pattern=[[2, 64]], offset=5, channel_multiplier=3)
    d = _tile((128, 64), nl.int32)
    nisa.tensor_tensor(dst=d, data1=m, data2=i, op=nl.add)
    return _store(d)


def k_iota_2d(x):
    i = _tile((128, 4, 16), nl.float32)
    nisa.iota(dst=i, pattern=[[100, 4], [1, 16]], channel_multiplier=1000)
    return _store(i)


def k_matmul(x, y):
    a, b = _load(x[:, 0:32]), _load(y)
    p = _tile((32, 64), buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b, accumulate=False)
    nisa.nc_matmul(dst=p, stationary=a, moving=b, accumulate=True)
    d = _tile((32, 64))
    nisa.tensor_copy(dst=d, src=p)
    return _store(d)


def k_transpose_vector(x):
    t = _load(x[0:32, 0:32])
    d = _tile((32, 32))
    nisa.nc_transpose(dst=d, data=t)
    return _store(d)


def k_reciprocal(x):
    d = _tile(x.shape)
    nisa.reciprocal(dst=d, data=_load(x))
    return _store(d)


def k_scan(x, y):
    d = _tile(x.shape)
    nisa.tensor_tensor_scan(dst=d, data0=_load(x), data1=_load(y), initial=0.0,
                            op0=nl.multiply, op1=nl.add)
    return _store(d)


def k_bn(x):
    st = _tile((128, 6))
    nisa.bn_stats(dst=st, data=_load(x))
    mv = _tile((128, 2))
    nisa.bn_aggr(dst=mv, data=st)
    return _store(mv)


def k_max8(x):
    d = _tile((128, 8))
    nisa.max8(dst=d, src=_load(x))
    return _store(d)


def k_dma_compute(x, y):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_compute(dst=out, srcs=[x, y, x], reduce_op=nl.add)
    return out


def k_dma_transpose(x):
    t = _tile((64, 128))
    nisa.dma_transpose(dst=t, src=x)
    return _store(t)


def k_exponential(x, v):
    d = _tile(x.shape)
    nisa.exponential(dst=d, src=_load(x), max_value=_load(v))
    return _store(d)


def k_select(x, y):
    t = _load(x)
    m = _tile(x.shape)
    nisa.affine_select(dst=m, pattern=[[1, 64]], channel_multiplier=-1, on_true_tile=t,
                       on_false_value=0.0, cmp_op=nl.less, offset=-10)
    return _store(m)


def k_ap_views(x):
    t = _load(x)
    d = _tile((128, 32))
    nisa.tensor_copy(dst=d, src=t.ap([[64, 128], [2, 32]], offset=1))
    e = _tile((128, 16))
    nisa.tensor_copy(dst=e, src=t.slice(1, 8, 40, 2))
    both = _tile((128, 48))
    nisa.tensor_copy(dst=both[:, 0:32], src=d)
    nisa.tensor_copy(dst=both[:, 32:48], src=e)
    return _store(both)


def k_hbm_ap(x):
    t = _tile((64, 128))
    nisa.dma_copy(dst=t, src=x.ap([[1, 64], [64, 128]]))  # a transposing read pattern
    return _store(t)


def _bn(x):
    return np.stack([x.mean(1), x.var(1)], axis=1)


CASES = [
    (k_tensor_tensor, (X, Y), lambda x, y: x * y),
    (k_tensor_scalar, (X, V), lambda x, v: np.maximum(x - v, 0.0)),
    (k_scalar_tensor_tensor, (X, Y), lambda x, y: 2 * x + y),
    (k_activation, (X, V), lambda x, v: np.concatenate(
        [np.tanh(x * 0.5 + v), np.tanh(x * 0.5 + v).sum(1, keepdims=True)], 1)),
    (k_activation_reduce, (X,), lambda x: np.exp(x).sum(1, keepdims=True)),
    (k_tensor_reduce, (X,), lambda x: x.max(1, keepdims=True)),
    (k_partition_reduce, (X,), lambda x: x.sum(0, keepdims=True)),
    (k_copy_cast, (X,), lambda x: x),
    (k_memset_iota, (X,), lambda x: 7 + 5 + 3 * np.arange(128)[:, None] + 2 * np.arange(64)),
    (k_iota_2d, (X,), lambda x: 1000.0 * np.arange(128)[:, None, None]
     + 100 * np.arange(4)[None, :, None] + np.arange(16)),
    (k_matmul, (X, Y), lambda x, y: 2 * x[:, 0:32].T @ y),
    (k_transpose_vector, (X,), lambda x: x[0:32, 0:32].T),
    (k_reciprocal, (X,), lambda x: 1 / x),
    (k_scan, (X, Y), lambda x, y: _scan(x, y)),
    (k_bn, (X,), _bn),
    (k_max8, (X,), lambda x: -np.sort(-x, axis=1)[:, :8]),
    (k_dma_compute, (X, Y), lambda x, y: 2 * x + y),
    (k_dma_transpose, (X,), lambda x: x.T),
    (k_exponential, (X, V), lambda x, v: np.exp(x - v)),
    (k_select, (X, Y), lambda x, y: np.where(
        -10 - np.arange(128)[:, None] + np.arange(64) < 0, x, 0.0)),
    (k_ap_views, (X,), lambda x: np.concatenate([x[:, 1:64:2], x[:, 8:40:2]], 1)),
    (k_hbm_ap, (X,), lambda x: x.T),
]


def _scan(x, y):
    out = np.zeros_like(x)
    r = np.zeros(x.shape[0], np.float32)
    for j in range(x.shape[1]):
        r = x[:, j] * r + y[:, j]
        out[:, j] = r
    return out


@pytest.mark.parametrize("kernel,args,ref", CASES, ids=[c[0].__name__[2:] for c in CASES])
def test_instruction_matches_numpy(kernel, args, ref):
    tol = 2e-2 if kernel in (k_copy_cast, k_activation, k_exponential, k_activation_reduce) \
        else 1e-4
    out = nki.simulate(kernel)(*args)
    np.testing.assert_allclose(out.astype(np.float64), ref(*args), rtol=tol, atol=tol)


def test_lnc2_program_ids_and_num_programs():
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 128), nl.float32, buffer=nl.shared_hbm)
        n = nl.num_programs()
        pid = nl.program_id(0)
        t = _tile((1, 128))
        nisa.iota(dst=t, pattern=[[0, 128]], offset=n * 10)
        u = _tile((1, 128))
        nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[pid:pid + 1, :], src=u)
        return out

    np.testing.assert_array_equal(nki.simulate(k[2])(X), np.full((2, 128), 21.0))
    np.testing.assert_array_equal(nki.simulate(k)(X)[0], np.full(128, 11.0))


def test_python_uses_of_loop_variables_trace_unrolled():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = _load(a[i * 64:(i + 1) * 64, :])
            if i == 0:  # a Python `if` on the loop variable: NKI 0.2+ unrolls
                nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=-1.0)
            nisa.dma_copy(dst=out[i * 64:min(128, (i + 1) * 64), :], src=t)
        return out

    out = nki.simulate(k)(X)
    np.testing.assert_array_equal(out, np.concatenate([-X[0:64], X[64:128]]))


def test_loop_bounds_computed_with_min_trace_unrolled():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.sequential_range(2):
            start = i * 48
            size = min(start + 48, a.shape[1]) - start  # 48, then 16: a length per iteration
            t = nl.ndarray((128, 48), a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t[:, 0:size], src=a[:, start:start + size])
            nisa.tensor_scalar(dst=t[:, 0:size], data=t[:, 0:size], op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out[:, start:start + size], src=t[:, 0:size])
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X + 1.0)
    np.testing.assert_array_equal(nki.simulate(k_one_tile)(X), X * 2.0)


def k_one_tile(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(1):
        start = i * 2048
        size = min(start + 2048, a.shape[1]) - start  # min() is decided; the length is not
        t = nl.ndarray((128, 2048), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:size], src=a[:, start:start + size])
        nisa.tensor_scalar(dst=t[:, 0:size], data=t[:, 0:size], op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[:, start:start + size], src=t[:, 0:size])
    return out


def test_torch_inputs_give_torch_outputs():
    torch = pytest.importorskip("torch")
    out = nki.simulate(k_tensor_tensor)(torch.from_numpy(X), torch.from_numpy(Y))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), X * Y, rtol=1e-6)
    bx = torch.from_numpy(X).to(torch.bfloat16)
    out = nki.simulate(k_copy_cast)(bx)
    assert out.dtype == torch.float32  # the kernel's output tile is float32
    np.testing.assert_array_equal(out.float().numpy(), bx.float().numpy())


def test_dataclass_config_arguments_and_shared_hbm_in_helpers():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:  # unhashable (eq without frozen), as nki-library's kernel configs
        scale: float
        cols: int

    def make_out(shape, dtype):  # a helper allocating the output (allowed since NKI 0.2)
        return nl.ndarray(shape, dtype, buffer=nl.shared_hbm)

    @nki.jit
    def k(a, cfg):
        out = make_out((128, cfg.cols), a.dtype)
        t = _load(a[:, 0:cfg.cols])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=cfg.scale)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X, Cfg(3.0, 32)), X[:, :32] * 3.0)
    np.testing.assert_array_equal(nki.simulate(k)(X, Cfg(2.0, 16)), X[:, :16] * 2.0)


def test_tensor_buffer_compares_with_the_buffer_markers():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = _load(a)
        assert t.buffer == nl.sbuf and t.buffer != nl.psum and out.buffer == nl.shared_hbm
        assert a.buffer != nl.sbuf
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X)


def test_loops_over_trace_time_registers_unroll():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        n = nisa.register_alloc(2)
        step = nisa.register_alloc()
        nisa.register_move(step, 1)

        def body(i):
            t = _load(a[i * 64:(i + 1) * 64, :])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out[i * 64:(i + 1) * 64, :], src=t)

        nl.fori_loop(0, n, body, step=int(step))
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X + 1.0)


def test_broadcast_access_pattern_repeats_an_element_along_the_free_dim():
    @nki.jit
    def k(a, v):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        col = _load(v)
        t = _tile(a.shape)
        nisa.tensor_tensor(dst=t, data1=_load(a), data2=col.ap([[1, 128], [0, a.shape[1]]]),
                           op=nl.subtract)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_allclose(nki.simulate(k)(X, V), X - V, rtol=1e-6)


def test_nkiobject_subclasses_are_dataclasses_with_optional_fields():
    import dataclasses

    class Dims(nl.NKIObject):
        rows: int
        cols: int
        scale: float = 1.0

    @dataclasses.dataclass
    class More(nl.NKIObject):
        a: int
        b: int

    @dataclasses.dataclass(frozen=True)
    class Hw(nl.NKIObject):
        alus: int = 8

    d = Dims(rows=128, cols=16)
    assert (d.rows, d.cols, d.scale) == (128, 16, 1.0) and Dims(1).cols is None
    assert More(a=1).b is None and Hw().alus == 8 and hash(Hw()) == hash(Hw())
    with pytest.raises(dataclasses.FrozenInstanceError):
        Hw().alus = 4

    @nki.jit
    def k(a, dims):
        out = nl.ndarray((dims.rows, dims.cols), a.dtype, buffer=nl.shared_hbm)
        t = _load(a[:, 0:dims.cols])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=dims.scale)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X, Dims(128, 8, 4.0)), X[:, :8] * 4.0)


def test_a_tile_in_a_python_condition_tests_presence():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = _load(a)
        bias = t if a.shape[1] == 64 else None
        if bias and t:  # presence, as in Python: a tile object is truthy
            nisa.tensor_tensor(dst=t, data1=t, data2=bias, op=nl.add)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X + X)


def test_shared_identity_matrix_is_an_sbuf_tile_for_the_tensor_engine():
    @nki.jit
    def k(a):
        out = nl.ndarray((64, 128), a.dtype, buffer=nl.shared_hbm)
        ident = nl.shared_identity_matrix(128, dtype=nl.float32)
        assert ident.buffer == nl.sbuf
        ps = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_load(a), moving=ident, is_transpose=True)
        t = _tile((64, 128))
        nisa.tensor_copy(dst=t, src=ps)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X.T)


def test_ap_of_a_sliced_view_with_its_own_dtype():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 16), a.dtype, buffer=nl.shared_hbm)
        t = _load(a)
        v = t[:, 8:40]
        t2 = _tile((128, 16))
        nisa.tensor_copy(dst=t2, src=v.ap([[64, 128], [2, 16]], dtype=a.dtype))
        nisa.dma_copy(dst=out, src=t2)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X[:, 8:40:2])


def test_nc_n_gather_picks_per_partition_positions():
    idx = RNG.integers(0, 64, size=(128, 24)).astype(np.uint32)

    @nki.jit
    def k(a, i):
        out = nl.ndarray(i.shape, a.dtype, buffer=nl.shared_hbm)
        d = _tile(i.shape)
        nisa.nc_n_gather(dst=d, data=_load(a), indices=_load(i))
        nisa.dma_copy(dst=out, src=d)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X, idx), np.take_along_axis(X, idx, axis=1))


def test_nonzero_with_count_lists_positions_padding_and_count():
    src = (RNG.random((128, 32)) < 0.3).astype(np.float32) * 5.0

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 33), nl.int32, buffer=nl.shared_hbm)
        d = _tile((128, 33), nl.int32)
        nisa.nonzero_with_count(dst=d, src=_load(a), index_offset=100, padding_val=-1)
        nisa.dma_copy(dst=out, src=d)
        return out

    ref = np.full((128, 33), -1, np.int32)
    for r in range(128):
        pos = np.flatnonzero(src[r])
        ref[r, :pos.size] = pos + 100
        ref[r, 32] = pos.size
    np.testing.assert_array_equal(nki.simulate(k)(src), ref)


def test_tensor_dtype_is_the_nl_name_and_equals_numpy():
    table = {nl.float32: 1.0, nl.bfloat16: 2.0}

    @nki.jit
    def k(a):
        assert a.dtype == nl.float32 and a.dtype == np.float32 and a.dtype != nl.bfloat16
        assert a.dtype.itemsize == 4
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = _load(a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=table[a.dtype] + 2.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), X * 3.0)


def test_nl_broadcast_to_takes_the_shape_by_position():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
        row = _load(a[0:1, :])
        b = nl.broadcast_to(row, (128, 64))
        nisa.dma_copy(dst=out, src=b)
        return out

    np.testing.assert_array_equal(nki.simulate(k)(X), np.broadcast_to(X[0:1], (128, 64)))


def test_tensor_copy_accepts_the_dtype_keyword_of_early_kernels():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        t = _tile(a.shape, nl.bfloat16)
        nisa.tensor_copy(dst=t, src=_load(a), dtype=nl.bfloat16)
        nisa.dma_copy(dst=out, src=t)
        return out

    got = nki.simulate(k)(X)
    np.testing.assert_allclose(got.astype(np.float32), X, rtol=1e-2, atol=1e-2)


def test_tensor_tensor_pairs_free_elements_of_a_unit_dim_view_with_a_flat_operand():
    @nki.jit
    def k(a, b):
        t = _load(a)
        m = _load(b)
        for j in range(a.shape[1]):
            s = t[:, j:j + 1, :]  # [P, 1, F] against m's [P, F]: the same F elements
            nisa.tensor_tensor(dst=s, data1=s, data2=m, op=nl.subtract)
        return _store(t)

    a = RNG.standard_normal((128, 3, 16)).astype(np.float32)
    b = RNG.standard_normal((128, 16)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(a, b), a - b[:, None, :])


def test_shared_constant_reads_a_npy_file(tmp_path):
    c = RNG.standard_normal((128, 8)).astype(np.float32)
    path = tmp_path / "c.npy"
    np.save(path, c)

    @nki.jit
    def k(a):
        t = _load(a)
        nisa.tensor_tensor(dst=t, data1=t, data2=_load(nl.shared_constant(str(path))), op=nl.add)
        return _store(t)

    x = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(x), x + c)
    path.unlink()
    with pytest.raises(NkiError, match="cannot read the .npy file"):
        nki.simulate(k)(x[:, :4])  # another shape: a new trace, which reads the file again


def test_nkiobject_plain_class_attributes_are_fields_too():
    class Section(nl.NKIObject):
        idx = None
        offset = 0
        prefix: bool = False

        def end(self):
            return self.offset + 1

    s = Section(idx=2, offset=5)
    assert (s.idx, s.offset, s.prefix, s.end()) == (2, 5, False, 6)
    assert Section(True, 1, 2).offset == 2 and Section().offset == 0  # annotated ones first
    with pytest.raises(TypeError, match="unexpected keyword argument 'end'"):
        Section(end=3)


def test_a_dataclass_nkiobject_takes_its_plain_class_attributes_by_keyword():
    import dataclasses

    @dataclasses.dataclass
    class Section(nl.NKIObject):
        idx = None
        offset = 0

    s = Section(idx=3)
    assert (s.idx, s.offset) == (3, 0) and Section(1, 2) == Section(idx=1, offset=2)
