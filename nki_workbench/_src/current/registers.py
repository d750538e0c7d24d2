"""Registers and dynamic loops of NKI 0.2–0.6 (``register_*``, ``dynamic_range``, ``fori_loop``).

The workbench traces by running the kernel, and its IR has no data-dependent loop: a register
whose value is known while tracing (``register_alloc(5)``, ``register_move``) is a Python int
and loops over it unroll, exactly as ``range`` would; a register loaded from a tensor
(``register_load``) holds a run-time value, which is refused with a named ``NkiError``.
"""

from __future__ import annotations

from ..errors import NkiError, user_location

__all__ = ["VirtualRegister", "register_alloc", "register_move", "register_load",
           "register_store", "dynamic_range", "fori_loop", "while_loop"]

_RUNTIME = ("a register loaded from a tensor holds a run-time value; the workbench traces "
            "without one (data-dependent loops are not modelled)")


class VirtualRegister:
    """A scalar register whose value is known while tracing.

    Attributes:
        value: the register's int value (``None`` until written).
    """

    def __init__(self, value=None):
        self.value = None if value is None else _int(value, "register_alloc")

    def __int__(self):
        return self.__index__()

    def __index__(self):
        if self.value is None:
            raise NkiError("wb_unsupported", "a register is read before it was written",
                           user_location(), "write it with register_alloc(n) or register_move")
        return self.value

    def __bool__(self):
        return bool(self.__index__())

    def __repr__(self):
        return f"VirtualRegister({self.value})"


def _int(v, api) -> int:
    if isinstance(v, VirtualRegister):
        return int(v)
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise NkiError("wb_unsupported", f"nisa.{api}: {v!r} is not a compile-time int; "
                       + _RUNTIME, user_location())
    return int(v)


def register_alloc(x=None):
    """A new register, holding the immediate ``x`` when given."""
    return VirtualRegister(x)


def register_move(dst, src):
    """``dst = src`` (an int or another register)."""
    dst.value = _int(src, "register_move")


def register_load(dst, src):
    """Load one element of ``src`` into ``dst``: a run-time value, refused here."""
    raise NkiError("wb_unsupported", "nisa.register_load: " + _RUNTIME, user_location(),
                   "pass the trip count to the kernel as an int, or loop over its maximum "
                   "with masked tiles")


def register_store(dst, src):
    """Store register ``src`` into the 1-element tensor ``dst`` (a memset of its value)."""
    from . import isa_data
    isa_data.memset(dst=dst, value=_int(src, "register_store"))


def dynamic_range(start, stop=None, step=1):
    """NKI 0.2–0.6 on-device loop; with trace-time bounds, ``range(start, stop, step)``."""
    if stop is None:
        start, stop = 0, start
    return range(_int(start, "dynamic_range"), _int(stop, "dynamic_range"),
                 _int(step, "dynamic_range"))


def fori_loop(lower, upper, body_fun, step=1, **kwargs):
    """``for i in range(lower, upper, step): body_fun(i)`` (NKI 0.6)."""
    for i in dynamic_range(lower, upper, step):
        body_fun(i)


def while_loop(init, body_fun):
    """Run ``r = body_fun(r)`` while the register ``r`` is non-zero (NKI 0.6)."""
    r = init
    for _ in range(1 << 20):
        if not _int(r, "while_loop"):
            return
        r = body_fun(r)
    raise NkiError("wb_unsupported", "nl.while_loop did not end after 2**20 iterations",
                   user_location())
