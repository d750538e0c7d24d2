"""Nested Python values as trees: the one walker of kernel arguments and results.

Containers are dicts, lists, tuples (named tuples keep their type) and dataclass instances;
everything else is a leaf. Paths join parameter names and keys with ``_`` (``x_0``,
``cfg_scale``), the names the tracer gives nested tensor parameters. ``jax.tree_util`` is not
used: jax is optional below the bridges.
"""

from __future__ import annotations

import dataclasses

__all__ = ["children", "is_container", "leaves", "leaves_with_paths", "map_leaves", "any_leaf"]


def _is_dataclass_instance(v) -> bool:
    return dataclasses.is_dataclass(v) and not isinstance(v, type)


def is_container(v) -> bool:
    """Whether ``v`` has children (dict, list, tuple or dataclass instance)."""
    return isinstance(v, (dict, list, tuple)) or _is_dataclass_instance(v)


def children(v) -> list:
    """``(key, child)`` pairs of a container, in order (``[]`` for a leaf)."""
    if isinstance(v, dict):
        return list(v.items())
    if isinstance(v, (list, tuple)):
        return list(enumerate(v))
    if _is_dataclass_instance(v):
        return [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]
    return []


def leaves_with_paths(v, path: str, is_leaf=None) -> list:
    """``(path, leaf)`` for every leaf of ``v`` under ``path``, depth first.

    Args:
        v: the value.
        path: the path of ``v`` itself (a parameter name).
        is_leaf: optional predicate that stops the descent (e.g. "is a tensor").
    """
    out: list = []

    def walk(x, p):
        if (is_leaf is not None and is_leaf(x)) or not is_container(x):
            out.append((p, x))
            return
        for k, c in children(x):
            walk(c, f"{p}_{k}")

    walk(v, path)
    return out


def leaves(v, is_leaf=None) -> list:
    """Every leaf of ``v``, depth first."""
    return [x for _, x in leaves_with_paths(v, "", is_leaf)]


def any_leaf(pred, v) -> bool:
    """Whether some leaf of ``v`` (a value where ``pred`` holds stops the descent) has ``pred``."""
    if pred(v):
        return True
    return any(any_leaf(pred, c) for _, c in children(v))


def map_leaves(fn, v, is_leaf=None, path: str | None = None):
    """``v`` rebuilt with every leaf replaced by ``fn(leaf)`` (or ``fn(path, leaf)``).

    Dicts keep their type, named tuples are rebuilt with their constructor, and dataclass
    instances through ``dataclasses.replace`` of their ``init`` fields.

    Args:
        fn: ``fn(leaf)``, or ``fn(path, leaf)`` when ``path`` is given.
        v: the value.
        is_leaf: optional predicate that stops the descent; without it every non-container
            value is a leaf.
        path: the path of ``v`` (turns on the two-argument form of ``fn``).
    """
    def rec(x, p):
        if (is_leaf is not None and is_leaf(x)) or not is_container(x):
            if is_leaf is not None and not is_leaf(x):
                return x
            return fn(x) if p is None else fn(p, x)
        sub = (lambda k: None) if p is None else (lambda k: f"{p}_{k}")
        if isinstance(x, dict):
            return type(x)((k, rec(c, sub(k))) for k, c in x.items())
        if isinstance(x, (list, tuple)):
            items = [rec(c, sub(k)) for k, c in enumerate(x)]
            if isinstance(x, list):
                return items
            return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
        return dataclasses.replace(x, **{f.name: rec(getattr(x, f.name), sub(f.name))
                                         for f in dataclasses.fields(x) if f.init})

    return rec(v, path)
