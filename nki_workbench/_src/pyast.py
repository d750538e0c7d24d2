"""Python's ``ast`` under one process-wide lock.

CPython 3.11 keeps the AST converter's recursion depth in interpreter-wide state, so two
threads parsing at once can fail with ``SystemError: AST constructor recursion depth
mismatch``. Every ``ast.parse``/``ast.literal_eval`` of the package goes through here.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["AST_LOCK", "parse", "literal_eval"]

AST_LOCK = threading.RLock()


def parse(source: str, *args, **kwargs) -> ast.AST:
    """``ast.parse`` under :data:`AST_LOCK`."""
    with AST_LOCK:
        return ast.parse(source, *args, **kwargs)


def literal_eval(node_or_string):
    """``ast.literal_eval`` under :data:`AST_LOCK`."""
    with AST_LOCK:
        return ast.literal_eval(node_or_string)
