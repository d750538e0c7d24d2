"""``nki.compiler`` (``ncc``): allocation control, kernel decorators and loop directives.

* ``ncc.sbuf`` / ``ncc.psum``: ``auto_alloc()`` (what ``nl.sbuf`` / ``nl.psum`` are),
  ``alloc(func)`` and ``mod_alloc(...)`` for direct allocation (``buffer=`` of ``nl.ndarray``).
* Kernel decorators returning a new kernel: ``skip_middle_end_transformations``,
  ``enable_stack_allocator`` (together with the former), ``force_auto_alloc``.
* Directives for ``directives=`` of ``nl.affine_range``/``sequential_range`` or ``with``:
  ``multi_buffer(factor)``, ``no_reorder()``, ``allocation_scope()``.

Example:
    >>> import nki_workbench.nki.compiler as ncc
    >>> buf = ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,))
"""

from __future__ import annotations

from ..._src.alloc.kernel_opts import (
    allocation_scope,
    enable_stack_allocator,
    force_auto_alloc,
    multi_buffer,
    no_reorder,
    skip_middle_end_transformations,
)
from ..._src.alloc.spec import PSUMAllocation, SBUFAllocation

__all__ = ["sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator",
           "force_auto_alloc", "multi_buffer", "no_reorder", "allocation_scope",
           "SBUFAllocation", "PSUMAllocation"]

sbuf = SBUFAllocation()
psum = PSUMAllocation()
