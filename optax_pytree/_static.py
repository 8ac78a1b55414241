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
from collections.abc import Mapping
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


# --------------------------------------------------------------------------
# Where two keys differ by numbers alone: what a recompilation of a number held static says.

_NO_NUMBER = object()


def _number_of(key: Any) -> Any:
    """The number a frozen key holds (a Python or NumPy number, no bool), else ``_NO_NUMBER``."""
    if not (type(key) is tuple and len(key) in (2, 3) and isinstance(key[0], type)):
        return _NO_NUMBER
    kind = key[0]
    if kind is float and len(key) == 2 and isinstance(key[1], str):
        return float.fromhex(key[1])
    if kind is complex and len(key) == 3:
        return complex(float.fromhex(key[1]), float.fromhex(key[2]))
    if kind is int and len(key) == 2 and type(key[1]) is int:
        return key[1]
    if issubclass(kind, np.number) and len(key) == 2 and isinstance(key[1], bytes):
        return np.frombuffer(key[1], dtype=kind)[0]
    if issubclass(kind, np.number) and len(key) == 2 and isinstance(key[1], np.number):
        return key[1]
    return _NO_NUMBER


def _named(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def number_differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]] | None:
    """Where two frozen keys (:func:`freeze`) differ, when they differ in numbers alone: each
    difference's path (``config['lr']``, a closure's cell ``rate``, ``args[0]``) and the two
    numbers; None where they differ in anything else (a structure, a string, an identity)."""
    if a == b:
        return []
    if isinstance(a, ByIdentity) and isinstance(b, ByIdentity):
        return _state_differences(a.value, b.value, path, 0) or None  # the same state: identity alone
    na, nb = _number_of(a), _number_of(b)
    if na is not _NO_NUMBER and nb is not _NO_NUMBER:
        return [(path, na, nb)] if type(na) is type(nb) else None
    if not (type(a) is tuple and type(b) is tuple and len(a) == len(b) and a and a[0] == b[0]):
        return None
    head = a[0]
    pairs: list[tuple[str, Any, Any]] = []
    if head == "function":
        if a[1] is not b[1] or a[2:6] != b[2:6]:
            return None
        for name, ca, cb in zip(a[1].co_freevars, a[6], b[6]):
            if type(ca) is tuple and ca and ca[0] == "object":
                pairs.append(("", ca, cb))  # its values are named from the function (``config.lr``)
            else:
                pairs.append((name, ca, cb))
        if len(a) > 7:  # what it reads of its module's globals (``_globals_key``)
            if len(a[7]) != len(b[7]):
                return None
            for g, h in zip(a[7], b[7]):
                if len(g) == len(h) == 2 and g[0] == h[0]:
                    pairs.append((g[0], g[1], h[1]))
                elif len(g) == len(h) == 4 and g[:3] == h[:3]:
                    pairs += [(n, x, y) for (n, x), (_, y) in zip(g[3], h[3])]
                elif g != h:
                    return None
        return _all_numbers(pairs, path)
    if head == "object":
        if a[1] is not b[1] or a[2] != b[2] or len(a[3]) != len(b[3]):
            return None
        return _all_numbers([(n, x, y) for (n, x), (_, y) in zip(a[3], b[3])], path)
    if head == "dataclass":
        if a[1] is not b[1]:
            return None
        return _all_numbers([(f"{path}.{n}", x, y) for (n, x), (_, y) in zip(a[2], b[2])], "")
    if head in (dict, list, tuple) and len(a) == 2:
        if [k for k, _ in a[1]] != [k for k, _ in b[1]]:
            return None
        return _all_numbers([(f"{path}[{k!r}]", x, y) for (k, x), (_, y) in zip(a[1], b[1])], "")
    if isinstance(head, type) and issubclass(head, functools.partial) and len(a) == 5:
        if a[1] != b[1] or a[4] != b[4]:
            return None
        args = number_differences(a[2], b[2], _named(path, "args"))
        keywords = number_differences(a[3], b[3], path)
        return None if args is None or keywords is None else args + keywords
    if isinstance(head, type) and len(a) == 2 and isinstance(a[1], Mapping) and isinstance(b[1], Mapping):
        ma, mb = a[1], b[1]  # a hashable mapping compared by value (immutabledict, frozendict)
        if list(ma) != list(mb):
            return None
        return _all_numbers([(f"{path}[{k!r}]", _freeze(ma[k], ()), _freeze(mb[k], ())) for k in ma], "")
    if isinstance(head, type) and len(a) == 2 and type(a[1]) is head and type(b[1]) is head:
        return _state_differences(a[1], b[1], path, 0) or None  # an object compared by its ==
    return None


_PLAIN_NUMBERS = (int, float, complex, np.number)
_MAX_STATE_DEPTH = 4


def _state_differences(x: Any, y: Any, path: str, depth: int) -> list[tuple[str, Any, Any]] | None:
    """Where two objects of the program's (compared by identity, or by their own ``==``) differ
    in what they hold, when in numbers alone (their items, attributes and the dicts held there)."""
    if x is y:
        return []
    if isinstance(x, _PLAIN_NUMBERS) and not isinstance(x, bool) and type(x) is type(y):
        inexact = isinstance(x, (float, complex, np.inexact))
        same = _number_key(x) == _number_key(y) if inexact else bool(x == y)
        return [] if same else [(path, x, y)]
    if type(x) is not type(y) or depth > _MAX_STATE_DEPTH:
        return None
    if x is None or isinstance(x, (str, bytes, bool)):
        return [] if x == y else None
    pairs: list[tuple[str, Any, Any]] = []
    if isinstance(x, (dict, Mapping)):
        if list(x) != list(y):
            return None
        pairs += [(f"{path}[{k!r}]", x[k], y[k]) for k in x]
    elif type(x) in (list, tuple):
        items_x: Any = x
        items_y: Any = y
        if len(items_x) != len(items_y):
            return None
        pairs += [(f"{path}[{i}]", u, v) for i, (u, v) in enumerate(zip(items_x, items_y))]
    own_x, own_y = _lookups.own_dict(x), _lookups.own_dict(y)
    if list(own_x) != list(own_y):
        return None
    pairs += [(f"{path}.{k}", own_x[k], own_y[k]) for k in own_x]
    if not pairs:
        return None
    out: list[tuple[str, Any, Any]] = []
    for at, u, v in pairs:
        found = _state_differences(u, v, at, depth + 1)
        if found is None:
            return None
        out += found
    return out


def _all_numbers(pairs: list[tuple[str, Any, Any]], path: str) -> list[tuple[str, Any, Any]] | None:
    out: list[tuple[str, Any, Any]] = []
    for name, x, y in pairs:
        found = number_differences(x, y, _named(path, name) if name else path)
        if found is None:
            return None
        out += found
    return out
