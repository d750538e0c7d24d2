"""The compiled program's results handed to the caller as writable numpy arrays, uncopied.

On CPU ``np.asarray`` of a JAX result is a read-only view of XLA's output buffer, so the run
path copied every output before returning it (``execution.package_outputs``): a 4 MiB copy
per 1024^2 float32 output, as long as the whole kernel on an element-wise one. A jitted
call's outputs are fresh buffers nothing else holds (XLA copies a parameter or constant that
a program returns; no input is donated), so :func:`host_results` hands each one over as a
writable array whose base (:class:`HostResult`) keeps the JAX result, and with it the buffer,
alive. An output that overlaps an argument or another output keeps the read-only view (and is
copied where it is handed out).

This module imports no JAX: ``execution`` asks :func:`handed` without paying for it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HostResult", "host_results", "handed"]


class HostResult:
    """A writable array interface over one JAX result's buffer; holds the result alive."""

    __slots__ = ("__array_interface__", "result")

    def __init__(self, result, view: np.ndarray):
        self.result = result
        face = dict(view.__array_interface__)
        face["data"] = (face["data"][0], False)
        self.__array_interface__ = face


def handed(x) -> bool:
    """Whether ``x`` is an array :func:`host_results` handed over (its buffer is its own)."""
    base = x.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, HostResult)


def host_results(outs, args) -> list:
    """The numpy arrays of the jitted call's results ``outs`` (CPU), writable where safe.

    Args:
        outs: the call's output ``jax.Array`` s.
        args: the call's host arguments (the inputs' windows): an output that overlaps one
            stays a read-only view.

    Returns:
        list: one numpy array per output, in order.
    """
    res, mine = [], []
    for o in outs:
        v = np.asarray(o)  # why: waits for the program; on CPU a view of XLA's buffer
        if v.size and not v.flags.owndata and v.flags.c_contiguous and not any(
                np.may_share_memory(v, a) for a in (*args, *mine)):
            w = np.asarray(HostResult(o, v))
            if w.dtype != v.dtype:  # why: the interface spells bf16 / fp8 as raw bytes
                w = w.view(v.dtype)
            mine.append(v)
            v = w
        res.append(v)
    return res
