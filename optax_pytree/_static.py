"""Classify: static (aux-data) values compared by value, unhashable ones and callables included.

JAX compares the aux data of two treedefs with ``==`` and hashes it to key the
``jit`` cache, so aux data "*must* be static, hashable, immutable objects". A
mask given as a dict of bools is none of these: ``freeze`` maps any static
value to a hashable key that compares by value, so two equal masks built
separately give equal treedefs (and one compilation).

Callables too. A program builds its optimizer in a function called once per
trial (``make_optimizer(config)``), and writes the weight-decay mask, the
label function or the schedule there, as a ``lambda``, a
``functools.partial`` or a closure over the config: a new object on every
call. ``jax.jit``'s static arguments, equinox's ``filter_jit`` and flax's
graphdefs compare such functions by identity, so every call is a new
program. Here two functions are the same static value when they are made by
the same code (``__code__``) in the same module (the same globals), with equal
defaults, equal attributes and closure cells equal by these same rules
(numbers by their bits, strings, containers item by item, arrays by
content, nested functions and partials recursively, wrapped objects by
treedef and leaves); a bound method also needs the same ``self``;
``functools.partial`` and ``jax.tree_util.Partial`` compare by function,
arguments and keywords; a function that reaches itself through its cells,
by the shape of that cycle. An object of the program's a closure holds (its
config, ``self``, a dict) counts by the values the function's code reads of
it (``_closures``: levanter's builders close over a config that holds the
swept rate, which the closure never reads), else as a whole: a dataclass by
its fields. Whatever these rules cannot compare (an object that is neither
hashable, a dataclass nor a pytree) is compared by identity, so two
callables are never wrongly equal.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dataclasses
import enum
import functools
import types
import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _leaves, _lookups
from ._bind import Wrapped


class ByIdentity:
    """Key for a value that can neither be hashed nor flattened to hashables."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByIdentity) and other.value is self.value


def _array_key(x: Any) -> tuple[Any, ...]:
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return ("key", str(x.dtype), _array_key(jax.random.key_data(x)))  # typed keys: by their data
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
            return ByIdentity(x)
        return _array_key(x)
    if isinstance(x, (float, complex, np.inexact)):
        return _number_key(x)
    try:
        hash(x)
    except TypeError:
        return ByIdentity(x)
    return (type(x), x)


class _EmptyCell:
    """The contents of a closure cell not yet assigned."""

    def __repr__(self) -> str:
        return "<empty cell>"


_EMPTY_CELL = _EmptyCell()


_NONE = (type(None), None)  # what ``freeze(None)`` gives


def _function_key(f: types.FunctionType, seen: tuple[int, ...]) -> Any:
    """A function by its code, module, defaults, attributes and closure cells (see the module)."""
    if f.__closure__ is None and f.__defaults__ is None and f.__kwdefaults__ is None and not f.__dict__:
        # A lambda of the builder's own (a mask, a label function): by its code and module.
        return ("function", f.__code__, ByIdentity(f.__globals__), _NONE, _NONE, None, (), _globals_key(f))
    seen = (*seen, id(f))
    cells = []
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:  # not assigned yet
            contents = _EMPTY_CELL
        held = _object_key(f, name, contents, seen) if _is_object(contents) else _freeze(contents, seen)
        cells.append(held)
    return (
        "function",
        f.__code__,
        ByIdentity(f.__globals__),
        _freeze(f.__defaults__, seen),
        _freeze(f.__kwdefaults__, seen),
        _freeze(f.__dict__, seen) if f.__dict__ else None,
        tuple(cells),
        _globals_key(f),
    )


def _globals_key(f: types.FunctionType) -> tuple[Any, ...]:
    """The numbers a function (and the functions of its module it calls) reads from its module's
    globals, and the values it reads through a config object there (a config at the top of a
    script): part of the function, as its cells are; the module itself is compared by identity.
    Other globals (functions, modules, objects whose look-ups are not known) are the module's,
    by identity with it."""
    out: list[Any] = []
    for g in _lookups.reachable([f]):  # and the functions of its module it calls, at any depth
        namespace = g.__globals__
        for name in sorted(_lookups.globals_read(g.__code__).names):
            value = namespace.get(name, _lookups.MISSING)
            if _leaves.is_concrete_number(value) and not isinstance(value, (np.ndarray, jax.Array)):
                out.append((name, _freeze(value, ())))
            elif _lookups.viewable(value) and not callable(value) and not isinstance(value, _NOT_VIEWED):
                node = _lookups.plan(value, _lookups.global_paths_read(g.__code__, name), 0)
                if node is not None:
                    read = [(leaf.name, _freeze(leaf.value, ())) for leaf in _lookups.leaves_of(node, name)]
                    out.append((name, type(value), _lookups.shape(node), tuple(read)))
    return tuple(dict.fromkeys(out))


_NOT_VIEWED = (type, types.ModuleType, types.FunctionType, types.MethodType, functools.partial, Wrapped)


def _is_object(value: Any) -> bool:
    """An object a closure holds (a config, ``self``, a dict): compared by what is read of it."""
    return (hasattr(value, "__dict__") or isinstance(value, (dict, list))) and not isinstance(
        value, _NOT_VIEWED
    )


def _object_key(f: types.FunctionType, var: str, obj: Any, seen: tuple[int, ...]) -> Any:
    """An object a closure holds, by the values its code reads of it (``_closures``), else as a whole."""
    found = _lookups.values_read(f.__code__, var, obj, f)
    if found is None:
        return _freeze(obj, seen)
    shape, values = found
    return ("object", type(obj), shape, tuple((n, _freeze(v, seen)) for n, v in values))


def _back(value: Any, seen: tuple[int, ...]) -> Any:
    """A function or partial met again inside itself: where, from here (a cycle, compared by shape)."""
    return ("back", len(seen) - seen.index(id(value)))


def _callable_key(value: Any, seen: tuple[int, ...]) -> Any:
    """The key of a function, bound method or partial, or None for anything else."""
    if isinstance(value, types.FunctionType):
        if id(value) in seen:  # it reaches itself (a recursive closure)
            return _back(value, seen)
        return _function_key(value, seen)
    if isinstance(value, types.MethodType):
        return ("method", _freeze(value.__func__, seen), ByIdentity(value.__self__))
    if isinstance(value, functools.partial):  # jax.tree_util.Partial too
        if id(value) in seen:
            return _back(value, seen)
        seen = (*seen, id(value))
        return (
            type(value),
            _freeze(value.func, seen),
            _freeze(value.args, seen),
            _freeze(value.keywords, seen),
            _freeze(value.__dict__, seen) if getattr(value, "__dict__", None) else None,
        )
    return None


def freeze(value: Any) -> Any:
    """Returns a hashable key that is equal for equal static values.

    Hashable values are keyed by ``(type, value)``, so ``1``, ``1.0`` and
    ``True`` stay distinct. Dicts, lists and tuples are keyed item by item, in
    order. Functions, bound methods and partials are keyed by what makes them
    (see the module docstring). Unhashable values (dicts, lists, arrays,
    custom pytrees of bools such as optax masks) are flattened with JAX and
    keyed by their treedef and the frozen leaves. What still cannot be hashed
    is keyed by identity.
    """
    return _freeze(value, ())


def _freeze(value: Any, seen: tuple[int, ...]) -> Any:
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
        return (type(value), tuple((k, _freeze(v, seen)) for k, v in items))
    if type(value) is set:  # optax.inject_hyperparams' closure holds its static_args as one
        return (set, frozenset(_freeze(v, seen) for v in value))
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        # A named tuple (a plain optax transformation: its init and update
        # closures) item by item, so its functions compare by structure.
        return (type(value), tuple(_freeze(v, seen) for v in value))
    if callable(value):
        key = _callable_key(value, seen)
        if key is not None:
            return key
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return (type(value), value)
    leaves, treedef = jax.tree_util.tree_flatten(value)
    if len(leaves) == 1 and leaves[0] is value:
        params = getattr(type(value), "__dataclass_params__", None)
        if params is not None and params.eq:  # a config: equal as its fields are, as == says
            fields = dataclasses.fields(typing.cast(Any, value))
            return (
                "dataclass",
                type(value),
                tuple((f.name, _freeze(getattr(value, f.name), seen)) for f in fields),
            )
        return ByIdentity(value)
    return ("tree", treedef, tuple(_freeze_leaf(leaf) for leaf in leaves))


_NAMED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, enum.Enum, type(None))


def _identity_equal(kind: type) -> bool:
    """Instances compared by identity (object's ``==``) that are no named thing (a class, a module,
    a function, an enum member) and no sentinel (a bare ``object()``)."""
    return kind is not object and kind.__eq__ is object.__eq__ and not issubclass(kind, _NAMED)


def held_by_identity(key: Any) -> list[Any]:
    """The values a frozen key compares by identity, a function's globals (its module) and
    traced values aside: what makes every new one a new static value."""
    out: list[Any] = []

    def walk(x: Any) -> None:
        if isinstance(x, ByIdentity):
            held = x.value
            if not (type(held) is dict and "__builtins__" in held) and not _leaves.is_tracer(held):
                out.append(held)
        elif type(x) is tuple and len(x) == 2 and type(x[1]) is x[0] and _identity_equal(x[0]):
            out.append(x[1])  # (type, value) of a value whose == is identity
        elif isinstance(x, tuple):
            for item in x:
                walk(item)
        elif isinstance(x, frozenset):
            for item in x:
                walk(item)

    walk(key)
    return out
