"""Tree: a closure's child that reads its config again wherever it is used, under ``jit`` too.

A schedule written as a closure over the program's config becomes a child
whose numbers are leaves (``_closures``), holding the values read when the
optimizer was made. Plain optax reads the config whenever it runs the
schedule: eagerly at every call, under ``jit`` when it traces. So a config
changed after the build must not be met with the old value, silently.
Eagerly, every build checks the sources (``_core.Core.check_sources``).
Under ``jit`` nothing of the object runs on the host at a call but its
flattening, which JAX does at every call to find the compiled program: so
such a child is of a subclass of its own class, registered with JAX, whose
flattening reads the source again first (``_closures.Source.check``) and
raises the eager error, naming the value, where it changed. Only these
children pay for it; every other wrapped object flattens as before (a
C-level attribute read).

The subclass is made from the child's class when first needed (this module
does not import ``_tree``, which imports ``_closures``, which calls
:func:`watch`); its aux data is the spec and the one-level treedef of the
base class (the child's structure as ``_tree`` flattens it), through which
JAX rebuilds the base object on unflatten. What JAX rebuilds (inside
``jit``, a ``tree_map``) holds leaves alone and no source, like any object
JAX rebuilds; ``replace`` gives values of its own (no source);
``_with_static`` (the smallest static part, ``_descend``) keeps the source.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import threading
from collections.abc import Iterable
from typing import Any

import jax

from . import _flax_serialization
from ._caches import cache

_EXACT_KEY = jax.tree_util.GetAttrKey("exact")  # the carried values' key, as ``_tree`` names it
_SUBCLASSES: dict[type, type] = {}  # a wrapped class -> its watched subclass (registered once)
_REGISTERING = threading.Lock()


def watch(obj: Any, source: Any) -> Any:
    """``obj`` (a wrapped child ``_tree`` made), as a watched object that checks ``source``
    (a ``_closures.Source``, or None) at every flatten and eager build."""
    base = type(obj)
    core = obj._core
    if source is not None:
        held = getattr(core, "source", None)  # a closure's child whose static function reads too
        core.source = source if held is None else _Both(held, source)
    if "_aux" in obj.__dict__:  # watched already (its static function's reads): the class swapped
        return obj
    cls = _SUBCLASSES.get(base) or _subclass(base)
    obj.__dict__["_aux"] = (core.spec, _base_structure(obj, base))
    object.__setattr__(obj, "__class__", cls)  # the class swap: its own pytree registration
    return obj


class _Both:
    """Two sources of one object, checked in turn."""

    __slots__ = ("first", "second")

    def __init__(self, first: Any, second: Any):
        self.first, self.second = first, second

    def check(self) -> None:
        self.first.check()
        self.second.check()


def _base_structure(obj: Any, base: type) -> Any:
    """The one-level treedef of ``obj`` as its base class flattens it (children as leaves), from
    the spec alone: the leaves are not made (they may be pending, ``_leaves.Pending``)."""
    core = obj._core
    spec = core.spec
    found = _STRUCTURES.get((base, spec))
    if found is not None:
        return found
    count = len(spec.keys) + (1 if spec.carried_dtypes else 0)  # the leaves, then the carried values
    twin: Any = tuple.__new__(base, tuple(obj)) if isinstance(obj, tuple) else object.__new__(base)
    twin.__dict__["_core"] = core
    twin.__dict__["_flat"] = ((None,) * count, spec)
    found = jax.tree_util.tree_structure(twin, is_leaf=lambda x: x is not twin)
    _STRUCTURES.set((base, spec), found)
    return found


_STRUCTURES = cache("(a wrapped class, a spec) -> its one-level treedef (_watch's aux data)", 1024)


def _check(obj: Any) -> None:
    source = getattr(obj._core, "source", None)  # unset: rebuilt by JAX, or made without one
    if source is not None:
        source.check()


def _flatten(obj: Any) -> tuple[Any, Any]:
    _check(obj)
    return obj._flat[0], obj.__dict__["_aux"]


def _flatten_with_keys(obj: Any) -> tuple[tuple[tuple[Any, Any], ...], Any]:
    _check(obj)
    flat, spec = obj._flat
    keys = (*spec.keys, _EXACT_KEY) if spec.carried_dtypes else spec.keys
    return tuple(zip(keys, flat)), obj.__dict__["_aux"]


def _unflatten(aux: Any, children: Iterable[Any]) -> Any:
    obj = aux[1].unflatten(children)  # the base class's own unflatten (``_tree``)
    obj.__dict__["_aux"] = aux
    object.__setattr__(obj, "__class__", _SUBCLASSES[type(obj)])
    return obj


def _subclass(base: type) -> type:
    with _REGISTERING:  # JAX refuses a second registration of one type
        found = _SUBCLASSES.get(base)
        return found if found is not None else _make_subclass(base)


def _make_subclass(base: type) -> type:
    def replace(self: Any, **changes: Any) -> Any:
        return watch(base.replace(self, **changes), None)  # values given, not read from the config

    def _with_static(self: Any, names: Iterable[str], **changes: Any) -> Any:
        return watch(base._with_static(self, names, **changes), getattr(self._core, "source", None))

    replace.__doc__ = base.replace.__doc__
    cls = type(
        base.__name__,
        (base,),
        {
            "__slots__": (),
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
            "replace": replace,
            "_with_static": _with_static,
        },
    )
    jax.tree_util.register_pytree_with_keys(cls, _flatten_with_keys, _unflatten, _flatten)
    _flax_serialization.also(cls)
    _SUBCLASSES[base] = cls
    return cls


__all__ = ["watch"]
