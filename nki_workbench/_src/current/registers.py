"""Registers and dynamic loops of NKI 0.2–0.6 (``register_*``, ``dynamic_range``, ``fori_loop``).

A register whose value is known while tracing (``register_alloc(5)``, ``register_move``) is a
Python int and loops over it unroll, exactly as ``range`` would. A register loaded from a
tensor (``register_load``) holds a run-time value: it is backed by a one-element int32 SBUF
tile, every write to it is an instruction on that tile, and a loop whose bound or condition it
is becomes a ``dynamic`` IR loop (body traced once) whose iterations the executor decides when
it runs, by reading the tile (:meth:`~..ir.nodes.Loop.iterations`).
"""

from __future__ import annotations

from ..errors import NkiError, user_location
from ..trace import context as C
from .kernel import program_guarded

__all__ = ["VirtualRegister", "register_alloc", "register_move", "register_load",
           "register_store", "dynamic_range", "fori_loop", "while_loop"]

_RUNTIME = ("a register loaded from a tensor holds a run-time value, which the trace does not "
            "know")
_REG_DTYPE = "int32"


class VirtualRegister:
    """A scalar register: a trace-time int, or a run-time value held in a one-element tile.

    Attributes:
        value: the register's int value while it is known at trace time (``None`` otherwise).
        tile: the SBUF tile holding a run-time value (``None`` while the value is known).
        frozen: the induction variable of a dynamic loop (not writable, not an int).
    """

    def __init__(self, value=None, frozen=False):
        self.value = None if value is None else _int(value, "register_alloc")
        self.tile = None
        self.frozen = frozen
        ctx = C.current()
        self._home = None if ctx is None else (ctx, ctx.block, ctx.scope)  # its tile's place

    def __int__(self):
        return self.__index__()

    def __index__(self):
        if self.frozen:
            raise NkiError("wb_unsupported", "the induction variable of a dynamic loop is a "
                           "run-time register, not a Python int", user_location(),
                           "index with a tile advanced in the body (.ap(scalar_offset=))")
        if self.tile is not None:
            raise NkiError("wb_unsupported", f"a register used as a Python value: {_RUNTIME}",
                           user_location(), "loop on it with nl.dynamic_range / nl.fori_loop "
                           "/ nl.while_loop")
        if self.value is None:
            raise NkiError("wb_unsupported", "a register is read before it was written",
                           user_location(), "write it with register_alloc(n) or register_move")
        return self.value

    def __bool__(self):
        return bool(self.__index__())

    def __repr__(self):
        return f"VirtualRegister({'run-time' if self.tile is not None else self.value})"


def _int(v, api) -> int:
    if isinstance(v, VirtualRegister):
        return int(v)
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise NkiError("wb_unsupported", f"nisa.{api}: {v!r} is not an int or a register",
                       user_location())
    return int(v)


def _runtime(r) -> bool:
    return isinstance(r, VirtualRegister) and r.tile is not None


def _tile_of(reg: VirtualRegister):
    """The register's backing tile, allocated where the register was (so loops see it)."""
    if reg.frozen:
        raise NkiError(None, "the induction variable of a dynamic loop cannot be written",
                       user_location())
    if reg.tile is None:
        from . import language
        ctx = C.require("nisa.register_load")
        t = language.ndarray((1, 1), _REG_DTYPE, buffer=language._L.sbuf, name="reg")
        home = reg._home
        if home is not None and home[0] is ctx and ctx.block is not home[1] and \
                any(b is home[1] for b in ctx.blocks):
            # why: a register allocated outside a loop and first loaded inside it must keep
            # its value across iterations and after the loop; the enclosing block's end is
            # right before the open loop
            last = ctx.block[-1] if ctx.block else None
            if getattr(getattr(last, "decl", None), "name", None) == t.name:
                home[1].append(ctx.block.pop())
                t._scope = home[2]
        reg.tile, reg.value = t, None
    return reg.tile


def _copy(dst, src):
    """One-element copy between tiles/tensors (a DMA when the dtypes agree, else a cast)."""
    from . import isa_data
    if src.dtype == dst.dtype:
        isa_data.dma_copy(dst=dst, src=src)
    else:
        isa_data.tensor_copy(dst=dst, src=src)


def _one_element(t, api):
    shape = tuple(t.shape)
    n = 1
    for s in shape:
        n *= int(s)
    if n != 1:
        raise NkiError(None, f"nisa.{api}: the tensor has shape {list(shape)}; a register holds "
                       "one element ([1] or [1, 1])", user_location())
    return t if shape == (1, 1) else t.reshape((1, 1))


def register_alloc(x=None):
    """A new register, holding the immediate ``x`` when given."""
    return VirtualRegister(x)


def register_move(dst, src):
    """``dst = src`` (an int or another register)."""
    if _runtime(src):
        _copy(_tile_of(dst), src.tile)
    elif _runtime(dst):
        from . import isa_data
        isa_data.memset(dst=dst.tile, value=_int(src, "register_move"))
    else:
        if dst.frozen:
            _tile_of(dst)  # raises: the induction variable is read-only
        dst.value = _int(src, "register_move")


def register_load(dst, src):
    """Load the one element of ``src`` (HBM or SBUF, ``[1]`` or ``[1, 1]``) into ``dst``."""
    _copy(_tile_of(dst), _one_element(src, "register_load"))


def register_store(dst, src):
    """Store register ``src`` into the one-element tensor ``dst``."""
    if _runtime(src):
        _copy(_one_element(dst, "register_store"), src.tile)
        return
    from . import isa_data
    isa_data.memset(dst=dst, value=_int(src, "register_store"))


class _DynamicLoop:
    """A loop the executor runs as many times as a register says (body traced once)."""

    def __init__(self, attrs, start, step, api):
        self.attrs, self.start, self.step, self.api = attrs, start, step, api
        self.loc = user_location()
        core = program_guarded()
        if core is not None:
            # why: per-core tracing guards each instruction by pid0 == c; the loop of core c's
            # body must run on core c only (other cores never wrote its register)
            self.attrs = self.attrs + (("core", core),)

    def __iter__(self):
        ctx = C.require(self.api)
        r = range(self.start, self.start + 2 * self.step, self.step)
        var = ctx.open_loop("dynamic", r, tuple(sorted(self.attrs)), self.loc,
                            C.TraceContext.loop_var_name(), None)
        try:
            yield VirtualRegister(frozen=True)
        finally:
            if ctx.loops and ctx.loops[-1]["var"] == var:
                ctx.close_loop()


def dynamic_range(start, stop=None, step=1):
    """NKI 0.2–0.6 on-device loop ``range(start, stop, step)``.

    With trace-time bounds this is ``range``; a run-time ``stop`` register gives a dynamic
    loop (its induction variable is a frozen register, as in NKI 0.4+).
    """
    if stop is None:
        start, stop = 0, start
    if not _runtime(stop):
        return range(_int(start, "dynamic_range"), _int(stop, "dynamic_range"),
                     _int(step, "dynamic_range"))
    if _runtime(start) or _runtime(step):
        raise NkiError("wb_unsupported", "nl.dynamic_range: a run-time start or step register "
                       "is not modelled (only the stop may be read at run time)", user_location())
    step = _int(step, "dynamic_range")
    if step <= 0:
        raise NkiError(None, f"nl.dynamic_range: step must be a positive int, got {step}",
                       user_location())
    return _DynamicLoop((("bound", stop.tile.name),), _int(start, "dynamic_range"), step,
                        "nl.dynamic_range")


def fori_loop(lower, upper, body_fun, step=1, **kwargs):
    """``for i in range(lower, upper, step): body_fun(i)`` (NKI 0.6).

    A run-time register bound gives a dynamic loop, as :func:`dynamic_range`.
    """
    for i in dynamic_range(lower, upper, step):
        body_fun(i)


def while_loop(init, body_fun):
    """Run ``r = body_fun(r)`` while the register ``r`` is non-zero (NKI 0.6).

    Iterations whose condition is known at trace time are traced one by one; from the first
    run-time condition on, the rest is one dynamic loop that re-reads the register before each
    iteration.
    """
    r = init
    for _ in range(1 << 20):
        if _runtime(r):
            _while_dynamic(r, body_fun)
            return
        if not _int(r, "while_loop"):
            return
        r = body_fun(r)
    raise NkiError("wb_unsupported", "nl.while_loop did not end after 2**20 iterations",
                   user_location())


def _while_dynamic(reg, body_fun):
    for _ in _DynamicLoop((("cond", reg.tile.name),), 0, 1, "nl.while_loop"):
        nxt = body_fun(reg)
        if nxt is not reg:
            if not isinstance(nxt, VirtualRegister):
                raise NkiError(None, "nl.while_loop: body_fun must return the condition "
                               f"register, got {nxt!r}", user_location())
            register_move(reg, nxt)
