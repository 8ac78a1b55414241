"""Every cache of the mechanism: one policy, one registry, one way to forget them.

What is cached is a function of its key alone (a factory's signature and
name, a configuration's analyses, an interned spec, the arguments the
verification found static, the compiled guards of a branch, an object's
carried host values), so forgetting an entry costs time, never a result:
each cache is an :class:`LRU` of a stated size (the least recently used
entry goes first, a lock around each operation), made by :func:`cache`,
and :func:`clear_caches` forgets them all (tests, benchmarks).

Not caches in that sense, and not here: ``functools.lru_cache`` on pure
functions of hashable arguments (``_leaves``' compiled converters, an
expression's compiled evaluator, ``_detect``'s reading of a signature), and
the drop-in's identity map (``_dropin._DROPINS``: one drop-in per optax
object, so that ``is`` holds between optax's aliases; never forgotten).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import collections
import threading
from typing import Any

_REGISTRY: list[LRU] = []


class LRU:
    """A small thread-safe LRU map."""

    def __init__(self, what: str, maxsize: int):
        self.what = what  # what it maps, for a reader
        self.maxsize = maxsize
        self.data: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        # On every wrap: no lock. Each OrderedDict operation is atomic; an
        # entry evicted by another thread between the two is a miss.
        data = self.data
        try:
            data.move_to_end(key)
            return data[key]
        except KeyError:
            return None

    def setdefault(self, key: Any, value: Any) -> Any:
        with self.lock:
            value = self.data.setdefault(key, value)
            self._keep(key)
            return value

    def set(self, key: Any, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            self._keep(key)

    def _keep(self, key: Any) -> None:
        self.data.move_to_end(key)
        while len(self.data) > self.maxsize:
            self.data.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.data.clear()


def cache(what: str, maxsize: int) -> LRU:
    """A new registered cache: ``what`` it maps, at most ``maxsize`` entries."""
    made = LRU(what, maxsize)
    _REGISTRY.append(made)
    return made


def clear_caches() -> None:
    """Forgets every cached result (for tests and benchmarks)."""
    for registered in _REGISTRY:
        registered.clear()


__all__ = ["LRU", "cache", "clear_caches"]
