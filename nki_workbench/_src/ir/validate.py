"""IR validation: one rule per node type, run before anything executes a kernel's IR.

A traced kernel is valid by construction; IR text from elsewhere (a backend_config, a file, a
hand edit) may not be. :func:`validate` checks the structural facts every executor, cost model
and encoder relies on and raises :class:`InvalidIRError` (``NkiError`` with the code
``wb_invalid_ir``) naming the offending instruction and its line in the printed IR:

* every tensor an access, a view or an indirect index names is declared earlier in the program;
* an access has one index expression per dimension of its tensor, and its grid broadcasts;
* every opcode is in the opcode table, with only the attributes its front end emits
  (:data:`ATTRIBUTES`), each of the type :data:`ATTR_TYPES` gives it;
* dtype names are NKI's canonical names; buffers, tensor kinds, loop kinds and engines are known;
* shapes are tuples of positive integers; loop bounds are integers with a non-zero step;
* every variable in an index, a mask or a predicate operand is bound by an enclosing loop or is
  a program id of the launch grid.

The rules live in :data:`RULES`, keyed by node class. The opcode table is
:data:`~.opcodes.OPCODES` unless the caller passes one; the ``nki.isa`` and collective opcodes
register there when their packages are imported (importing ``nki_workbench`` does it), so
validate after that.

:mod:`.budget` is the second gate for IR that is about to run (a static work estimate).

Setting the environment variable ``NKI_WORKBENCH_VALIDATE_IR=1`` also validates every kernel
right after it is traced (:func:`validate_traces_enabled`) — a debugging aid for front-end work.
"""

from __future__ import annotations

import base64
import binascii
import math
import numbers
import os

from .. import dtypes as D
from ..errors import NkiError
from ..hw.targets import TARGETS
from . import expr as E
from .attr_table import ATTR_TYPES, ATTRIBUTES, COMMON, KERNEL_ATTRS, LOOP_ATTRS
from .nodes import (
    BUFFERS,
    LOOP_KINDS,
    TENSOR_KINDS,
    Access,
    Alloc,
    Inst,
    Kernel,
    Loop,
    Scalar,
    TensorDecl,
)
from .opcodes import ENGINES, OPCODES
from .printer import format_decl, format_inst

__all__ = ["InvalidIRError", "validate", "ATTRIBUTES", "ATTR_TYPES", "KERNEL_ATTRS",
           "LOOP_ATTRS", "RULES", "MAX_RANK", "printed_lines", "VALIDATE_ENV",
           "validate_traces_enabled", "CODE"]

CODE = "wb_invalid_ir"
VALIDATE_ENV = "NKI_WORKBENCH_VALIDATE_IR"


class InvalidIRError(NkiError):
    """The IR breaks a structural rule (code ``wb_invalid_ir``).

    Attributes:
        line: the line of the offending node in the printed IR (``None`` when unknown).
        inst: the offending instruction (or statement) as IR text, ``None`` for kernel-level
            problems.
    """

    def __init__(self, message: str, line: int | None = None, inst: str | None = None,
                 loc: str | None = None):
        self.line = line
        self.inst = inst
        where = f"IR line {line}" if line is not None else "IR"
        what = f": '{_clip(inst)}'" if inst else ""
        super().__init__(CODE, f"invalid IR at {where}{what}: {message}", loc,
                         "the IR text was edited or produced by another tool; re-trace the kernel")


def _clip(text: str, n: int = 160) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


_RETURNS = ("none", "single", "tuple", "list")
MAX_RANK = 8
"""Most dimensions a tensor or an index grid may have (NKI tiles have at most a few)."""
MAX_DIM = 1 << 31
"""Largest size of one dimension (of a tensor, an index grid or an access)."""


# ----------------------------------------------------------------------------- the walk
class _Scope:
    """What is known at a point of the program: declarations so far and the bound variables."""

    def __init__(self, kernel: Kernel, opcodes, lines):
        self.kernel = kernel
        self.opcodes = OPCODES if opcodes is None else opcodes
        self.lines = lines
        self.decls: dict = {}
        self.bound: set = {f"pid{d}" for d in range(len(kernel.grid))}
        self.node = None  # the statement being checked (for messages)

    def fail(self, message: str, node=None):
        node = self.node if node is None else node
        raise InvalidIRError(message, self.lines.get(id(node)), _text(node),
                             getattr(node, "loc", None) or
                             getattr(getattr(node, "decl", None), "loc", None))


def _text(node) -> str | None:
    try:
        if isinstance(node, Inst):
            return format_inst(node)
        if isinstance(node, Alloc):
            return "alloc " + format_decl(node.decl)
        if isinstance(node, TensorDecl):
            return "param " + format_decl(node)
        if isinstance(node, Loop):
            return f"for {node.var} in {node.kind}_range({node.start}, {node.stop}, {node.step})"
    except Exception:  # noqa: BLE001  why: a node too broken to print is still reported
        return f"{type(node).__name__}(...)"
    return None


def _positive_ints(v) -> bool:
    return isinstance(v, tuple) and all(type(x) is int and 0 < x <= MAX_DIM for x in v)


def _is_int(v) -> bool:
    return type(v) is int


def _name(v) -> bool:
    return isinstance(v, str) and v.isidentifier()


# ----------------------------------------------------------------------------- expression rules
def _check_atom(sc: _Scope, a, where: str):
    if isinstance(a, E.Var):
        if a.name not in sc.bound:
            sc.fail(f"{where} uses variable '{a.name}', which no enclosing loop binds (bound: "
                    f"{', '.join(sorted(sc.bound)) or 'none'})")
    elif isinstance(a, E.Iota):
        if not (_is_int(a.size) and _is_int(a.axis) and _is_int(a.ndim)
                and 0 < a.size <= MAX_DIM and 0 <= a.axis < a.ndim <= MAX_RANK):
            sc.fail(f"{where} has a malformed index grid {E.to_str(a)}")
    elif isinstance(a, E.Fn):
        if a.op not in E._FNS or len(a.args) != 2:
            sc.fail(f"{where} uses an unknown index function '{a.op}'")
        for x in a.args:
            _check_expr(sc, x, where)
    elif isinstance(a, E.Dyn):
        decl = sc.decls.get(a.tensor)
        if decl is None:
            sc.fail(f"{where} reads run-time indices from undeclared tensor '{a.tensor}'")
        _check_index(sc, a.tensor, decl, a.index, where)
        if not _positive_ints(a.shape) or len(a.shape) > MAX_RANK:
            sc.fail(f"{where}: indirect index shape {a.shape!r} is not positive integers")
    else:
        sc.fail(f"{where} holds {type(a).__name__}, not an index atom")


def _check_expr(sc: _Scope, e, where: str, pred: bool = False):
    if isinstance(e, E.Pred):
        if not pred:
            sc.fail(f"{where} uses a comparison where an integer index is expected")
        if e.op in ("and", "or", "not"):
            if len(e.args) != (1 if e.op == "not" else 2):
                sc.fail(f"{where}: '{e.op}' takes {1 if e.op == 'not' else 2} operands")
            for x in e.args:
                _check_expr(sc, x, where, pred=True)
        elif e.op in E._CMP and len(e.args) == 2:
            for x in e.args:
                _check_expr(sc, x, where)
        else:
            sc.fail(f"{where} has an unknown predicate '{e.op}'")
    elif isinstance(e, E.Affine):
        if not _is_int(e.const):
            sc.fail(f"{where} has a non-integer constant {e.const!r}")
        for term in e.terms:
            if not (isinstance(term, tuple) and len(term) == 2 and _is_int(term[1])):
                sc.fail(f"{where} has a malformed affine term {term!r}")
            _check_atom(sc, term[0], where)
    else:
        sc.fail(f"{where} holds {type(e).__name__}, not an index expression")


def _check_index(sc: _Scope, name: str, decl, index, where: str):
    if index is None:
        return
    if not isinstance(index, tuple):
        sc.fail(f"{where}: the index of '{name}' is not a tuple")
    if len(index) != len(decl.shape):
        sc.fail(f"{where} indexes '{name}' with {len(index)} expression(s), but '{name}' has "
                f"rank {len(decl.shape)} (shape {list(decl.shape)})")
    for e in index:
        _check_expr(sc, e, where)


# ----------------------------------------------------------------------------- node rules
def _check_access(sc: _Scope, a: Access, where: str):
    decl = sc.decls.get(a.tensor) if isinstance(a.tensor, str) else None
    if decl is None:
        sc.fail(f"{where} names tensor '{a.tensor}', which is not declared before this point")
    _check_index(sc, a.tensor, decl, a.index, where)
    if a.shape is not None and (not _positive_ints(a.shape) or len(a.shape) > MAX_RANK):
        sc.fail(f"{where}: access shape {a.shape!r} is not a tuple of positive integers")
    grid = decl.shape if a.index is None else _check_grid(sc, a.index, where)
    if a.shape is not None and math.prod(a.shape) != math.prod(grid):
        # why: a shape override only re-labels the accessed elements (unit axes, views)
        sc.fail(f"{where}: access shape {a.shape!r} of '{a.tensor}' does not hold the "
                f"{math.prod(grid)} elements its index selects")


def _check_grid(sc: _Scope, exprs, where: str) -> tuple:
    # why: executors build these grids; they must broadcast and stay within MAX_DIM per axis
    try:
        grid = E.grid_shape(exprs)
    except ValueError:
        sc.fail(f"{where}: its index grids do not broadcast together")
    if not _positive_ints(tuple(grid)) and grid != ():
        sc.fail(f"{where}: index grid {grid!r} is too large")
    return grid


def _check_scalar(sc: _Scope, s: Scalar, where: str):
    if not isinstance(s.value, numbers.Real):
        sc.fail(f"{where}: scalar operand {s.value!r} is not a number")
    if s.dtype is not None and s.dtype not in D.DTYPE_NAMES:
        sc.fail(f"{where}: unknown dtype '{s.dtype}' (expected one of "
                f"{', '.join(D.DTYPE_NAMES)})")


def _check_operand(sc: _Scope, op, where: str):
    rule = _OPERAND_RULES.get(type(op))
    if rule is None:
        sc.fail(f"{where} is a {type(op).__name__}, not an IR operand")
    rule(sc, op, where)


_OPERAND_RULES = {
    Access: _check_access,
    Scalar: _check_scalar,
    E.Affine: lambda sc, e, where: _check_expr(sc, e, where),
    E.Pred: lambda sc, e, where: _check_expr(sc, e, where, pred=True),
}


def _check_attr_value(sc: _Scope, key: str, v):
    types = ATTR_TYPES.get(key)
    if types is not None and not (isinstance(v, types) and not (
            isinstance(v, bool) and bool not in types)):
        names = " or ".join("None" if t is type(None) else t.__name__ for t in types)
        sc.fail(f"attribute '{key}' must be {names}, got {v!r}")
    if key == "dtype" and v not in D.DTYPE_NAMES:
        sc.fail(f"unknown dtype '{v}' (expected one of {', '.join(D.DTYPE_NAMES)})")
    if key == "dtypes" and not all(x in D.DTYPE_NAMES for x in v):
        sc.fail(f"attribute 'dtypes' holds an unknown dtype name: {v!r}")
    if key == "engine" and v not in ENGINES:
        sc.fail(f"unknown engine '{v}' (expected one of {', '.join(ENGINES)})")
    if isinstance(v, (E.Affine, E.Pred)):
        _check_expr(sc, v, f"attribute '{key}'", pred=True)


def _check_inst(sc: _Scope, s: Inst):
    if not isinstance(s.op, str) or s.op not in sc.opcodes:
        sc.fail(f"unknown opcode '{s.op}'")
    known = ATTRIBUTES.get(s.op, frozenset(COMMON))
    for item in s.attrs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            sc.fail(f"malformed attribute {item!r}")
        key, v = item
        if key not in known:
            sc.fail(f"opcode '{s.op}' has no attribute '{key}' (known: "
                    f"{', '.join(sorted(known))})")
        _check_attr_value(sc, key, v)
    if len({k for k, _ in s.attrs}) != len(s.attrs):
        sc.fail("an attribute is given twice")
    for k, o in enumerate(s.outs):
        if not isinstance(o, Access):
            sc.fail(f"output {k} is a {type(o).__name__}, not a tensor access")
        _check_access(sc, o, f"output {k}")
    for k, o in enumerate(s.ins):
        _check_operand(sc, o, f"operand {k}")
    if s.mask is not None:
        if not isinstance(s.mask, E.Pred):
            sc.fail("the mask is not a predicate")
        _check_expr(sc, s.mask, "the mask", pred=True)
    for k, e in [(f"operand {k}", o) for k, o in enumerate(s.ins)
                 if isinstance(o, (E.Affine, E.Pred))] + [("the mask", s.mask)]:
        if e is not None:
            _check_grid(sc, [e], k)


def _check_decl(sc: _Scope, d: TensorDecl):
    if not _name(d.name):
        sc.fail(f"tensor name {d.name!r} is not an identifier")
    if d.name in sc.decls:
        sc.fail(f"tensor '{d.name}' is declared twice")
    if not _positive_ints(d.shape) or len(d.shape) > MAX_RANK:
        sc.fail(f"shape {d.shape!r} of '{d.name}' is not a tuple of at most {MAX_RANK} "
                "positive integers")
    if d.dtype not in D.DTYPE_NAMES:
        sc.fail(f"unknown dtype '{d.dtype}' of '{d.name}' (expected one of "
                f"{', '.join(D.DTYPE_NAMES)})")
    if d.buffer not in BUFFERS:
        sc.fail(f"unknown buffer '{d.buffer}' of '{d.name}' (expected {', '.join(BUFFERS)})")
    if d.kind not in TENSOR_KINDS:
        sc.fail(f"unknown tensor kind '{d.kind}' of '{d.name}' (expected "
                f"{', '.join(TENSOR_KINDS)})")
    if not (_is_int(d.par_dim) and 0 <= d.par_dim < max(1, len(d.shape))):
        sc.fail(f"par_dim {d.par_dim!r} of '{d.name}' is outside its rank {len(d.shape)}")
    _check_fits(sc, d)
    if d.init is not None and not isinstance(d.init, numbers.Real):
        sc.fail(f"init {d.init!r} of '{d.name}' is not a number")
    _check_view(sc, d)
    if d.kind == "const":
        _check_const(sc, d)
    if d.alloc is not None and not (isinstance(d.alloc, tuple) and d.alloc
                                    and isinstance(d.alloc[0], str)):
        sc.fail(f"alloc {d.alloc!r} of '{d.name}' is not an allocation spec")


def _check_fits(sc: _Scope, d: TensorDecl):
    # why: the tracer refuses on-chip tiles over the partition count or the per-partition
    # capacity of the target; IR holding one was not traced (and would allocate without bound)
    if d.buffer not in ("sbuf", "psum") or not d.shape:
        return
    tgt = TARGETS[sc.kernel.target]
    if d.shape[d.par_dim] > tgt.pmax:
        sc.fail(f"'{d.name}' spans {d.shape[d.par_dim]} partitions, more than the {tgt.pmax} "
                f"of {tgt.name}")
    free = math.prod(d.shape[d.par_dim + 1:]) * D.itemsize(D.from_name(d.dtype))
    limit = tgt.psum_bank_bytes if d.buffer == "psum" else tgt.total_available_sbuf_size
    if free > limit:
        sc.fail(f"{d.buffer} tensor '{d.name}' needs {free} bytes per partition, more than the "
                f"{limit} of {tgt.name}")


def _check_const(sc: _Scope, d: TensorDecl):
    # why: the executors reshape the decoded bytes to the declared shape
    try:
        raw = base64.b64decode(d.data, validate=True) if isinstance(d.data, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None:
        sc.fail(f"constant '{d.name}' needs data= base64 text of its values")
    want = math.prod(d.shape) * D.storage_dtype(D.from_name(d.dtype)).itemsize
    if len(raw) != want:
        sc.fail(f"constant '{d.name}' holds {len(raw)} bytes of data; its shape "
                f"{list(d.shape)} and dtype {d.dtype} need {want}")


def _check_view(sc: _Scope, d: TensorDecl):
    if d.base is None and d.view is None:
        return
    base = sc.decls.get(d.base) if isinstance(d.base, str) else None
    if base is None:
        sc.fail(f"'{d.name}' views undeclared tensor '{d.base}'")
    if d.view not in ("reshape", "bitcast"):
        sc.fail(f"unknown view '{d.view}' of '{d.name}' (expected reshape or bitcast)")
    size = math.prod(d.shape) * (D.itemsize(D.from_name(d.dtype)) if d.view == "bitcast" else 1)
    bsize = math.prod(base.shape) * (D.itemsize(D.from_name(base.dtype))
                                     if d.view == "bitcast" else 1)
    if size != bsize:
        sc.fail(f"{d.view} view '{d.name}' of shape {list(d.shape)} does not cover "
                f"'{base.name}' of shape {list(base.shape)}")


def _rule_alloc(sc: _Scope, s: Alloc):
    if not isinstance(s.decl, TensorDecl):
        sc.fail("alloc without a tensor declaration")
    _check_decl(sc, s.decl)
    sc.decls[s.decl.name] = s.decl


def _rule_loop(sc: _Scope, s: Loop):
    if not _name(s.var):
        sc.fail(f"loop variable {s.var!r} is not an identifier")
    if s.var in sc.bound:
        sc.fail(f"loop variable '{s.var}' is already bound by an enclosing loop or the grid")
    if not (_is_int(s.start) and _is_int(s.stop) and _is_int(s.step)) or s.step == 0:
        sc.fail("loop bounds must be integers with a non-zero step")
    if s.kind not in LOOP_KINDS:
        sc.fail(f"unknown loop kind '{s.kind}' (expected {', '.join(LOOP_KINDS)})")
    for item in s.attrs:
        if not (isinstance(item, tuple) and len(item) == 2 and item[0] in LOOP_ATTRS):
            sc.fail(f"unknown loop attribute {item!r} (known: {', '.join(sorted(LOOP_ATTRS))})")
    if not isinstance(s.body, tuple):
        sc.fail("loop body is not a tuple of statements")
    _check_dynamic(sc, s)
    sc.bound.add(s.var)
    try:
        _walk(sc, s.body)
    finally:
        sc.bound.discard(s.var)


def _check_dynamic(sc: _Scope, s: Loop):
    """A dynamic loop names one register: a declared one-element tensor (``bound``/``cond``)."""
    regs = [v for k, v in s.attrs if k in ("bound", "cond")]
    if s.kind != "dynamic":
        if regs:
            sc.fail(f"loop attribute bound/cond on a {s.kind} loop (only dynamic loops have one)")
        return
    if len(regs) != 1:
        sc.fail("a dynamic loop needs exactly one of the attributes bound= or cond=")
    decl = sc.decls.get(regs[0]) if isinstance(regs[0], str) else None
    if decl is None:
        sc.fail(f"dynamic loop register {regs[0]!r} is not a declared tensor")
    elif math.prod(decl.shape) != 1:
        sc.fail(f"dynamic loop register '{decl.name}' has shape {decl.shape}, not one element")


RULES = {Inst: lambda sc, s: _check_inst(sc, s), Alloc: _rule_alloc, Loop: _rule_loop}
"""Statement class -> its rule ``(scope, node)``; operands go through ``_OPERAND_RULES``."""


def _walk(sc: _Scope, body):
    for s in body:
        rule = RULES.get(type(s))
        sc.node = s
        if rule is None:
            sc.fail(f"{type(s).__name__} is not an IR statement")
        rule(sc, s)


def _check_kernel(sc: _Scope, k: Kernel):
    if not _name(k.name):
        sc.fail(f"kernel name {k.name!r} is not an identifier")
    if not _positive_ints(k.grid):
        sc.fail(f"launch grid {k.grid!r} is not a tuple of positive integers")
    if k.target not in TARGETS:
        sc.fail(f"unknown target '{k.target}' (expected one of {', '.join(TARGETS)})")
    if not (isinstance(k.outputs, tuple) and all(isinstance(n, str) for n in k.outputs)):
        sc.fail(f"the kernel's outputs {k.outputs!r} are not tensor names")
    for item in k.attrs:
        if not (isinstance(item, tuple) and len(item) == 2 and item[0] in KERNEL_ATTRS):
            sc.fail(f"unknown kernel attribute {item!r} (known: "
                    f"{', '.join(sorted(KERNEL_ATTRS))})")
    if k.attr("returns", "single") not in _RETURNS:
        sc.fail(f"kernel attribute returns={k.attr('returns')!r} is not one of "
                f"{', '.join(_RETURNS)}")
    for p in k.params:
        sc.node = p
        if not isinstance(p, TensorDecl):
            sc.fail("a kernel parameter is not a tensor declaration")
        _check_decl(sc, p)
        if p.buffer not in ("hbm", "shared_hbm"):
            sc.fail(f"parameter '{p.name}' must live in HBM, not '{p.buffer}'")
        sc.decls[p.name] = p
    _walk(sc, k.body)
    sc.node = k
    declared = k.decls() if all(isinstance(s, (Inst, Loop, Alloc)) for s in k.body) else {}
    for name in k.outputs:
        if name not in declared:
            sc.fail(f"the kernel returns '{name}', which is not a declared tensor")
    shapes = k.attr("output_shapes")
    if shapes is not None:
        if not (isinstance(shapes, tuple) and len(shapes) == len(k.outputs)
                and all(isinstance(s, tuple) and _positive_ints(s) for s in shapes)):
            sc.fail(f"kernel attribute output_shapes={shapes!r} is not one shape per output")
        for name, shape in zip(k.outputs, shapes or (), strict=False):
            d = declared.get(name)
            if d is not None and math.prod(shape) != math.prod(d.shape):
                sc.fail(f"output '{name}' {list(d.shape)} is returned as {list(shape)}, "
                        "which has a different element count")


def validate(kernel: Kernel, *, opcodes: dict | None = None, lines: dict | None = None) -> Kernel:
    """Check ``kernel`` against the IR rules; return it unchanged when it is valid.

    Args:
        kernel: the IR.
        opcodes: the opcode table (default :data:`~.opcodes.OPCODES`, which must be complete:
            import ``nki_workbench`` first).
        lines: ``id(node) -> line`` in the IR text the kernel was parsed from (default: the line
            each node has in ``print_kernel(kernel)``).

    Returns:
        ``kernel``.

    Raises:
        InvalidIRError: ``NkiError`` with code ``wb_invalid_ir`` naming the first bad node and
            its IR line.
    """
    if not isinstance(kernel, Kernel):
        raise InvalidIRError(f"expected a Kernel, got {type(kernel).__name__}")
    sc = _Scope(kernel, opcodes, printed_lines(kernel) if lines is None else lines)
    try:
        _check_kernel(sc, kernel)
    except InvalidIRError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError,
            RecursionError) as exc:
        # why: a node of the wrong type deep inside still gets a located wb_invalid_ir
        sc.fail(f"malformed node ({type(exc).__name__}: {exc})")
    return kernel


def printed_lines(kernel: Kernel) -> dict:
    """``id(node) -> line number`` of every parameter and statement in ``print_kernel(kernel)``."""
    out = {}
    line = 1
    for p in kernel.params:
        line += 1
        out[id(p)] = line

    def body(stmts):
        nonlocal line
        if not stmts:
            line += 1  # the printer writes "pass"
        for s in stmts:
            line += 1
            out[id(s)] = line
            if isinstance(s, Loop) and isinstance(s.body, tuple):
                body(s.body)
    body(kernel.body if isinstance(kernel.body, tuple) else ())
    return out


def validate_traces_enabled() -> bool:
    """Whether ``NKI_WORKBENCH_VALIDATE_IR`` asks to validate every traced kernel."""
    return os.environ.get(VALIDATE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
