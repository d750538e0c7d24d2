"""What the kernel's source says around a traced line (Python hides it from the tracer).

The tracer runs the kernel as ordinary Python, so an ``if``/``while`` on a tile, a tensor
created under a branch, or a local ``x: nt.tensor[128, 512] = ...`` annotation leave no trace
in the values it sees. These helpers read the kernel's source file (``linecache``, parsed once
per file version) to find the statement at a frame's line and what encloses it.
"""

from __future__ import annotations

import ast
import functools
import linecache

from .. import pyast

__all__ = ["statement_at", "condition_source", "annotated_locals"]



@functools.lru_cache(maxsize=128)
def _index(filename: str, text: str):
    """``line -> (innermost statement, its ancestors outermost first)`` of one source text."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}, None
    out = {}

    def visit(node, ancestors):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    out[line] = (child, ancestors)  # why: inner statements overwrite outer
                visit(child, ancestors + (child,))
            else:
                visit(child, ancestors)
    visit(tree, ())
    return out, tree


def statement_at(frame):
    """``(statement, ancestors)`` at ``frame``'s current line (``(None, ())`` if unknown)."""
    if frame is None:
        return None, ()
    fname = frame.f_code.co_filename
    lines = linecache.getlines(fname, frame.f_globals)
    if not lines:
        return None, ()
    return _index(fname, "".join(lines))[0].get(frame.f_lineno, (None, ()))


def condition_source(frame):
    """``(kind, text)`` when the frame is evaluating an ``if``/``while``/``assert`` condition.

    ``kind`` is ``"if"``, ``"while"``, ``"assert"`` or ``"ternary"``; ``text`` the condition as
    written. ``(None, None)`` elsewhere.
    """
    stmt, _ = statement_at(frame)
    if stmt is None:
        return None, None
    fname = frame.f_code.co_filename
    text = "".join(linecache.getlines(fname, frame.f_globals))
    line = frame.f_lineno
    kinds = ((ast.If, "if"), (ast.While, "while"), (ast.Assert, "assert"))
    for cls, kind in kinds:
        if isinstance(stmt, cls) and stmt.test.lineno <= line <= (stmt.test.end_lineno or line):
            return kind, ast.get_source_segment(text, stmt.test)
    for node in ast.walk(stmt):
        if isinstance(node, ast.IfExp) and node.test.lineno <= line <= (
                node.test.end_lineno or line):
            return "ternary", ast.get_source_segment(text, node.test)
    return None, None


def annotated_locals(func) -> dict:
    """``{line: (name, shape)}`` of ``name: nt.tensor[d0, d1, ...] = ...`` in ``func``'s body."""
    code = getattr(func, "__code__", None)
    if code is None:
        return {}
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return {}
    tree = _index(code.co_filename, "".join(lines))[1]
    first = code.co_firstlineno
    stmt = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                           ast.AsyncFunctionDef))
                 and n.name == code.co_name and first in
                 [n.lineno] + [d.lineno for d in n.decorator_list[:1]]), None) if tree else None
    if stmt is None:
        return {}
    out = {}
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and
                node.value is not None and isinstance(node.annotation, ast.Subscript)):
            continue
        base = node.annotation.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name != "tensor":
            continue
        try:
            shape = pyast.literal_eval(node.annotation.slice)
        except (ValueError, SyntaxError):
            continue
        shape = shape if isinstance(shape, tuple) else (shape,)
        if shape and all(isinstance(s, int) for s in shape):
            out[node.lineno] = (node.target.id, tuple(shape))
    return out
