"""Shared: value objects, compared by a key and hashed once.

Several objects of the mechanism are compared by value and looked up in
caches or compared by JAX on every jitted call (a spec is a treedef's aux
data): a configuration's key, a spec, the user's options, a closure's
factory, the aux data of an object with its state. Each is a
:class:`ValueObject`: it sets ``self.key`` (a hashable value, often nested
tuples, that says everything equality compares) and calls
:meth:`~ValueObject.cache_hash` at the end of ``__init__``. A tuple would
recompute its hash at every lookup, through every nested tuple; here the
hash is computed once, and equality is identity first (what JAX hands on
is the same object, at once), then the type, the hash, the key.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from typing import Any


class ValueObject:
    """Equal when of the same class (``isinstance``) with equal ``key``; hashed once (``hash``).

    A subclass sets ``self.key`` in ``__init__``, then calls
    :meth:`cache_hash`. Its own ``__slots__``, if any, list neither ``key``
    nor ``hash`` (they are these).
    """

    __slots__ = ("hash", "key")

    key: Any
    hash: int

    def cache_hash(self) -> None:
        """Hashes ``self.key`` once (the key must not change afterwards)."""
        self.hash = hash(self.key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, type(self)) and self.hash == other.hash and self.key == other.key


class ConfigKey(ValueObject):
    """A configuration's key (nested tuples), hashed once: looked up in several caches.

    What a wrapped object's configuration is made of (``Classified.key``) and
    what its analyses are cached by (``Classified.analysis_key``). A tuple
    recomputes its hash at every lookup, through every nested tuple, and a
    cache hit then compares it item by item; a wrap looks its keys up
    several times.
    """

    __slots__ = ()

    def __init__(self, key: Any):
        self.key = key
        self.cache_hash()

    def __repr__(self) -> str:
        return f"ConfigKey({self.key!r})"
