"""``nki.language.constants``: dtype size helper used by public kernels."""

from ..._src.dtypes import sizeinbytes

__all__ = ["sizeinbytes"]
