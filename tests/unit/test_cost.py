"""Per-opcode cost formulas (hand-computed cycles from hardware.md §3), per-target facts and the
cost table's coverage of every IR opcode."""

import re
from pathlib import Path

import pytest

import nki_workbench.nki  # noqa: F401  (registers every nl and nisa opcode)
from nki_workbench._src.errors import NkiError
from nki_workbench._src.hw import cost as C
from nki_workbench._src.ir import OPCODES, Access, Inst, Scalar, TensorDecl
from nki_workbench._src.ir import expr as E


def D(name, shape, dtype="float32", buffer="sbuf"):
    return TensorDecl(name, tuple(shape), dtype, buffer)


def I(opcode, outs, ins, **attrs):  # noqa: E743
    def acc(x):
        return Access(x) if isinstance(x, str) else x
    return Inst(opcode, tuple(acc(o) for o in outs), tuple(acc(i) for i in ins),
                tuple(sorted(attrs.items())))


def P(opcode, outs, ins, decls, target="trn1", **attrs):
    return C.price(I(opcode, outs, ins, **attrs), {d.name: d for d in decls}, target)


def cycles(*a, **k):
    return P(*a, **k).cycles


X = [D("x", (128, 512)), D("y", (128, 512)), D("o", (128, 512))]
XB = [D("x", (128, 512), "bfloat16"), D("y", (128, 512), "bfloat16"),
      D("o", (128, 512), "bfloat16")]


# ------------------------------------------------------------------ ScalarE
def test_activation_max_min_ii_n():
    assert cycles("activation", ["o"], ["x", Scalar(1.0)], X) == 512
    small = [D("x", (128, 16)), D("o", (128, 16))]
    assert cycles("activation", ["o"], ["x"], small) == 64  # MIN_II floor
    assert cycles("exp", ["o"], ["x"], X) == 512  # nl functions price like activation
    p = P("exp", ["o"], ["x"], X)
    assert p.engine == "scalar" and p.ns == pytest.approx(512 / 1.4)
    assert "max(MIN_II, N)" in p.formula and "hw §" in p.formula


def test_activation_reduce_adds_min_ii():
    decls = X + [D("r", (128, 1))]
    assert cycles("activation_reduce", ["o", "r"], ["x"], decls) == 512 + 64
    assert cycles("activation", ["o", "r"], ["x"], decls) == 512 + 64  # with reduce_res


def test_trn3_scalar_16bit_double_width():
    assert cycles("activation", ["o"], ["x"], XB, "trn3") == 256
    assert cycles("activation", ["o"], ["x"], X, "trn3") == 512
    assert cycles("activation", ["o"], ["x"], XB, "trn2") == 512


# ------------------------------------------------------------------ TensorE
MM = [D("s", (128, 128), "bfloat16"), D("m", (128, 512), "bfloat16"),
      D("ps", (128, 512), "float32", "psum")]


def test_nc_matmul_formula_bf16_and_fp32():
    p = P("nc_matmul", ["ps"], ["s", "m"], MM)
    assert p.cycles == 512 and p.engine == "tensor"
    assert p.ns == pytest.approx(512 / 2.8)
    assert p.flops == 2 * 128 * 128 * 512
    fp32 = [D("s", (128, 128)), D("m", (128, 512)), D("ps", (128, 512), "float32", "psum")]
    assert cycles("nc_matmul", ["ps"], ["s", "m"], fp32) == 4 * 512
    assert cycles("nc_matmul", ["ps"], ["s", "m"], fp32, is_moving_onezero=True) == 1024


def test_nc_matmul_small_tiles_min64():
    tiny = [D("s", (128, 32), "bfloat16"), D("m", (128, 16), "bfloat16"),
            D("ps", (32, 16), "float32", "psum")]
    assert cycles("nc_matmul", ["ps"], ["s", "m"], tiny) == 32  # max(min(64, 32), 16)
    short = [D("s", (128, 128), "bfloat16"), D("m", (128, 8), "bfloat16"),
             D("ps", (128, 8), "float32", "psum")]
    assert cycles("nc_matmul", ["ps"], ["s", "m"], short) == 64  # max(min(64, 128), 8)


def test_nl_matmul_without_transpose_x_adds_a_transpose():
    decls = [D("x", (64, 128), "bfloat16"), D("m", (128, 512), "bfloat16"),
             D("ps", (64, 512), "float32", "psum")]
    # matmul max(min(64, 64), 512) = 512 + transpose of x [64, 128]: max(64, min(64, 128)) = 64
    assert cycles("matmul", ["ps"], ["x", "m"], decls, transpose_x=False) == 512 + 64
    assert cycles("matmul", ["ps"], ["x", "m"], decls, transpose_x=True) == 512


def test_nc_transpose_tensor_and_vector():
    d = [D("x", (128, 32), "bfloat16"), D("o", (32, 128), "float32", "psum")]
    assert cycles("nc_transpose", ["o"], ["x"], d, engine="tensor") == 128  # max(P, min(64, F))
    v = [D("x", (32, 32)), D("o", (32, 32))]
    assert cycles("nc_transpose", ["o"], ["x"], v, engine="vector") == 64


# ------------------------------------------------------------------ VectorE
def test_tensor_tensor_cases():
    assert cycles("tensor_tensor", ["o"], ["x", "y"], XB, op="add") == 512  # bf16 fast path
    assert cycles("tensor_tensor", ["o"], ["x", "y"], X, op="add") == 1024  # 2N
    assert cycles("tensor_tensor", ["o"], ["x", "y"], XB, op="divide") == 1024
    mixed = [D("x", (128, 512), buffer="psum"), D("y", (128, 512)), D("o", (128, 512))]
    assert cycles("tensor_tensor", ["o"], ["x", "y"], mixed, op="add") == 512  # one PSUM
    assert cycles("add", ["o"], ["x", Scalar(2.0)], X) == 512  # nl with scalar: tensor_scalar
    assert cycles("add", ["o"], ["x", "y"], X) == 1024


def test_trn2_vector_performance_modes():
    assert cycles("tensor_tensor", ["o"], ["x", "y"], XB, "trn2", op="add") == 256  # 2x
    assert cycles("tensor_scalar", ["o"], ["x", Scalar(1.0)], XB, "trn2") == 128  # 4x
    p = P("tensor_copy", ["o"], ["x"], XB, "trn2")
    assert p.cycles == 128 and p.perf_mode == 4
    assert cycles("tensor_scalar", ["o"], ["x", Scalar(1.0)], X, "trn2") == 512  # fp32: 1x


def test_tensor_reduce_bf16_half():
    d = [D("x", (128, 512), "bfloat16"), D("r", (128, 1), "bfloat16")]
    assert cycles("tensor_reduce", ["r"], ["x"], d, op="add") == 256
    assert cycles("tensor_reduce", ["r"], ["x"], d, op="multiply") == 512
    f = [D("x", (128, 512)), D("r", (128, 1))]
    assert cycles("tensor_reduce", ["r"], ["x"], f, op="max") == 512
    assert cycles("sum", ["r"], ["x"], d) == 256


def test_memset_zero_16bit_halves():
    assert cycles("memset", ["o"], [Scalar(0.0)], XB) == 256
    assert cycles("memset", ["o"], [Scalar(1.0)], XB) == 512
    assert cycles("memset", ["o"], [Scalar(0.0)], X) == 512
    ps = [D("o", (128, 512), buffer="psum")]
    assert P("memset", ["o"], [Scalar(0.0)], ps).engine == "none"  # folded into the group


def test_vector_formulas_table():
    assert cycles("reciprocal", ["o"], ["x"], X, engine="vector") == 8 * 512
    assert cycles("reciprocal", ["o"], ["x"], X) == 512  # nl.reciprocal: ScalarE activation
    assert cycles("tensor_tensor_scan", ["o"], ["x", "y"], X) == 1024
    assert cycles("tensor_scalar_reduce", ["o", "x"], ["y"], X) == 512 + 64
    assert cycles("tensor_copy_dynamic_src", ["o"], ["x"], X) == 600
    big = [D("x", (128, 1024)), D("o", (128, 1024))]
    assert cycles("tensor_copy_dynamic_dst", ["o"], ["x"], big) == 1024
    assert cycles("dropout", ["o"], ["x", Scalar(0.5)], X) == 512
    assert cycles("max8", ["o"], ["x"], X) == 512
    assert cycles("nc_match_replace8", ["o"], ["x"], [D("x", (128, 16)), D("o", (128, 16))]) \
        == 64


def test_scalar_tensor_tensor_fast_case():
    ok = cycles("scalar_tensor_tensor", ["o"], ["x", Scalar(1.0), "y"], XB, op0="subtract",
                op1="multiply")
    assert ok == 512
    assert cycles("scalar_tensor_tensor", ["o"], ["x", Scalar(1.0), "y"], XB, op0="add",
                  op1="multiply") == 1024


def test_tensor_copy_predicated():
    assert cycles("tensor_copy_predicated", ["o"], ["x", "y"], X) == 1024
    mixed = [D("x", (128, 512), buffer="psum"), D("y", (128, 512)), D("o", (128, 512))]
    assert cycles("tensor_copy_predicated", ["o"], ["x", "y"], mixed) == 512


def test_bn_formulas():
    d = [D("x", (128, 6)), D("o", (128, 2))]
    assert cycles("bn_aggr", ["o"], ["x"], d) == 64
    d = [D("x", (128, 300)), D("o", (128, 2))]
    assert cycles("bn_aggr", ["o"], ["x"], d) == 1300  # 13 * 300/3
    assert cycles("bn_stats", ["o"], ["x"], [D("x", (128, 512)), D("o", (128, 6))]) == 512


def test_stride_penalty_doubles_n():
    decls = [D("x", (128, 4096)), D("o", (128, 512))]
    strided = Access("x", (E.as_expr(E.Iota(128, 0, 2)),
                           E.mul(E.as_expr(E.Iota(512, 1, 2)), E.const(8))))
    assert C.price(I("tensor_scalar", ["o"], [strided, Scalar(1.0)]),
                   {d.name: d for d in decls}).cycles == 1024  # 32-byte stride > 16


# ------------------------------------------------------------------ GpSimd
def test_gpsimd_formulas():
    assert cycles("iota", ["o"], [], X) == 150 + 512
    assert cycles("affine_select", ["o"], ["x"], X) == 150 + 512
    src = [D("x", (128, 64), "bfloat16"), D("i", (128, 4), "uint16"),
           D("o", (128, 256), "bfloat16")]
    # C = ((28 + 4*4) / (4*4)) / min(4/2, 4) = 1.375; 150 + 64*4 / 1.375
    assert cycles("local_gather", ["o"], ["x", "i"], src, num_elem_per_idx=4,
                  num_valid_indices=64) == pytest.approx(150 + 256 / 1.375)
    assert cycles("rand", ["o"], [], X, "trn3") == 150 + 128  # 4 values / lane / cycle


# ------------------------------------------------------------------ DMA
def test_dma_plan_full_partitions():
    decls = [D("a", (1024, 2048), "bfloat16", "hbm"), D("t", (128, 512), "bfloat16")]
    src = Access("a", (E.as_expr(E.Iota(128, 0, 2)), E.as_expr(E.Iota(512, 1, 2))))
    p = C.price(I("load", ["t"], [src]), {d.name: d for d in decls})
    plan = p.dma
    assert p.engine == "dma" and plan.bytes == 128 * 512 * 2
    assert plan.partitions == 128 and plan.descriptors == 128 and plan.fixed_ns == 1300
    # (131072 B + 128 descriptors * 256 B) over 16 engines at 17 B/ns, then each engine's
    # 214 ns gap after its transfer (assume:dma_transfer_gap)
    assert p.ns == pytest.approx((131072 + 128 * 256) / 16 / 17 + 214)


def test_dma_four_partitions_single_engine_matches_trn2_profile():
    # hw §4 [DMA-O]: a [4, 4096] bf16 transfer uses one engine: 32 KiB in 1416 ns on Trn2
    decls = [D("a", (4, 4096), "bfloat16", "hbm"), D("t", (4, 4096), "bfloat16")]
    p = C.price(I("load", ["t"], ["a"]), {d.name: d for d in decls}, "trn2")
    assert p.ns == pytest.approx((32768 + 4 * 256) / 23)
    assert abs(p.ns - 1416) / 1416 < 0.05


def test_dma_transpose_and_rmw_rates():
    decls = [D("a", (128, 128), "bfloat16", "hbm"), D("t", (128, 128), "bfloat16")]
    ds = {d.name: d for d in decls}
    assert C.price(I("load_transpose2d", ["t"], ["a"]), ds).dma.eff == 0.125
    assert C.price(I("dma_transpose", ["t"], ["a"]), ds, "trn2").dma.eff == 0.9
    assert C.price(I("dma_copy", ["a"], ["t"], dst_rmw_op="add"), ds, "trn2").dma.eff == 0.5
    assert C.price(I("dma_copy", ["a"], ["t"], dst_rmw_op="add"), ds, "trn3").dma.eff == 1.0
    assert C.price(I("dma_copy", ["a"], ["t"], dge_mode="hwdge"), ds, "trn2").dma.fixed_ns \
        == 600


# ------------------------------------------------------------------ targets and coverage
def test_target_facts_and_peaks():
    t1, t2, t3 = (C.cost_target(n) for n in ("trn1", "trn2", "trn3"))
    assert t1.clock_ghz == {"tensor": 2.8, "vector": 1.12, "scalar": 1.4, "gpsimd": 1.4,
                            "sync": 1.4}
    assert t2.clock_ghz["vector"] == 0.96 and t3.clock_ghz["vector"] == 1.2
    assert abs(t1.peak_flops() / 92e12 - 1) < 0.01  # hw §0: 92 TFLOPS BF16 per core
    assert abs(t2.peak_flops() / 79e12 - 1) < 0.01
    assert abs(t1.peak_flops("float32") / 23e12 - 1) < 0.01
    assert [t.peak_dma_bytes_per_s for t in (t1, t2, t3)] == [272e9, 368e9, 528e9]
    assert C.cost_target("inf2") is t1 and t1.hw.psum_banks == 8


def test_every_ir_opcode_and_isa_name_has_a_cost_entry():
    assert sorted(set(OPCODES) - set(C.COSTS)) == []
    isa_a3 = """activation activation_reduce affine_select bn_aggr bn_stats builtin_custom_op
        dma_copy dma_transpose dropout iota local_gather max8 memset nc_find_index8
        nc_match_replace8 nc_matmul nc_stream_shuffle nc_transpose range_select reciprocal
        scalar_tensor_tensor select_reduce sequence_bounds tensor_copy tensor_copy_dynamic_dst
        tensor_copy_dynamic_src tensor_copy_predicated tensor_partition_reduce tensor_reduce
        tensor_scalar tensor_scalar_reduce tensor_tensor tensor_tensor_scan""".split()
    assert [n for n in isa_a3 if n not in C.COSTS] == []


def test_missing_entry_is_a_clear_error():
    with pytest.raises(NkiError) as ei:
        C.price(Inst("frobnicate", (Access("o"),), (), (), None, "k.py:7"),
                {"o": D("o", (128, 4))})
    assert ei.value.code == "wb_no_cost_entry"
    assert "'frobnicate'" in str(ei.value) and "k.py:7" in str(ei.value)


def test_every_assumption_named_in_the_tables_exists():
    facts = Path(C.__file__).with_name("cost_targets.py").read_text()
    src = Path(C.__file__).read_text() + facts
    used = set(re.findall(r"assume:(\w+)", src))
    assert used and used <= set(C.ASSUMPTIONS), used - set(C.ASSUMPTIONS)
    # every table row carries a source: a hardware.md section or a named assumption
    for line in facts[facts.index("_TABLE: dict"):facts.index(
            "@dataclasses.dataclass(frozen=True)\nclass CostTarget")].splitlines():
        if line.strip().startswith('"') and ": (" in line and not line.endswith("("):
            assert "hw §" in line or "assume:" in line or "#" in line, line


# ------------------------------------------------------------------ the remaining rows
F512 = [D("x", (128, 512)), D("y", (128, 512)), D("o", (128, 512)), D("r", (128, 1)),
        D("i", (128, 16), "int32"), D("h", (128, 512), "float32", "hbm")]


@pytest.mark.parametrize("op, outs, ins, attrs, want", [
    ("nc_stream_shuffle", ["o"], ["x"], {}, 512),
    ("range_select", ["o"], ["x", "r", "r"], {}, 512),
    ("select_reduce", ["o"], ["x", "y", Scalar(0.0)], {}, 1024),  # both SBUF: 2N
    ("select_reduce", ["o", "r"], ["x", "y", Scalar(0.0)], {}, 1024 + 64),
    ("nc_find_index8", ["r"], ["x", "y"], {}, 512),
    ("tensor_partition_reduce", ["o"], ["x"], {}, 150 + 512),
    ("sequence_bounds", ["o"], ["x"], {}, 150 + 512),
    ("builtin_custom_op", ["o"], ["x"], {}, 150 + 512),
    ("softmax", ["o"], ["x"], {}, 512 + 512 + (512 + 64) + 512),
    ("rms_norm", ["o"], ["x", "y"], {}, (512 + 64) + 64 + 512 + 1024),
    ("mean", ["r"], ["x"], {}, 512 + 64),
    ("var", ["r"], ["x"], {}, 512 + 64),  # one bn_stats chunk + bn_aggr floor
    ("where", ["o"], ["x", "y", "x"], {}, 1024),
    ("copy", ["o"], ["x"], {}, 512),
    ("broadcast_to", ["o"], ["r"], {}, 512),  # N of the output
    ("random_seed", [], [Scalar(1)], {}, 150),
    ("gather_flattened", ["o"], ["x", "i"], {}, 150 + 256 / 8),  # C = (32/4)/1
    ("loop_reduce", ["o"], ["o", "x"], {"acc": "add"}, 1024),
])
def test_remaining_formulas(op, outs, ins, attrs, want):
    assert cycles(op, outs, ins, F512, **attrs) == pytest.approx(want)


def test_collective_and_simulation_only_rows():
    p = P("all_reduce", ["o"], ["x"], F512)
    ns = 2 * 1300 + 128 * 512 * 4 / 272  # assume:collective
    assert p.engine == "sync" and p.ns == pytest.approx(ns)
    d = P("device_print", [], ["x"], F512)
    assert d.engine == "none" and d.ns == 0


def test_dma_transpose_priced_as_copy_times_rate():
    decls = {d.name: d for d in [D("a", (128, 128), "float32", "hbm"), D("t", (128, 128))]}
    plain = C.price(I("load", ["t"], ["a"]), decls)
    tr = C.price(I("load_transpose2d", ["t"], ["a"]), decls)
    gap = C.cost_target("trn1").dma_transfer_gap_ns  # why: the gap is not data movement
    assert tr.ns - gap == pytest.approx((plain.ns - gap) * 8)  # 1/8 rate on trn1
    assert C.price(I("load_transpose2d", ["t"], ["a"]), decls, "trn2").ns == pytest.approx(
        C.price(I("load", ["t"], ["a"]), decls, "trn2").ns / 0.9)
