"""Classify: each bound argument is a dynamic leaf, a child, or static.

- **dynamic**: int (not bool), float, complex, NumPy/JAX numeric arrays and
  scalars; stored as JAX arrays (see ``_leaves``). A dynamic argument is a
  *candidate* for detection: the probe may find that the factory needs it as
  a concrete Python value (static) or that it only compares it (guarded).
- **child**: a wrapped value, or a tuple/list/dict holding wrapped values;
  and a callable that ``_closures`` turns into one (below).
- **static**: everything else (bool, None, str, dtypes, masks, classes, a
  function that closes over nothing, any callable that does not become a
  child), compared by value (``_static``).

A callable argument (a function, a bound method, a ``functools.partial``, a
callable object; also inside a tuple, list or dict) becomes a child when
``_closures`` can rebuild it from what it captures (cells assigned and never
written, holding a number, a numeric array, a wrapped object or such a
callable, directly or read through a captured object such as a config) and
the object made from it is a schedule, called at a step count, made without
a warning, that gives a number; or when all it captures are wrapped objects
and functions. It is made by the ``make_child`` that ``classify`` is handed
(``_tree.make_child``, through ``_pipeline.make``). Under ``dynamic_only``,
or with the argument named in ``static_argnames`` or marked :func:`static`,
the callable stays static.

The user overrides the rules per argument, by name (``static_argnames``,
``dynamic_argnames``, ``dynamic_only``) or at the call site by marking the
value (:func:`static`, :func:`dynamic`), which also works through the
drop-in module, whose factories have optax's signatures.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import inspect
import os
import types
import typing
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias, TypeVar

import jax

from . import _closures, _leaves, _recompiled, _static
from ._annotations import Renderer
from ._bind import FactoryInfo, Wrapped, is_wrapped
from ._children import SLOT as SLOT  # pickles of templates written before name it here
from ._children import Template, contains_wrapped, flat_container, structure, structure_of
from ._value import ConfigKey, ValueObject
from ._vocabulary import Role

# A classified argument: its name -> its role (``Role``), in signature order.
Roles: TypeAlias = dict[str, Role]

T = TypeVar("T")


# --------------------------------------------------------------------------
# Marking a value at the call site.


class _Marked:
    __slots__ = ("role", "value")

    def __init__(self, value: Any, role: str):
        if isinstance(value, _Marked):
            raise TypeError(f"optax_pytree.{role}: {value!r} is already marked {value.role}")
        self.value = value
        self.role = role

    def __repr__(self) -> str:
        return f"optax_pytree.{self.role}({self.value!r})"


def static(value: T) -> T:
    """Marks an argument static at the call site: its value is part of the compiled program.

    The spelling of ``static_argnames`` for one argument, usable where a
    keyword cannot be added: through the drop-in module (whose factories have
    optax's own signatures), in ``tx.replace(...)``, in a typed call. A static
    numeric argument is a Python constant of the compiled program, as in raw
    optax (its arithmetic in double precision): use it for exact optax
    numerics, or for a value that must never vary.

    Args:
        value: the argument's value.

    Returns:
        The value, marked (typed as the value itself).

    Examples:
        >>> import optax, optax_pytree as opx
        >>> tx = opx.wrap(optax.adam, learning_rate=1e-3, b2=opx.static(0.999))
        >>> tx.static_argnames
        ('b2', 'mu_dtype', 'nesterov')
        >>> import optax_pytree.optax as dropin
        >>> dropin.adam(1e-3, b2=opx.static(0.999)).b2
        0.999
    """
    return typing.cast(T, _Marked(value, Role.STATIC))


def dynamic(value: T) -> T:
    """Marks a numeric argument dynamic at the call site, with no automatic detection.

    The spelling of ``dynamic_argnames`` for one argument. The value stays a
    plain leaf, not probed: if the factory needs it as a Python value, the
    error comes at trace time and names it.

    Args:
        value: a number, numeric array, or pytree of them.

    Returns:
        The value, marked (typed as the value itself).

    Examples:
        >>> import optax, optax_pytree as opx
        >>> opx.wrap(optax.sgd, learning_rate=opx.dynamic(0.1)).dynamic_argnames
        ('learning_rate',)
    """
    return typing.cast(T, _Marked(value, Role.DYNAMIC))


# --------------------------------------------------------------------------
# Options.


class Options(ValueObject):
    """The user's overrides, kept by the spec so that ``replace`` keeps them (``key``: all three)."""

    __slots__ = ("dynamic", "dynamic_only", "static")

    def __init__(
        self,
        static: frozenset[str] = frozenset(),
        dynamic: frozenset[str] = frozenset(),
        dynamic_only: frozenset[str] | None = None,
    ):
        self.static = static
        self.dynamic = dynamic
        self.dynamic_only = dynamic_only
        self.key: tuple[Any, ...] = (static, dynamic, dynamic_only)
        self.cache_hash()

    def with_marks(self, static: Iterable[str], dynamic: Iterable[str]) -> Options:
        static, dynamic = frozenset(static), frozenset(dynamic)
        if not static and not dynamic:
            return self
        return Options((self.static - dynamic) | static, (self.dynamic - static) | dynamic, self.dynamic_only)


NO_OPTIONS = Options()


def make_options(
    info: FactoryInfo,
    static_argnames: str | Iterable[str],
    dynamic_argnames: str | Iterable[str],
    dynamic_only: str | Iterable[str] | None,
) -> Options:
    static = info.check_names(static_argnames, "static_argnames")
    dynamic = info.check_names(dynamic_argnames, "dynamic_argnames")
    both = static & dynamic
    if both:
        raise ValueError(
            f"{info.name}: argument {sorted(both)[0]!r} is in both static_argnames and dynamic_argnames"
        )
    only = None if dynamic_only is None else info.check_names(dynamic_only, "dynamic_only")
    if only is not None and only & static:
        raise ValueError(
            f"{info.name}: argument {sorted(only & static)[0]!r} is in both static_argnames and dynamic_only"
        )
    if not static and not dynamic and only is None:
        return NO_OPTIONS
    return Options(static, dynamic, only)


# Makes the wrapped child of a callable given as an argument from its recipe and captured values
# (``_closures``), or None where the mechanism does not honour it: ``_tree.make_child``, handed to
# ``_pipeline.make`` by ``_tree.make`` and to :func:`classify` by the pipeline (no import of ``_tree``).
MakeChild = Callable[[Any, dict[str, Any]], Any]


def _closure_child(value: Any, make_child: MakeChild | None) -> Any:
    """The child a callable given as an argument becomes (``_closures``), or None."""
    if make_child is None or not callable(value) or is_wrapped(value):
        return None
    return _closures.child(value, make_child, _static.freeze)


def _with_closure_children(value: Any, make_child: MakeChild | None) -> Any:
    """A container with the callables in it that become children (``_closures``) made so."""
    if make_child is None:
        return value
    if isinstance(value, dict):
        items = {k: _with_closure_children(v, make_child) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    if isinstance(value, (tuple, list)):
        items = [_with_closure_children(v, make_child) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    child = _closure_child(value, make_child)
    return value if child is None else child


_WARNED: set[tuple[str, int]] = set()  # the code locations warned about, once each
_CHECKED: set[tuple[str, int]] = set()  # the code locations whose look-ups were read (``unproved``)


def _warn_static(info: FactoryInfo, name: str, value: Any, frozen: Any) -> None:
    """Warns, once per code location, of a callable argument that stays static where its numbers
    cost a compilation each: it holds something compared by identity, or reads its numbers
    through look-ups of a class's own code not proved to give what the object holds (each named,
    with why), or it differs from the one the same code gave before by a number alone (its path
    and both values)."""
    fn = value.__func__ if isinstance(value, types.MethodType) else getattr(value, "func", value)
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    where = (code.co_filename, code.co_firstlineno)
    qualname = getattr(fn, "__qualname__", fn)
    place = (
        f"{info.name}: argument {name!r}, the function {qualname!r} ({os.path.basename(where[0])}:{where[1]})"
    )
    _warn_recompiled(place, (info.name, name, where), frozen)
    if where in _WARNED:
        return
    held = _static.held_by_identity(frozen)
    unproved: list[str] = []
    if where not in _CHECKED:
        _CHECKED.add(where)
        unproved = _closures.unproved(value)
    if not held and not unproved:
        return
    _WARNED.add(where)
    kinds = sorted({type(h).__name__ for h in held})
    if unproved:
        compared = f", compared by identity ({' and '.join(kinds)})" if held else ", compared by value"
        text = (
            f"reads its numbers through look-ups that are the class's own code and not proved to give "
            f"the values the object holds ({'; '.join(unproved)}), so it stays static{compared}: "
            "every optimizer built with another value is a new compilation. Hold the numbers as the "
            "object's attributes or items, read as they are stored, or make the function once and reuse it"
        )
    else:
        text = (
            f"holds {' and '.join(kinds)} compared by identity (its value cannot be compared): every "
            "optimizer built with a new one is a new compilation. Hold plain numbers, a dataclass, a dict "
            "or a config object whose look-ups give what it holds instead, or make the function once and "
            "reuse it"
        )
    warnings.warn(
        f"optax_pytree: {place}, {text}; optax_pytree.explain(a, b) says what differs between two builds",
        stacklevel=_recompiled.user_stacklevel(),
    )


def _warn_recompiled(place: str, at: tuple[str, str, tuple[str, int]], frozen: Any) -> None:
    """Warns, once per code location, where a static callable differs from the one the same code
    gave before by numbers alone (``_recompiled``)."""
    before = _recompiled.last(at, frozen)
    if before is None or before == frozen or _recompiled.warned(at[2]):
        return
    found = _static.number_differences(before, frozen)
    if found:
        _recompiled.warn(
            at[2],
            f"optax_pytree: {place}, is static, and this optimizer differs from one the same code built "
            f"before only by a number it holds static ({_recompiled.shown(found)}): each value is a new "
            "compilation. The function is part of the program, not a schedule whose numbers are leaves "
            "(optax_pytree.explain(a, b) says why); read the number in a schedule, or pass it as a "
            "hyperparameter",
        )


# --------------------------------------------------------------------------
# Values the factory's annotations rule out.


def _admits_str(annotation: Any) -> bool:
    """Whether an annotation could accept a ``str`` (unknown ones do)."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return True
    if isinstance(annotation, str):  # not evaluated: judge by its words
        return any(word in annotation for word in ("str", "Any", "object", "Sequence", "Iterable"))
    if isinstance(annotation, (typing.TypeVar, typing.ForwardRef)):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(isinstance(a, str) for a in typing.get_args(annotation))
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        return any(_admits_str(a) for a in typing.get_args(annotation))
    if origin is not None:
        annotation = origin
    if isinstance(annotation, type):
        try:
            return issubclass(str, annotation)
        except TypeError:
            return True
    return True


def _annotation_text(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    try:  # optax's aliases by name (optax.ScalarOrSchedule), not expanded
        return Renderer()(annotation)
    except Exception:  # noqa: BLE001 - only for a message
        pass
    name = getattr(annotation, "__name__", None)
    return name if isinstance(name, str) and typing.get_origin(annotation) is None else str(annotation)


def check_value(info: FactoryInfo, name: str, value: Any) -> None:
    """A ``str`` given for an argument whose annotation rules strings out: an error now."""
    if not isinstance(value, (str, bytes)):
        return
    annotation = info.annotation(name)
    if _admits_str(annotation):
        return
    hint = ""
    try:
        float(value)
        hint = f"; pass a number: {name}={value.decode() if isinstance(value, bytes) else value}"
    except ValueError:
        pass
    raise TypeError(
        f"{info.name}: argument {name!r} got the string {value!r}, but it is annotated "
        f"{_annotation_text(annotation)}, which does not admit a string{hint}"
    )


# --------------------------------------------------------------------------
# Classification.


_NO_DEFAULT = object()
NO_KEY = ConfigKey(())  # a Classified's keys until classification sets them


class Classified:
    """The roles of one configuration's arguments, and the key of its configuration."""

    __slots__ = (
        "analysis_key",
        "candidates",
        "children",
        "forced",
        "key",
        "options",
        "python_numbers",
        "roles",
        "templates",
        "values",
        "wide",
    )

    def __init__(self) -> None:
        self.roles: Roles = {}
        self.values: dict[str, Any] = {}
        self.templates: dict[str, Template] = {}
        self.candidates: list[str] = []  # numeric arguments for detection and guards
        self.forced: list[str] = []  # numeric arguments forced dynamic (no detection)
        self.wide: list[str] = []  # Python integers beyond the range of an integer leaf: static
        self.key = NO_KEY  # the configuration: what its spec is made of
        # The configuration and what a factory may decide about a value besides
        # comparing it (its Python type, whether it is the default object):
        # the analyses are cached, and verified, per analysis key.
        self.analysis_key = NO_KEY
        self.python_numbers = True  # every candidate a Python number, nothing forced dynamic (no tracer)
        self.children: list[str] = []  # the arguments whose role is CHILD
        self.options: Options = NO_OPTIONS

    @property
    def python(self) -> bool:
        """The values are the factory's arguments as they are (Python numbers, static values; no child)."""
        return self.python_numbers and not self.children


def factory_key(info: FactoryInfo) -> Any:
    """The factory as configurations key it: by what makes it (a builder's fresh closure is the same)."""
    key = info.key
    if key is None:
        key = info.key = _static.freeze(info.factory)
    return key


def classify(
    info: FactoryInfo, arguments: dict[str, Any], options: Options, make_child: MakeChild | None
) -> Classified:
    """The role of each argument, and the keys of the configuration (see :class:`Classified`).

    ``make_child``: how a callable argument becomes a child (``_closures``); None: none
    does (``dynamic_only`` given asks the same).
    """
    if options is NO_OPTIONS:
        out = _classify_common(info, arguments, make_child)
        if out is not None:
            return out
    if options.dynamic_only is not None:
        make_child = None
    return _classify(info, arguments, options, make_child)


def _classify_common(
    info: FactoryInfo, arguments: dict[str, Any], make_child: MakeChild | None
) -> Classified | None:
    """:func:`classify` of the common values, no option given: on every rebuild, kept short.

    Python floats and integers (candidates), ``None`` and bools (static),
    wrapped values and containers of them only (children), functions that
    close over nothing (static: a mask or label function written in the
    builder), other callables (children where ``_closures`` makes them so,
    else static). Anything else: None, and :func:`_classify` decides, as it
    would for these values.
    """
    out = Classified()
    key_parts: list[Any] = []
    given: list[Any] = []
    roles, values, candidates, children = out.roles, out.values, out.candidates, out.children
    defaults = info.defaults
    x64 = bool(jax.config.jax_enable_x64)  # pyright: ignore[reportAttributeAccessIssue]
    for name, value in arguments.items():
        kind = type(value)
        if kind is float or (kind is int and _leaves.fits_int_leaf(value)):
            candidates.append(name)
            key_parts.append((name, Role.DYNAMIC, _leaves.python_kind_key(kind, x64)))
            given.append((kind, value is defaults.get(name, _NO_DEFAULT)))
            roles[name] = Role.DYNAMIC
        elif value is None or kind is bool:
            key_parts.append((name, Role.STATIC, (kind, value)))
            roles[name] = Role.STATIC
        elif isinstance(value, Wrapped):  # a schedule, an inner optimizer
            key_parts.append((name, Role.CHILD, structure(value)))
            roles[name] = Role.CHILD
            children.append(name)
        elif (
            kind is types.FunctionType
            and value.__closure__ is None
            and not _closures.reads_module_values(value)
        ):  # nothing to make a child of
            key_parts.append((name, Role.STATIC, _static.freeze(value)))
            roles[name] = Role.STATIC
        elif (flat := flat_container(value)) is not None:  # chain's, partition's
            out.templates[name], shape = flat
            key_parts.append((name, Role.CHILD, flat[0].key, shape))
            roles[name] = Role.CHILD
            children.append(name)
        elif make_child is not None and callable(value) and kind is not type:
            child = _closure_child(value, make_child)
            if child is not None:  # a schedule written as a closure: its numbers are leaves (_closures)
                value = child
                key_parts.append((name, Role.CHILD, structure(child)))
                roles[name] = Role.CHILD
                children.append(name)
            else:
                frozen = _static.freeze(value)
                key_parts.append((name, Role.STATIC, frozen))
                roles[name] = Role.STATIC
                _warn_static(info, name, value, frozen)
        else:
            return None
        values[name] = value
    out.key = ConfigKey((factory_key(info), tuple(key_parts), NO_OPTIONS.key))
    out.analysis_key = ConfigKey((out.key, tuple(given)))
    return out


def _classify(
    info: FactoryInfo, arguments: dict[str, Any], options: Options, make_child: MakeChild | None
) -> Classified:
    out = Classified()
    marked_static, marked_dynamic = [], []
    for name, value in arguments.items():
        if isinstance(value, _Marked):
            (marked_static if value.role == Role.STATIC else marked_dynamic).append(name)
            arguments = {**arguments, name: value.value}
    options = options.with_marks(marked_static, marked_dynamic)
    out.options = options
    key_parts: list[Any] = []
    given: list[Any] = []  # what a factory may decide about a candidate besides comparing it
    defaults = info.defaults
    for name, value in arguments.items():
        check_value(info, name, value)
        if name in options.static:
            role = Role.STATIC
            key_parts.append((name, role, _static.freeze(value)))
        elif name in options.dynamic:
            if not (_leaves.is_numeric_leaf(value) or _leaves.is_numeric_tree(value)):
                raise TypeError(
                    f"{info.name}: argument {name!r} is forced dynamic (dynamic_argnames or "
                    f"optax_pytree.dynamic) but its value {value!r} "
                    "is not numeric (an int, float, complex or numeric array, or a pytree of them)"
                )
            out.python_numbers = False
            role = Role.DYNAMIC
            out.forced.append(name)
            key_parts.append((name, "forced dynamic", _leaves.aval_key(value)))
        elif is_wrapped(value):
            role = Role.CHILD
            key_parts.append((name, role, structure(value)))
        elif isinstance(value, (tuple, list, dict)) and contains_wrapped(
            value := _with_closure_children(value, make_child)
        ):
            role = Role.CHILD
            out.templates[name], value = Template.split(value)
            key_parts.append((name, role, out.templates[name].key, structure_of(value)))
        elif _leaves.is_integer_scalar(value) and not _leaves.fits_int_leaf(value):
            # 10**10 steps: an int32 leaf cannot hold it, Python's int can.
            role = Role.STATIC
            out.wide.append(name)
            key_parts.append((name, role, _static.freeze(value)))
        elif _leaves.is_numeric_leaf(value) and (
            options.dynamic_only is None or name in options.dynamic_only
        ):
            role = Role.DYNAMIC
            out.candidates.append(name)
            # Not the shape: a batch of values (a population, replaced outside
            # vmap) takes the branches of its members (checked elementwise).
            key_parts.append((name, role, _leaves.kind_key(value)))
            given.append((_leaves.given_type(value), value is defaults.get(name, _NO_DEFAULT)))
            out.python_numbers = out.python_numbers and type(value) in (int, float, complex)
        else:
            child = _closure_child(value, make_child)
            if child is not None:  # a schedule written as a closure: its numbers are leaves (_closures)
                role = Role.CHILD
                value = child
                key_parts.append((name, role, structure(value)))
            else:
                role = Role.STATIC
                frozen = _static.freeze(value)
                key_parts.append((name, role, frozen))
                if callable(value):
                    _warn_static(info, name, value, frozen)
        out.roles[name] = role
        out.values[name] = value
        if role == Role.CHILD:
            out.children.append(name)
    out.key = ConfigKey((factory_key(info), tuple(key_parts), options.key))
    out.analysis_key = ConfigKey((out.key, tuple(given)))
    return out
