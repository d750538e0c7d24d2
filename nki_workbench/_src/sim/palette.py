"""One colour per opcode, the same in every plot (timelines, compare, report, widgets).

The colour depends on the opcode's name only — never on which other opcodes a kernel uses — so
``exp`` has one colour in every kernel, in both panels of ``compare`` and with any engine filter.
Frequent opcodes get fixed, well separated colours; the others a colour picked from the same
palette by a hash of the name (stable across processes and versions).
"""

from __future__ import annotations

import zlib

__all__ = ["opcode_colour", "PALETTE", "FIXED"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79")
"""matplotlib's tab20 order, then a dark blue: the colours every opcode is drawn in."""

# why: the opcodes most kernels use are told apart at a glance (DMA blues, matmul red, ...)
FIXED = {"load": "#1f77b4", "store": "#aec7e8", "dma_copy": "#17becf", "matmul": "#d62728",
         "nc_matmul": "#d62728", "transpose": "#ff9896", "nc_transpose": "#ff9896",
         "exp": "#ff7f0e", "add": "#2ca02c", "subtract": "#98df8a", "multiply": "#9467bd",
         "divide": "#c5b0d5", "max": "#8c564b", "sum": "#e377c2", "tensor_reduce": "#f7b6d2",
         "activation": "#ffbb78", "tensor_tensor": "#bcbd22", "tensor_scalar": "#dbdb8d",
         "tensor_copy": "#7f7f7f", "copy": "#7f7f7f", "memset": "#c49c94",
         "iota": "#9edae5", "rsqrt": "#393b79", "reciprocal": "#393b79"}


def opcode_colour(op: str) -> str:
    """The ``#rrggbb`` colour of an opcode (same name, same colour, everywhere)."""
    fixed = FIXED.get(op)
    if fixed is not None:
        return fixed
    return PALETTE[zlib.crc32(op.encode()) % len(PALETTE)]
