"""Bounded caches: every cache the workbench keeps is a least-recently-used map of fixed size."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["LRU", "lru_get", "lru_put", "DEFAULT_SIZE"]

DEFAULT_SIZE = 128
"""Entries a cache keeps unless it says otherwise (least recently used are dropped)."""


def lru_get(cache: dict, key, default=None):
    """``cache[key]`` marked as most recently used (any dict: insertion order is the age)."""
    if key not in cache:
        return default
    value = cache.pop(key)
    cache[key] = value
    return value


def lru_put(cache: dict, key, value, size: int = DEFAULT_SIZE):
    """Store ``cache[key] = value`` and drop the oldest entries beyond ``size``."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > size:
        del cache[next(iter(cache))]
    return value


class LRU(OrderedDict):
    """A dict that keeps at most ``size`` entries (reads refresh an entry).

    Args:
        size: the most entries kept.
    """

    def __init__(self, size: int = DEFAULT_SIZE):
        super().__init__()
        self.size = size

    def lookup(self, key, default=None):
        """The value under ``key`` (refreshed), or ``default``."""
        if key not in self:
            return default
        self.move_to_end(key)
        return self[key]

    def store(self, key, value):
        """Keep ``value`` under ``key``, dropping the least recently used beyond ``size``."""
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value
