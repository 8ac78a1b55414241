"""Static (aux-data) values compared by value, unhashable ones included.

JAX compares the aux data of two treedefs with ``==`` and hashes it to key the
``jit`` cache, so aux data "*must* be static, hashable, immutable objects". A
mask given as a dict of bools is none of these: ``freeze`` maps any static
value to a hashable key that compares by value, so two equal masks built
separately give equal treedefs (and one compilation).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from . import _leaves
from ._bind import Wrapped


class _ByIdentity:
    """Key for a value that can neither be hashed nor flattened to hashables."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ByIdentity) and other.value is self.value


def _array_key(x: Any) -> tuple[Any, ...]:
    a = np.asarray(x)
    return ("array", a.shape, a.dtype.str, a.tobytes())


def _number_key(x: Any) -> Any:
    """A float's key by its bits: ``-0.0`` is not ``0.0`` (``math.copysign`` tells them apart),
    and a NaN equals itself."""
    if isinstance(x, float):
        return (type(x), x.hex())
    if isinstance(x, complex):
        return (type(x), x.real.hex(), x.imag.hex())
    return (type(x), np.asarray(x).tobytes())  # NumPy inexact scalars


def _freeze_leaf(x: Any) -> Any:
    if isinstance(x, (np.ndarray, jax.Array)):
        if _leaves.is_tracer(x):
            return _ByIdentity(x)
        return _array_key(x)
    if isinstance(x, (float, complex, np.inexact)):
        return _number_key(x)
    try:
        hash(x)
    except TypeError:
        return _ByIdentity(x)
    return (type(x), x)


def freeze(value: Any) -> Any:
    """Returns a hashable key that is equal for equal static values.

    Hashable values are keyed by ``(type, value)``, so ``1``, ``1.0`` and
    ``True`` stay distinct. Dicts, lists and tuples are keyed item by item, in
    order. Unhashable values (dicts, lists, arrays, custom
    pytrees of bools such as optax masks) are flattened with JAX and keyed by
    their treedef and the frozen leaves. What still cannot be hashed is keyed
    by identity.
    """
    if isinstance(value, (np.ndarray, jax.Array)):
        return _freeze_leaf(value)
    if isinstance(value, Wrapped):  # a wrapped child made static: by its treedef and leaf values
        leaves, treedef = jax.tree_util.tree_flatten(value)
        return ("wrapped", treedef, tuple(_freeze_leaf(leaf) for leaf in leaves))
    # Plain containers keep their order (dicts included: optax.monitor builds
    # its state in the order of its dict), which JAX's flattening would sort.
    if isinstance(value, (float, complex, np.inexact)):
        return _number_key(value)
    if type(value) in (dict, list, tuple):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return (type(value), tuple((k, freeze(v)) for k, v in items))
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return (type(value), value)
    leaves, treedef = jax.tree_util.tree_flatten(value)
    if len(leaves) == 1 and leaves[0] is value:
        return _ByIdentity(value)
    return ("tree", treedef, tuple(_freeze_leaf(leaf) for leaf in leaves))
