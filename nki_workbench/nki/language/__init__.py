"""``nki.language`` (``nl``): tiles, memory movement, math, reductions, iterators, indices."""

from ..._src.lang import *  # noqa: F401,F403
from ..._src.lang import __all__ as _all
from . import constants  # noqa: F401

__all__ = list(_all) + ["constants"]
