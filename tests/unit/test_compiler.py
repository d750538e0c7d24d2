"""nki.compiler: direct allocation (alloc / mod_alloc / auto_alloc), validation with codes and
lines, kernel decorators (immutable re-wrapping), directives recorded in the IR."""

import functools
import inspect
import warnings

import numpy as np
import pytest

import nki_workbench.nki.compiler as ncc
import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src.alloc import kernel_fields, occupancy
from nki_workbench._src.alloc.spec import AllocationConventionWarning
from nki_workbench._src.errors import NkiError
from nki_workbench._src.ir import Loop, parse, print_kernel

HERE = "unit/test_compiler.py"


def line_of(marker, func):
    src, start = inspect.getsourcelines(func)
    for k, text in enumerate(src):
        if marker in text:
            return f"{HERE}:{start + k}"
    raise AssertionError(marker)


def fixed(*addr):
    """An allocation function (NKI's parameter names) placing every block at ``addr``."""
    def func(idx, pdim_size, fdim_size):
        return addr
    return func


def fail(idx, pdim_size, fdim_size):
    return 1 // 0


def decl(kernel, name):
    return kernel.decls()[name]


def traced(k, *args):
    return nki.jit(k, mode="simulation").trace(*args) if not hasattr(k, "trace") else \
        k.trace(*args)


# ----------------------------------------------------------------------------- markers
def test_auto_markers_are_nl_buffers():
    assert ncc.sbuf.auto_alloc() is nl.sbuf and ncc.sbuf.auto_alloc() == nl.sbuf
    assert ncc.psum.auto_alloc() is nl.psum
    assert isinstance(ncc.sbuf, ncc.SBUFAllocation) and isinstance(ncc.psum, ncc.PSUMAllocation)
    assert ncc.sbuf.alloc(fixed(0, 0)).name == "sbuf"
    assert ncc.psum.mod_alloc(base_bank=0).name == "psum"


# ----------------------------------------------------------------------------- direct kernels
def add_direct(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nt = a.shape[1] // 512
    # double buffering with mod_alloc: blocks 0,1,2,3 -> physical tiles 0,1,0,1
    a_t = nl.ndarray((nt, nl.par_dim(128), 512), dtype=a.dtype,
                     buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    # the same with a custom function (NKI direct-allocation guide style)
    b_t = nl.ndarray((nt, nl.par_dim(128), 512), dtype=a.dtype,
                     buffer=ncc.sbuf.alloc(
                         lambda idx, pdim_size, fdim_size: (0, 4096 + idx[0] % 2 * fdim_size)))
    c_t = nl.ndarray((nt, nl.par_dim(128), 512), dtype=a.dtype,
                     buffer=ncc.sbuf.mod_alloc(base_addr=8192, num_free_tiles=(2,)))
    for i in nl.affine_range(nt):
        a_t[i] = nl.load(a[:, i * 512:(i + 1) * 512])
        b_t[i] = nl.load(b[:, i * 512:(i + 1) * 512])
        c_t[i] = nl.add(a_t[i], b_t[i])
        nl.store(out[:, i * 512:(i + 1) * 512], value=c_t[i])
    return out


def test_sbuf_alloc_lambda_and_mod_alloc_double_buffering():
    rng = np.random.default_rng(0)
    a = rng.random((128, 2048), dtype=np.float32)
    b = rng.random((128, 2048), dtype=np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(add_direct, a, b), a + b, atol=1e-6)
    k = traced(add_direct, a, b).kernel
    assert decl(k, "a_t").alloc[:2] == ("mod_alloc", ((0, 0), (0, 2048), (0, 0), (0, 2048)))
    assert decl(k, "b_t").alloc[:2] == ("alloc", ((0, 4096), (0, 6144), (0, 4096), (0, 6144)))
    assert dict(decl(k, "c_t").alloc[2])["num_free_tiles"] == (2,)
    assert parse(print_kernel(k)) == k
    occ = occupancy(k).sbuf
    assert occ.strategy == "direct"
    # 3 tensors x 2 physical tiles x 2048 B: the 4 logical blocks share 2 tiles each
    assert [(a.name, a.byte_addr) for a in occ.allocations] == [
        ("a_t[0]", 0), ("a_t[1]", 2048), ("b_t[0]", 4096), ("b_t[1]", 6144), ("c_t[0]", 8192),
        ("c_t[1]", 10240)]
    assert occ.peak_bytes_per_partition == 6 * 2048
    assert occ.allocations[0].blocks == ((0,), (2,))


def mm_psum_direct(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nn = N // 512
    lt = nl.ndarray((K // 128, nl.par_dim(128), M), dtype=lhsT.dtype,
                    buffer=ncc.sbuf.mod_alloc(base_addr=0))
    rt = nl.ndarray((K // 128, nl.par_dim(128), 512), dtype=rhs.dtype,
                    buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
    ps = nl.ndarray((nn, nl.par_dim(128), 512), dtype=nl.float32,
                    buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
    res = nl.ndarray((nn, nl.par_dim(128), 512), dtype=nl.float32,
                     buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    for n in nl.affine_range(nn):
        ps[n, :, :] = 0.0
        for k in nl.affine_range(K // 128):
            lt[k] = nl.load(lhsT[k * 128:(k + 1) * 128, :])
            rt[k] = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
            ps[n] += nl.matmul(lt[k], rt[k], transpose_x=True)
        res[n] = nl.copy(ps[n])
        nl.store(result[:, n * 512:(n + 1) * 512], value=res[n])
    return result


def test_psum_mod_alloc_banks_and_numerics():
    rng = np.random.default_rng(1)
    a = rng.random((256, 128), dtype=np.float32)
    b = rng.random((256, 1536), dtype=np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(mm_psum_direct, a, b), a.T @ b, rtol=1e-4,
                               atol=1e-3)
    k = traced(mm_psum_direct, a, b).kernel
    assert decl(k, "ps").alloc[1] == ((2, 0, 0), (3, 0, 0), (2, 0, 0))
    psum = occupancy(k).psum
    assert [(p.name, p.bank, p.offset) for p in psum.allocations] == [
        ("ps[0]", 2, 4096), ("ps[1]", 3, 6144)]
    assert psum.peak_bytes_per_partition == 4096


def test_block_dims_of_many_dims_and_fdim_size():
    seen = []

    def where(idx, pdim_size, fdim_size):
        seen.append((idx, pdim_size, fdim_size))
        return (0, (idx[0] * 3 + idx[1]) * fdim_size)

    def kern(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, 3, nl.par_dim(64), 4, 32), dtype=nl.bfloat16,
                       buffer=ncc.sbuf.alloc(where))
        t[0, 0] = nl.load(a)
        nl.store(out, value=t[0, 0])
        return out

    a = np.ones((64, 4, 32), dtype=np.float32)
    k = traced(kern, a).kernel
    # fdim_size = 4 * 32 * 2 bytes; idx covers the two block dims row-major
    assert seen[0] == ((0, 0), 64, 256) and seen[-1] == ((1, 2), 64, 256) and len(seen) == 6
    assert decl(k, "t").alloc[1][5] == (0, 5 * 256)


# ----------------------------------------------------------------------------- validation
def _direct_kernel(buffer_factory, shape=(128, 512)):
    def kern(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(shape, dtype=nl.float32, buffer=buffer_factory())  # the direct tensor
        t[...] = nl.load(a)
        nl.store(out, value=t)
        return out
    return kern


BAD = [
    # (factory, shape, code, words in the message)
    (lambda: ncc.sbuf.alloc(fixed(32, 0)), (128, 512), "wb_alloc_start_partition",
     ["start_partition 32", "128 partitions", "[0]"]),
    (lambda: ncc.sbuf.alloc(fixed(32, 0)), (64, 512), "wb_alloc_start_partition",
     ["allowed: [0, 64]"]),
    (lambda: ncc.sbuf.alloc(fixed(16, 0)), (32, 512), "wb_alloc_start_partition",
     ["[0, 32, 64, 96]"]),
    (lambda: ncc.sbuf.alloc(fixed(0, 180224)), (128, 512), "wb_alloc_byte_addr",
     ["byte_addr 180224", "[0, 180224)"]),
    (lambda: ncc.sbuf.alloc(fixed(0, -4)), (128, 512), "wb_alloc_byte_addr", []),
    (lambda: ncc.sbuf.alloc(fixed(0, 179200)), (128, 512), "wb_alloc_out_of_capacity",
     ["[179200, 181248)", "180224"]),
    (lambda: ncc.sbuf.alloc(fixed(0,)), (128, 512), "wb_alloc_bad_result",
     ["(start_partition, byte_addr)"]),
    (lambda: ncc.sbuf.alloc(fail), (128, 512), "wb_alloc_bad_result",
     ["ZeroDivisionError"]),
    (lambda: ncc.sbuf.alloc(fixed(0.0, 0)), (128, 512), "wb_alloc_bad_result", []),
    (lambda: ncc.psum.alloc(fixed(8, 0, 0)), (128, 512), "wb_alloc_psum_bank",
     ["bank 8"]),
    (lambda: ncc.psum.alloc(fixed(0, 0, 64)), (128, 256), "wb_alloc_psum_offset",
     ["byte_addr 64"]),
    (lambda: ncc.psum.alloc(fixed(0, 32, 0)), (32, 256), "wb_alloc_psum_offset",
     ["start_partition 32"]),
    # a PSUM tile larger than one bank (1024 fp32 = 4 KiB per partition)
    (lambda: ncc.psum.alloc(fixed(0, 0, 0)), (128, 1024),
     "err_size_of_dimension_exceed_arch_limit", ["4096 bytes", "one PSUM bank"]),
]


@pytest.mark.parametrize("factory,shape,code,words", BAD)
def test_direct_allocation_errors_have_code_and_line(factory, shape, code, words):
    kern = _direct_kernel(factory, shape)
    a = np.zeros(shape, dtype=np.float32)
    with pytest.raises(NkiError) as info:
        traced(kern, a)
    err = info.value
    assert err.code == code, str(err)
    assert err.loc == line_of("the direct tensor", kern)
    for w in words:
        assert w in str(err), (w, str(err))


def test_valid_start_partitions_and_per_target_range():
    for pdim, start in [(128, 0), (64, 64), (32, 96), (20, 32), (33, 64)]:
        kern = _direct_kernel(lambda s=start: ncc.sbuf.alloc(fixed(s, 0)), (pdim, 512))
        k = traced(kern, np.zeros((pdim, 512), np.float32)).kernel
        assert decl(k, "t").alloc[1] == ((start, 0),)
    # 200000 is past trn1's usable 180224 bytes but inside trn2's 212984
    kern = _direct_kernel(lambda: ncc.sbuf.alloc(fixed(0, 200000)), (128, 512))
    a = np.zeros((128, 512), np.float32)
    assert nki.jit(kern, mode="simulation", platform_target="trn2").trace(a).kernel.target == "trn2"
    with pytest.raises(NkiError, match="wb_alloc_byte_addr"):
        traced(kern, a)


def test_bad_mod_alloc_arguments():
    cases = [
        (lambda: ncc.sbuf.mod_alloc(base_addr=0, base_partition=32), "base_partition must be 0"),
        (lambda: ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(0,)), "positive"),
        (lambda: ncc.psum.mod_alloc(base_bank=0, base_addr=64), "base_addr must be 0"),
        (lambda: ncc.psum.mod_alloc(base_bank=0, num_free_tiles=(2,)), "all ones"),
        (lambda: ncc.sbuf.alloc(42), "callable"),
    ]
    for factory, words in cases:
        kern = _direct_kernel(factory)
        with pytest.raises(NkiError) as info:
            traced(kern, np.zeros((128, 512), np.float32))
        assert info.value.code == "wb_alloc_bad_argument" and words in str(info.value)
        assert info.value.loc.startswith(HERE + ":")  # the line calling mod_alloc/alloc


def test_direct_tensor_with_initial_value_is_refused():
    def kern(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.zeros((128, 512), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nl.store(out, value=t)
        return out
    with pytest.raises(NkiError) as info:
        traced(kern, np.zeros((128, 512), np.float32))
    assert info.value.code == "err_tensor_creation_on_scratchpad_with_init_value_not_supported"


def mixed(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    t[...] = nl.load(a)
    e = nl.exp(t)  # an instruction result: NKI allocates it implicitly
    nl.store(out, value=e)
    return out


def implicit_result(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    t[...] = nl.load(a)
    e = nl.multiply(t, t)  # an instruction result: NKI allocates it implicitly
    nl.store(out, value=e)
    return out


def results_psum(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)  # an instruction result: NKI allocates it implicitly
    p1 = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.alloc(fixed(1, 0, 0)))
    p1[...] = nl.matmul(t, t, transpose_x=True)
    p2 = nl.matmul(t, t, transpose_x=True)  # implicitly allocated PSUM result
    s = nl.add(p1, p2)
    nl.store(out, value=s)
    return out


def declared_mixed(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    u = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)  # declared auto
    t[...] = nl.load(a)
    u[...] = nl.exp(t)
    nl.store(out, value=u)
    return out


def declared_mixed_psum(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    t[...] = nl.load(a)
    p1 = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    p2 = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)  # declared auto PSUM
    p1[...] = nl.matmul(t, t, transpose_x=True)
    p2[...] = nl.matmul(t, t, transpose_x=True)
    nl.store(out, value=nl.add(p1, p2))
    return out


def test_no_mixing_rule_is_about_declared_tensors():
    a = np.ones((128, 512), np.float32)
    with pytest.raises(NkiError) as info:
        traced(declared_mixed, a)
    err = info.value
    assert err.code == "wb_alloc_mixed_auto_and_direct"
    assert err.loc == line_of("declared auto", declared_mixed)
    assert "'u'" in str(err) and "'t'" in str(err) and "force_auto_alloc" in str(err)
    with pytest.raises(NkiError) as info:
        traced(declared_mixed_psum, np.ones((128, 128), np.float32))
    assert info.value.code == "wb_alloc_mixed_auto_and_direct" and "PSUM" in str(info.value)
    assert info.value.loc == line_of("declared auto PSUM", declared_mixed_psum)


def test_instruction_results_are_allocated_implicitly_around_direct_tensors():
    a = np.random.default_rng(3).random((128, 512), dtype=np.float32)
    k = nki.jit(implicit_result, mode="simulation")
    np.testing.assert_allclose(k(a), a * a, rtol=1e-6)
    occ = occupancy(k.trace(a).kernel)
    sb = {x.tensor: x for x in occ.sbuf.allocations}
    assert sb["t"].kind == "mod_alloc" and (sb["t"].byte_addr, sb["t"].size_bytes) == (0, 2048)
    assert sb["e"].kind == "auto" and sb["e"].byte_addr >= 2048  # never on top of 't'
    b = np.random.default_rng(4).random((128, 128), dtype=np.float32)
    k2 = nki.jit(results_psum, mode="simulation")
    np.testing.assert_allclose(k2(b), 2 * b.T @ b, rtol=1e-4)
    ps = {x.tensor: x for x in occupancy(k2.trace(b).kernel).psum.allocations}
    assert ps["p1"].bank == 1 and ps["p2"].kind == "auto" and ps["p2"].bank != 1


def test_force_auto_alloc_ignores_direct_allocation():
    a = np.random.default_rng(2).random((128, 512), dtype=np.float32)
    k2 = ncc.force_auto_alloc(nki.jit(mixed, mode="simulation"))
    np.testing.assert_allclose(k2(a), np.exp(a), rtol=1e-5)
    k = k2.trace(a).kernel
    assert decl(k, "t").alloc is None
    assert k.attr("compile_opts") == (("force_auto_alloc", True),)
    assert "compile_opts=(('force_auto_alloc', True),)" in print_kernel(k)


# ----------------------------------------------------------------------------- decorators
def simple(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def test_decorators_rewrap_immutably():
    base = nki.jit(simple, mode="simulation")
    k1 = ncc.skip_middle_end_transformations(base)
    k2 = ncc.enable_stack_allocator(log_level=20)(k1)
    assert kernel_fields(base) == {"compile_opts": (), "allocator": ()}
    assert kernel_fields(k1)["compile_opts"] == (("skip_middle_end_transformations", True),)
    assert kernel_fields(k2)["allocator"] == (("kind", "stack"), ("log_level", 20))
    assert kernel_fields(k2)["compile_opts"] == kernel_fields(k1)["compile_opts"]
    assert type(k2) is type(base) and k2.mode == "simulation" and k2.func is not base.func
    assert k2.func.__code__ is simple.__code__ and not hasattr(simple, "_nki_kernel_fields")
    a = np.ones((128, 64), np.float32)
    kb, kk = base.trace(a).kernel, k2.trace(a).kernel
    assert kb.attr("allocator") is None and kb.attr("compile_opts") is None
    assert kk.attr("allocator") == (("kind", "stack"), ("log_level", 20))
    assert parse(print_kernel(kk)) == kk
    np.testing.assert_array_equal(k2(a), a)
    # the grid and options survive re-wrapping
    g = ncc.force_auto_alloc(nki.jit(simple, mode="simulation", platform_target="trn2")[2])
    assert g.grid == (2,) and g.platform_target == "trn2"


def test_decorator_forms_and_stacking_orders():
    @ncc.enable_stack_allocator
    @ncc.skip_middle_end_transformations
    @nki.jit(mode="simulation")
    def docs_order(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    @nki.jit(mode="simulation")
    @ncc.skip_middle_end_transformations()
    @ncc.enable_stack_allocator(log_level=10)
    def inner_order(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    a = np.ones((128, 64), np.float32)
    for k, level in [(docs_order, 50), (inner_order, 10)]:
        ir = k.trace(a).kernel
        assert dict(ir.attr("allocator")) == {"kind": "stack", "log_level": level}
        assert dict(ir.attr("compile_opts")) == {"skip_middle_end_transformations": True}
        np.testing.assert_array_equal(k(a), a)


def test_stack_allocator_needs_skip_middle_end():
    @ncc.enable_stack_allocator
    @nki.jit(mode="simulation")
    def lonely(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    with pytest.raises(NkiError) as info:
        lonely.trace(np.ones((128, 64), np.float32))
    err = info.value
    assert err.code == "wb_stack_allocator_requires_skip_middle_end"
    assert err.loc == f"{HERE}:{inspect.getsourcelines(lonely.func)[1]}"  # its first decorator
    assert "skip_middle_end_transformations" in str(err)


# ----------------------------------------------------------------------------- directives
def directive_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128, directives=ncc.multi_buffer(3)):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    for j in nl.sequential_range(a.shape[0] // 128,
                                 directives=[ncc.no_reorder(), ncc.multi_buffer(2)]):
        with ncc.allocation_scope():
            u = nl.load(a[j * 128:(j + 1) * 128, :])
            nl.store(out[j * 128:(j + 1) * 128, :], value=u)
    with ncc.no_reorder():
        v = nl.load(a[0:128, :])
        nl.store(out[0:128, :], value=v)
    return out


def test_directives_recorded_in_ir():
    a = np.random.default_rng(3).random((256, 64), dtype=np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(directive_kernel, a), a)
    k = traced(directive_kernel, a).kernel
    loops = [s for s in k.body if isinstance(s, Loop)]
    assert dict(loops[0].attrs)["directives"] == ("multi_buffer", 3)
    assert dict(loops[1].attrs)["directives"] == (("no_reorder",), ("multi_buffer", 2))
    assert k.attr("directive_scopes") == ((("allocation_scope",), ("u",), ()),
                                          (("no_reorder",), ("v",), ()))
    assert parse(print_kernel(k)) == k
    occ = {a.tensor: a for a in occupancy(k).sbuf.allocations}
    assert (occ["t"].copies, occ["u"].copies, occ["v"].copies) == (3, 2, 1)
    assert occ["t"].size_bytes == 3 * 64 * 4


def test_directive_errors():
    with pytest.raises(NkiError) as info:
        ncc.multi_buffer(0)
    assert info.value.code == "wb_bad_directive"
    with pytest.raises(NkiError) as info:
        with ncc.no_reorder():
            pass
    assert info.value.code == "err_nki_api_outside_of_nki_kernel"
    assert ncc.multi_buffer(2) == ncc.multi_buffer(2) and repr(ncc.no_reorder()) == \
        "ncc.no_reorder()"


# ----------------------------------------------------------------------------- call convention
def _psum_addr(bank_map, idx, pdim_size, fdim_size):
    return (bank_map[idx], 0, 0)


def partial_banks(a):
    # the allocated-attention style: extra parameters bound by keyword with functools.partial
    out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    t[...] = nl.load(a)
    r = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(
        base_addr=512, num_free_tiles=(2,)))
    ps = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.psum.alloc(
        functools.partial(_psum_addr, bank_map={(0,): 1, (1,): 5})))
    for i in nl.affine_range(2):
        ps[i] = nisa.nc_matmul(t, t)
        r[i] = nl.multiply(ps[i], 2.0)
        nl.store(out[i], value=r[i])
    return out


def test_allocation_functions_are_called_with_nki_keywords():
    a = np.random.default_rng(5).random((128, 128), dtype=np.float32)
    k = nki.jit(partial_banks, mode="simulation")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = k(a)
    np.testing.assert_allclose(got, np.stack([2 * a.T @ a] * 2), rtol=1e-4)
    banks = [x.bank for x in occupancy(k.trace(a).kernel).psum.allocations if x.tensor == "ps"]
    assert sorted(banks) == [1, 5]


def test_positional_only_allocation_function_warns_and_bad_signature_errors():
    kern = _direct_kernel(lambda: ncc.sbuf.alloc(lambda i, p, f: (0, 0)), (128, 512))
    with pytest.warns(AllocationConventionWarning, match="idx, pdim_size, fdim_size"):
        traced(kern, np.zeros((128, 512), np.float32))
    kern = _direct_kernel(lambda: ncc.sbuf.alloc(lambda idx: (0, 0)), (128, 512))
    with pytest.raises(NkiError) as info:
        traced(kern, np.zeros((128, 512), np.float32))
    assert info.value.code == "wb_alloc_bad_argument"
    assert info.value.loc == line_of("the direct tensor", kern)


def act_reduce_direct(a):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    y = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2048))
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    bias = nl.ndarray((128, 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4100))
    bias[...] = 0
    x[...] = nl.load(a)
    y[...] = nisa.activation_reduce(op=nl.square, data=x, reduce_op=np.add, reduce_res=s,
                                    bias=bias)
    nl.store(out, value=s)
    return out


def test_multi_output_instruction_writes_its_destination_directly():
    a = np.random.default_rng(6).random((128, 512), dtype=np.float32)
    k = nki.jit(act_reduce_direct, mode="simulation")
    np.testing.assert_allclose(k(a), np.square(a).sum(1, keepdims=True), rtol=1e-4)
    kernel = k.trace(a).kernel
    sbuf = [d for d in kernel.decls().values() if d.buffer == "sbuf"]
    assert sorted(d.name for d in sbuf) == ["bias", "s", "x", "y"]  # no temporary result


# ----------------------------------------------------------------------------- NKI rejections
def _allocated(body):
    def kern(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(a)
        r = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
        body(t, r)
        nl.store(out, value=r)
        return out
    return kern


def _no_bias_isa(t, r):
    r[...] = nisa.activation(op=nl.exp, data=t)  # the rejected line


def _no_bias_nl(t, r):
    r[...] = nl.exp(t)  # the rejected line


def _tensor_transpose(t, r):
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    ps[...] = nisa.nc_transpose(t, engine=nisa.tensor_engine)  # the rejected line
    r[...] = nl.copy(ps)


def _nl_transpose(t, r):
    r[...] = nl.transpose(t)  # the rejected line


def _matmul_no_transpose_x(t, r):
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    ps[...] = nl.matmul(t, t)  # the rejected line
    r[...] = nl.copy(ps)


@pytest.mark.parametrize("body,code", [
    (_no_bias_isa, "err_bias_tensor_must_be_specified_in_allocation"),
    (_no_bias_nl, "err_bias_tensor_must_be_specified_in_allocation"),
    (_tensor_transpose, "err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"),
    (_nl_transpose, "err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"),
    (_matmul_no_transpose_x, "err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"),
])
def test_allocated_kernel_rejections_name_code_and_line(body, code):
    with pytest.raises(NkiError) as info:
        traced(_allocated(body), np.ones((128, 128), np.float32))
    assert info.value.code == code
    assert info.value.loc == line_of("the rejected line", body)
    assert "'t'" in str(info.value)


def _with_bias(t, r):
    bias = nl.ndarray((128, 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
    bias[...] = 0
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    ps[...] = nl.matmul(t, t, transpose_x=True)
    r[...] = nisa.activation(op=nl.exp, data=ps, bias=bias, scale=0.01)


def test_the_same_kernels_pass_when_auto_allocated_or_written_as_nki_requires():
    a = np.random.default_rng(8).random((128, 128), dtype=np.float32)
    for body in (_no_bias_isa, _no_bias_nl, _nl_transpose):
        k = ncc.force_auto_alloc(nki.jit(_allocated(body), mode="simulation"))
        ref = a.T if body is _nl_transpose else np.exp(a)
        np.testing.assert_allclose(k(a), ref, rtol=1e-5)
    k = nki.jit(_allocated(_with_bias), mode="simulation")
    np.testing.assert_allclose(k(a), np.exp(0.01 * (a.T @ a)), rtol=1e-4)


def psum_only_direct(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=2))
    ps[...] = nl.matmul(t, t, transpose_x=True)
    nl.store(out, value=nl.exp(nl.multiply(ps, 0.01)))  # SBUF is auto: the bias fits
    return out


def test_activation_without_bias_is_fine_when_only_psum_is_direct():
    a = np.random.default_rng(9).random((128, 128), dtype=np.float32)
    k = nki.jit(psum_only_direct, mode="simulation")
    np.testing.assert_allclose(k(a), np.exp(0.01 * (a.T @ a)), rtol=1e-4)


@ncc.sbuf.alloc
def _interleaved(idx, pdim_size, fdim_size):
    return (0, 1024 + (idx[0] % 2) * fdim_size)


def decorated_alloc(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype, buffer=_interleaved)
    for i in nl.affine_range(4):
        t[i] = nl.load(a[:, i * 64:(i + 1) * 64])
        nl.store(out[:, i * 64:(i + 1) * 64], value=t[i])
    return out


def test_sbuf_alloc_used_as_a_decorator():
    a = np.random.default_rng(10).random((128, 256), dtype=np.float32)
    k = nki.jit(decorated_alloc, mode="simulation")
    np.testing.assert_array_equal(k(a), a)
    sb = [x for x in occupancy(k.trace(a).kernel).sbuf.allocations if x.tensor == "t"]
    assert sorted(x.byte_addr for x in sb) == [1024, 1280]
