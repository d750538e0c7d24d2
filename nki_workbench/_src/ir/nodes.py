"""IR node types: a kernel is declarations plus a tree of loops and instructions.

The tracer builds these; the printer/parser serialise them; the simulator, encoder, cost
model and widgets read them. Every node is a frozen dataclass, so IRs compare and hash
structurally (``parse(print(ir)) == ir``) and can be used as cache keys.

Conventions:

* Tensors are referred to by name. A :class:`TensorDecl` is introduced by ``Kernel.params`` (kernel
  arguments living in HBM) or by an :class:`Alloc` statement at the scope that creates it (a tile
  created in a loop body is a fresh tile in every iteration).
* An :class:`Access` reads or writes part of a tensor: one index expression per tensor dimension,
  whose iotas span the access grid (``index=None`` is the whole tensor).
* An :class:`Inst` has output accesses, input operands (accesses, scalars or index expressions),
  a sorted tuple of attributes, an optional mask predicate over the instruction's grid, and the
  kernel source line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import NkiError
from . import expr as E

__all__ = ["TensorDecl", "Access", "Scalar", "Inst", "Loop", "Alloc", "Kernel", "Stmt",
           "LOOP_KINDS", "MAX_DYNAMIC_ITERATIONS", "BUFFERS", "TENSOR_KINDS", "walk_insts",
           "walk_stmts"]

LOOP_KINDS = ("affine", "sequential", "dynamic")
MAX_DYNAMIC_ITERATIONS = 1 << 20  # why: a register that never reaches 0 must not hang the run
BUFFERS = ("hbm", "shared_hbm", "sbuf", "psum")  # "hbm" is NKI's private_hbm
TENSOR_KINDS = ("input", "output", "inout", "local", "const")


@dataclass(frozen=True, slots=True)
class TensorDecl:
    """A tensor: name, shape, NKI dtype name, buffer and role.

    Attributes:
        name: unique identifier in the kernel.
        shape: dimensions (block dims first, then the partition dim ``par_dim``, then free dims).
        dtype: NKI dtype name (``"bfloat16"``, ``"float32"``...).
        buffer: one of :data:`BUFFERS`.
        kind: one of :data:`TENSOR_KINDS`.
        par_dim: index of the partition dimension in ``shape``.
        init: fill value for ``nl.zeros/ones/full`` (``None`` = uninitialised).
        base: for a view, the name of the tensor it views.
        view: how it views it (``reshape`` or ``bitcast``).
        data: for constants, ``(dtype_name, base64 bytes)`` of the raw little-endian data.
        alloc: direct-allocation spec (``(kind, args...)``) or ``None`` for automatic allocation.
        loc: ``file:line`` of the creating kernel line.
    """

    name: str
    shape: tuple
    dtype: str
    buffer: str
    kind: str = "local"
    par_dim: int = 0
    init: object = None
    base: str | None = None
    view: str | None = None
    data: str | None = None
    alloc: tuple | None = None
    loc: str | None = None


@dataclass(frozen=True, slots=True)
class Access:
    """``tensor[index]``: per-dimension index expressions (``None`` = the whole tensor)."""

    tensor: str
    index: tuple | None = None
    shape: tuple | None = None  # set only when it differs from the index grid (unit axes, views)

    def grid(self, decl: TensorDecl) -> tuple:
        """Shape of the accessed grid (the value's shape)."""
        if self.shape is not None:
            return tuple(self.shape)
        if self.index is None:
            return tuple(decl.shape)
        return E.grid_shape(self.index)


@dataclass(frozen=True, slots=True)
class Scalar:
    """A compile-time scalar operand (Python float/int/bool), with optional NKI dtype name."""

    value: object
    dtype: str | None = None


Operand = Access | Scalar | E.Affine | E.Pred


@dataclass(frozen=True, slots=True)
class Inst:
    """One instruction: ``outs = op(ins, **attrs)`` under ``mask``, traced from ``loc``."""

    op: str
    outs: tuple
    ins: tuple
    attrs: tuple = ()
    mask: E.Pred | None = None
    loc: str | None = None

    def attr(self, key: str, default=None):
        """Value of attribute ``key`` (attributes are a sorted tuple of pairs)."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class Alloc:
    """Declare a tensor at this point of the program (re-created each time control passes)."""

    decl: TensorDecl


@dataclass(frozen=True, slots=True)
class Loop:
    """``for var in <kind>_range(start, stop, step): body`` kept as a loop (never unrolled).

    A ``dynamic`` loop (today's ``nl.dynamic_range`` / ``fori_loop`` / ``while_loop`` over a
    register loaded from a tensor) has its iterations decided at run time by the int value of
    a one-element tensor, the register: attribute ``bound`` names it for
    ``range(start, value, step)`` (read once, at entry), ``cond`` for "while value != 0" (read
    before each iteration). Its static ``stop`` is then ``start + 2 * step``: analyses that
    do not execute see a body that repeats; executors call :meth:`iterations`.
    """

    var: str
    start: int
    stop: int
    step: int
    kind: str
    body: tuple
    loc: str | None = None
    attrs: tuple = ()

    @property
    def trip_count(self) -> int:
        """Number of iterations."""
        return len(range(self.start, self.stop, self.step))

    def iterations(self, read):
        """The loop variable's values; ``read(tensor_name)`` gives a register's run-time int.

        Raises:
            NkiError: a ``cond`` loop past :data:`MAX_DYNAMIC_ITERATIONS`.
        """
        at = dict(self.attrs)
        if self.kind != "dynamic":
            return range(self.start, self.stop, self.step)
        if "bound" in at:
            return range(self.start, read(at["bound"]), self.step)
        return self._while(read, at["cond"])

    def _while(self, read, cond):
        v = self.start
        for _ in range(MAX_DYNAMIC_ITERATIONS):
            if not read(cond):
                return
            yield v
            v += self.step
        raise NkiError(None, f"a while loop on register '{cond}' did not end after "
                       f"{MAX_DYNAMIC_ITERATIONS} iterations", self.loc,
                       "the body must load a zero into the register to stop")


Stmt = Inst | Loop | Alloc


@dataclass(frozen=True, slots=True)
class Kernel:
    """A traced kernel.

    Attributes:
        name: the kernel function's name.
        params: tensor arguments (HBM), in flattened argument order.
        body: statements.
        outputs: names of output tensors in return order (new convention) or of written
            parameters (legacy convention).
        grid: SPMD launch grid (``()`` = a single instance).
        target: ``"trn1"``, ``"trn2"``...
        attrs: other kernel-level facts as sorted ``(key, value)`` pairs (e.g. return structure).
    """

    name: str
    params: tuple
    body: tuple
    outputs: tuple
    grid: tuple = ()
    target: str = "trn1"
    attrs: tuple = field(default=())

    def attr(self, key: str, default=None):
        """Value of kernel attribute ``key``."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def result_shapes(self) -> tuple:
        """The shape the caller gets for each output (a returned reshape view keeps its shape).

        ``outputs`` name the tensors the executors fill; the ``output_shapes`` attribute (set
        only when a kernel returns ``t.reshape(...)`` of an output) gives the returned shapes.
        """
        shapes = self.attr("output_shapes")
        if shapes is not None:
            return tuple(tuple(s) for s in shapes)
        decls = self.decls()
        return tuple(tuple(decls[n].shape) for n in self.outputs)

    def decls(self) -> dict:
        """All tensor declarations by name (params and allocs at any depth)."""
        out = {d.name: d for d in self.params}
        for s in walk_stmts(self.body):
            if isinstance(s, Alloc):
                out[s.decl.name] = s.decl
        return out

    def replace(self, **kw) -> Kernel:
        """A copy with fields replaced."""
        return replace(self, **kw)


def walk_stmts(body):
    """Yield every statement, depth first, in program order."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from walk_stmts(s.body)


def walk_insts(body):
    """Yield every instruction in program order."""
    for s in walk_stmts(body):
        if isinstance(s, Inst):
            yield s
