"""A small typed builder of XLA ``HloModule`` text (the role torch-neuronx's ``scribe`` plays).

The PyTorch bridge needs exactly one kind of module: parameters feeding one ``custom-call``
whose result is either one array or a tuple of arrays (then unpacked with
``get-tuple-element`` and re-packed by a ``tuple`` ROOT). The builder checks what XLA's text
parser does not: names are unique, operands belong to the computation, and every
``output_to_operand_aliasing`` pair has identical shapes on both sides.

Example:
    >>> b = HloBuilder("add")
    >>> x = b.parameter(ArrayShape("f32", (128, 512)))
    >>> y = b.parameter(ArrayShape("f32", (128, 512)))
    >>> cc = b.custom_call("AwsNeuronNkiKernel", [x, y], ArrayShape("f32", (128, 512)),
    ...                    backend_config="e30=", output_to_operand_aliasing={(): (1, ())})
    >>> text = b.build(cc).text

The text follows XLA's HLO text grammar (``HloModule name, entry_computation_layout=...``,
then ``ENTRY main { ... ROOT ... }``); layouts are row-major (``{n-1,...,0}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["ELEMENT_TYPES", "ArrayShape", "TupleShape", "Instruction", "HloBuilder",
           "HloModule", "HloBuildError"]

ELEMENT_TYPES = ("pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16",
                 "f32", "f64", "c64", "c128", "f8e4m3", "f8e4m3fn", "f8e5m2")
"""XLA primitive types this builder writes (the HLO text spelling)."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class HloBuildError(ValueError):
    """A module that XLA would reject (or, for aliases, silently mis-handle)."""


@dataclass(frozen=True)
class ArrayShape:
    """A dense array shape: element type and dimensions, row-major layout.

    Attributes:
        element_type: one of :data:`ELEMENT_TYPES` (``"f32"``, ``"bf16"``, ``"pred"``...).
        dims: dimension sizes (``()`` for a scalar).
    """

    element_type: str
    dims: tuple = ()

    def __post_init__(self):
        if self.element_type not in ELEMENT_TYPES:
            raise HloBuildError(f"unknown XLA element type {self.element_type!r}; one of "
                                f"{', '.join(ELEMENT_TYPES)}")
        dims = tuple(self.dims)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise HloBuildError(f"array dimensions must be non-negative ints, got {dims!r}")
        object.__setattr__(self, "dims", dims)

    @property
    def text(self) -> str:
        """``f32[128,512]{1,0}`` (scalars: ``f32[]``)."""
        layout = "{" + ",".join(str(i) for i in reversed(range(len(self.dims)))) + "}"
        return f"{self.element_type}[{','.join(map(str, self.dims))}]" + (
            layout if self.dims else "")

    def at(self, index: tuple) -> ArrayShape:
        """The sub-shape at a shape index (only ``()`` for an array)."""
        if index:
            raise HloBuildError(f"shape index {list(index)} does not exist in array shape "
                                f"{self.text}")
        return self


@dataclass(frozen=True)
class TupleShape:
    """A tuple of array shapes (one level deep: what a multi-result custom call returns)."""

    elements: tuple

    def __post_init__(self):
        elems = tuple(self.elements)
        if not all(isinstance(e, ArrayShape) for e in elems):
            raise HloBuildError("tuple elements must be ArrayShapes")
        object.__setattr__(self, "elements", elems)

    @property
    def text(self) -> str:
        """``(f32[4]{0}, s32[2,2]{1,0})``."""
        return "(" + ", ".join(e.text for e in self.elements) + ")"

    def at(self, index: tuple) -> ArrayShape | TupleShape:
        """The sub-shape at a shape index such as ``(1,)``."""
        if not index:
            return self
        i = index[0]
        if not 0 <= i < len(self.elements):
            raise HloBuildError(f"shape index {list(index)} does not exist in tuple shape "
                                f"{self.text}")
        return self.elements[i].at(tuple(index[1:]))


@dataclass(frozen=True, eq=False)
class Instruction:
    """One HLO instruction; ``attrs`` are ``(name, text)`` pairs printed after the operands."""

    name: str
    shape: ArrayShape | TupleShape
    opcode: str
    operands: tuple = ()
    head: str = ""          # text inside the parentheses when it is not operands: parameter(0)
    attrs: tuple = ()
    builder: object = field(default=None, repr=False)

    def line(self, root: bool) -> str:
        """The instruction as one line of HLO text."""
        inside = self.head or ", ".join(o.name for o in self.operands)
        tail = "".join(f", {k}={v}" for k, v in self.attrs)
        return f"  {'ROOT ' if root else ''}{self.name} = {self.shape.text} " \
               f"{self.opcode}({inside}){tail}"


def _index_text(index: tuple) -> str:
    return "{" + ",".join(str(int(i)) for i in index) + "}"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class HloModule:
    """A built module: its entry parameters, instructions and ROOT.

    Attributes:
        name: the module name.
        parameters: the ``parameter`` instructions in number order.
        instructions: every instruction in definition order (parameters first).
        root: the ROOT instruction.
    """

    name: str
    parameters: tuple
    instructions: tuple
    root: Instruction

    @property
    def text(self) -> str:
        """The ``HloModule`` text XLA's parser reads."""
        layout = "(" + ", ".join(p.shape.text for p in self.parameters) + ")->" \
            + self.root.shape.text
        lines = [f"HloModule {self.name}, entry_computation_layout={{{layout}}}", "",
                 "ENTRY main {"]
        lines += [inst.line(inst is self.root) for inst in self.instructions]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __str__(self):
        return self.text


class HloBuilder:
    """Builds the entry computation of one HLO module, instruction by instruction.

    Args:
        name: the module name (an HLO identifier: letters, digits, ``_ . -``).
    """

    def __init__(self, name: str):
        self.name = self._check_name(name)
        self._insts: list = []
        self._params: list = []
        self._names: set = set()

    @staticmethod
    def _check_name(name: str) -> str:
        if not isinstance(name, str) or not _NAME.match(name):
            raise HloBuildError(f"{name!r} is not an HLO identifier (letters, digits, '_', "
                                "'.', '-'; not starting with a digit)")
        return name

    def _fresh(self, name: str | None, stem: str) -> str:
        if name is None:
            i = len(self._insts)
            name = f"{stem}.{i}"
            while name in self._names:
                i += 1
                name = f"{stem}.{i}"
        self._check_name(name)
        if name in self._names:
            raise HloBuildError(f"instruction name '{name}' is already used in module "
                                f"'{self.name}'")
        self._names.add(name)
        return name

    def _own(self, operands) -> tuple:
        ops = tuple(operands)
        for o in ops:
            if not isinstance(o, Instruction) or o.builder is not self:
                raise HloBuildError(f"operand {getattr(o, 'name', o)!r} is not an instruction "
                                    f"of module '{self.name}'")
        return ops

    def _add(self, inst: Instruction) -> Instruction:
        self._insts.append(inst)
        return inst

    def parameter(self, shape: ArrayShape | TupleShape, name: str | None = None) -> Instruction:
        """Add the next entry parameter (numbered from 0)."""
        n = len(self._params)
        inst = Instruction(self._fresh(name or f"p{n}", "p"), shape, "parameter", head=str(n),
                           builder=self)
        self._params.append(inst)
        return self._add(inst)

    def custom_call(self, target: str, operands, shape: ArrayShape | TupleShape, *,
                    backend_config: str = "", output_to_operand_aliasing=None,
                    has_side_effect: bool = False, name: str | None = None) -> Instruction:
        """Add a ``custom-call``.

        Args:
            target: ``custom_call_target``.
            operands: the operand instructions.
            shape: the result shape (a :class:`TupleShape` for several results).
            backend_config: the opaque string handed to the target (here base64 JSON).
            output_to_operand_aliasing: ``{output shape index: (operand, operand shape index)}``
                with shape indices as tuples (``()`` = the whole value, ``(1,)`` = tuple
                element 1); each aliased pair must have the same shape.
            has_side_effect: mark the call as side-effecting (never removed).
            name: instruction name (default ``custom-call.N``).

        Returns:
            The instruction.
        """
        ops = self._own(operands)
        aliases = dict(output_to_operand_aliasing or {})
        parts = []
        for out_index, (operand, op_index) in sorted(aliases.items()):
            out_index, op_index = tuple(out_index), tuple(op_index)
            if not 0 <= operand < len(ops):
                raise HloBuildError(f"alias of output {list(out_index)} names operand {operand}"
                                    f", but the custom call has {len(ops)} operands")
            dst, src = shape.at(out_index), ops[operand].shape.at(op_index)
            if dst != src:
                raise HloBuildError(f"output {list(out_index)} ({dst.text}) cannot alias operand "
                                    f"{operand} ({src.text}): shapes differ")
            parts.append(f"{_index_text(out_index)}: ({operand}, {_index_text(op_index)})")
        attrs = [("custom_call_target", _quote(target))]
        if parts:
            attrs.append(("output_to_operand_aliasing", "{" + ", ".join(parts) + "}"))
        if has_side_effect:
            attrs.append(("custom_call_has_side_effect", "true"))
        attrs.append(("backend_config", _quote(backend_config)))
        return self._add(Instruction(self._fresh(name, "custom-call"), shape, "custom-call", ops,
                                     attrs=tuple(attrs), builder=self))

    def get_tuple_element(self, operand: Instruction, index: int,
                          name: str | None = None) -> Instruction:
        """Element ``index`` of a tuple-shaped instruction."""
        (op,) = self._own([operand])
        if not isinstance(op.shape, TupleShape):
            raise HloBuildError(f"get-tuple-element of '{op.name}', which is not a tuple")
        shape = op.shape.at((index,))
        return self._add(Instruction(self._fresh(name, "get-tuple-element"), shape,
                                     "get-tuple-element", (op,), attrs=(("index", str(index)),),
                                     builder=self))

    def tuple(self, operands, name: str | None = None) -> Instruction:
        """A tuple of array-shaped instructions."""
        ops = self._own(operands)
        shape = TupleShape(tuple(o.shape for o in ops))
        return self._add(Instruction(self._fresh(name, "tuple"), shape, "tuple", ops,
                                     builder=self))

    def build(self, root: Instruction) -> HloModule:
        """Finish the module with ``root`` as the entry computation's ROOT."""
        (root,) = self._own([root])
        return HloModule(self.name, tuple(self._params), tuple(self._insts), root)
