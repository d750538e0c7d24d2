"""ScalarE ``activation`` and ``activation_reduce``.

ScalarE ``activation`` and ``activation_reduce`` with the activation-function table
(nki-api.md §4.2): which functions ``op=`` accepts and their documented valid input ranges.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..ir import Scalar
from . import common as K
from .enums import reduce_cmd as _cmd

__all__ = ["activation", "activation_reduce", "ACTIVATIONS", "VALID_RANGE", "activation_name"]

# canonical activation name -> documented valid input range ((lo, hi), or (lo, hi, "abs") for
# a range on |x|); None: any input
VALID_RANGE = {
    "copy": None, "square": None, "sigmoid": None, "relu": None, "gelu": None,
    "gelu_dx": None, "gelu_apprx_tanh": None, "gelu_apprx_sigmoid": None, "silu": None,
    "silu_dx": None, "tanh": None, "softplus": None, "mish": None, "erf": None, "erf_dx": None,
    "exp": None, "log": (2.0 ** -64, 2.0 ** 64), "sin": (-math.pi, math.pi),
    "arctan": (-math.pi / 2, math.pi / 2), "sqrt": (2.0 ** -116, 2.0 ** 118),
    "rsqrt": (2.0 ** -87, 2.0 ** 97), "reciprocal": (2.0 ** -42, 2.0 ** 42, "abs"),
    "sign": None, "abs": None,
}
ACTIVATIONS = frozenset(VALID_RANGE)
# numpy callables accepted as activation functions
_NUMPY = {id(f): n for f, n in [(np.copy, "copy"), (np.square, "square"), (np.tanh, "tanh"),
                                (np.exp, "exp"), (np.log, "log"), (np.sin, "sin"),
                                (np.arctan, "arctan"), (np.sqrt, "sqrt"),
                                (np.reciprocal, "reciprocal"), (np.sign, "sign"),
                                (np.abs, "abs"), (np.absolute, "abs")]}
_REDUCE_OPS = frozenset({"add", "maximum", "minimum", "multiply"})
_IDLE, _RESET_REDUCE = _cmd.idle, _cmd.reset_reduce


def activation_name(op, api: str) -> str:
    """Canonical activation-table name of ``op`` (``nl.exp``, ``np.exp``, ``'exp'``...)."""
    name = _NUMPY.get(id(op))
    if name is None:
        fname = op if isinstance(op, str) else getattr(op, "__name__", None)
        mod = getattr(op, "__module__", "") or ""
        if isinstance(op, str) or mod.startswith("nki_workbench"):
            name = {"identity": "copy"}.get(fname, fname)
    if name not in ACTIVATIONS:
        raise K.err(None, f"{api}: {op!r} is not an activation function",
                    "use one of the activation table: nl.exp, nl.tanh, nl.gelu, nl.relu, "
                    "nl.copy, np.square... (nki-api.md §4.2)")
    return name


def _operands(api, data, bias, scale, op):
    p = data.shape[0]
    if isinstance(scale, K.NkiTensor):
        if D.name_of(scale.dtype) != "float32":
            raise K.err("err_activation_scale_invalid_type",
                        f"{api}: scale tile must be float32, got {D.name_of(scale.dtype)}",
                        "use a float32 [P, 1] tile or a Python float")
    elif not isinstance(scale, (int, float, np.integer, np.floating)) or isinstance(scale, bool):
        raise K.err("err_activation_scale_invalid_type",
                    f"{api}: scale must be a compile-time scalar or a float32 [P, 1] tile, got "
                    f"{type(scale).__name__}")
    sc = K.scalar_or_vector(scale, p, api, "scale", "err_activation_scale_invalid_type",
                            "err_activation_scale_scalar_or_vector")
    if isinstance(sc, Scalar):
        sc = Scalar(float(sc.value))
    if bias is None:
        b = Scalar(0.0)
    else:
        if not isinstance(bias, K.NkiTensor):
            raise K.err("err_activation_bias_invalid_type",
                        f"{api}: bias must be a [P, 1] tile of float32/float16/bfloat16, got "
                        f"{type(bias).__name__}", "load the bias vector into an SBUF tile")
        b = K.scalar_or_vector(bias, p, api, "bias", "err_activation_bias_invalid_type",
                               "err_activation_bias_invalid_type",
                               dtypes=("float32", "float16", "bfloat16"))
        if op == "reciprocal" and K.target().nc_version < 3:
            raise K.err("wb_isa_unsupported", f"{api}: activation(op=reciprocal) cannot take a "
                        "bias on NeuronCore-v2", "use nisa.reciprocal, or add the bias first")
    return sc, b


def _common(api, op, data, bias, scale, dtype):
    K.tile(data, api, "data")
    name = activation_name(op, api)
    sc, b = _operands(api, data, bias, scale, name)
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return name, sc, b, dt


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=_IDLE, mask=None, dtype=None, **kwargs):
    """``op(data * scale + bias)`` on Scalar Engine (fp32 math), with optional reduction.

    After the activation the result can be reduced along all free axes with ``reduce_op`` and
    combined into ScalarE's per-partition accumulator registers according to ``reduce_cmd``
    (``reset``, ``reduce``, ``reset_reduce``; ``idle`` leaves them alone); ``reduce_res``
    (a ``[P, 1]`` tile) receives the registers' value after the instruction.

    Args:
        op: activation function (nki-api.md §4.2).
        data: input tile (SBUF or PSUM).
        bias: ``[P, 1]`` float32/float16/bfloat16 tile.
        scale: compile-time float or float32 ``[P, 1]`` tile.
        reduce_op: reduction operator (add, max, min, multiply).
        reduce_res: ``[P, 1]`` tile receiving the accumulator registers.
        reduce_cmd: a ``nisa.reduce_cmd``.
        mask: compile-time predicate.
        dtype: result dtype (default: ``data``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.activation"
    name, sc, b, dt = _common(api, op, data, bias, scale, dtype)
    cmd = K.cmd_name(reduce_cmd, api)
    rn = None
    if reduce_op is not None:
        rn = K.alu(reduce_op, api, "reduce_op")
        if rn not in _REDUCE_OPS:
            raise K.err(None, f"{api}: reduce_op must be add, max, min or multiply, got {rn}")
    if cmd in ("reduce", "reset_reduce") and rn is None:
        raise K.err(None, f"{api}: reduce_cmd={cmd} needs a reduce_op")
    return _emit(api, "activation", name, data, sc, b, dt, rn, cmd, reduce_res, mask)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None,
                      dtype=None, **kwargs):
    """``activation`` plus ``reduce_res = reduce_op(result)`` along all free axes (ScalarE).

    Same as ``activation(..., reduce_cmd=reset_reduce, reduce_res=reduce_res)``: the
    accumulator registers are reset and then hold this instruction's reduction.

    Args:
        op: activation function.
        data: input tile.
        reduce_op: reduction operator (add only on NeuronCore-v2).
        reduce_res: ``[P, 1]`` tile written in place.
        bias: ``[P, 1]`` float tile.
        scale: float or float32 ``[P, 1]`` tile.
        mask: compile-time predicate.
        dtype: result dtype.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.activation_reduce"
    name, sc, b, dt = _common(api, op, data, bias, scale, dtype)
    rn = K.alu(reduce_op, api, "reduce_op")
    if rn not in _REDUCE_OPS:
        raise K.err(None, f"{api}: reduce_op must be add, max, min or multiply, got {rn}")
    if K.target().nc_version < 3 and rn != "add":
        raise K.err("wb_isa_unsupported", f"{api}: on NeuronCore-v2 reduce_op must be add, got "
                    f"{rn}", "use np.add, or target trn2")
    if reduce_res is None:
        raise K.err(None, f"{api}: reduce_res is required")
    return _emit(api, "activation_reduce", name, data, sc, b, dt, rn, "reset_reduce",
                 reduce_res, mask)


def _emit(api, opcode, name, data, sc, b, dt, rn, cmd, reduce_res, mask):
    attrs = {"op": name, "reduce_op": rn, "reduce_cmd": cmd}
    if reduce_res is None:
        return K.compute(opcode, [data, sc, b], data.shape, dt, "scalar", attrs=attrs, mask=mask,
                         api=api)
    K.reduce_res_tile(reduce_res, data.shape[0], api)
    out = K.fresh_tile(data.shape, dt, api)
    attrs.update(dtype=D.name_of(dt), dtypes=(D.name_of(dt), D.name_of(reduce_res.dtype)))
    K.emit(opcode, [out, reduce_res], [data, sc, b], "scalar", attrs=attrs, mask=mask, api=api)
    return out
