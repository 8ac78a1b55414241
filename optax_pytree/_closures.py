"""Classify: captured values: what a function holds, what its code reads of it, how it is rebuilt.

Programs write their schedules as closures over the numbers they sweep, most
often read through the program's configuration object::

    def create_learning_rate_fn(config):
        def schedule(step):
            warmup = jnp.minimum(1.0, step / config.warmup_steps)
            return config.optim.lr * warmup
        return schedule

    tx = optax.adamw(create_learning_rate_fn(config))

(flax's examples, scenic's ``lr_fn`` over ``config.lr_configs``, cleanrl's
``linear_schedule`` over ``args``, Mava's over an OmegaConf ``DictConfig``,
``functools.partial(learning_rate_decay, lr_init=..., lr_final=...)``,
``self.lr`` in a trainer's method). A function compared by value is a new
static value for every rate: one compilation per rate. Here such a function
given as an argument becomes a child of the object: its captured numbers are
leaves (probed, guarded and verified like any factory's arguments; one the
function needs as a Python value is static), whether held directly in a
cell, given to a ``functools.partial``, held as a NumPy or JAX array, or read
through a captured object along attribute and item look-ups. This is
equinox's ``closure_to_pytree``, done by the one mechanism.

This module is the one home of captured values:

- **reading code** (:func:`paths_read`): the paths a function's code reads
  of a variable (``config.optim.lr``, ``config["lr"]``, ``self.helper()``),
  read off its bytecode. Any other use of the variable (passed to a call,
  returned, stored, an instruction this reader does not know, on any
  Python version) gives ``None``: the whole object counts. It fails closed.
- **reading objects** (:func:`_step`): a look-up replaced only on types whose
  look-ups are known: plain objects and dataclasses (no ``__getattr__``),
  ``argparse.Namespace``, ``types.SimpleNamespace``, named tuples, dicts,
  lists and tuples, ml_collections' ``ConfigDict`` and ``FrozenConfigDict``
  (``FieldReference`` resolved) and OmegaConf's ``DictConfig`` and
  ``ListConfig`` (interpolations resolved); methods and properties of a
  plain class through what their code reads of ``self``. Anything else
  keeps the object whole (static, compared by ``_static``).
- **the recipe** (:class:`ClosureFactory`): a function, bound method,
  partial or callable object as a factory whose parameters are its captured
  values, named by their paths (``config.optim.lr``); calling it rebuilds the
  function, each captured object replaced by a view that answers exactly the
  look-ups read, with the values given.

Only where it is safe and useful: cells all assigned and never written
(``nonlocal``: a rebuilt closure has fresh cells); at least one number,
numeric array, wrapped object or convertible function among the values;
and a function that runs as a schedule with them (a mask or a label
function that reads a number stays static, compared by value).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dis
import functools
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._bind import is_wrapped
from ._caches import cache
from ._leaves import is_concrete_number
from ._value import ValueObject

# --------------------------------------------------------------------------
# Reading code: the paths a variable is read along.

# A step of a path: ("attr", name), ("item", key) or ("call", name) (a method called).
Access = tuple[str, Any]
Path = tuple[Access, ...]

# Instructions that push a local or cell variable (Python 3.10 to 3.13).
_LOADS = frozenset({"LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CLOSURE"})
# Instructions that name a variable and do nothing with its value.
_HARMLESS = frozenset({"MAKE_CELL", "COPY_FREE_VARS"})
_ATTRIBUTE = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
# Every instruction that names a local or free variable, on this Python.
_NAMES_A_VARIABLE = frozenset(dis.opname[op] for op in (*dis.haslocal, *dis.hasfree))
_MAX_DEPTH = 6


def _names(instruction: dis.Instruction) -> tuple[Any, ...]:
    value = instruction.argval
    return value if isinstance(value, tuple) else (value,)


def _is_method_load(instruction: dis.Instruction) -> bool:
    if instruction.opname == "LOAD_METHOD":
        return True
    # Python 3.12+: LOAD_ATTR's low bit says it pushes a method for a call.
    return (
        sys.version_info >= (3, 12) and instruction.opname == "LOAD_ATTR" and bool((instruction.arg or 0) & 1)
    )


def _follow(instructions: list[dis.Instruction], j: int) -> Path:
    """The look-ups applied to the value pushed just before instruction ``j``."""
    path: list[Access] = []
    n = len(instructions)
    while j < n and not instructions[j].is_jump_target:
        ins = instructions[j]
        if ins.opname in _ATTRIBUTE:
            if _is_method_load(ins):
                path.append(("call", ins.argval))
                break
            path.append(("attr", ins.argval))
            j += 1
        elif (
            ins.opname == "LOAD_CONST"
            and type(ins.argval) in (str, int)
            and j + 1 < n
            and instructions[j + 1].opname == "BINARY_SUBSCR"
            and not instructions[j + 1].is_jump_target
        ):
            path.append(("item", ins.argval))
            j += 2
        else:
            break
    return tuple(path)


@functools.lru_cache(maxsize=4096)
def paths_read(code: types.CodeType, var: str) -> tuple[Path, ...] | None:
    """The paths read of ``var`` in ``code`` and the functions it defines, in order, or None (see
    the module).

    Every path is non-empty: the variable is only ever looked into. Fails
    closed: an instruction that names the variable and is not a known load,
    or a load whose value is not looked into, gives None.
    """
    if "__class__" in code.co_freevars:
        return None  # zero-argument super() reads self implicitly (Python < 3.12: no instruction)
    instructions = list(dis.get_instructions(code))
    paths: set[Path] = set()
    for k, ins in enumerate(instructions):
        names = _names(ins)
        if var not in names:
            continue
        op = ins.opname
        if op in _HARMLESS:
            continue
        if op not in _LOADS:
            if op in _NAMES_A_VARIABLE:
                return None  # a store, a delete, or a load this reader does not know (LOAD_FAST_BORROW)
            continue  # an attribute, global or constant that happens to share the name
        if op == "LOAD_CLOSURE" or _closure_tuple(instructions, k):
            continue  # handed to a function defined here: read below
        if names[-1] != var or names.count(var) != 1:
            return None  # pushed below another value: what happens to it is not followed
        path = _follow(instructions, k + 1)
        if not path:
            return None
        paths.add(path)
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and var in const.co_freevars:
            inner = paths_read(const, var)
            if inner is None:
                return None
            paths.update(inner)
    return tuple(sorted(paths, key=repr))


def _closure_tuple(instructions: list[dis.Instruction], k: int) -> bool:
    """Whether instruction ``k`` loads a cell into the closure of a function being made."""
    j = k
    while j < len(instructions) and instructions[j].opname in _LOADS:
        j += 1
    return (
        j + 1 < len(instructions)
        and instructions[j].opname == "BUILD_TUPLE"
        and isinstance(instructions[j + 1].argval, types.CodeType)
    )


def values_read(code: types.CodeType, var: str, obj: Any) -> tuple[Any, list[tuple[str, Any]]] | None:
    """What ``code`` reads of ``obj`` (held by its variable ``var``): the shape of its look-ups and
    the values read, by path; None where that cannot be told (the whole object counts).

    What ``_static`` compares an object a static function holds by.
    """
    plan = _plan(obj, paths_read(code, var), 0)
    if plan is None:
        return None
    values = [(leaf.name, leaf.value) for leaf in _leaves_of(plan, var)]
    return _shape(plan), values


# --------------------------------------------------------------------------
# Reading objects: a look-up done on a type whose look-ups are known.


class _Fail(Exception):
    """A look-up this module cannot replace safely: the object stays whole."""


_MISSING = object()


def _type_named(value: Any, *names: str) -> bool:
    return not _names_of(type(value)).isdisjoint(names)


@functools.lru_cache(maxsize=1024)
def _names_of(cls: type) -> frozenset[str]:
    """The full names of a class and its bases (its kind, told without importing its library)."""
    return frozenset(f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)


@functools.lru_cache(maxsize=4096)
def _on_class(cls: type, name: str) -> Any:
    """``name`` as the class holds it (``inspect.getattr_static``), once per class and name."""
    return inspect.getattr_static(cls, name, _MISSING)


_CONFIG_DICTS = (
    "ml_collections.config_dict.config_dict.ConfigDict",
    "omegaconf.dictconfig.DictConfig",
)
_CONFIG_LISTS = ("omegaconf.listconfig.ListConfig",)


# Attribute look-ups as ``object`` does them (SimpleNamespace's is its own, and the same).
_PLAIN_GETATTRIBUTE = (object.__getattribute__, types.SimpleNamespace.__getattribute__)


def _plain_class(cls: type) -> bool:
    return cls.__getattribute__ in _PLAIN_GETATTRIBUTE and not hasattr(cls, "__getattr__")


class _Attribute(NamedTuple):
    """What ``obj.name`` is: a value, or code of its class run on it (a method or a property)."""

    kind: str  # "value", "method" or "property"
    value: Any  # the value; the method's or getter's function


def _attribute(obj: Any, name: str) -> _Attribute:
    cls = type(obj)
    if _type_named(obj, *_CONFIG_DICTS):
        if name.startswith("_") or _on_class(cls, name) is not _MISSING:
            raise _Fail  # one of its methods or its own state
        return _Attribute("value", getattr(obj, name))
    if _is_namedtuple(obj):
        if name not in cls._fields:  # pyright: ignore[reportAttributeAccessIssue]
            raise _Fail
        return _Attribute("value", getattr(obj, name))
    if isinstance(obj, (dict, list, tuple, type, types.ModuleType)) or not _plain_class(cls):
        raise _Fail
    found = _on_class(cls, name)
    own = getattr(obj, "__dict__", {})
    if name in own and not _is_data_descriptor(found):
        return _Attribute("value", own[name])
    if found is _MISSING:
        raise _Fail  # not there: plain Python raises; keep that to the object itself
    if isinstance(found, property):
        if found.fget is None or type(found.fget) is not types.FunctionType:
            raise _Fail
        return _Attribute("property", found.fget)
    if type(found) is types.FunctionType:
        return _Attribute("method", found)
    if type(found).__name__ == "member_descriptor":  # __slots__
        return _Attribute("value", getattr(obj, name))
    if callable(found) or hasattr(type(found), "__get__"):
        raise _Fail  # a classmethod, a staticmethod, another descriptor: what it reads is unknown
    return _Attribute("value", found)  # a class constant


def _is_namedtuple(obj: Any) -> bool:
    """A NamedTuple: its fields a tuple of the class (a wrapped optimizer answers ``_fields`` as
    optax's NamedTuples do, through a property, and is no plain tuple to read into)."""
    return isinstance(obj, tuple) and isinstance(getattr(type(obj), "_fields", None), tuple)


def _is_data_descriptor(x: Any) -> bool:
    return x is not _MISSING and hasattr(type(x), "__set__")


def _item(obj: Any, key: Any) -> Any:
    if type(obj) in (dict, list, tuple) or _type_named(obj, *_CONFIG_DICTS, *_CONFIG_LISTS):
        try:
            return obj[key]
        except Exception:  # noqa: BLE001 - a missing key raises in the function itself, as plain
            raise _Fail from None
    if _is_namedtuple(obj):
        return obj[key]
    raise _Fail


# --------------------------------------------------------------------------
# The plan of a captured object: the look-ups read, as a tree.


class _Node:
    """The look-ups read of one object: attributes and items, each a value or a deeper node."""

    __slots__ = ("attrs", "items")

    def __init__(self) -> None:
        self.attrs: dict[str, Any] = {}  # name -> _Node | _Leaf | _Code
        self.items: dict[Any, Any] = {}  # key -> _Node | _Leaf


class _Leaf:
    """A value read whole: a parameter of the factory, read along ``steps`` from the captured object."""

    __slots__ = ("name", "steps", "value")

    def __init__(self, value: Any, steps: Path):
        self.value = value
        self.steps = steps
        self.name = ""


class _Code(NamedTuple):
    """A method or property of the object's class, run on the view."""

    kind: str  # "method" or "property"
    function: types.FunctionType


def _plan(obj: Any, paths: tuple[Path, ...] | None, depth: int, at: Path = ()) -> _Node | None:
    """The look-ups ``paths`` make of ``obj`` (itself read along ``at``), or None where one
    cannot be replaced safely."""
    if paths is None or depth > _MAX_DEPTH:
        return None
    node = _Node()
    try:
        for path in paths:
            _add(node, obj, path, depth, at)
    except _Fail:
        return None
    return node


def _add(node: _Node, obj: Any, path: Path, depth: int, at: Path) -> None:
    (kind, key), rest = path[0], path[1:]
    if kind == "item":
        table, value = node.items, _item(obj, key)
    else:
        found = _attribute(obj, key)
        table = node.attrs
        if found.kind != "value":
            if rest or (kind == "call") != (found.kind == "method"):
                raise _Fail  # a method read as a value, or looked into
            code = found.value.__code__
            if code.co_argcount == 0:
                raise _Fail
            inner = _plan(obj, paths_read(code, code.co_varnames[0]), depth + 1, at)
            if inner is None:
                raise _Fail
            table[key] = _Code(found.kind, found.value)
            _merge(node, inner)
            return
        value = found.value
        if kind == "call":  # a callable value held by the object: called as it is
            rest = ()
    held = table.get(key)
    step = ("item" if kind == "item" else "attr", key)
    if not rest or isinstance(held, _Leaf) or not _viewable(value):
        table[key] = _Leaf(value, (*at, step))  # read whole: what is read deeper is in it
        return
    inner = _Node() if held is None else held
    try:
        _add(inner, value, rest, depth, (*at, step))
    except _Fail:  # a deeper look-up not replaced safely: this value is read whole, as it is
        table[key] = _Leaf(value, (*at, step))
        return
    table[key] = inner


def _merge(into: _Node, other: _Node) -> None:
    for table, more in ((into.attrs, other.attrs), (into.items, other.items)):
        for key, value in more.items():
            held = table.get(key)
            if isinstance(value, _Node) and isinstance(held, _Node):
                _merge(held, value)
            elif held is None or isinstance(value, _Leaf):
                table[key] = value


def _leaves_of(node: _Node, prefix: str) -> list[_Leaf]:
    """The leaves of a plan, each named by its path (``config.optim.lr``, ``config['lr']``)."""
    out: list[_Leaf] = []
    for table, spell in ((node.attrs, lambda k: f".{k}"), (node.items, lambda k: f"[{k!r}]")):
        for key, value in table.items():
            if isinstance(value, _Leaf):
                value.name = prefix + spell(key)
                out.append(value)
            elif isinstance(value, _Node):
                out.extend(_leaves_of(value, prefix + spell(key)))
    return out


def _shape(node: _Node) -> Any:
    """A plan without its values: part of the factory's key."""

    def part(x: Any) -> Any:
        if isinstance(x, _Leaf):
            return ("leaf", x.name)
        if isinstance(x, _Code):
            return (x.kind, x.function)
        return _shape(x)

    return (
        tuple((k, part(v)) for k, v in node.attrs.items()),
        tuple((k, part(v)) for k, v in node.items.items()),
    )


class _View:
    """What a rebuilt function holds in place of a captured object: the look-ups it reads, answered.

    The function's code was read: it only looks into the variable (see
    :func:`paths_read`), along the paths of the plan; methods and properties
    of the object's class run on the view.
    """

    __slots__ = ("_optax_pytree_attrs", "_optax_pytree_items")

    def __init__(self, node: _Node, values: dict[str, Any]):
        attrs: dict[str, Any] = {}
        for key, x in node.attrs.items():
            if isinstance(x, _Leaf):
                attrs[key] = values[x.name]
            elif isinstance(x, _Code):
                attrs[key] = x
            else:
                attrs[key] = _View(x, values)
        self._optax_pytree_attrs = attrs
        self._optax_pytree_items = {
            k: values[x.name] if isinstance(x, _Leaf) else _View(x, values) for k, x in node.items.items()
        }

    def __getattr__(self, name: str) -> Any:
        try:
            found = self._optax_pytree_attrs[name]
        except KeyError:
            raise AttributeError(name) from None
        if isinstance(found, _Code):
            if found.kind == "property":
                return found.function(self)
            return types.MethodType(found.function, self)
        return found

    def __getitem__(self, key: Any) -> Any:
        return self._optax_pytree_items[key]

    def __repr__(self) -> str:
        return f"<view of {sorted(self._optax_pytree_attrs) + sorted(self._optax_pytree_items, key=repr)}>"


# --------------------------------------------------------------------------
# Reading cells, and the recipe of a callable.

_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})


@functools.lru_cache(maxsize=1024)
def _writes_a_cell(code: types.CodeType, names: frozenset[str] | None = None) -> bool:
    """Whether ``code``, or a function it defines, assigns one of its free variables (``nonlocal``)."""
    names = frozenset(code.co_freevars) if names is None else names
    free = names & frozenset(code.co_freevars)
    if free and any(i.opname in _WRITES and i.argval in free for i in dis.get_instructions(code)):
        return True
    return any(isinstance(c, types.CodeType) and _writes_a_cell(c, names) for c in code.co_consts)


def _useful(value: Any, seen: frozenset[int]) -> bool:
    """A value that makes a child worth it: a number, a wrapped object, a convertible callable."""
    if is_concrete_number(value) or is_wrapped(value):
        return True
    return callable(value) and capture(value, seen) is not None


class _Held(NamedTuple):
    """How one captured value is handed to the rebuilt function."""

    name: str  # the cell's or parameter's name
    plan: _Node | None  # None: the value itself, a parameter of that name; else a view of it


class Capture(NamedTuple):
    """A callable as a factory of its captured values: the recipe, and the values given."""

    kind: str  # "function", "method", "partial" or "object" (a callable object's __call__)
    function: Any  # the types.FunctionType that runs (typed Any: pyright would bind it as a method)
    cells: tuple[_Held, ...]  # the function's closure, in order
    bound: tuple[_Held, ...]  # the method's self; the partial's arguments (positional first)
    positional: int  # how many of ``bound`` are a partial's positional arguments
    partial_type: type | None
    values: dict[str, Any]  # parameter name -> value
    source: Any  # the callable given


def _held(code: types.CodeType, name: str, value: Any, values: dict[str, Any], seen: frozenset[int]) -> _Held:
    """A captured value as parameters: itself, or the values read through it (a view)."""
    if is_concrete_number(value) or is_wrapped(value) or not _viewable(value):
        values[name] = value
        return _Held(name, None)
    plan = _plan(value, paths_read(code, name), 0)
    if plan is not None:
        leaves = _leaves_of(plan, name)
        if any(_useful(leaf.value, seen) for leaf in leaves):
            for leaf in leaves:
                values[leaf.name] = leaf.value
            return _Held(name, plan)
    values[name] = value
    return _Held(name, None)


def _viewable(value: Any) -> bool:
    """Whether a value may be replaced by a view of what is read of it (an object, a container)."""
    if value is None or isinstance(value, (str, bytes, bool, int, float, complex, type, types.ModuleType)):
        return False
    return not callable(value) or (hasattr(value, "__dict__") and not isinstance(value, types.FunctionType))


def capture(fn: Any, seen: frozenset[int] = frozenset()) -> Capture | None:
    """The recipe of ``fn`` and its captured values, if it may become a child (see the module), else None."""
    if id(fn) in seen or len(seen) > 8:
        return None
    seen = seen | {id(fn)}
    given: Any = fn
    values: dict[str, Any] = {}
    bound: list[_Held] = []
    positional = 0
    partial_type = None
    function: types.FunctionType
    if type(fn) is types.FunctionType:
        kind, function = "function", fn
    elif (
        type(fn) is types.MethodType
        and type(fn.__func__) is types.FunctionType
        # ``opt.init`` of a wrapped optimizer: its code is the library's, and the object
        # reaches a factory as plain optax's (a child), whose method is another: static.
        and not is_wrapped(fn.__self__)
    ):
        kind, function = "method", fn.__func__
    elif isinstance(fn, functools.partial) and type(fn.func) is types.FunctionType:
        kind, function, partial_type = "partial", fn.func, type(fn)
    elif (
        callable(fn)
        and not is_wrapped(fn)
        and hasattr(fn, "__dict__")
        and type(inspect.getattr_static(type(fn), "__call__", None)) is types.FunctionType
        and _plain_class(type(fn))
    ):
        kind, function = "object", inspect.getattr_static(type(fn), "__call__")
    else:
        return None
    code = function.__code__
    if _writes_a_cell(code):
        return None
    if kind in ("method", "object"):
        if code.co_argcount == 0:
            return None
        this = given.__self__ if kind == "method" else given
        bound.append(_held(code, code.co_varnames[0], this, values, seen))
    elif kind == "partial":
        if getattr(given, "__dict__", None):
            return None
        names = code.co_varnames[: code.co_argcount]
        if len(given.args) > len(names):
            return None
        positional = len(given.args)
        for name, value in (*zip(names, given.args), *given.keywords.items()):
            if name in values or any(h.name == name for h in bound):
                return None
            bound.append(_held(code, name, value, values, seen))
    cells: list[_Held] = []
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # not assigned yet
            return None
        if value is fn or value is function:  # it calls itself: rebuilt, it would call the old one
            return None
        cells.append(_held(code, name, value, values, seen))
    if not any(_useful(v, seen) for v in values.values()):
        return None
    return Capture(kind, function, tuple(cells), tuple(bound), positional, partial_type, values, fn)


def _roots(captured: Capture) -> list[tuple[_Held, Callable[[], Any]]]:
    """Each captured value with how to read it again from the callable given."""
    fn = captured.source
    function = fn.__func__ if captured.kind == "method" else fn.func if captured.kind == "partial" else None
    cells = (function if function is not None else captured.function).__closure__ or ()
    if captured.kind == "function":
        cells = fn.__closure__ or ()
    out: list[tuple[_Held, Callable[[], Any]]] = [
        (h, lambda c=c: c.cell_contents) for h, c in zip(captured.cells, cells)
    ]
    if captured.kind in ("method", "object"):
        this = fn.__self__ if captured.kind == "method" else fn
        out.append((captured.bound[0], lambda: this))
    elif captured.kind == "partial":
        for i, h in enumerate(captured.bound):
            if i < captured.positional:
                out.append((h, lambda i=i: fn.args[i]))
            else:
                out.append((h, lambda n=h.name: fn.keywords[n]))
    return out


def _resolve(obj: Any, steps: Path) -> Any:
    for kind, key in steps:
        if kind == "item":
            obj = _item(obj, key)
        else:
            found = _attribute(obj, key)
            if found.kind != "value":
                raise _Fail
            obj = found.value
    return obj


def _same(old: Any, new: Any) -> bool:
    if old is new:
        return True
    if type(old) is not type(new):
        return False
    if isinstance(old, np.ndarray):
        return (
            old.shape == new.shape
            and old.dtype == new.dtype
            and bool(np.array_equal(old, new, equal_nan=True))
        )
    try:
        return bool(old == new) or (old != old and new != new)  # NaN is NaN
    except Exception:  # noqa: BLE001 - an object that cannot say: changed
        return False


class Source:
    """What a child was made from: the callable given, and the values read through it then.

    A program may change its config after making the optimizer; plain optax
    reads the config at every call of the schedule. :meth:`check` reads it
    again (on every eager build of the child, see ``_build.build_child``) and
    raises, naming the value, where it changed: the object holds the values
    read when it was made, and a silently different number is never given.
    """

    __slots__ = ("captured", "snapshot", "where")

    def __init__(self, captured: Capture, where: str):
        self.captured = captured
        self.where = where
        # In-place changes of a NumPy array are changes too: a copy of each.
        self.snapshot = {
            n: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for n, v in captured.values.items()
        }

    def check(self) -> None:
        for held, read in _roots(self.captured):
            try:
                root = read()
            except ValueError:  # a cell emptied
                root = _MISSING
            if held.plan is None:
                reads = [(held.name, lambda root=root: root)]
            else:
                reads = [
                    (leaf.name, lambda root=root, steps=leaf.steps: _resolve(root, steps))
                    for leaf in _leaves_of(held.plan, held.name)
                ]
            for name, now in reads:
                old = self.snapshot[name]
                try:
                    new = now()
                except Exception:  # noqa: BLE001 - no longer readable as it was
                    new = _MISSING
                if not _same(old, new):
                    shown = "no longer readable" if new is _MISSING else f"now {new!r}"
                    raise ValueError(
                        f"optax_pytree: {self.where} read {name} = {old!r} when the optimizer was made, "
                        "and it "
                        f"is {shown}: the optimizer holds the values read then (plain optax would read the "
                        "new one at its next step): make the optimizer again after changing the config"
                    )


def only_wrapped(values: dict[str, Any]) -> bool:
    """No number among the values (wrapped objects and functions): a child whatever it is."""
    return not any(is_concrete_number(v) for v in values.values())


def is_schedule_like(fn: Any) -> bool:
    """Whether ``fn`` of a step count gives a scalar number (a schedule), not a mask, a label or an error.

    What a callable returns, where ``_leaves``' predicates judge a value: a
    Python int or float, or a 0-d array or scalar of a numeric dtype; no bool.

    Traced abstractly (``jax.eval_shape``: what it gives under ``jit``, as optax
    calls it); a function only Python values can run (``if step < 10``) is
    called on step 0 instead.
    """
    from . import _quiet

    try:
        with _quiet.quietly():
            out = jax.eval_shape(fn, jax.ShapeDtypeStruct((), jnp.int32))
    except Exception:  # noqa: BLE001 - not traceable: try it on a number
        try:
            with _quiet.quietly():
                out = fn(jnp.zeros((), jnp.int32))
        except Exception:  # noqa: BLE001 - not a callable of the step count
            return False
    if isinstance(out, (bool, np.bool_)):
        return False
    if isinstance(out, (int, float)):
        return True
    if isinstance(out, (np.ndarray, np.generic, jax.Array, jax.ShapeDtypeStruct)):
        return len(out.shape) == 0 and bool(jnp.issubdtype(out.dtype, jnp.number))
    return False


def with_cells(fn: types.FunctionType, cells: tuple[Any, ...] | None, defaults: Any, kwdefaults: Any) -> Any:
    """A function of ``fn``'s code, module, name and attributes with these cells and defaults."""
    out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, defaults, cells or None)
    out.__kwdefaults__ = kwdefaults
    out.__qualname__ = fn.__qualname__
    out.__module__ = fn.__module__
    out.__doc__ = fn.__doc__
    out.__dict__.update(fn.__dict__)
    return out


def _parameter(name: str) -> inspect.Parameter:
    """A keyword parameter named by a path (``config.optim.lr``): no identifier, so made, then named."""
    parameter = inspect.Parameter("_", inspect.Parameter.KEYWORD_ONLY)
    parameter._name = name  # pyright: ignore[reportAttributeAccessIssue] - inspect checks for identifiers
    return parameter


class ClosureFactory(ValueObject):
    """Makes a callable of one recipe from its captured values: a closure as a factory.

    Its parameters are the values the callable captures, named by their
    paths (``rate``, ``config.optim.lr``, ``self.lr``, ``kwargs['peak_value']``);
    calling it gives a new callable of the same code, module, name, defaults
    and attributes, over the values given (objects answered by views).
    Compared by ``key`` (made by the caller, see ``_classify``), so that
    every closure a builder makes is one factory.
    """

    def __init__(self, captured: Capture, key: Any):
        fn = captured.function
        self.captured = captured._replace(values={}, source=None)  # the recipe, not the values
        self.code = fn.__code__
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(captured.source, "__qualname__", fn.__qualname__)
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self.__signature__ = inspect.Signature([_parameter(n) for n in captured.values])
        self.key = key
        self.cache_hash()

    @staticmethod
    def shape(captured: Capture) -> Any:
        """What of a recipe its key is made of, besides the function (the caller freezes it)."""
        held = tuple(
            (h.name, None if h.plan is None else _shape(h.plan)) for h in captured.cells + captured.bound
        )
        return (captured.kind, captured.positional, captured.partial_type, held, tuple(captured.values))

    def __call__(self, /, **values: Any) -> Any:  # positional-only: a value may be named self
        c = self.captured

        def given(h: _Held) -> Any:
            return values[h.name] if h.plan is None else _View(h.plan, values)

        f = c.function
        fn: Any = f
        if c.cells:
            fn = with_cells(
                f, tuple(types.CellType(given(h)) for h in c.cells), f.__defaults__, f.__kwdefaults__
            )
        if c.kind == "function":
            return fn
        if c.kind in ("method", "object"):
            return types.MethodType(fn, given(c.bound[0]))
        args = [given(h) for h in c.bound[: c.positional]]
        keywords = {h.name: given(h) for h in c.bound[c.positional :]}
        assert c.partial_type is not None
        return c.partial_type(fn, *args, **keywords)

    def __repr__(self) -> str:
        return f"<closure {self.__module__}.{self.__qualname__}>"

    def where(self) -> str:
        """``train.py:41``: where the function is written."""
        import os

        return f"{os.path.basename(self.code.co_filename)}:{self.code.co_firstlineno}"


def child(fn: Any, make: Callable[[Any, dict[str, Any]], Any], freeze: Callable[[Any], Any]) -> Any:
    """The wrapped child a callable given as an argument becomes, or None (see the module).

    ``make(factory, values)`` makes the wrapped object, or None
    (``_tree.make_child``, handed down through the pipeline and the
    classification); ``freeze`` keys a static value.
    """
    captured = capture(fn)
    if captured is None:
        return None
    f = captured.function
    defaults, kwdefaults, attributes = f.__defaults__, f.__kwdefaults__, f.__dict__
    key = (
        f.__code__,
        _Identity(f.__globals__),
        None if defaults is None else freeze(defaults),
        None if kwdefaults is None else freeze(kwdefaults),
        freeze(dict(attributes)) if attributes else None,
        ClosureFactory.shape(captured),
    )
    factory = _FACTORIES.get(key)
    if factory is None:
        factory = ClosureFactory(captured, key)
        _FACTORIES.set(key, factory)
    wrapped = make(factory, captured.values)
    if wrapped is None:
        return None
    wrapped._core.source = Source(captured, f"the schedule {factory.__qualname__} ({factory.where()})")
    if only_wrapped(captured.values):
        return wrapped
    spec = wrapped._core.spec
    schedule_like = _SCHEDULE_LIKE.get(spec)
    if schedule_like is None:
        schedule_like = is_schedule_like(fn)
        _SCHEDULE_LIKE.set(spec, schedule_like)
    return wrapped if schedule_like else None  # a mask, a label or skip function: static, by value


_SCHEDULE_LIKE = cache("spec of a closure's child -> whether the callable is a schedule", 1024)
_FACTORIES = cache("a recipe's key -> its ClosureFactory (one per recipe, as builders make it anew)", 1024)


class _Identity:
    """A key part compared by identity (a function's globals: its module)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.value is self.value
