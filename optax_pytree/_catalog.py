"""Shared: which public names of optax are factories, read from optax itself.

Used by the drop-in module, its stubs (``_stubs``) and the catalogue test, so
that a new optax release is covered without editing a list here, and by
``_bind`` to name a factory as optax exports it. A name is a factory when its
return annotation is a transformation or ``optax.Schedule``; where optax left
it unannotated, when its docstring's ``Returns:`` section says it returns a
gradient transformation; and classes whose instances have ``init`` and
``update`` (``optax.MultiSteps``).
"""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from typing import Any

from optax._src import base

from ._vocabulary import Kind

_TRANSFORMATIONS = (base.GradientTransformation, base.GradientTransformationExtraArgs)
_TRANSFORMATION_NAMES = ("GradientTransformation", "GradientTransformationExtraArgs")


def _returns_section(doc: str | None) -> str:
    if not doc or "Returns:" not in doc:
        return ""
    return doc.split("Returns:", 1)[1].split("\n\n", 1)[0]


def factory_kind(obj: Any) -> Kind | None:
    """A transformation factory, a schedule factory, or None (not a factory)."""
    if inspect.isclass(obj):
        if issubclass(obj, tuple):  # states, GradientTransformation itself
            return None
        if callable(getattr(obj, "init", None)) and callable(getattr(obj, "update", None)):
            if callable(getattr(obj, "gradient_transformation", None)):
                return Kind.TRANSFORMATION
        return None
    if isinstance(obj, functools.partial):  # optax.nadam = partial(adam, nesterov=True)
        return factory_kind(obj.func)
    if not isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
        return None
    try:
        returns = inspect.signature(obj).return_annotation
    except (TypeError, ValueError):
        return None
    if isinstance(returns, str):
        last = returns.rsplit(".", 1)[-1]
        if last in _TRANSFORMATION_NAMES:
            return Kind.TRANSFORMATION
        if last == "Schedule":
            return Kind.SCHEDULE
        return None
    if returns in _TRANSFORMATIONS:
        return Kind.TRANSFORMATION
    if returns == base.Schedule:
        return Kind.SCHEDULE
    if returns is inspect.Signature.empty and "gradient transformation" in _returns_section(
        obj.__doc__
    ).lower().replace("gradienttransformation", "gradient transformation"):
        return Kind.TRANSFORMATION
    return None


@functools.lru_cache(maxsize=1)
def injectors() -> tuple[Any, ...]:
    """optax's factories of factories: ``inject_hyperparams``, ``inject_stateful_hyperparams``.

    Not factories in :func:`factory_kind`'s sense (they return a factory); the
    drop-in gives its own (see ``_inject``).
    """
    import optax

    found = [get_quietly(optax, n)[0] for n in ("inject_hyperparams", "inject_stateful_hyperparams")]
    return tuple(f for f in found if f is not None)


def public_names(module: types.ModuleType) -> list[str]:
    """``__all__`` and every other public name (optax's ``__all__`` misses some)."""
    names: set[str] = set(getattr(module, "__all__", ()))
    names.update(n for n in dir(module) if not n.startswith("_"))
    # Quietly: reading a deprecated name warns, and listing names is no use of them.
    return sorted(n for n in names if not inspect.ismodule(get_quietly(module, n)[0]))


def get_quietly(module: types.ModuleType, name: str) -> tuple[Any, bool]:
    """``getattr(module, name)`` and whether optax flagged the name as deprecated."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = getattr(module, name, None)
    return obj, any(issubclass(w.category, DeprecationWarning) for w in caught)


def factories() -> list[tuple[str, Any, str]]:
    """(qualified name, factory, kind) for every factory of optax, contrib, schedules.

    A factory reachable under several names (``optax.linear_schedule`` and
    ``optax.schedules.linear_schedule``) is listed once, under its first name;
    names that optax deprecates in favour of another are left out.
    """
    import optax.contrib
    import optax.schedules

    out, seen = [], set()
    for module in (optax, optax.contrib, optax.schedules):
        for name in public_names(module):
            obj, deprecated = get_quietly(module, name)
            kind = factory_kind(obj)
            if kind is None or deprecated or id(obj) in seen:
                continue
            seen.add(id(obj))
            out.append((f"{module.__name__}.{name}", obj, kind))
    return out
