"""IR -> text.

One instruction per line, loops indented, tensors with buffer, shape and dtype, and the kernel
source line as a trailing ``# file:line`` comment.

The text is what the backend_config carries as ``serialize_ir_string``; :mod:`.parser` reads it
back and ``parse(print_kernel(k)) == k`` holds for every kernel (tested over the whole suite).
"""

from __future__ import annotations

import math

from . import expr as E
from .nodes import Access, Alloc, Inst, Kernel, Loop, Scalar, TensorDecl

__all__ = ["print_kernel", "format_value", "format_operand", "format_decl", "format_inst"]

_INDENT = "  "
_DECL_OPTIONAL = (("par_dim", 0), ("init", None), ("base", None), ("view", None),
                  ("alloc", None), ("data", None))


def format_value(v) -> str:
    """A literal: int, float, str, bool, None, tuples of those, or an index expression."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(float(v))
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, tuple):
        inner = ", ".join(format_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, (E.Affine, E.Pred)):
        return f"expr({E.to_str(v)})"
    raise TypeError(f"IR attribute values must be literals or index expressions, got {v!r}")


def format_operand(op) -> str:
    """An instruction operand."""
    if isinstance(op, Access):
        text = op.tensor
        if op.index is not None:
            text += f"[{', '.join(E.to_str(e) for e in op.index)}]"
        if op.shape is not None:
            text += f":{E.tuple_str(op.shape)}"
        return text
    if isinstance(op, Scalar):
        lit = format_value(op.value)
        return lit if op.dtype is None else f"{op.dtype}({lit})"
    if isinstance(op, (E.Affine, E.Pred)):
        return format_value(op)
    raise TypeError(f"not an IR operand: {op!r}")


def format_decl(d: TensorDecl) -> str:
    """``name: buffer dtype[shape] kind key=value...`` (without the source comment)."""
    shape = ", ".join(str(s) for s in d.shape)
    text = f"{d.name}: {d.buffer} {d.dtype}[{shape}] {d.kind}"
    for key, default in _DECL_OPTIONAL:
        val = getattr(d, key)
        if val != default:
            text += f" {key}={format_value(val)}"
    return text


def _attrs(attrs) -> str:
    if not attrs:
        return ""
    return " [" + ", ".join(f"{k}={format_value(v)}" for k, v in attrs) + "]"


def _loc(loc) -> str:
    return f"  # {loc}" if loc else ""


def format_inst(s: Inst) -> str:
    """One instruction line (without indentation)."""
    outs = ", ".join(format_operand(o) for o in s.outs)
    call = f"{s.op}({', '.join(format_operand(i) for i in s.ins)})"
    text = f"{outs} = {call}" if outs else call
    text += _attrs(s.attrs)
    if s.mask is not None:
        text += f" mask={E.to_str(s.mask)}"
    return text + _loc(s.loc)


def _body(body, depth: int, lines: list):
    pad = _INDENT * depth
    if not body:
        lines.append(pad + "pass")
    for s in body:
        if isinstance(s, Alloc):
            lines.append(f"{pad}alloc {format_decl(s.decl)}{_loc(s.decl.loc)}")
        elif isinstance(s, Loop):
            head = f"for {s.var} in {s.kind}_range({s.start}, {s.stop}, {s.step}){_attrs(s.attrs)}:"
            lines.append(pad + head + _loc(s.loc))
            _body(s.body, depth + 1, lines)
        elif isinstance(s, Inst):
            lines.append(pad + format_inst(s))
        else:
            raise TypeError(f"not an IR statement: {s!r}")


def print_kernel(k: Kernel) -> str:
    """The text form of a kernel."""
    grid = format_value(tuple(k.grid))
    lines = [f"kernel {k.name} grid={grid} target={k.target}{_attrs(k.attrs)}"]
    for p in k.params:
        lines.append(f"{_INDENT}param {format_decl(p)}{_loc(p.loc)}")
    _body(k.body, 1, lines)
    lines.append(f"{_INDENT}return {format_value(tuple(k.outputs))}")
    return "\n".join(lines) + "\n"
