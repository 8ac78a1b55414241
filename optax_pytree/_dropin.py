"""Feature: the machinery of the drop-in modules ``optax_pytree.optax`` (and its ``contrib``, ``schedules``).

Each drop-in module mirrors one optax module, generated from it at import
time: every name that :func:`optax_pytree._catalog.factory_kind` calls a
factory is bound to ``pytree_transformation(factory)``; every other name is
bound to the very object optax has. Names optax serves lazily (deprecated
ones) and private names are forwarded by the module's ``__getattr__`` (PEP
562), so optax's deprecation warnings still fire, at the user's line.
"""

from __future__ import annotations

import functools
import types
import warnings
from typing import Any

from . import _catalog, _inject
from ._wrap import pytree_transformation

# id(optax factory) -> (optax factory, drop-in factory). One drop-in per optax
# object, so names optax shares keep sharing one object:
# ``optax_pytree.optax.linear_schedule is optax_pytree.optax.schedules.linear_schedule``.
_DROPINS: dict[int, tuple[Any, Any]] = {}


def dropin(obj: Any, name: str) -> Any:
    """The drop-in version of the optax object ``obj`` found under ``name``.

    A factory gives a decorated factory whose calls return wrapped objects,
    with the factory's name, docstring and signature; anything else is
    returned as is.

    Args:
        obj: an attribute of an optax module.
        name: the attribute's name, used to name a factory that has no name of
            its own (``optax.nadam`` is a ``functools.partial`` of ``adam``).

    Returns:
        The drop-in factory, or ``obj`` itself when it is not a factory.

    Examples:
        >>> import optax
        >>> from optax_pytree import _dropin
        >>> _dropin.dropin(optax.adam, "adam").__name__
        'adam'
        >>> _dropin.dropin(optax.apply_updates, "apply_updates") is optax.apply_updates
        True
    """
    found = _DROPINS.get(id(obj))
    if found is not None and found[0] is obj:
        return found[1]
    if any(obj is f for f in _catalog.injectors()):
        # A factory of factories: its factories make pytrees (``_inject``).
        return _DROPINS.setdefault(id(obj), (obj, _inject.dropin_of(obj)))[1]
    if _catalog.factory_kind(obj) is None:
        return obj
    decorated = pytree_transformation(obj)
    if isinstance(obj, functools.partial):
        # functools.wraps copies no name from a partial; the docstring optax
        # set on it is copied.
        decorated.__name__ = decorated.__qualname__ = name
        decorated.__module__ = getattr(obj.func, "__module__", decorated.__module__)
    return _DROPINS.setdefault(id(obj), (obj, decorated))[1]


def _lookup(source: types.ModuleType, name: str) -> tuple[Any, list[warnings.WarningMessage]]:
    """``getattr(source, name)`` and the deprecation warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = getattr(source, name)
    return obj, [w for w in caught if issubclass(w.category, DeprecationWarning)]


def fill(namespace: dict[str, Any], source: types.ModuleType) -> None:
    """Binds in ``namespace`` the drop-in version of each public name of ``source``.

    Names already bound in ``namespace`` are kept (the drop-in submodules
    ``contrib`` and ``schedules``). Deprecated names are left to
    :func:`forward`, so that each use warns as optax does.

    Args:
        namespace: the ``globals()`` of a drop-in module.
        source: the optax module it mirrors.
    """
    for name in _catalog.public_names(source):
        if name in namespace:
            continue
        try:
            obj, deprecations = _lookup(source, name)
        except AttributeError:  # listed in __all__ but gone (an accelerated deprecation)
            continue
        if not deprecations:
            namespace[name] = dropin(obj, name)
    if hasattr(source, "__all__"):  # ``from ... import *`` gives optax's names
        namespace["__all__"] = list(source.__all__)


def forward(source: types.ModuleType, module_name: str, name: str) -> Any:
    """A drop-in module's ``__getattr__``: the names ``fill`` did not bind.

    Args:
        source: the optax module mirrored.
        module_name: the drop-in module's name, for error messages.
        name: the attribute asked for.

    Returns:
        The drop-in version of ``getattr(source, name)``; optax's deprecation
        warnings are re-raised at the caller's line.

    Raises:
        AttributeError: ``source`` has no such attribute (with optax's message
            when it gives a reason, such as a removed deprecated name).
    """
    try:
        obj, deprecations = _lookup(source, name)
    except AttributeError as e:
        message = f"module {module_name!r} has no attribute {name!r}"
        if str(e) != f"module {source.__name__!r} has no attribute {name!r}":
            message += f": {e}"
        raise AttributeError(message) from None
    for w in deprecations:
        # 1: here, 2: the module's __getattr__, 3: the line that used the name.
        warnings.warn(w.message, w.category, stacklevel=3)
    return dropin(obj, name)
