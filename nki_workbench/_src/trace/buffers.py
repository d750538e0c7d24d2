"""Memory-location markers (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm``).

They sit in the trace layer because both front ends below the passes use them: ``nki.language``
(``buffer=`` arguments) and the allocation surface (``ncc.sbuf.alloc`` buffers subclass
:class:`Buffer`).
"""

from __future__ import annotations

__all__ = ["Buffer", "sbuf", "psum", "hbm", "private_hbm", "shared_hbm"]


class Buffer:
    """A memory location marker (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm``).

    Attributes:
        name: IR buffer name.
        alloc: direct-allocation spec for allocation objects (``None`` = automatic).
    """

    __slots__ = ("name", "alloc")

    def __init__(self, name: str, alloc=None):
        self.name = name
        self.alloc = alloc

    def __repr__(self):
        return f"nl.{self.name}" if self.alloc is None else f"<{self.name} allocation {self.alloc}>"

    def __eq__(self, other):
        if isinstance(other, str):  # why: ``t.buffer`` is the IR name (``t.buffer == nl.sbuf``)
            return self.alloc is None and other == self.name
        return isinstance(other, Buffer) and (self.name, self.alloc) == (other.name, other.alloc)

    def __hash__(self):
        return hash(self.name) if self.alloc is None else hash((self.name, self.alloc))


sbuf = Buffer("sbuf")
psum = Buffer("psum")
private_hbm = Buffer("hbm")
hbm = private_hbm
shared_hbm = Buffer("shared_hbm")
