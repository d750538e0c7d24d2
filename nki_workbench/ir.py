"""The workbench IR: frozen node types, the opcode table, the text printer/parser, the validator.

``parse(print_kernel(k)) == k`` for every traced kernel; ``parse`` also validates (bad IR raises
``NkiError [wb_invalid_ir]`` naming the instruction and its line); ``validate(kernel)`` checks a
kernel built in Python. ``Budget`` limits the work ``simulate_backend_config`` accepts.
"""

from ._src.ir import (
                      OPCODES,
                      Access,
                      Alloc,
                      Budget,
                      Inst,
                      InvalidIRError,
                      IRParseError,
                      Kernel,
                      Loop,
                      Scalar,
                      TensorDecl,
                      expr,
                      opinfo,
                      parse,
                      parse_expr,
                      print_kernel,
                      walk_insts,
                      walk_stmts,
)
from ._src.ir.validate import validate

__all__ = ["OPCODES", "Access", "Alloc", "Budget", "Inst", "InvalidIRError", "IRParseError",
           "Kernel", "Loop", "Scalar", "TensorDecl", "expr", "opinfo", "parse", "parse_expr",
           "print_kernel", "validate", "walk_insts", "walk_stmts"]
