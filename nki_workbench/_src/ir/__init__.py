"""The IR: node types, opcode table, text printer and parser (round-tripping), validator.

The validator is the submodule :mod:`.validate` (``validate.validate(kernel)``); the work
budget of IR about to run is :mod:`.budget`.
"""

from . import expr
from .budget import Budget
from .nodes import Access, Alloc, Inst, Kernel, Loop, Scalar, TensorDecl, walk_insts, walk_stmts
from .opcodes import OPCODES, OpInfo, opinfo, register
from .parser import IRParseError, parse, parse_expr
from .printer import format_inst, print_kernel
from .validate import InvalidIRError

__all__ = ["expr", "Access", "Alloc", "Inst", "Kernel", "Loop", "Scalar", "TensorDecl",
           "walk_insts", "walk_stmts", "OPCODES", "OpInfo", "opinfo", "register", "IRParseError",
           "parse", "parse_expr", "format_inst", "print_kernel", "InvalidIRError", "Budget"]
