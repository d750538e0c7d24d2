"""The workbench IR: frozen node types, the opcode table, and the text printer/parser.

``parse(print_kernel(k)) == k`` for every traced kernel.
"""

from ._src.ir import (
                      OPCODES,
                      Access,
                      Alloc,
                      Inst,
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

__all__ = ["OPCODES", "Access", "Alloc", "Inst", "IRParseError", "Kernel", "Loop", "Scalar",
           "TensorDecl", "expr", "opinfo", "parse", "parse_expr", "print_kernel", "walk_insts",
           "walk_stmts"]
