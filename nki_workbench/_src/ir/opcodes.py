"""The opcode table: every instruction the IR can hold, its engine and its family.

This file doubles as the IR reference. Opcodes of ``nki.language`` calls carry the function's
name (``exp``, ``add``, ``load``...); ``nki.isa`` instructions are registered by the isa module
under their ISA names. The simulator's numerics and the cost model are separate tables keyed
by the same names; a name missing from one of them is an error naming it, never a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OpInfo", "OPCODES", "register", "opinfo", "ENGINES"]

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma", "sync", "none")


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What the IR knows about an opcode.

    Attributes:
        name: the opcode.
        engine: the engine that runs it by default (one of :data:`ENGINES`).
        family: ``dma``, ``unary``, ``binary``, ``reduce``, ``matmul``, ``fill``, ``composite``,
            ``misc`` or ``isa``.
        doc: one line.
    """

    name: str
    engine: str
    family: str
    doc: str = ""


OPCODES: dict[str, OpInfo] = {}


def register(name: str, engine: str, family: str, doc: str = "") -> OpInfo:
    """Add an opcode (re-registering the same name with other facts is an error)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} for opcode {name!r}")
    info = OpInfo(name, engine, family, doc)
    old = OPCODES.get(name)
    if old is not None and old != info:
        raise ValueError(f"opcode {name!r} registered twice with different facts")
    OPCODES[name] = info
    return info


def opinfo(name: str) -> OpInfo:
    """Facts of opcode ``name``; unknown names raise ``KeyError`` naming them."""
    try:
        return OPCODES[name]
    except KeyError:
        raise KeyError(f"unknown IR opcode {name!r}") from None


# --- data movement (DMA queues): HBM <-> SBUF
for _n, _d in [("load", "HBM -> SBUF tile"), ("store", "SBUF/PSUM tile -> HBM"),
               ("load_transpose2d", "HBM [N,M] -> SBUF [M,N]"),
               ("atomic_rmw", "dst = op(dst, value) on HBM with indirect indices")]:
    register(_n, "dma", "dma", _d)

# --- on-chip copies and fills
register("copy", "vector", "unary", "tile copy (assignment, nl.copy); casts to the destination")
register("broadcast_to", "vector", "unary", "numpy-rules broadcast of a tile")
register("memset", "vector", "fill", "fill a tile with a compile-time value (nl.zeros/ones/full)")
register("rand", "gpsimd", "fill", "uniform [0, 1) random tile")
register("random_seed", "gpsimd", "misc", "seed the random generator")

# --- element-wise unary: activation-table functions run on ScalarE (nki-api.md §4.2)
for _n in ["exp", "log", "sin", "arctan", "tanh", "sqrt", "rsqrt", "sigmoid", "relu", "gelu",
           "gelu_dx", "gelu_apprx_tanh", "gelu_apprx_sigmoid", "silu", "silu_dx", "erf", "erf_dx",
           "softplus", "mish", "square", "sign", "abs", "reciprocal"]:
    register(_n, "scalar", "unary", "activation-table function")
for _n in ["negative", "trunc", "floor", "ceil", "cos", "tan", "invert", "logical_not"]:
    register(_n, "vector", "unary", "vector-engine element-wise function")

# --- element-wise binary (VectorE; fp32 math, bitvec ops on raw bits)
for _n in ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "mod", "fmod",
           "equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and",
           "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
           "right_shift"]:
    register(_n, "vector", "binary", "element-wise binary function")
register("where", "vector", "binary", "select: condition ? x : y")

# --- reductions along free axes (VectorE)
for _n in ["sum", "prod", "max", "min", "mean", "all", "var"]:
    register(_n, "vector", "reduce", "reduction along free axes")
register("loop_reduce", "vector", "binary", "accumulate across loop iterations into the dst")

# --- TensorE
register("matmul", "tensor", "matmul", "x @ y (or x.T @ y) into PSUM, fp32 accumulation")
register("transpose", "tensor", "matmul", "2-D partition <-> free transpose")

# --- composites (several engines on hardware; one instruction here)
register("softmax", "vector", "composite", "softmax along free axes")
register("rms_norm", "vector", "composite", "x / rms(x) * w")
register("dropout", "vector", "unary", "zero elements with probability rate")
register("gather_flattened", "gpsimd", "composite", "per-partition gather from flattened free dims")
register("all_reduce", "sync", "composite", "reduce a tile across SPMD programs")

# --- debugging
register("device_print", "none", "misc", "print a tile (simulation only)")
