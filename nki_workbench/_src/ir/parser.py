"""Text -> IR: the inverse of :mod:`.printer` (``parse(print_kernel(k)) == k``).

A line-oriented reader (indentation gives loop nesting) over a small tokenizer; expressions
and literals are read by recursive descent and rebuilt through the same normalising
constructors the tracer uses, so the canonical form comes back identical.
"""

from __future__ import annotations

import re

from .. import pyast
from . import expr as E
from . import validate as _validate
from .nodes import Access, Alloc, Inst, Kernel, Loop, Scalar, TensorDecl

__all__ = ["parse", "parse_expr", "IRParseError"]



class IRParseError(ValueError):
    """The text is not valid IR; the message names the line."""


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#.*$)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<iota>\{\d+@\d+/\d+\})
  | (?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)
  | (?P<name>[A-Za-z_][A-Za-z_0-9.]*)
  | (?P<op><=|>=|==|!=|->|[<>+\-*&|~()\[\],:=])
""", re.VERBOSE)

_CMP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


class _Tokens:
    def __init__(self, text: str, lineno: int):
        self.toks: list[tuple[str, str]] = []
        self.comment: str | None = None
        self.lineno = lineno
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise IRParseError(f"line {lineno}: unexpected text {text[pos:pos + 20]!r}")
            pos = m.end()
            kind = m.lastgroup
            if kind == "ws":
                continue
            if kind == "comment":
                self.comment = m.group()[1:].strip() or None
                break
            self.toks.append((kind, m.group()))
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("eof", "")

    def next(self):
        tok = self.peek()
        self.i += 1
        return tok

    def accept(self, value: str) -> bool:
        if self.peek()[1] == value and self.peek()[0] in ("op", "name"):
            self.i += 1
            return True
        return False

    def expect(self, value: str):
        if not self.accept(value):
            raise self.error(f"expected {value!r}")

    def name(self) -> str:
        kind, val = self.next()
        if kind != "name":
            raise self.error(f"expected a name, got {val!r}")
        return val

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def error(self, msg: str) -> IRParseError:
        got = self.peek()[1] or "end of line"
        return IRParseError(f"line {self.lineno}: {msg} (at {got!r})")


# ----------------------------------------------------------------------------- expressions

def _expr(t: _Tokens):
    left = _and(t)
    while t.accept("|"):
        left = E.lor(left, _and(t))
    return left


def _and(t):
    left = _not(t)
    while t.accept("&"):
        left = E.land(left, _not(t))
    return left


def _not(t):
    if t.accept("~"):
        return E.lnot(_not(t))
    left = _arith(t)
    op = t.peek()[1]
    if t.peek()[0] == "op" and op in _CMP:
        t.next()
        return E.compare(_CMP[op], left, _arith(t))
    return left


def _arith(t):
    left = _term(t)
    while t.peek()[1] in ("+", "-") and t.peek()[0] == "op":
        op = t.next()[1]
        right = _term(t)
        left = E.add(left, right) if op == "+" else E.sub(left, right)
    return left


def _term(t):
    left = _factor(t)
    while t.accept("*"):
        left = E.mul(left, _factor(t))
    return left


_FN_PARSE = {"floordiv": E.floordiv, "mod": E.mod, "mul": E.mul,
             "min": lambda a, b: E.minmax("min", a, b), "max": lambda a, b: E.minmax("max", a, b)}


def _factor(t):
    kind, val = t.peek()
    if t.accept("-"):
        return E.neg(_factor(t))
    if t.accept("("):
        e = _expr(t)
        t.expect(")")
        return e
    t.next()
    if kind == "num" and "." not in val and "e" not in val.lower():
        return E.const(int(val))
    if kind == "iota":
        size, rest = val[1:-1].split("@")
        axis, ndim = rest.split("/")
        return E.as_expr(E.Iota(int(size), int(axis), int(ndim)))
    if kind == "name":
        if val == "dyn" and t.peek()[1] == "(":
            t.expect("(")
            name = t.name()
            index = _index(t)
            t.expect(":")
            shape = _value(t)
            t.expect(")")
            return E.as_expr(E.Dyn(name, index, tuple(shape)))
        if val in _FN_PARSE and t.peek()[1] == "(":
            t.expect("(")
            a = _expr(t)
            t.expect(",")
            b = _expr(t)
            t.expect(")")
            return _FN_PARSE[val](a, b)
        return E.as_expr(E.Var(val))
    t.i -= 1
    raise t.error("expected an index expression")


def _index(t: _Tokens):
    if not t.accept("["):
        return None
    idx = [_expr(t)]
    while t.accept(","):
        idx.append(_expr(t))
    t.expect("]")
    return tuple(idx)


def parse_expr(text: str):
    """Parse one index expression or predicate."""
    t = _Tokens(text, 1)
    e = _expr(t)
    if not t.at_end():
        raise t.error("trailing text after expression")
    return e


# ----------------------------------------------------------------------------- literals

_NAMED = {"None": None, "True": True, "False": False, "nan": float("nan"), "inf": float("inf")}


def _value(t: _Tokens):
    kind, val = t.peek()
    if t.accept("-"):
        v = _value(t)
        return -v
    if t.accept("("):
        items = []
        while not t.accept(")"):
            items.append(_value(t))
            if not t.accept(","):
                t.expect(")")
                break
        return tuple(items)
    if kind == "name" and val == "expr" and t.peek(1)[1] == "(":
        t.next()
        t.expect("(")
        e = _expr(t)
        t.expect(")")
        return e
    t.next()
    if kind == "num":
        return float(val) if ("." in val or "e" in val.lower()) else int(val)
    if kind == "str":
        return pyast.literal_eval(val)  # why: one lock for all ast use (see _src/pyast)
    if kind == "name" and val in _NAMED:
        return _NAMED[val]
    t.i -= 1
    raise t.error("expected a literal")


def _attrs(t: _Tokens) -> tuple:
    if not t.accept("["):
        return ()
    out = []
    while not t.accept("]"):
        key = t.name()
        t.expect("=")
        out.append((key, _value(t)))
        if not t.accept(","):
            t.expect("]")
            break
    return tuple(out)


# ----------------------------------------------------------------------------- operands, decls

def _operand(t: _Tokens):
    kind, val = t.peek()
    if kind == "name" and val == "expr" and t.peek(1)[1] == "(":
        return _value(t)
    if kind == "name" and val not in _NAMED and t.peek(1)[1] == "(":
        t.next()
        t.expect("(")
        v = _value(t)
        t.expect(")")
        return Scalar(v, val)
    if kind == "name" and val not in _NAMED:
        t.next()
        index = _index(t)
        shape = tuple(_value(t)) if t.accept(":") else None
        return Access(val, index, shape)
    return Scalar(_value(t))


def _decl(t: _Tokens) -> TensorDecl:
    name = t.name()
    t.expect(":")
    buffer = t.name()
    dtype = t.name()
    t.expect("[")
    shape = []
    while not t.accept("]"):
        shape.append(_value(t))
        if not t.accept(","):
            t.expect("]")
            break
    kind = t.name()
    extra = {}
    while not t.at_end():
        key = t.name()
        t.expect("=")
        extra[key] = _value(t)
    return TensorDecl(name=name, shape=tuple(shape), dtype=dtype, buffer=buffer, kind=kind,
                      loc=t.comment, **extra)


def _inst(t: _Tokens) -> Inst:
    outs = []
    # an instruction with outputs reads "outs = op(...)"; find whether a top-level '=' exists
    depth, has_eq = 0, False
    prev = None
    for kind, val in t.toks:
        if kind == "op" and val == "(" and depth == 0 and prev == "name":
            break  # why: the op's call comes first; a later '=' is an attribute or mask=
        prev = kind
        if kind == "op" and val in "([":
            depth += 1
        elif kind == "op" and val in ")]":
            depth -= 1
        elif kind == "op" and val == "=" and depth == 0:
            has_eq = True
            break
    if has_eq:
        outs.append(_operand(t))
        while t.accept(","):
            outs.append(_operand(t))
        t.expect("=")
    op = t.name()
    t.expect("(")
    ins = []
    while not t.accept(")"):
        ins.append(_operand(t))
        if not t.accept(","):
            t.expect(")")
            break
    attrs = _attrs(t)
    mask = None
    if t.accept("mask"):
        t.expect("=")
        mask = _expr(t)
    if not t.at_end():
        raise t.error("trailing text after instruction")
    return Inst(op, tuple(outs), tuple(ins), attrs, mask, t.comment)


# ----------------------------------------------------------------------------- lines and blocks

def _lines(text: str):
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 2
        out.append((n, depth, raw.strip()))
    return out


def _block(lines, pos: int, depth: int, where: dict, line: list):
    body = []
    while pos < len(lines):
        n, d, text = lines[pos]
        if d < depth:
            break
        if d > depth:
            raise IRParseError(f"line {n}: unexpected indentation")
        line[0] = n
        t = _Tokens(text, n)
        size = len(body)
        head = t.peek()[1]
        if head == "pass" and len(t.toks) == 1:
            pos += 1
        elif head in ("return", "param"):
            break
        elif head == "alloc" and t.peek(1)[0] == "name" and t.peek(2)[1] == ":":
            t.next()
            body.append(Alloc(_decl(t)))
            pos += 1
        elif head == "for" and t.peek(2)[1] == "in":
            t.next()
            var = t.name()
            t.expect("in")
            kind = t.name()
            if not kind.endswith("_range"):
                raise t.error("expected <kind>_range")
            t.expect("(")
            start, stop, step = (_value(t), (t.expect(","), _value(t))[1],
                                 (t.expect(","), _value(t))[1])
            t.expect(")")
            attrs = _attrs(t)
            t.expect(":")
            inner, pos = _block(lines, pos + 1, depth + 1, where, line)
            body.append(Loop(var, start, stop, step, kind[:-len("_range")], tuple(inner),
                             t.comment, attrs))
        else:
            body.append(_inst(t))
            pos += 1
        if len(body) > size:
            where[id(body[-1])] = n
    return body, pos


# why: a mutated text can make the literal/expression readers or the node constructors fail
# in many ways (a shape that is not a tuple, an unknown decl key, a zero step, deep nesting);
# each becomes an IRParseError naming the line instead of escaping as a bare built-in error
_READ_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError,
                OverflowError, RecursionError, SyntaxError, MemoryError)


def parse(text: str, *, validate: bool = True, opcodes: dict | None = None) -> Kernel:
    """Parse the text form of a kernel (as printed by ``print_kernel``).

    Args:
        text: the IR text.
        validate: check the kernel with :func:`~.validate.validate` (on by default; turn it off
            only to read IR that is deliberately outside the rules, e.g. printer edge cases).
        opcodes: the opcode table the validator checks against (default: the registry).

    Returns:
        The kernel.

    Raises:
        IRParseError: the text is not IR (the message names the line).
        InvalidIRError: the text is IR but breaks a rule (``NkiError`` code ``wb_invalid_ir``,
            naming the instruction and its line).
    """
    if not isinstance(text, str):
        raise IRParseError(f"IR text must be a str, got {type(text).__name__}")
    where: dict = {}
    line = [None]
    try:
        kernel = _parse(text, where, line)
    except IRParseError:
        raise
    except _READ_ERRORS as exc:
        at = f"line {line[0]}: " if line[0] is not None else ""
        raise IRParseError(f"{at}{type(exc).__name__}: {_short(exc)}") from None
    if validate:
        _validate.validate(kernel, opcodes=opcodes, lines=where)
    return kernel


def _short(exc) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:197] + "..."


def _parse(text: str, where: dict, line: list) -> Kernel:
    lines = _lines(text)
    if not lines:
        raise IRParseError("empty IR text")
    n, _, head = lines[0]
    line[0] = n
    t = _Tokens(head, n)
    t.expect("kernel")
    name = t.name()
    t.expect("grid")
    t.expect("=")
    grid = _value(t)
    t.expect("target")
    t.expect("=")
    target = t.name()
    attrs = _attrs(t)
    if not isinstance(grid, tuple):
        raise t.error("the grid must be a tuple")
    pos = 1
    params = []
    while pos < len(lines) and lines[pos][2].startswith("param "):
        line[0] = lines[pos][0]
        pt = _Tokens(lines[pos][2], lines[pos][0])
        pt.next()
        params.append(_decl(pt))
        where[id(params[-1])] = lines[pos][0]
        pos += 1
    body, pos = _block(lines, pos, 1, where, line)
    if pos >= len(lines) or not lines[pos][2].startswith("return"):
        raise IRParseError(f"line {lines[min(pos, len(lines) - 1)][0]}: expected 'return'")
    line[0] = lines[pos][0]
    rt = _Tokens(lines[pos][2], lines[pos][0])
    rt.next()
    outputs = _value(rt)
    if not isinstance(outputs, tuple):
        raise rt.error("'return' takes a tuple of tensor names")
    if not rt.at_end():
        raise rt.error("trailing text after 'return'")
    if pos + 1 < len(lines):
        raise IRParseError(f"line {lines[pos + 1][0]}: text after 'return'")
    return Kernel(name, tuple(params), tuple(body), tuple(outputs), tuple(grid), target,
                  tuple(attrs))

