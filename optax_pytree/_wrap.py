"""The generic wrapper: any optax factory's result as a JAX pytree."""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import operator
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _detect, _leaves, _static

_EMPTY = inspect.Parameter.empty
_MARK = "__optax_pytree_factory__"  # set by @pytree_transformation on its result

DYNAMIC = "dynamic"
CHILD = "child"
STATIC = "static"


# --------------------------------------------------------------------------
# Factories: signature, binding, calling.


@functools.lru_cache(maxsize=1)
def _optax_names() -> dict[int, str]:
    import optax.contrib
    import optax.schedules

    from . import _catalog

    names: dict[int, str] = {}
    for module in (optax.schedules, optax.contrib, optax):  # later wins: prefer optax.x
        for name in _catalog.public_names(module):
            obj, deprecated = _catalog.get_quietly(module, name)
            if obj is not None and not deprecated:
                names[id(obj)] = f"{module.__name__}.{name}"
    return names


def _public_name(factory: Any) -> str:
    """``optax.adam`` rather than ``optax._src.alias.adam`` where possible."""
    found = _optax_names().get(id(factory))
    if found is not None:
        return found
    qualname = getattr(factory, "__qualname__", None) or repr(factory)
    module_name = getattr(factory, "__module__", None)
    return f"{module_name}.{qualname}" if module_name else qualname


class _FactoryInfo:
    """What ``wrap`` needs to know about a factory, computed once per factory."""

    def __init__(self, public: Any, factory: Callable[..., Any]):
        self.public = public  # what the user sees (a decorated factory stays decorated)
        self.factory = factory  # what gets called
        try:
            self.signature = inspect.signature(factory)
        except (TypeError, ValueError) as e:
            raise TypeError(f"optax_pytree.wrap: cannot read the signature of {factory!r}: {e}") from None
        params = list(self.signature.parameters.values())
        self.var_positional = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
        self.var_keyword = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        self.named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        self.param_names = frozenset(p.name for p in params)
        self.simple = (
            self.var_positional is None
            and self.var_keyword is None
            and all(p.kind is not p.POSITIONAL_ONLY for p in params)
        )
        # How to call it back: positionally up to (and including) *args.
        self.positional: list[tuple[str, bool]] = []  # (name, is *args)
        self.keyword: list[str] = []
        for p in params:
            if p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and self.var_positional):
                self.positional.append((p.name, False))
            elif p.kind is p.VAR_POSITIONAL:
                self.positional.append((p.name, True))
            elif p.kind is not p.VAR_KEYWORD:
                self.keyword.append(p.name)
        self._name: str | None = None

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = _public_name(self.public)
        return self._name

    def check_names(self, names: Iterable[str], what: str) -> frozenset[str]:
        if isinstance(names, str):
            names = (names,)
        names = frozenset(names)
        for n in sorted(names):
            if not isinstance(n, str):
                raise TypeError(f"{self.name}: {what} must be argument names (str), got {n!r}")
            if n not in self.param_names and self.var_keyword is None:
                raise ValueError(
                    f"{self.name}: {what} names {n!r}, which is not an argument of {self.name}; "
                    f"its arguments are {sorted(self.param_names)}"
                )
        return names

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Argument name -> value, defaults included; ``**kwargs`` entries flattened."""
        if not args and self.simple:
            for k in kwargs:
                if k not in self.param_names:
                    raise TypeError(
                        f"{self.name}: unknown argument {k!r}; its arguments are "
                        f"{[p.name for p in self.named]}"
                    )
            out = {}
            for p in self.named:
                if p.name in kwargs:
                    out[p.name] = kwargs[p.name]
                elif p.default is not _EMPTY:
                    out[p.name] = p.default
                else:
                    raise TypeError(f"{self.name}: missing required argument {p.name!r}")
            return out
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        out = {}
        for name, value in bound.arguments.items():
            if name == self.var_keyword:
                out.update(value)
            else:
                out[name] = value
        return out

    def call(self, values: dict[str, Any]) -> Any:
        args: list[Any] = []
        for name, star in self.positional:
            if star:
                args.extend(values[name])
            else:
                args.append(values[name])
        kwargs = {n: values[n] for n in self.keyword}
        if self.var_keyword is not None:
            kwargs.update((n, v) for n, v in values.items() if n not in self.param_names)
        return self.factory(*args, **kwargs)


_INFO_LOCK = threading.Lock()
_INFOS: dict[Any, _FactoryInfo] = {}


def _factory_info(factory: Any) -> _FactoryInfo:
    try:
        return _INFOS[factory]
    except (KeyError, TypeError):
        pass
    if not callable(factory):
        raise TypeError(f"optax_pytree.wrap: the factory must be callable, got {factory!r}")
    inner = getattr(factory, _MARK, factory)
    info = _FactoryInfo(factory, inner)
    try:
        with _INFO_LOCK:
            _INFOS[factory] = info
    except TypeError:  # unhashable callable: no cache
        pass
    return info


# --------------------------------------------------------------------------
# Child containers: a tuple/list/dict holding wrapped values.


def is_wrapped(x: Any) -> bool:
    return isinstance(x, _Wrapped)


def name_of(w: Any) -> str:
    """The public name of a wrapped object's factory (``optax.adam``), for messages."""
    return w._core.spec.info.name


def argument_names(w: Any) -> tuple[str, ...]:
    """The names of a wrapped object's arguments, in signature order."""
    return w._core.spec.names


class _Slot:
    """Where a wrapped value sits in a container's template."""

    def __repr__(self) -> str:
        return "<wrapped>"

    def __reduce__(self) -> str:
        return "_SLOT"


_SLOT = _Slot()


def _split(value: Any) -> tuple[Any, Any]:
    """(template, child): the static rest of a container, and its wrapped values."""
    if is_wrapped(value):
        return _SLOT, value
    if isinstance(value, dict):
        parts = {k: _split(v) for k, v in value.items()}
        return {k: t for k, (t, _) in parts.items()}, {k: c for k, (_, c) in parts.items()}
    if isinstance(value, (tuple, list)):
        parts = [_split(v) for v in value]
        templates, children = [t for t, _ in parts], [c for _, c in parts]
        if isinstance(value, list):
            return templates, children
        if hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*templates), type(value)(*children)
        return tuple(templates), tuple(children)
    return value, None


def _merge(template: Any, child: Any, fn: Callable[[Any], Any]) -> Any:
    if template is _SLOT:
        return fn(child)
    if isinstance(template, dict):
        return {k: _merge(t, child[k], fn) for k, t in template.items()}
    if isinstance(template, (tuple, list)):
        items = [_merge(t, c, fn) for t, c in zip(template, child)]
        if isinstance(template, list):
            return items
        return type(template)(*items) if hasattr(template, "_fields") else tuple(items)
    return template


class _Template:
    """The static part of a container that holds wrapped values.

    ``optax.named_chain(("clip", a), ("adam", b))`` binds ``(("clip", a),
    ("adam", b))``: the wrapped ``a`` and ``b`` are children, the strings and
    the nesting are static. The child handed to JAX is the container with
    every non-wrapped value replaced by ``None``, so key paths read naturally
    (``.transforms[1][1].learning_rate``). Dicts keep their order (JAX sorts
    keys; ``optax.monitor`` builds its state in the order given).
    """

    __slots__ = ("key", "template")

    def __init__(self, template: Any):
        self.template = template
        self.key = _static.freeze(template)

    @classmethod
    def split(cls, value: Any) -> tuple[_Template, Any]:
        template, child = _split(value)
        return cls(template), child

    def merge(self, child: Any, fn: Callable[[Any], Any] = lambda w: w) -> Any:
        return _merge(self.template, child, fn)


def _contains_wrapped(value: Any) -> bool:
    return any(is_wrapped(x) for x in jax.tree_util.tree_leaves(value, is_leaf=is_wrapped))


# --------------------------------------------------------------------------
# The spec: everything static about a wrapped object (the pytree aux data).


class _Spec:
    """Aux data of a wrapped object: hashable, compared by value."""

    __slots__ = (
        "detected",
        "forced_dynamic",
        "forced_static",
        "hash",
        "info",
        "key",
        "kind",
        "leaf_names",
        "names",
        "roles",
        "static",
        "templates",
        "undecided",
    )

    def __init__(
        self,
        info: _FactoryInfo,
        kind: str,
        roles: dict[str, str],
        static: dict[str, Any],
        templates: dict[str, _Template],
        detected: tuple[str, ...],
        undecided: bool,
        forced_static: frozenset[str],
        forced_dynamic: frozenset[str],
    ):
        self.info = info
        self.kind = kind
        self.names = tuple(roles)
        self.roles = roles
        self.static = static
        self.templates = templates
        self.detected = detected
        self.undecided = undecided
        self.forced_static = forced_static
        self.forced_dynamic = forced_dynamic
        self.leaf_names = tuple(n for n, r in roles.items() if r != STATIC)
        parts = []
        for name, role in roles.items():
            if role == STATIC:
                parts.append((name, role, _static.freeze(static[name])))
            elif name in templates:
                parts.append((name, role, templates[name].key))
            else:
                parts.append((name, role))
        self.key = (info.factory, kind, tuple(parts), detected, forced_static, forced_dynamic)
        self.hash = hash(self.key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, _Spec) and self.hash == other.hash and self.key == other.key

    def __repr__(self) -> str:
        return f"<spec of {self.info.name}: dynamic={list(self.leaf_names)}>"


class _LRU:
    """A small thread-safe LRU map (detection results, interned specs)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.data: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            try:
                self.data.move_to_end(key)
                return self.data[key]
            except KeyError:
                return None

    def setdefault(self, key: Any, value: Any) -> Any:
        with self.lock:
            value = self.data.setdefault(key, value)
            self.data.move_to_end(key)
            while len(self.data) > self.maxsize:
                self.data.popitem(last=False)
            return value

    def clear(self) -> None:
        with self.lock:
            self.data.clear()


_DETECTED = _LRU(4096)  # (factory, configuration) -> (kind, detected, undecided)
_SPECS = _LRU(4096)  # interned specs: equal specs are the same object, so == is `is`
_SPEC_OF_KEY = _LRU(4096)  # wrap's configuration key -> interned spec


def clear_caches() -> None:
    """Forgets every cached detection result (for tests and benchmarks)."""
    _DETECTED.clear()
    _SPECS.clear()
    _SPEC_OF_KEY.clear()
    _INFOS.clear()


# --------------------------------------------------------------------------
# Building: the wrapped object -> the real optax object.


class _Core:
    """Spec and leaves of one wrapped object; owns ``init``/``update``.

    The wrapped transformation is a tuple ``(init, update)`` like every optax
    transformation, so that ``optax.chain`` and friends can unpack it. Its two
    elements are this core's bound methods: no reference cycle with the
    wrapped object, which JAX rebuilds at every unflatten.
    """

    __slots__ = ("leaves", "spec")

    def __init__(self, spec: _Spec, leaves: tuple[Any, ...]):
        self.spec = spec
        self.leaves = leaves

    def argument(self, name: str, build_children: bool = False) -> Any:
        """One argument's value; children built into plain optax objects if asked."""
        spec = self.spec
        role = spec.roles[name]
        if role == STATIC:
            return spec.static[name]
        value = self.leaves[spec.leaf_names.index(name)]
        if role == DYNAMIC:
            return value
        fn = _build_child if build_children else _identity
        return spec.templates[name].merge(value, fn) if name in spec.templates else fn(value)

    def arguments(self, build_children: bool) -> dict[str, Any]:
        return {name: self.argument(name, build_children) for name in self.spec.roles}

    def build_raw(self) -> Any:
        """What the factory returns, as it returns it."""
        spec = self.spec
        try:
            return spec.info.call(self.arguments(build_children=True))
        except Exception as e:
            _raise_traced_failure(e, spec, self.leaves, "building it")
            raise

    def build(self) -> Any:
        """The plain optax transformation (``MultiSteps`` unwrapped) or schedule."""
        built = self.build_raw()
        return _detect.as_transformation(built) if self.spec.kind == "transformation" else built

    def init(self, params: Any) -> Any:
        tx = self.build()
        try:
            return tx.init(params)
        except Exception as e:
            _raise_traced_failure(e, self.spec, self.leaves, "init")
            raise

    def update(self, updates: Any, state: Any, params: Any = None, **extra_args: Any) -> tuple[Any, Any]:
        tx = self.build()
        try:
            return tx.update(updates, state, params, **extra_args)
        except Exception as e:
            _raise_traced_failure(e, self.spec, self.leaves, "update")
            raise


def _build_child(w: Any) -> Any:
    return w._core.build() if is_wrapped(w) else w


def _raise_traced_failure(e: Exception, spec: _Spec, leaves: tuple[Any, ...], where: str) -> None:
    """Turns "a dynamic argument had to be concrete" into an error that names it."""
    concreteness = (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerBoolConversionError,
        jax.errors.TracerIntegerConversionError,
        jax.errors.TracerArrayConversionError,
    )
    text = str(e)
    if not isinstance(e, concreteness) and not (
        isinstance(e, TypeError) and any(w in text for w in ("Traced<", "Tracer", "concrete"))
    ):
        return  # not about a traced value: the factory's own error stands
    traced = [
        n
        for n, leaf in zip(spec.leaf_names, leaves)
        if spec.roles[n] == DYNAMIC and any(_leaves.is_tracer(x) for x in jax.tree_util.tree_leaves(leaf))
    ]
    if not traced:
        return
    named = [n for n in traced if f".{n}" in text or f"'{n}'" in text or f"`{n}`" in text]
    culprits = named or traced
    which = f"argument {culprits[0]!r} is" if len(culprits) == 1 else f"one of the arguments {culprits} is"
    hint = ", ".join(repr(n) for n in culprits) + ("," if len(culprits) == 1 else "")
    raise TypeError(
        f"{spec.info.name}: {which} dynamic (a traced JAX value) but the factory needs it as a "
        f"concrete Python value ({where} failed: {type(e).__name__}). Automatic static detection "
        f"{'could not decide for this configuration' if spec.undecided else 'did not catch it'}; "
        f"mark it static: optax_pytree.wrap({spec.info.name}, ..., static_argnames=({hint}))."
    ) from e


# --------------------------------------------------------------------------
# The wrapped objects.


class _Wrapped:
    """Behaviour shared by wrapped transformations and wrapped schedules."""

    _core: _Core

    @property
    def factory(self) -> Callable[..., Any]:
        """The factory this object rebuilds (as given to ``wrap``)."""
        return self._core.spec.info.public

    @property
    def hyperparams(self) -> dict[str, Any]:
        """Argument name -> value: dynamic leaves, wrapped children, static values."""
        return self._core.arguments(build_children=False)

    @property
    def dynamic_argnames(self) -> tuple[str, ...]:
        """Arguments stored as leaves (numeric hyperparameters and children)."""
        return self._core.spec.leaf_names

    @property
    def static_argnames(self) -> tuple[str, ...]:
        """Arguments stored as static aux data (part of the treedef)."""
        spec = self._core.spec
        return tuple(n for n, r in spec.roles.items() if r == STATIC)

    @property
    def detected_static_argnames(self) -> tuple[str, ...]:
        """Numeric arguments that automatic detection found must be static."""
        return self._core.spec.detected

    def build(self) -> Any:
        """The plain optax object (transformation or schedule) for the current values."""
        return self._core.build()

    def replace(self, **changes: Any) -> Any:
        """A copy with some arguments changed, validated and classified like ``wrap``.

        A new value for a dynamic argument keeps the placement of the old one
        where that was chosen (``jax.device_put``): a hyperparameter
        replicated over a mesh stays replicated, so a sharded ``jit`` taking
        the optimizer does not retrace.

        Example:
            >>> import optax, optax_pytree as opx
            >>> tx = opx.wrap(optax.adam, learning_rate=1e-3)
            >>> float(tx.replace(learning_rate=3e-4).learning_rate)
            0.0003000000142492354
        """
        spec = self._core.spec
        for name in changes:
            if name not in spec.roles:
                raise ValueError(
                    f"{spec.info.name}: replace() got unknown argument {name!r}; "
                    f"its arguments are {list(spec.names)}"
                )
        new = _make(
            spec.info,
            {**self.hyperparams, **changes},
            spec.forced_static,
            spec.forced_dynamic,
        )
        return _keep_placement(self, new)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_core", "_flat"):
            raise AttributeError(name)
        core = self.__dict__.get("_core")
        if core is not None and name in core.spec.roles:
            return core.argument(name)
        if core is not None and not name.startswith("_"):
            # Public attributes of what the factory returns, e.g. the
            # ``has_updated`` of an ``optax.MultiSteps``.
            built = core.build_raw()
            if hasattr(built, name) and not isinstance(built, tuple):
                return getattr(built, name)
        raise AttributeError(
            f"{type(self).__name__} of {core.spec.info.name if core else '?'} has no attribute "
            f"or argument {name!r}"
        )

    def __dir__(self) -> Iterable[str]:
        return [*super().__dir__(), *self._core.spec.names]

    def __reduce__(self) -> Any:
        spec = self._core.spec
        return (
            _rebuild,
            (
                _FactoryRef(spec.info.public),
                self.hyperparams,
                tuple(sorted(spec.forced_static)),
                tuple(sorted(spec.forced_dynamic)),
                spec.detected,
            ),
        )

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        import copy

        return jax.tree_util.tree_map(lambda x: copy.deepcopy(x, memo), self)

    def __repr__(self) -> str:
        spec = self._core.spec
        parts = []
        for name, value in self.hyperparams.items():
            role = spec.roles[name]
            if role == DYNAMIC:
                parts.append(f"{name}={_describe_leaf(value)}")
            elif role == STATIC and name in spec.detected:
                parts.append(f"{name}={value!r} <static: detected>")
            elif role == STATIC and name in spec.forced_static and _leaves.is_numeric(value):
                parts.append(f"{name}={value!r} <static>")
            else:
                parts.append(f"{name}={value!r}")
        return f"wrap({spec.info.name}, {', '.join(parts)})"


def _describe_leaf(x: Any) -> str:
    if _leaves.is_tracer(x):
        return f"<dynamic {x.aval.str_short()}>"
    if isinstance(x, (jax.Array, np.ndarray)):
        aval = _leaves.aval_text(x.shape, x.dtype)
        if x.size == 1:
            return f"{np.asarray(x).reshape(())[()]!s} <dynamic {aval}>"
        return f"<dynamic {aval}>"
    return f"{x!r} <dynamic>"


class PyTreeTransformation(_Wrapped, optax.GradientTransformationExtraArgs):
    """An optax transformation that is a pytree of its hyperparameters.

    Made by :func:`wrap`. It is an ``optax.GradientTransformationExtraArgs``
    (a tuple ``(init, update)``), so it goes wherever optax takes one.
    """

    def init(self, params: Any) -> Any:  # pyright: ignore[reportIncompatibleVariableOverride]
        """Exactly the factory's ``init`` for the current hyperparameters."""
        return self._core.init(params)

    def update(  # pyright: ignore[reportIncompatibleVariableOverride]
        self, updates: Any, state: Any, params: Any = None, **extra_args: Any
    ) -> tuple[Any, Any]:
        """Exactly the factory's ``update``; extra arguments are forwarded."""
        return self._core.update(updates, state, params, **extra_args)

    def gradient_transformation(self) -> PyTreeTransformation:
        """Itself: what ``optax.MultiSteps(...).gradient_transformation()`` gives."""
        return self

    # Equality and hash are the tuple's: its elements are per-object bound
    # methods, so equality is identity, as for any optax transformation.


class PyTreeSchedule(_Wrapped):
    """An optax schedule (step count -> value) that is a pytree of its arguments."""

    def __call__(self, count: Any) -> Any:
        return self._core.build()(count)


_CLASSES = {"transformation": PyTreeTransformation, "schedule": PyTreeSchedule}


def _new(spec: _Spec, leaves: tuple[Any, ...]) -> Any:
    # Also on the dispatch path (every jitted call that returns or rebuilds
    # a wrapped object): kept to the fewest Python-level steps.
    core = _new_core(_Core)
    core.spec = spec
    core.leaves = leaves
    if spec.kind == "transformation":
        obj = _new_tuple(PyTreeTransformation, (core.init, core.update))
    else:
        obj = _new_object(PyTreeSchedule)
    d = obj.__dict__
    d["_core"] = core
    d["_flat"] = (leaves, spec)
    return obj


_new_core = _new_object = object.__new__
_new_tuple = tuple.__new__


# Flattening is on the dispatch path of every jitted call: a C-level getter of
# a precomputed (children, aux) pair, no Python frame.
_flatten = operator.attrgetter("_flat")


def _flatten_with_keys(obj: Any) -> tuple[tuple[tuple[Any, Any], ...], _Spec]:
    core = obj._core
    keys = tuple(jax.tree_util.GetAttrKey(n) for n in core.spec.leaf_names)
    return tuple(zip(keys, core.leaves)), core.spec


def _unflatten(spec: _Spec, leaves: Iterable[Any]) -> Any:
    return _new(spec, tuple(leaves))


for _cls in _CLASSES.values():
    jax.tree_util.register_pytree_with_keys(_cls, _flatten_with_keys, _unflatten, _flatten)


# --------------------------------------------------------------------------
# Pickling.


class _FactoryRef:
    """Pickles a factory by module and name, decorated or not."""

    def __init__(self, factory: Any):
        self.factory = factory

    def __reduce__(self) -> Any:
        f = self.factory
        public = _optax_names().get(id(f))
        if public is not None:  # optax.nadam is a functools.partial: by its name
            module_name, _, name = public.rpartition(".")
            return (_resolve_factory, (module_name, name))
        module, qualname = getattr(f, "__module__", None), getattr(f, "__qualname__", None)
        if module and qualname and "<locals>" not in qualname:
            return (_resolve_factory, (module, qualname))
        return (_identity, (f,))


def _identity(x: Any) -> Any:
    return x


def _resolve_factory(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _rebuild(
    factory: Any,
    arguments: dict[str, Any],
    static_argnames: tuple[str, ...],
    dynamic_argnames: tuple[str, ...],
    detected: tuple[str, ...],
) -> Any:
    if isinstance(factory, _FactoryRef):
        factory = factory.factory
    info = _factory_info(factory)
    return _make(info, arguments, frozenset(static_argnames), frozenset(dynamic_argnames), detected)


# --------------------------------------------------------------------------
# wrap.


def _is_numeric_tree(x: Any) -> bool:
    leaves = jax.tree_util.tree_leaves(x)
    return bool(leaves) and all(_leaves.is_numeric(v) for v in leaves)


def _param_shapes_from(static: dict[str, Any]) -> list[Any]:
    """Stand-in parameters shaped like a static pytree argument (a mask, labels)."""
    out = []
    for value in static.values():
        if callable(value) or not isinstance(value, (dict, list, tuple)) or not value:
            continue
        leaves = jax.tree_util.tree_leaves(value)
        if leaves and all(isinstance(x, (bool, np.bool_, str)) for x in leaves):
            out.append(jax.tree_util.tree_map(lambda _: jax.ShapeDtypeStruct((4, 3), jnp.float32), value))
    return out


def _analyse(
    info: _FactoryInfo,
    roles: dict[str, str],
    values: dict[str, Any],
    templates: dict[str, _Template],
    candidates: list[str],
    forced_dynamic_leaves: dict[str, Any],
) -> tuple[str, tuple[str, ...], bool]:
    """Calls the factory once (kind, early errors) and probes the candidates."""
    base: dict[str, Any] = {}
    for name, role in roles.items():
        value = values[name]
        if role == CHILD:
            value = templates[name].merge(value, _build_child) if name in templates else _build_child(value)
        base[name] = value
    try:
        result = info.call(base)
    except Exception as e:
        if hasattr(e, "add_note"):
            shown = ", ".join(f"{n}={values[n]!r}" for n, r in roles.items() if r != CHILD)
            e.add_note(f"(raised by {info.name} when optax_pytree.wrap called it with {shown})")  # pyright: ignore[reportAttributeAccessIssue]
        raise
    if isinstance(result, optax.GradientTransformation) or (
        callable(getattr(result, "init", None)) and callable(getattr(result, "update", None))
    ):
        kind = "transformation"
    elif callable(result):
        kind = "schedule"
    else:
        raise TypeError(
            f"optax_pytree.wrap: {info.name} returned {type(result).__name__}, which is neither an "
            "optax transformation (init/update) nor a schedule (a callable of the step count)"
        )
    if not candidates:
        return kind, (), False
    leaves = _leaves.to_leaves({n: values[n] for n in candidates})
    base = {**base, **forced_dynamic_leaves}
    probe = _detect.Probe(
        lambda cand: info.call({**base, **cand}),
        kind,
        concrete={n: values[n] for n in candidates},
        abstract=leaves,
        param_shapes=_param_shapes_from({n: v for n, v in values.items() if roles[n] == STATIC}),
    )
    detected = _detect.detect_static(probe, candidates)
    if detected is None:
        return kind, (), True
    return kind, detected, False


def _is_committed(x: Any) -> bool:
    return isinstance(x, jax.Array) and not _leaves.is_tracer(x) and x.committed


def _keep_leaf_placement(old: Any, new: Any) -> Any:
    placed = _is_committed(old) and isinstance(new, jax.Array) and not _is_committed(new)
    return jax.device_put(new, old.sharding) if placed and old.shape == new.shape else new


def _keep_placement(old: Any, new: Any) -> Any:
    """``new`` with its leaves placed as ``old``'s, where those were placed on purpose.

    A leaf that ``jax.device_put`` placed (a committed array) and a fresh
    value for it (uncommitted) have different shardings, which ``jit`` keys
    its cache on; replacing one hyperparameter must not cost a retrace.
    """
    old_leaves, treedef = jax.tree_util.tree_flatten(old)
    if not any(map(_is_committed, old_leaves)):  # the common case: nothing placed
        return new
    new_leaves, new_treedef = jax.tree_util.tree_flatten(new)
    if new_treedef != treedef:  # another static configuration: nothing to match
        return new
    return jax.tree_util.tree_unflatten(treedef, list(map(_keep_leaf_placement, old_leaves, new_leaves)))


def _make(
    info: _FactoryInfo,
    arguments: dict[str, Any],
    forced_static: frozenset[str],
    forced_dynamic: frozenset[str],
    detected: tuple[str, ...] | None = None,
) -> Any:
    roles: dict[str, str] = {}
    values: dict[str, Any] = {}
    templates: dict[str, _Template] = {}
    candidates: list[str] = []
    forced: list[str] = []
    key_parts: list[Any] = []
    for name, value in arguments.items():
        if name in forced_static:
            role = STATIC
            key_parts.append((name, role, _static.freeze(value)))
        elif name in forced_dynamic:
            if not (_leaves.is_numeric(value) or _is_numeric_tree(value)):
                raise TypeError(
                    f"{info.name}: argument {name!r} is in dynamic_argnames but its value {value!r} "
                    "is not numeric (an int, float, complex or numeric array, or a pytree of them)"
                )
            role = DYNAMIC
            forced.append(name)
            # Not the key of an undecided numeric argument: forcing it dynamic
            # turns its detection off, so the two detect different statics.
            key_parts.append((name, "forced dynamic", _leaves.aval_key(value)))
        elif is_wrapped(value):
            role = CHILD
            key_parts.append((name, role, jax.tree_util.tree_structure(value)))
        elif isinstance(value, (tuple, list, dict)) and _contains_wrapped(value):
            role = CHILD
            templates[name], value = _Template.split(value)
            key_parts.append((name, role, templates[name].key, jax.tree_util.tree_structure(value)))
        elif _leaves.is_numeric(value):
            role = DYNAMIC
            candidates.append(name)
            key_parts.append((name, role, _leaves.aval_key(value)))
        else:
            role = STATIC
            key_parts.append((name, role, _static.freeze(value)))
        roles[name] = role
        values[name] = value

    undecided = False
    key = (info.factory, tuple(key_parts))
    if detected is None:
        found = _DETECTED.get(key)
        if found is None:
            found = _analyse(
                info, roles, values, templates, candidates, _leaves.to_leaves({n: values[n] for n in forced})
            )
            _DETECTED.setdefault(key, found)
        elif found[1]:
            # Arguments the factory reads as Python values are what its own
            # checks look at (``sync_period >= 1``): call it, so that a bad
            # value fails here, at wrap, rather than at trace time.
            _analyse(info, roles, values, templates, [], {})
        kind, detected, undecided = found
    else:
        kind = _kind_of(info, roles, values, templates)
    assert detected is not None
    for name in detected:
        roles[name] = STATIC
    dynamic = [n for n, r in roles.items() if r == DYNAMIC]
    converted = _leaves.to_leaves({n: values[n] for n in dynamic}) if dynamic else {}
    # Equal configurations share one spec object (so that JAX's treedef
    # comparisons are identity checks), found without rebuilding it.
    spec_key = (info, key, tuple(_static.freeze(values[n]) for n in detected), forced_static, forced_dynamic)
    spec = _SPEC_OF_KEY.get(spec_key)
    if spec is None:
        static = {n: values[n] for n, r in roles.items() if r == STATIC}
        spec = _Spec(info, kind, roles, static, templates, detected, undecided, forced_static, forced_dynamic)
        spec = _SPECS.setdefault(spec, spec)
        _SPEC_OF_KEY.setdefault(spec_key, spec)
    leaves = tuple(converted[n] if roles[n] == DYNAMIC else values[n] for n in spec.leaf_names)
    return _new(spec, leaves)


def _kind_of(
    info: _FactoryInfo, roles: dict[str, str], values: dict[str, Any], templates: dict[str, _Template]
) -> str:
    kind, _, _ = _analyse(info, roles, values, templates, [], {})
    return kind


T = TypeVar("T")


def wrap_transformation_as_pytree(
    factory: Callable[..., Any],
    /,
    *args: Any,
    static_argnames: str | Iterable[str] = (),
    dynamic_argnames: str | Iterable[str] = (),
    **kwargs: Any,
) -> Any:
    """Wraps an optax factory's result as a pytree of its hyperparameters.

    An optax optimizer is a pair of closures over its hyperparameters, so it is
    not a JAX type. Passed to a jitted function it fails::

        @jax.jit
        def step(tx, params, grads): ...
        step(optax.adam(1e-3), params, grads)
        # TypeError: Error interpreting argument to <function step> as an
        # abstract array. The problematic value is of type <class
        # 'optax._src.base.GradientTransformationExtraArgs'> ...

    and marked static, it recompiles for every new optimizer object, even with
    the same learning rate. ``wrap`` binds the arguments to the factory's
    signature (defaults included) and returns an object that *is* an optax
    transformation (or schedule) and also a pytree:

    - numeric arguments (int, float, complex, numeric arrays) are dynamic
      leaves, stored as JAX arrays (Python numbers weakly typed);
    - wrapped transformations and schedules given as arguments, also inside a
      tuple, list or dict, are child pytrees;
    - everything else (bools, None, strings, dtypes, callables, masks) is
      static aux data, compared by value;
    - ``static_argnames`` / ``dynamic_argnames`` override these rules;
    - a numeric argument that the factory needs as a concrete Python value
      (a shape, a Python ``if``) is found automatically and made static; see
      ``detected_static_argnames``.

    The real optax object is rebuilt from the leaves on every ``init`` and
    ``update``, so inside ``jit`` it is built from tracers: a new learning rate
    is a new leaf value, not a new program.

    Args:
        factory: an optax transformation or schedule factory (``optax.adam``,
            ``optax.chain``, ``optax.contrib.muon``, ``optax.linear_schedule``,
            ``optax.MultiSteps``, ...) or any function returning one.
        *args: positional arguments of ``factory``.
        static_argnames: arguments to keep static whatever their value.
        dynamic_argnames: numeric arguments to keep dynamic (no detection).
        **kwargs: keyword arguments of ``factory``.

    Returns:
        A wrapped transformation (an ``optax.GradientTransformationExtraArgs``)
        or a wrapped schedule (callable with a step count), which is a pytree.

    Raises:
        TypeError: unknown or missing arguments, a non-numeric value in
            ``dynamic_argnames``, or a factory that returns neither a
            transformation nor a schedule.
        ValueError: an argument both in ``static_argnames`` and
            ``dynamic_argnames``, or a name that is not an argument.

    Examples:
        >>> import jax, jax.numpy as jnp, optax
        >>> import optax_pytree as opx
        >>> traces = 0
        >>> @jax.jit
        ... def step(tx, params, grads):
        ...     global traces
        ...     traces += 1
        ...     updates, _ = tx.update(grads, tx.init(params), params)
        ...     return optax.apply_updates(params, updates)
        >>> params, grads = jnp.ones(3), jnp.ones(3)
        >>> for lr in (0.1, 0.01, 0.001):
        ...     params = step(opx.wrap(optax.sgd, learning_rate=lr), params, grads)
        >>> traces
        1
        >>> opx.wrap(optax.lookahead, opx.wrap(optax.sgd, 0.1), sync_period=5,
        ...          slow_step_size=0.5).detected_static_argnames
        ('sync_period',)
    """
    info = _factory_info(factory)
    static_names = info.check_names(static_argnames, "static_argnames")
    dynamic_names = info.check_names(dynamic_argnames, "dynamic_argnames")
    both = static_names & dynamic_names
    if both:
        raise ValueError(
            f"{info.name}: argument {sorted(both)[0]!r} is in both static_argnames and dynamic_argnames"
        )
    return _make(info, info.bind(args, kwargs), static_names, dynamic_names)


wrap = wrap_transformation_as_pytree


def pytree_transformation(
    factory: Callable[..., Any] | None = None,
    /,
    *,
    static_argnames: str | Iterable[str] = (),
    dynamic_argnames: str | Iterable[str] = (),
) -> Any:
    """Decorates a factory so that calling it returns a wrapped object.

    Name, docstring and signature of the factory are kept. Works on built-ins
    too: ``pytree_transformation(optax.adam)``.

    Args:
        factory: the factory to decorate (omit to get a decorator with options).
        static_argnames: as in :func:`wrap`.
        dynamic_argnames: as in :func:`wrap`.

    Returns:
        The decorated factory (or a decorator when ``factory`` is omitted).

    Examples:
        >>> import jax.numpy as jnp, optax
        >>> import optax_pytree as opx
        >>> @opx.pytree_transformation
        ... def clipped_sgd(learning_rate, max_norm=1.0):
        ...     "SGD after global-norm clipping."
        ...     return optax.chain(optax.clip_by_global_norm(max_norm),
        ...                        optax.sgd(learning_rate))
        >>> tx = clipped_sgd(0.1)
        >>> sorted(tx.dynamic_argnames)
        ['learning_rate', 'max_norm']
        >>> clipped_sgd.__doc__
        'SGD after global-norm clipping.'
    """
    if factory is None:
        return functools.partial(
            pytree_transformation, static_argnames=static_argnames, dynamic_argnames=dynamic_argnames
        )
    inner = getattr(factory, _MARK, factory)
    info = _factory_info(inner)
    static_names = info.check_names(static_argnames, "static_argnames")
    dynamic_names = info.check_names(dynamic_argnames, "dynamic_argnames")
    both = static_names & dynamic_names
    if both:
        raise ValueError(
            f"{info.name}: argument {sorted(both)[0]!r} is in both static_argnames and dynamic_argnames"
        )

    # A class (optax.MultiSteps) must not lend its members to the function.
    @functools.wraps(inner, updated=() if inspect.isclass(inner) else functools.WRAPPER_UPDATES)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return _make(info, info.bind(args, kwargs), static_names, dynamic_names)

    setattr(decorated, _MARK, inner)
    setattr(decorated, "__signature__", info.signature)  # noqa: B010 - not a plain attribute to pyright
    return decorated
