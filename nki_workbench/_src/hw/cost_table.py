"""The per-opcode cost table: what the formulas see of an instruction, the formulas, ``COSTS``.

:class:`OpView` is an IR instruction as the cycle formulas read it (engine, :class:`Operand`
facts of its inputs and outputs, attributes); :data:`COSTS` maps each opcode name (IR opcode =
``nl`` function name or ``nki.isa`` instruction name) to a :class:`CostEntry` (default engine and
formula). Sources are cited as in :mod:`.cost` (``hw §x`` of ``shared/reference/hardware.md``,
``assume:<name>`` for the named assumptions of :mod:`.cost_targets`); :mod:`.cost` prices an
instruction from this table and re-exports its public names.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from .. import dtypes as D
from ..ir import OPCODES, Access, Inst, Scalar
from ..ir import expr as E
from .cost_targets import COMPUTE_ENGINES, CostTarget


# --------------------------------------------------------------------------------- operands
@dataclasses.dataclass(frozen=True, slots=True)
class Operand:
    """Static facts of one instruction operand.

    Attributes:
        kind: ``tile`` (SBUF/PSUM), ``hbm``, ``scalar`` or ``expr``.
        tensor: tensor name ('' for scalars and expressions).
        buffer: ``sbuf``, ``psum``, ``hbm``, ``shared_hbm`` or ''.
        dtype: NKI dtype name ('' when unknown).
        itemsize: bytes per element.
        partitions: partition count of the accessed region.
        elems: total elements accessed.
        inner_stride: innermost-dimension stride in elements (1 = contiguous).
        dyn: whether run-time (indirect) indices are involved.
        value: the value of a scalar operand.
    """

    kind: str
    tensor: str = ""
    buffer: str = ""
    dtype: str = ""
    itemsize: int = 4
    partitions: int = 1
    elems: int = 1
    inner_stride: int = 1
    dyn: bool = False
    value: object = None

    @property
    def n(self) -> int:
        """Elements per partition (the formulas' N)."""
        return max(1, self.elems // max(1, self.partitions))

    @property
    def nbytes(self) -> int:
        """Bytes accessed."""
        return self.elems * self.itemsize


def linear_dim(e):
    """``(iota_size, coef)`` of a single-iota affine index (``(1, 0)`` for a scalar index)."""
    if not isinstance(e, E.Affine):
        return None
    io = None
    for atom, k in e.terms:
        if isinstance(atom, E.Iota):
            if io is not None:
                return None
            io = (atom.size, k)
        elif not isinstance(atom, E.Var):
            return None
    return io or (1, 0)


def operand_of(x, decls: dict) -> Operand:
    if isinstance(x, Scalar):
        return Operand("scalar", dtype=x.dtype or "", value=x.value)
    if not isinstance(x, Access):
        return Operand("expr", elems=int(math.prod(E.grid_shape((x,)) or (1,))))
    decl = decls[x.tensor]
    grid = x.grid(decl)
    elems = int(math.prod(grid)) if grid else 1
    if x.index is None:
        parts = int(decl.shape[decl.par_dim]) if decl.shape else 1
        stride, dyn = 1, False
    else:
        pe = x.index[decl.par_dim] if decl.par_dim < len(x.index) else None
        parts = int(math.prod(E.grid_shape((pe,)) or (1,))) if pe is not None else 1
        lin = linear_dim(x.index[-1]) if x.index else (1, 1)
        stride = 1 if lin is None or lin[0] == 1 else abs(lin[1])
        dyn = any(E.dyns(e) for e in x.index)
    kind = "hbm" if decl.buffer in ("hbm", "shared_hbm") else "tile"
    return Operand(kind, x.tensor, decl.buffer, decl.dtype, D.itemsize(D.from_name(decl.dtype)),
                   max(1, parts), elems, max(1, stride), dyn)


_ENGINE_IDS = {1: "tensor", 2: "scalar", 3: "gpsimd", 4: "dma", 5: "vector", 6: "sync"}


@dataclasses.dataclass(frozen=True)
class OpView:
    """An instruction as the cost formulas see it: opcode, engine, operands, attributes."""

    op: str
    engine: str
    ins: tuple
    outs: tuple
    attrs: dict

    @classmethod
    def of(cls, inst: Inst, decls: dict) -> OpView:
        """Builds the view of ``inst`` given the kernel's declarations."""
        attrs = dict(inst.attrs)
        eng = attrs.get("engine")
        if isinstance(eng, int) and not isinstance(eng, bool):
            eng = _ENGINE_IDS.get(eng)
        elif isinstance(eng, str):
            eng = eng.rsplit(".", 1)[-1].replace("_engine", "").lower()
        if eng not in COMPUTE_ENGINES:
            info = OPCODES.get(inst.op)
            entry = COSTS.get(inst.op)
            eng = info.engine if info is not None else (entry.engine if entry else "none")
        return cls(inst.op, eng, tuple(operand_of(x, decls) for x in inst.ins),
                   tuple(operand_of(x, decls) for x in inst.outs), attrs)

    def tiles(self, side: str = "ins") -> list:
        """Tensor operands (tiles and HBM) of ``ins`` or ``outs``."""
        return [o for o in getattr(self, side) if o.kind in ("tile", "hbm")]

    def n(self, i: int = 0, side: str = "ins") -> int:
        """N of the ``i``-th tensor operand of ``side`` (falls back to the first output)."""
        ts = self.tiles(side)
        if i < len(ts):
            return ts[i].n
        outs = self.tiles("outs")
        return outs[0].n if outs else 1

    def dtypes(self) -> set:
        """The dtype names of every tensor operand and of the result."""
        out = {o.dtype for o in self.tiles("ins") + self.tiles("outs")}
        if self.attrs.get("dtype"):
            out.add(self.attrs["dtype"])
        return out

    def buffers(self) -> set:
        """Buffers every tensor operand lives in."""
        return {o.buffer for o in self.tiles("ins") + self.tiles("outs")}


# A formula returns (cycles, expression text, variables, source tag).
Formula = Callable[[OpView, CostTarget], tuple]


@dataclasses.dataclass(frozen=True)
class CostEntry:
    """One row of the cost table: default engine and the formula.

    Attributes:
        engine: engine used when neither the instruction nor the opcode table names one.
        formula: ``f(view, target) -> (cycles, expression, variables, source)``; ``None`` for
            DMA transfers, priced by :func:`dma_plan`.
    """

    engine: str
    formula: Formula | None


def _n_eff(v: OpView, t: CostTarget, n: int) -> tuple[int, str]:
    """N doubled by a wide innermost stride (hw §1.3 [A1]; assume:stride_penalty_v3)."""
    for o in v.tiles("ins") + v.tiles("outs"):
        if o.kind == "tile" and o.inner_stride * o.itemsize > t.stride_penalty_bytes:
            return 2 * n, " (strided: N doubled, hw §1.3)"
    return n, ""


_16BIT = {"bfloat16", "float16"}
_LOWP = _16BIT | {"float8_e4m3", "float8_e5m2"}


def _speedup(v: OpView, t: CostTarget, family: str) -> int:
    """Performance-mode divisor of the N term (hw §2.3 [A2], §2.1 [A3]; assume:perf_mode_n)."""
    if v.engine == "vector" and t.vector_perf_modes:
        tiles = v.tiles("ins") + v.tiles("outs")
        if not tiles or not v.dtypes() <= _16BIT:
            return 1
        all_sbuf = all(o.buffer == "sbuf" for o in tiles)
        contiguous = all(o.inner_stride == 1 for o in tiles)
        if family == "copy":
            return 4 if all_sbuf and contiguous else 2
        if family == "tensor_tensor" and all_sbuf:
            return 2
        return 1
    if v.engine == "scalar" and t.scalar_16bit_2x and v.dtypes() <= _LOWP:
        return 2
    return 1


def _maxii(n_name: str, mult: float = 1.0, family: str = "", src: str = "",
           extra_ii: int = 0, dynamic: bool = False, side: str = "ins") -> Formula:
    """``max(MIN_II, mult*N) [+ MIN_II]`` on the instruction's engine (N of ``side``)."""
    def f(v: OpView, t: CostTarget):
        n, note = _n_eff(v, t, v.n(0, side))
        sp = _speedup(v, t, family) if family else 1
        ii = t.min_ii_dynamic if dynamic else t.min_ii
        ii_name = "MIN_II_DYNAMIC" if dynamic else "MIN_II"
        body = mult * n / sp
        cyc = max(ii, body) + (t.min_ii if extra_ii else 0)
        term = (f"{mult:g}*{n_name}" if mult != 1 else n_name) + (f"/{sp}" if sp > 1 else "")
        text = f"max({ii_name}, {term})" + (" + MIN_II" if extra_ii else "") + note
        env = {ii_name: ii, "N": n}
        if sp > 1:
            env["perf_mode"] = sp
        return cyc, text, env, src
    return f


def _plain(mult: float, start: int = 0, src: str = "", label: str = "N") -> Formula:
    """``start + mult*N`` (``start`` = GPSIMD_START when 150)."""
    def f(v: OpView, t: CostTarget):
        n, note = _n_eff(v, t, v.n(0))
        s = t.gpsimd_start if start else 0
        cyc = s + mult * n
        term = f"{mult:g}*{label}" if mult != 1 else label
        return cyc, (f"GPSIMD_START + {term}" if start else term) + note, \
            {"GPSIMD_START": s, "N": n} if start else {"N": n}, src
    return f


# ------------------------------------------------------------------ formulas with conditions
def _op_name(v: OpView, key: str = "op") -> str:
    o = v.attrs.get(key)
    return str(o).rsplit(".", 1)[-1] if o is not None else v.op


def _tensor_tensor(v: OpView, t: CostTarget):
    ts = v.tiles("ins")
    scalar_like = (len(ts) < 2 or any(o.kind in ("scalar", "expr") for o in v.ins)
                   or (any(o.n == 1 for o in ts) and max(o.n for o in ts) > 1))
    if scalar_like:  # a broadcast scalar or [P,1] operand: tensor_scalar (hw §3)
        return _maxii("N", src="hw §3 tensor_scalar [ISA-old]")(v, t)
    n, note = _n_eff(v, t, v.n(0))
    sp = _speedup(v, t, "tensor_tensor")
    bufs = [o.buffer for o in ts[:2]]
    one_psum = bufs.count("psum") == 1
    fast = (bufs == ["sbuf", "sbuf"] and v.dtypes() <= {"bfloat16"}
            and _op_name(v) in ("add", "multiply", "subtract")
            and all(o.inner_stride == 1 for o in ts))
    mult = 1 if one_psum or fast else 2
    cyc = max(t.min_ii, mult * n / sp)
    why = "one PSUM input" if one_psum else ("bf16 add/mul/sub in SBUF" if fast else "general")
    term = ("N" if mult == 1 else "2*N") + (f"/{sp}" if sp > 1 else "")
    env = {"MIN_II": t.min_ii, "N": n, **({"perf_mode": sp} if sp > 1 else {})}
    return cyc, f"max(MIN_II, {term}) ({why}){note}", env, "hw §3 tensor_tensor [ISA-old]"


def _tensor_reduce(v: OpView, t: CostTarget):
    n, note = _n_eff(v, t, v.n(0))
    half = (v.dtypes() <= {"bfloat16"} and _op_name(v) in ("add", "max", "sum", "maximum"))
    return (n / 2 if half else n), ("N/2 (bf16 add/max)" if half else "N") + note, {"N": n}, \
        "hw §3 tensor_reduce [ISA-old]"


def _memset(v: OpView, t: CostTarget):
    n = v.n(0, "outs")
    val = v.attrs.get("value")
    if val is None and v.ins and v.ins[0].kind == "scalar":
        val = v.ins[0].value
    dt = v.attrs.get("dtype") or (v.outs[0].dtype if v.outs else "")
    zero = val in (0, 0.0) and dt in _16BIT
    body = n / 2 if zero else n
    return max(t.min_ii, body), "max(MIN_II, N/2) (zero, 16-bit)" if zero else "max(MIN_II, N)", \
        {"MIN_II": t.min_ii, "N": n}, "hw §3 memset [ISA-old]"


def _matmul(v: OpView, t: CostTarget):
    ts = v.tiles("ins")
    stat, mov = ts[0], ts[1]
    rows = 2 if v.attrs.get("perf_mode") else 1  # double-row FP8: K = 2x128 in the time of 128
    plain_x = v.op == "matmul" and not v.attrs.get("transpose_x")  # x is [M, K]
    n_st, n_mv = (stat.partitions if plain_x else stat.n // rows), mov.n // rows
    fp32 = "float32" in (stat.dtype, mov.dtype)
    fac = t.mm_fp32_factor if fp32 else 1
    onezero = fp32 and (v.attrs.get("is_stationary_onezero") or v.attrs.get("is_moving_onezero"))
    base = max(min(t.mm_init_latency, n_st), n_mv)
    cyc = fac * base / (2 if onezero else 1)
    text = ("4*" if fp32 else "") + "max(min(64, N_stationary), N_moving)" + \
        (" / 2 (onezero, assume:onezero_2x)" if onezero else "")
    env = {"N_stationary": n_st, "N_moving": n_mv}
    if plain_x:  # nl.matmul without transpose_x: x [M,K] is transposed on TensorE first (hw §3)
        p, f = stat.partitions, stat.n
        tr = max(p, min(64, f)) * fac
        cyc += tr
        text += " + max(P, min(64, F)) (transpose of x)"
        env.update(P=p, F=f)
    return cyc, text, env, "hw §2.2, §3 nc_matmul [A1][ISA-old]"


def matmul_flops(v: OpView) -> float:
    ts = v.tiles("ins")
    if len(ts) < 2:
        return 0.0
    rows = 2 if v.attrs.get("perf_mode") else 1  # hw §2.2: double-row mode, logical K = 256
    k = ts[1].partitions * rows
    m = ts[0].n // rows if v.op == "nc_matmul" or v.attrs.get("transpose_x") \
        else ts[0].partitions
    return 2.0 * k * m * (ts[1].n // rows)


def _transpose(v: OpView, t: CostTarget):
    o = v.tiles("ins")[0]
    if v.engine == "tensor":
        cyc = max(o.partitions, min(t.mm_init_latency, o.n))
        return cyc, "max(P, min(64, F))", {"P": o.partitions, "F": o.n}, \
            "hw §3 nc_transpose (TensorE) [ISA-old]"
    return _maxii("N", src="hw §3 nc_transpose (VectorE) [ISA-old]")(v, t)


def _reciprocal(v: OpView, t: CostTarget):
    if v.engine == "vector":
        return _maxii("N", 8, src="hw §3 reciprocal [ISA-old]")(v, t)
    return _maxii("N", family="act", src="hw §3 activation [ISA-old]")(v, t)


def _stt(v: OpView, t: CostTarget):
    ts = v.tiles("ins")
    n, note = _n_eff(v, t, v.n(0))
    fast = (len(ts) >= 2 and ts[0].dtype == "bfloat16" and ts[-1].dtype == "bfloat16"
            and _op_name(v, "op0") == "subtract" and _op_name(v, "op1") == "multiply"
            and n % 2 == 0)
    return (n if fast else 2 * n), ("N (bf16 subtract/multiply)" if fast else "2*N") + note, \
        {"N": n}, "hw §3 scalar_tensor_tensor [ISA-old]"


def _predicated(v: OpView, t: CostTarget):
    ts = v.tiles("ins")
    one_psum = sum(o.buffer == "psum" for o in ts[:2]) == 1
    n, note = _n_eff(v, t, v.n(0))
    mult = 1 if one_psum else 2
    extra = t.min_ii if v.op == "select_reduce" and len(v.outs) > 1 else 0
    return max(t.min_ii, mult * n) + extra, \
        f"max(MIN_II, {'N' if one_psum else '2*N'})" + (" + MIN_II" if extra else "") + note, \
        {"MIN_II": t.min_ii, "N": n}, \
        "hw §3 tensor_copy_predicated [ISA-old]" + (" + assume:select_reduce" if
                                                    v.op == "select_reduce" else "")


def _activation(v: OpView, t: CostTarget):
    reduce = v.op == "activation_reduce" or len(v.outs) > 1
    return _maxii("N", family="act", extra_ii=int(reduce),
                  src="hw §2.4, §3 activation[_reduce] [A1][ISA-old]")(v, t)


def _bn_aggr(v: OpView, t: CostTarget):
    n = v.n(0)
    return max(t.min_ii, 13 * (n / 3)), "max(MIN_II, 13*(N/3))", {"MIN_II": t.min_ii, "N": n}, \
        "hw §3 bn_aggr [ISA-old]"


def _local_gather(v: OpView, t: CostTarget):
    src = v.tiles("ins")[0]
    e = int(v.attrs.get("num_elem_per_idx", 1) or 1)
    idx = v.tiles("ins")[1] if len(v.tiles("ins")) > 1 else None
    nv = v.attrs.get("num_valid_indices") or (idx.elems // 8 if idx else v.n(0, "outs"))
    tt = 4  # hw §3 local_gather: t = 4
    c = ((28 + tt * e) / (tt * e)) / min(4 / src.itemsize, e)
    cyc = t.gpsimd_start + nv * e / c
    return cyc, "GPSIMD_START + num_valid*elem_per_idx / C", \
        {"num_valid": nv, "elem_per_idx": e, "C": round(c, 3)}, "hw §3 local_gather [ISA-old]"


def _rand(v: OpView, t: CostTarget):
    n = v.n(0, "outs")
    r = t.rand_values_per_cycle
    src = "hw §2.3 [A3] XORWOW" if r > 1 else "assume:gpsimd_unpriced"
    return t.gpsimd_start + n / r, f"GPSIMD_START + N/{r}", {"N": n}, src


def _softmax(v: OpView, t: CostTarget):
    # max-reduce, subtract (tensor_scalar), exp with sum (activation_reduce), divide (tensor_scalar)
    n, note = _n_eff(v, t, v.n(0))
    ii = t.min_ii
    cyc = n + max(ii, n) + (max(ii, n) + ii) + max(ii, n)
    return cyc, "N + max(MIN_II,N) + (max(MIN_II,N)+MIN_II) + max(MIN_II,N)" + note, \
        {"MIN_II": ii, "N": n}, "hw §3 tensor_reduce+tensor_scalar+activation_reduce; " \
        "assume:composites"


def _rms_norm(v: OpView, t: CostTarget):
    # square with sum (activation_reduce), rsqrt of the mean (activation on [P,1]), scale by it
    # (tensor_scalar), multiply by w (tensor_tensor)
    n, note = _n_eff(v, t, v.n(0))
    ii = t.min_ii
    cyc = (max(ii, n) + ii) + ii + max(ii, n) + max(ii, 2 * n)
    return cyc, "(max(MIN_II,N)+MIN_II) + MIN_II + max(MIN_II,N) + max(MIN_II,2N)" + note, \
        {"MIN_II": ii, "N": n}, "hw §3 activation_reduce+activation+tensor_scalar+" \
        "tensor_tensor; assume:composites"


def _mean(v: OpView, t: CostTarget):
    cyc, text, env, src = _tensor_reduce(v, t)
    return cyc + t.min_ii, text + " + MIN_II (scale)", {**env, "MIN_II": t.min_ii}, \
        src + "; assume:composites"


def _var(v: OpView, t: CostTarget):
    n = v.n(0)
    chunks = math.ceil(n / t.hw.bn_stats_fmax)
    stats = chunks * max(t.min_ii, min(n, t.hw.bn_stats_fmax))
    aggr = max(t.min_ii, 13 * (6 * chunks / 3))
    return stats + aggr, "chunks*max(MIN_II, min(N,512)) + max(MIN_II, 13*(6*chunks/3))", \
        {"MIN_II": t.min_ii, "N": n, "chunks": chunks}, "hw §3 bn_stats+bn_aggr; " \
        "assume:composites"


def _collective(v: OpView, t: CostTarget):
    nbytes = sum(o.nbytes for o in v.tiles("ins"))
    ns = 2 * t.dma_fixed_ns + nbytes / (t.dma_engines * t.dma_bytes_per_ns)
    cyc = ns * t.clock_ghz["sync"]
    return cyc, "(2*DMA_FIXED + bytes/DMA_BW) * clock", {"bytes": nbytes}, "assume:collective"


def _nothing(v: OpView, t: CostTarget):
    return 0, "0 (simulation only)", {}, "not a device instruction"


_GP = _plain(1, start=1, src="assume:gpsimd_unpriced")

COSTS: dict[str, CostEntry] = {}


def _reg(names, engine: str, formula: Formula | None):
    for n in names.split() if isinstance(names, str) else names:
        COSTS[n] = CostEntry(engine, formula)


# --- DMA (priced by dma_plan)
_reg("load store load_transpose2d atomic_rmw dma_copy dma_transpose", "dma", None)
# --- nki.isa instructions (hw §3 table, nki-api.md §4.3)
_reg("activation activation_reduce", "scalar", _activation)
_reg("affine_select", "gpsimd", _plain(1, start=1, src="hw §3 affine_select [ISA-old]"))
_reg("bn_stats", "vector", _maxii("N", src="hw §3 bn_stats [ISA-old]"))
_reg("bn_aggr", "vector", _bn_aggr)
_reg("dropout", "vector", _maxii("N", src="hw §3 dropout [ISA-old]"))
_reg("iota", "gpsimd", lambda v, t: (t.gpsimd_start + v.n(0, "outs"), "150 + N",
                                     {"N": v.n(0, "outs")}, "hw §3 iota [ISA-old]"))
_reg("local_gather", "gpsimd", _local_gather)
_reg("max8 nc_find_index8", "vector", _plain(1, src="hw §3 max8/nc_find_index8 [ISA-old]"))
_reg("nc_match_replace8", "vector", _maxii("N", src="hw §3; assume:match_replace_max"))
_reg("memset", "vector", _memset)
_reg("nc_matmul", "tensor", _matmul)
_reg("nc_stream_shuffle", "vector", _maxii("N", src="hw §3 nc_stream_shuffle [ISA-old]"))
_reg("nc_transpose", "tensor", _transpose)
_reg("range_select", "vector", _maxii("N", src="hw §3 range_select [ISA-old]"))
_reg("reciprocal", "vector", _reciprocal)
_reg("scalar_tensor_tensor", "vector", _stt)
_reg("tensor_copy", "vector", _maxii("N", family="copy", src="hw §2.3, §3 tensor_copy"))
_reg("tensor_copy_dynamic_src tensor_copy_dynamic_dst", "vector",
     _maxii("N", dynamic=True, src="hw §3 tensor_copy_dynamic [ISA-old]"))
_reg("tensor_copy_predicated select_reduce", "vector", _predicated)
_reg("tensor_reduce", "vector", _tensor_reduce)
_reg("tensor_scalar", "vector", _maxii("N", family="copy", src="hw §2.3, §3 tensor_scalar"))
_reg("tensor_scalar_reduce", "vector",
     _maxii("N", extra_ii=1, src="hw §3 tensor_scalar_reduce [ISA-old]"))
_reg("tensor_tensor", "vector", _tensor_tensor)
_reg("tensor_tensor_scan", "vector", _maxii("N", 2, src="hw §3 tensor_tensor_scan [ISA-old]"))
# (?) priced as tensor_tensor_scan: one pass, a dependent ALU step per element
_reg("tensor_scalar_cumulative", "vector",
     _maxii("N", 2, src="as tensor_tensor_scan (hw §3 [ISA-old]) (?)"))
_reg("tensor_partition_reduce sequence_bounds builtin_custom_op nc_n_gather "
     "nonzero_with_count", "gpsimd", _GP)
# --- nki.language operations (nl opcode names; engines from ir.opcodes)
_reg("copy broadcast_to", "vector", _maxii("N", family="copy", side="outs",
                                           src="hw §3 tensor_copy [ISA-old]"))
_reg("rand", "gpsimd", _rand)
_reg("random_seed", "gpsimd", lambda v, t: (t.gpsimd_start, "GPSIMD_START", {},
                                            "assume:gpsimd_unpriced"))
_reg("exp log sin arctan tanh sqrt rsqrt sigmoid relu gelu gelu_dx gelu_apprx_tanh "
     "gelu_apprx_sigmoid silu silu_dx erf erf_dx softplus mish square sign abs", "scalar",
     _activation)
_reg("negative trunc floor ceil cos tan invert logical_not", "vector",
     _maxii("N", src="assume:nl_unary_vector"))
_reg("add subtract multiply divide power maximum minimum mod fmod equal not_equal greater "
     "greater_equal less less_equal logical_and logical_or logical_xor bitwise_and bitwise_or "
     "bitwise_xor left_shift right_shift loop_reduce", "vector", _tensor_tensor)
_reg("where", "vector", _maxii("N", 2, src="assume:nl_where"))
_reg("sum prod max min all", "vector", _tensor_reduce)
_reg("mean", "vector", _mean)
_reg("var", "vector", _var)
_reg("matmul", "tensor", _matmul)
_reg("transpose", "tensor", _transpose)
_reg("softmax", "vector", _softmax)
_reg("rms_norm", "vector", _rms_norm)
_reg("gather_flattened", "gpsimd", _local_gather)
_reg("all_reduce", "sync", _collective)
_reg("device_print", "none", _nothing)


def partition_broadcast(v: OpView, t: CostTarget) -> bool:
    """Whether a ``broadcast_to`` is a TensorE matmul whose result stays in PSUM.

    A one-partition tile spread over several partitions, of at most ``psum_fmax`` elements: the
    result must fit one PSUM tile (hw §1.2: a PSUM tile holds one 2 KiB bank per partition,
    ``nl.tile_size.psum_fmax`` = 512); a longer one is evacuated to SBUF by a copy (priced as
    the VectorE copy, the TensorE matmuls overlapping it).
    """
    ins, outs = v.tiles("ins"), v.tiles("outs")
    return bool(ins and outs and ins[0].kind == "tile" and ins[0].partitions == 1
                and outs[0].partitions > 1 and ins[0].n <= t.hw.psum_fmax)


def _bcast_matmul(v: OpView, t: CostTarget):
    # why: NKI lowers a partition broadcast to nc_matmul(ones[1, M], x[1, N],
    # is_stationary_onezero=True) on TensorE, result in PSUM (hw §2.2; [A1] "TensorE alternative
    # use": partition broadcast); priced with the nc_matmul formula, fp32 4x halved by onezero
    src, out = v.tiles("ins")[0], v.tiles("outs")[0]
    fp32 = src.dtype == "float32"
    fac = t.mm_fp32_factor / 2 if fp32 else 1
    base = max(min(t.mm_init_latency, out.partitions), src.n)
    return fac * base, ("2*" if fp32 else "") + "max(min(64, M), N) (partition broadcast: " \
        "matmul with ones, onezero)", {"M": out.partitions, "N": src.n}, \
        "hw §2.2, §3 nc_matmul [A1 TensorE partition broadcast][ISA-old]"


PARTITION_BROADCAST = CostEntry("tensor", _bcast_matmul)
