"""Classify: what a function reads: the paths its code reads of a variable, the look-ups replaced safely.

Two readings, each failing closed (``_closures`` keeps the whole object
where either says no):

- **reading code** (``_bytecode``: :func:`paths_read`, :func:`global_paths_read`): the
  paths a function's code reads of a variable, a cell or a global
  (``config.optim.lr``, ``config["lr"]``, ``config.get("lr", 1e-3)``,
  ``getattr(config, "lr")``, ``self.helper()``), read off its bytecode. Any
  other use of the variable (passed to a call, returned, stored, an
  instruction this reader does not know, on any Python version) gives
  ``None``: the whole object counts.
- **reading objects** (:func:`plan`): what the look-up reads decides, not
  the object's class. A look-up whose code is known is done as it is: an
  attribute the instance holds (its ``__dict__``, its slots: plain objects,
  dataclasses, equinox modules, pydantic models' fields,
  ``argparse.Namespace``, ``SimpleNamespace``, dict subclasses such as
  easydict's), a dict's item (dict subclasses reading their own items
  included), named tuples, lists and tuples, ml_collections' ``ConfigDict``
  and ``FrozenConfigDict`` (``FieldReference`` resolved) and OmegaConf's
  ``DictConfig`` and ``ListConfig`` (interpolations resolved); methods and
  properties of a plain class through what their code reads of ``self``.
  A look-up that is the class's own code (``__getattr__``, a custom
  ``__getattribute__`` or ``__getitem__``, a mapping's or the program's
  ``get``, a property beside a ``__getattr__``) is *guarded*
  (:func:`_guarded`), as torch.compile guards what a traced program read:
  replaced where it is proved to give the object the config holds under
  that name (in its items, its ``__dict__``, a dict held there), the same
  object when read twice, leaving the config as it was; done again, as the
  function does it, at every check (:func:`read_again`); else the object
  stays whole, and :func:`why_not` says which look-up and why. A ``.get``
  or a ``getattr`` with a default on a key or attribute absent is recorded
  as absent: the view answers the default, and the config is checked to
  stay without it. An equinox field marked ``eqx.field(static=True)`` is
  read as a static value. The plan is a tree of what is read; :class:`View`
  answers those look-ups in the rebuilt function, with the values given.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import inspect
import itertools
import types
from typing import Any, NamedTuple

from . import _quiet
from ._bytecode import Access as Access
from ._bytecode import GlobalsRead as GlobalsRead
from ._bytecode import Path as Path
from ._bytecode import getattr_is_builtin as getattr_is_builtin
from ._bytecode import global_paths_read as global_paths_read
from ._bytecode import globals_read as globals_read
from ._bytecode import paths_read as paths_read
from ._bytecode import reachable as reachable

_MAX_DEPTH = 6


def values_read(
    code: types.CodeType, var: str, obj: Any, function: types.FunctionType | None = None
) -> tuple[Any, list[tuple[str, Any]]] | None:
    """What ``code`` reads of ``obj`` (held by its variable ``var``): the shape of its look-ups and
    the values read, by path; None where that cannot be told (the whole object counts).

    What ``_static`` compares an object a static function holds by.
    """
    if function is not None and not getattr_is_builtin(function):
        return None
    node = plan(obj, paths_read(code, var), 0)
    if node is None:
        return None
    values = [(leaf.name, leaf.value) for leaf in leaves_of(node, var)]
    return shape(node), values


# --------------------------------------------------------------------------
# Reading objects: a look-up whose code is known, done as it is; the class's own, guarded.


class Fail(Exception):
    """A look-up this module cannot replace safely: the object stays whole."""


class Unproved(Fail):
    """A look-up of the class's own code not proved to give what the object holds (:func:`_guarded`):
    the object stays whole, and the warning says which look-up and why."""


class _Absent(Fail):
    """The key or attribute is not there (what a ``.get`` or a ``getattr`` with a default tells)."""


MISSING = object()


class _AbsentValue:
    """What a check reads where a key or attribute the function found absent still is."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = _AbsentValue()


def is_equinox_bound_method(value: Any) -> bool:
    """An equinox ``BoundMethod`` (a module's method, a pytree)."""
    return _is_equinox(type(value), "BoundMethod")


def type_named(value: Any, *names: str) -> bool:
    return not _names_of(type(value)).isdisjoint(names)


@functools.lru_cache(maxsize=1024)
def _names_of(cls: type) -> frozenset[str]:
    """The full names of a class and its bases (its kind, told without importing its library)."""
    return frozenset(f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)


@functools.lru_cache(maxsize=4096)
def _on_class(cls: type, name: str) -> Any:
    """``name`` as the class holds it (``inspect.getattr_static``), once per class and name."""
    return inspect.getattr_static(cls, name, MISSING)


_CONFIG_DICTS = (
    "ml_collections.config_dict.config_dict.ConfigDict",
    "omegaconf.dictconfig.DictConfig",
)
_CONFIG_LISTS = ("omegaconf.listconfig.ListConfig",)
_PYDANTIC = "pydantic.main.BaseModel"


# Attribute look-ups as ``object`` does them (SimpleNamespace's and dict's are their own, and the same:
# a data descriptor of the class, then the instance's ``__dict__``, then the class, then ``__getattr__``).
_PLAIN_GETATTRIBUTE = (
    object.__getattribute__,
    types.SimpleNamespace.__getattribute__,
    dict.__getattribute__,
)


@functools.lru_cache(maxsize=1024)
def _generic_getattribute(cls: type) -> bool:
    """Whether ``obj.name`` on an instance is ``object``'s look-up (``__getattr__`` called only where it
    finds nothing), or equinox's (which wraps bound methods, nothing else)."""
    if cls.__getattribute__ in _PLAIN_GETATTRIBUTE:
        return True
    module = next((c for c in cls.__mro__ if _is_equinox(c, "Module")), None)
    return module is not None and cls.__getattribute__ is module.__getattribute__


@functools.lru_cache(maxsize=1024)
def plain_class(cls: type) -> bool:
    """Whether ``obj.name`` on an instance is ``object``'s look-up with no ``__getattr__``: what the
    instance and its class hold, nothing computed (its methods and properties are read as code)."""
    return not hasattr(cls, "__getattr__") and _generic_getattribute(cls)


def _is_equinox(cls: type, name: str) -> bool:
    """An equinox class by its name (``equinox._module._module.Module`` now, ``equinox._module.Module``
    in equinox 0.11): told without importing equinox."""
    return cls.__qualname__ == name and (cls.__module__ or "").startswith("equinox.")


@functools.lru_cache(maxsize=1024)
def _static_fields(cls: type) -> frozenset[str]:
    """The fields of an equinox module marked ``eqx.field(static=True)``: static, not leaves."""
    if not any(_is_equinox(c, "Module") for c in cls.__mro__):
        return frozenset()
    fields = getattr(cls, "__dataclass_fields__", {})
    return frozenset(n for n, f in fields.items() if getattr(f, "metadata", {}).get("static", False))


class _Attribute(NamedTuple):
    """What ``obj.name`` is: a value, or code of its class run on it (a method or a property)."""

    kind: str  # "value", "method" or "property"
    value: Any  # the value; the method's or getter's function
    # How to read it again (``read_again``): "cfg" (a config dict's item), "own" (the
    # object's ``__dict__``), "dyn-attr" (the class's own ``__getattr__``, proved to give what it
    # holds: :func:`_guarded`) or "attr" (read as here).
    access: str = "attr"
    static: bool = False  # an equinox field marked static


def own_dict(obj: Any) -> dict[str, Any]:
    """The instance's own ``__dict__`` ({} where it has none, or where the class answers
    ``__dict__`` with code of its own, as munch's ``Munch`` does)."""
    for c in type(obj).__mro__:
        descriptor = c.__dict__.get("__dict__")
        if descriptor is not None:
            if type(descriptor) not in (types.GetSetDescriptorType, types.MemberDescriptorType):
                return {}
            try:
                own = descriptor.__get__(obj, type(obj))
            except Exception:  # noqa: BLE001 - no dict after all
                return {}
            return own if type(own) is dict else {}
    return {}


def _attribute(obj: Any, name: str) -> _Attribute:
    cls = type(obj)
    if type_named(obj, *_CONFIG_DICTS):
        if name.startswith("_") or _on_class(cls, name) is not MISSING:
            raise Fail(f"{cls.__name__}.{name} is one of its methods or its own state")
        try:
            present = name in obj
        except Exception:  # noqa: BLE001 - a config that cannot say: not read
            raise Fail(f"{cls.__name__} cannot say whether it holds {name!r}") from None
        if not present:
            raise _Absent
        try:
            return _Attribute("value", getattr(obj, name), "cfg")
        except Exception:  # noqa: BLE001 - a missing value ('???'): raised in the function, as plain
            raise Fail(f"{cls.__name__}.{name} cannot be read") from None
    if _is_namedtuple(obj):
        if name not in cls._fields:  # pyright: ignore[reportAttributeAccessIssue]
            raise Fail(f"{cls.__name__}.{name} is not one of its fields")
        return _Attribute("value", getattr(obj, name))
    if isinstance(obj, (type, types.ModuleType)) or cls in (dict, list, tuple) or _is_array(obj):
        raise Fail(f"{cls.__name__}.{name} is not read as a value")
    own = own_dict(obj)
    if type_named(obj, _PYDANTIC):
        fields = getattr(cls, "model_fields", None)
        if isinstance(fields, dict) and name in fields and name in own:
            return _Attribute("value", own[name], "own")
        if name.startswith("_"):
            raise Fail(f"{cls.__name__}.{name}: its private attributes answer through __getattr__")
    if not _generic_getattribute(cls):  # the class's own look-up answers everything
        return _Attribute("value", _present(_guarded(obj, "attr", name)), "dyn-attr")
    found = _on_class(cls, name)
    if name in own and not _is_data_descriptor(found):
        return _Attribute("value", own[name], "own", name in _static_fields(cls))
    if found is MISSING:
        if type_named(obj, _PYDANTIC):
            raise Fail(f"{cls.__name__}.{name} may be an extra field")
        if _on_class(cls, "__getattr__") is not MISSING:  # what the class's __getattr__ answers
            return _Attribute("value", _present(_guarded(obj, "attr", name)), "dyn-attr")
        raise _Absent  # not there: plain Python raises; keep that to the object itself
    if not plain_class(cls):
        if isinstance(found, property):  # beside a __getattr__: what it gives, proved as its look-ups
            return _Attribute("value", _present(_guarded(obj, "attr", name)), "dyn-attr")
        raise Fail(f"{cls.__name__}.{name} is held by the class, whose look-ups are its own")
    if isinstance(found, property):
        if found.fget is None or type(found.fget) is not types.FunctionType:
            raise Fail(f"{cls.__name__}.{name} is a property whose code cannot be read")
        return _Attribute("property", found.fget)
    if _is_equinox(type(found), "_wrap_method"):  # equinox 0.11 wraps a module's methods
        found = getattr(found, "method", None)
        if type(found) is not types.FunctionType:
            raise Fail(f"{cls.__name__}.{name} is a method whose code cannot be read")
    if type(found) is types.FunctionType:
        return _Attribute("method", found)
    if type(found).__name__ == "member_descriptor":  # __slots__
        return _Attribute("value", getattr(obj, name), static=name in _static_fields(cls))
    if callable(found) or hasattr(type(found), "__get__"):
        raise Fail(f"{cls.__name__}.{name} is a descriptor: what it reads is unknown")
    return _Attribute("value", found)  # a class constant


def _present(value: Any) -> Any:
    if value is ABSENT:
        raise _Absent
    return value


def _is_namedtuple(obj: Any) -> bool:
    """A NamedTuple: its fields a tuple of the class (a wrapped optimizer answers ``_fields`` as
    optax's NamedTuples do, through a property, and is no plain tuple to read into)."""
    return isinstance(obj, tuple) and isinstance(getattr(type(obj), "_fields", None), tuple)


def _is_array(obj: Any) -> bool:
    """A NumPy or JAX array (or anything that converts to one): read whole, never indexed here."""
    return hasattr(type(obj), "__array__") or hasattr(type(obj), "__jax_array__")


def _is_data_descriptor(x: Any) -> bool:
    return x is not MISSING and hasattr(type(x), "__set__")


def _item(obj: Any, key: Any) -> tuple[Any, str]:
    """``obj[key]``, and how to read it again: "item" (a look-up whose code is known), "dyn-item"
    (the class's own ``__getitem__``, proved to give what it holds)."""
    cls = type(obj)
    if cls in (dict, list, tuple) or type_named(obj, *_CONFIG_DICTS, *_CONFIG_LISTS):
        try:
            return obj[key], "item"
        except Exception:  # noqa: BLE001 - a missing key raises in the function itself, as plain
            raise Fail(f"{cls.__name__}[{key!r}] cannot be read") from None
    if _is_namedtuple(obj):
        return obj[key], "item"
    if _is_array(obj) or isinstance(obj, (str, bytes)):
        raise Fail(f"{cls.__name__}[{key!r}] is not read as a value")
    if isinstance(obj, dict) and _on_class(cls, "__getitem__") is _DICT_GETITEM:
        if not dict.__contains__(obj, key):  # its __missing__ would answer
            raise Fail(f"{cls.__name__}[{key!r}] is absent")
        return dict.__getitem__(obj, key), "item"
    if _on_class(cls, "__getitem__") is MISSING:
        raise Fail(f"{cls.__name__} has no items")
    value = _guarded(obj, "item", key)
    if value is ABSENT:
        raise Fail(f"{cls.__name__}[{key!r}] is absent")  # raised in the function, as plain
    return value, "dyn-item"


_DICT_GETITEM = inspect.getattr_static(dict, "__getitem__")
_DICT_GET = inspect.getattr_static(dict, "get")


def _get_access(obj: Any) -> str | None:
    """How ``obj.get(key, default)`` is read: "get" (a dict's, a config dict's), "dyn-get" (the
    class's own ``get``, a mapping's or the program's, proved to give what it holds:
    :func:`_guarded`), or None (no ``get``)."""
    cls = type(obj)
    if cls is dict or type_named(obj, *_CONFIG_DICTS):
        return "get"
    if isinstance(obj, dict) and _on_class(cls, "get") is _DICT_GET:
        return "get"
    if _is_array(obj) or isinstance(obj, (str, bytes, type, types.ModuleType)):
        return None
    if callable(_on_class(cls, "get")):  # a mapping's, or a method of the program's class
        return "dyn-get"
    return None


def _got(obj: Any, key: Any) -> Any:
    """``obj.get(key)`` of a mapping whose ``get`` is known, or :data:`ABSENT`."""
    try:
        value = obj.get(key, MISSING)
    except Exception:  # noqa: BLE001 - a missing value ('???'): raised in the function, as plain
        raise Fail(f"{type(obj).__name__}.get({key!r}) cannot be read") from None
    return ABSENT if value is MISSING else value


# --------------------------------------------------------------------------
# A look-up of the class's own code, guarded: what torch.compile's guards do for a traced
# program (record what was read, check it again), done where the code of a look-up is the
# program's (``__getattr__``, ``__getitem__``, a mapping's ``get``). No list of known classes
# decides it: the look-up is replaced where it is proved to give the object the config holds under
# that name, the same object when read twice, and to leave the config as it was; the check
# (``read_again``) does the look-up again at every flatten and eager build, as the function would.


_RAISED = object()  # the look-up raised AttributeError or KeyError: the name is absent
_MAX_STATE = 256  # the items of the object's storage its state is told by, at most


def _spell_lookup(obj: Any, kind: str, key: Any) -> str:
    cls = type(obj).__name__
    if kind == "attr":
        if isinstance(_on_class(type(obj), key), property):
            return f"the property {cls}.{key}"
        how = "__getattr__" if _generic_getattribute(type(obj)) else "__getattribute__"
        return f"{cls}.{how}({key!r})"
    if kind == "item":
        return f"{cls}.__getitem__({key!r})"
    return f"{cls}.get({key!r})"


def _lookup_once(obj: Any, kind: str, key: Any) -> Any:
    """The look-up as the function does it: the value, :data:`MISSING` (``.get``'s default), or
    :data:`_RAISED`."""
    try:
        if kind == "attr":
            return getattr(obj, key)
        if kind == "item":
            return obj[key]
        return obj.get(key, MISSING)
    except (AttributeError, KeyError):
        return _RAISED


def _places(obj: Any) -> list[dict[Any, Any]]:
    """Where an object holds its values: its items (a dict), its ``__dict__``, and the dicts held
    there or in its slots (``self._fields``, dotmap's ``_map``, immutabledict's ``_dict``)."""
    out: list[dict[Any, Any]] = []
    if isinstance(obj, dict):
        out.append(obj)
    own = own_dict(obj)
    if own:
        out.append(own)
    held = list(own.values())
    for c in type(obj).__mro__:
        slots = c.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            descriptor = c.__dict__.get(name)
            if isinstance(descriptor, types.MemberDescriptorType):
                try:
                    held.append(descriptor.__get__(obj, type(obj)))
                except AttributeError:  # an empty slot
                    pass
    out += [h for h in held if isinstance(h, dict) and h is not obj and h is not own]
    return out


def _state(obj: Any) -> tuple[Any, ...]:
    """What the object holds, by identity: a look-up that changes it (counts, caches, makes an
    absent key) is not a read."""
    return tuple(
        tuple((k, id(v)) for k, v in itertools.islice(dict.items(p), _MAX_STATE)) for p in _places(obj)
    )


def _guarded(obj: Any, kind: str, key: Any) -> Any:
    """The value of a look-up of the class's own code (``kind``: "attr", "item", "get"), or
    :data:`ABSENT`; :class:`Fail` (saying why) where it is not proved to give what the object holds.
    """
    where = _spell_lookup(obj, kind, key)
    try:
        before = _state(obj)
        with _quiet.quietly():
            first = _lookup_once(obj, kind, key)
            second = _lookup_once(obj, kind, key)
        after = _state(obj)
    except Exception as e:  # noqa: BLE001 - it raises: the object stays whole
        raise Unproved(f"{where} raises {type(e).__name__}") from None
    if after != before:
        raise Unproved(f"{where} changes the object when it is read")
    if first is not second:
        try:
            equal = bool(first == second)
        except Exception:  # noqa: BLE001 - cannot say
            equal = False
        if equal:
            raise Unproved(f"{where} computes its value (a new object each time it is read)")
        raise Unproved(f"{where} gives another value each time it is read")
    try:
        stored = [dict.__getitem__(p, key) for p in _places(obj) if dict.__contains__(p, key)]
    except TypeError:  # an unhashable key
        stored = []
    if first is MISSING or first is _RAISED:
        if stored:
            raise Unproved(f"{where} does not give the value it holds under {key!r}")
        return ABSENT
    if not any(s is first for s in stored):
        raise Unproved(f"{where} computes its value (it is not a value the object holds under {key!r})")
    return first


def resolve(obj: Any, steps: Path) -> Any:
    """What ``steps`` read of ``obj`` now: a value, or :data:`ABSENT` where it is absent."""
    for kind, key in steps:
        if kind == "get":
            access = _get_access(obj)
            if access is None:
                raise Fail(f"{type(obj).__name__}.get is not a mapping's")
            if access == "get":
                obj = _got(obj, key)
            else:  # proved when planned: done again as the function does it
                obj = _lookup_once(obj, "get", key)
                obj = ABSENT if obj is MISSING or obj is _RAISED else obj
            if obj is ABSENT:
                return ABSENT
        elif kind == "item":
            obj = _item(obj, key)[0]
        else:
            try:
                found = _attribute(obj, key)
            except _Absent:
                return ABSENT
            if found.kind != "value":
                raise Fail(f"{type(obj).__name__}.{key} is code")
            obj = found.value
    return obj


# How a look-up was done when the plan was made, to be done again: (access, the object's type
# then, key); access is "item", "get", "cfg" (a config dict's attribute: its item), "own" (an
# attribute in the object's ``__dict__``), "dyn-attr", "dyn-item", "dyn-get" (the class's own
# look-up, done again as the function does it) or "attr" (any other attribute, read as planned).
Fast = tuple[tuple[str, type, Any], ...]


def read_again(root: Any, fast: Fast, steps: Path) -> Any:
    """What ``steps`` read of ``root`` now, as :func:`resolve` tells it: each look-up done as
    it was when the plan was made (:class:`Leaf` ``.fast``), where each object along the path
    is of the type it was then (its look-ups were found safe for that type); :func:`resolve`
    itself for any other. What a check runs at every jitted call (``_closures.Source``)."""
    value: Any = root
    for access, cls, key in fast:
        if type(value) is not cls:
            return resolve(root, steps)
        if access == "own":
            value = value.__dict__.get(key, ABSENT)
        elif access == "cfg":
            value = value[key] if key in value else ABSENT
        elif access == "item":
            value = value[key]
        elif access == "get":
            value = _got(value, key)
        elif access == "dyn-attr":  # the class's own look-ups, done as the function does them
            value = getattr(value, key, ABSENT)
        elif access == "dyn-item":
            value = value[key]
        elif access == "dyn-get":
            value = value.get(key, ABSENT)
        else:
            value = _attribute_value(value, key)
        if value is ABSENT:
            return ABSENT
    return value


def _attribute_value(obj: Any, name: str) -> Any:
    try:
        found = _attribute(obj, name)
    except _Absent:
        return ABSENT
    if found.kind != "value":
        raise Fail(f"{type(obj).__name__}.{name} is code")
    return found.value


def viewable(value: Any) -> bool:
    """Whether a value may be replaced by a view of what is read of it (an object, a container)."""
    if value is None or isinstance(value, (str, bytes, bool, int, float, complex, type, types.ModuleType)):
        return False
    return not callable(value) or (hasattr(value, "__dict__") and not isinstance(value, types.FunctionType))


# --------------------------------------------------------------------------
# The plan of a captured object: the look-ups read, as a tree.


class Node:
    """The look-ups read of one object: attributes and items, each a value or a deeper node; and
    those found absent (a ``.get`` or ``getattr`` with a default), with the steps to them."""

    __slots__ = ("absent", "attrs", "items")

    def __init__(self) -> None:
        self.attrs: dict[str, Any] = {}  # name -> Node | Leaf | _Code
        self.items: dict[Any, Any] = {}  # key -> Node | Leaf
        self.absent: dict[Access, Path] = {}  # ("attr", name) or ("item", key) -> steps from the root


class Leaf:
    """A value read whole: a parameter of the factory, read along ``steps`` from the captured object."""

    __slots__ = ("fast", "name", "static", "steps", "value", "why")

    def __init__(self, value: Any, steps: Path, fast: Fast, static: bool = False, why: str = ""):
        self.value = value
        self.steps = steps
        self.fast = fast  # the look-ups as they were done (``read_again``)
        self.name = ""
        self.static = static  # an equinox field marked ``eqx.field(static=True)``: static, not a leaf
        self.why = why  # read whole because a deeper look-up was not replaced safely: why


class _Code(NamedTuple):
    """A method or property of the object's class, run on the view."""

    kind: str  # "method" or "property"
    function: types.FunctionType


def plan(obj: Any, paths: tuple[Path, ...] | None, depth: int, at: Path = (), fast: Fast = ()) -> Node | None:
    """The look-ups ``paths`` make of ``obj`` (itself read along ``at``, done as ``fast``), or
    None where one cannot be replaced safely."""
    if paths is None or depth > _MAX_DEPTH:
        return None
    node = Node()
    try:
        for path in paths:
            _add(node, obj, path, depth, at, fast)
    except Fail:
        return None
    return node


def why_not(obj: Any, paths: tuple[Path, ...] | None) -> list[str]:
    """Why what ``paths`` read of ``obj`` is not replaced, look-up by look-up: the look-ups of the
    class's own code not proved to give what it holds (:func:`_guarded`), the first one that stops
    the plan and those that make a value read whole. Empty where nothing of that kind failed."""
    if paths is None:
        return []
    node = Node()
    try:
        for path in paths:
            _add(node, obj, path, 0, (), ())
    except Unproved as e:
        return [str(e)]
    except Fail:
        return []
    return [leaf.why for leaf in leaves_of(node, "") if leaf.why]


def _add(node: Node, obj: Any, path: Path, depth: int, at: Path, fast: Fast) -> None:
    (kind, key), rest = path[0], path[1:]
    cls = type(obj)
    static = False
    get = _get_access(obj) if kind == "get" else None
    if kind == "get" and get is None:
        kind, key, rest = "call", "get", ()  # a method ``get`` of the object's class
    if kind in ("item", "get"):
        if get == "get":
            value, how = _got(obj, key), "get"
        elif get == "dyn-get":
            value, how = _guarded(obj, "get", key), "dyn-get"
        else:
            value, how = _item(obj, key)
        if value is ABSENT:
            node.absent[("item", key)] = (*at, (kind, key))
            return
        table, step, access = node.items, (kind, key), (how, cls, key)
    else:
        try:
            found = _attribute(obj, key)
        except _Absent:
            if kind != "getattr?":
                raise
            node.absent[("attr", key)] = (*at, ("attr", key))
            return
        table, step, access = node.attrs, ("attr", key), (found.access, cls, key)
        if found.kind != "value":
            if rest or (kind == "call") != (found.kind == "method"):
                raise Fail(f"{cls.__name__}.{key} is code, read as a value or looked into")
            code = found.value.__code__
            if code.co_argcount == 0 or not getattr_is_builtin(found.value):
                raise Fail(f"{cls.__name__}.{key}'s code cannot be read")
            inner = plan(obj, paths_read(code, code.co_varnames[0]), depth + 1, at, fast)
            if inner is None:
                raise Fail(f"{cls.__name__}.{key}'s code reads what cannot be replaced")
            table[key] = _Code(found.kind, found.value)
            _merge(node, inner)
            return
        value, static = found.value, found.static
        if kind == "call":  # a callable value held by the object: called as it is
            rest = ()
    held = table.get(key)
    at, fast = (*at, step), (*fast, access)
    if not rest or isinstance(held, Leaf) or not viewable(value):
        table[key] = Leaf(value, at, fast, static)  # read whole: what is read deeper is in it
        return
    inner = Node() if held is None else held
    try:
        _add(inner, value, rest, depth, at, fast)
    except Fail as e:  # a deeper look-up not replaced safely: this value is read whole, as it is
        table[key] = Leaf(value, at, fast, static, str(e) if isinstance(e, Unproved) else "")
        return
    table[key] = inner


def _merge(into: Node, other: Node) -> None:
    into.absent.update(other.absent)
    for table, more in ((into.attrs, other.attrs), (into.items, other.items)):
        for key, value in more.items():
            held = table.get(key)
            if isinstance(value, Node) and isinstance(held, Node):
                _merge(held, value)
            elif held is None or isinstance(value, Leaf):
                table[key] = value


def _spell(kind: str, key: Any) -> str:
    return f".{key}" if kind == "attr" else f"[{key!r}]"


def leaves_of(node: Node, prefix: str) -> list[Leaf]:
    """The leaves of a plan, each named by its path (``config.optim.lr``, ``config['lr']``)."""
    out: list[Leaf] = []
    for kind, table in (("attr", node.attrs), ("item", node.items)):
        for key, value in table.items():
            if isinstance(value, Leaf):
                value.name = prefix + _spell(kind, key)
                out.append(value)
            elif isinstance(value, Node):
                out.extend(leaves_of(value, prefix + _spell(kind, key)))
    return out


def absent_of(node: Node, prefix: str) -> list[tuple[str, Path]]:
    """The keys and attributes found absent in a plan: each named by its path, with its steps."""
    out = [(prefix + _spell(kind, key), steps) for (kind, key), steps in node.absent.items()]
    for kind, table in (("attr", node.attrs), ("item", node.items)):
        for key, value in table.items():
            if isinstance(value, Node):
                out.extend(absent_of(value, prefix + _spell(kind, key)))
    return out


def functions_of(node: Node) -> list[types.FunctionType]:
    """The methods and property getters of the object's class that a plan runs on the view."""
    out: list[types.FunctionType] = []
    for value in (*node.attrs.values(), *node.items.values()):
        if isinstance(value, _Code):
            out.append(value[1])  # its function (by index: pyright would bind the attribute)
        elif isinstance(value, Node):
            out.extend(functions_of(value))
    return out


def shape(node: Node) -> Any:
    """A plan without its values: part of the factory's key."""

    def part(x: Any) -> Any:
        if isinstance(x, Leaf):
            return ("leaf", x.name, x.static)
        if isinstance(x, _Code):
            return (x.kind, x.function)
        return shape(x)

    return (
        tuple((k, part(v)) for k, v in node.attrs.items()),
        tuple((k, part(v)) for k, v in node.items.items()),
        tuple(sorted(node.absent, key=repr)),
    )


class View:
    """What a rebuilt function holds in place of a captured object: the look-ups it reads, answered.

    The function's code was read: it only looks into the variable (see
    :func:`paths_read`), along the paths of the plan; methods and properties
    of the object's class run on the view. A key or attribute absent from
    the plan is absent from the view: ``.get(key, default)`` gives the
    default, ``getattr(view, name, default)`` too.
    """

    __slots__ = ("_optax_pytree_attrs", "_optax_pytree_items")

    def __init__(self, node: Node, values: dict[str, Any]):
        attrs: dict[str, Any] = {}
        for key, x in node.attrs.items():
            if isinstance(x, Leaf):
                attrs[key] = values[x.name]
            elif isinstance(x, _Code):
                attrs[key] = x
            else:
                attrs[key] = View(x, values)
        self._optax_pytree_attrs = attrs
        self._optax_pytree_items = {
            k: values[x.name] if isinstance(x, Leaf) else View(x, values) for k, x in node.items.items()
        }

    def __getattr__(self, name: str) -> Any:
        try:
            found = self._optax_pytree_attrs[name]
        except KeyError:
            if name == "get":  # a mapping's (read as ``("get", key)``: see ``_add``)
                return self._optax_pytree_get
            raise AttributeError(name) from None
        if isinstance(found, _Code):
            if found.kind == "property":
                return found.function(self)
            return types.MethodType(found.function, self)
        return found

    def _optax_pytree_get(self, key: Any, default: Any = None) -> Any:
        items = self._optax_pytree_items
        return items[key] if key in items else default

    def __getitem__(self, key: Any) -> Any:
        return self._optax_pytree_items[key]

    def __repr__(self) -> str:
        return f"<view of {sorted(self._optax_pytree_attrs) + sorted(self._optax_pytree_items, key=repr)}>"
