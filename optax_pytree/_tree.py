"""Tree: the wrapped objects, their pytree registration and pickling.

A wrapped object is its spec (aux data) and its leaves (the dynamic
hyperparameters and children, in signature order). Flattening is on the
dispatch path of every jitted call that takes one, so it is a C-level
attribute read of a precomputed ``(leaves, spec)`` pair; unflattening builds
the object with the fewest Python steps. Wrapped objects are immutable: a
change is ``replace``, which validates and classifies like ``wrap``.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import copy
import functools
import operator
import types
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import (
    _bind,
    _build,
    _closures,
    _flax_serialization,
    _leaves,
    _staged,
    _trace_context,  # noqa: F401  # pyright: ignore[reportUnusedImport] - imported for its effect: the trace context
    _watch,
)
from ._bind import Wrapped
from ._classify import NO_OPTIONS, Options
from ._core import Core, Kept
from ._leaves import Exact, Leaves, Pending
from ._spec import Spec
from ._vocabulary import Kind, Level, Role


def spec_of(w: Any) -> Spec:
    """A wrapped object's static configuration (its treedef's aux data)."""
    return w._core.spec


def name_of(w: Any) -> str:
    """The public name of a wrapped object's factory (``optax.adam``), for messages."""
    return w._core.spec.info.name


def argument_names(w: Any) -> tuple[str, ...]:
    """The names of a wrapped object's arguments, in signature order."""
    return w._core.spec.names


_W = TypeVar("_W", bound="_Wrapped")


class _Wrapped(Wrapped):
    """Behaviour shared by wrapped transformations and wrapped schedules."""

    _core: Core

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
        return tuple(n for n, r in spec.roles.items() if r == Role.STATIC)

    @property
    def exact(self) -> tuple[Any, ...]:
        """The host values of what the factory computes from its arguments in Python, and their fingerprint.

        optax computes ``1 - b2`` in Python, in double precision, before it
        meets an array; these leaves hold such values for this object's
        arguments (computed when it was made), so that it computes exactly
        plain optax's numbers: one vector per dtype (``tx.exact[0]`` in key
        paths; adam's holds ``1 - b1``, ``1 - b2`` and the fingerprint).
        Empty when the factory does no such arithmetic. Under ``jax.grad``
        their cotangents are zero.
        """
        return self._core.exact or ()

    @property
    def detected_static_argnames(self) -> tuple[str, ...]:
        """Numeric arguments that automatic detection found must be static."""
        return self._core.spec.detected

    @property
    def guarded_argnames(self) -> tuple[str, ...]:
        """Dynamic arguments the factory compares in Python: their branch is static.

        Values that take the same branches (the same outcome of every
        comparison, :attr:`guards`) share one treedef and one compilation.
        """
        return self._core.spec.guarded

    @property
    def guards(self) -> tuple[str, ...]:
        """The comparisons the factory made of its dynamic arguments, with their outcomes.

        Examples:
            >>> import optax, optax_pytree as opx
            >>> opx.wrap(optax.exponential_decay, 1.0, 10, 0.5).guards
            ('transition_steps <= 0 is False', 'decay_rate == 0 is False', 'transition_begin < 0 is False')
        """
        return self._core.spec.guard_text()

    def build(self) -> Any:
        """The plain optax object (transformation or schedule) for the current values."""
        return self._core.build()

    # optax's tree utilities (``tree_get``, ``tree_set``) find values by the
    # fields of NamedTuples, and expect the fields to be the pytree children:
    # a wrapped object answers with its dynamic arguments (leaves and
    # children, in flattening order), so ``optax.tree_utils.tree_get(tx,
    # "learning_rate")`` finds the hyperparameter, in children too, and
    # ``tree_set`` goes through replace (validated).
    #
    # flax's serialization takes the same fields for a NamedTuple's and
    # rebuilds one with ``type(obj)(**fields)``, which cannot carry the static
    # configuration: the first time ``_fields`` is read with flax loaded, a
    # handler for wrapped objects is registered with flax
    # (:func:`register_with_flax`), so ``to_bytes``/``from_bytes`` and
    # checkpoints round-trip them.

    @property
    def _fields(self) -> tuple[str, ...]:
        if not _flax_serialization.registered:
            register_with_flax(only_if_loaded=True)
        return self._core.spec.leaf_names

    def _replace(self: _W, **changes: Any) -> _W:
        return self.replace(**changes)

    def _asdict(self) -> dict[str, Any]:
        return self.hyperparams

    def replace(self: _W, **changes: Any) -> _W:
        """A copy with some arguments changed, validated and classified like ``wrap``.

        A guarded argument's new value is checked against the factory's
        branches: on another branch it is another static configuration (as
        ``wrap`` with that value gives). A traced value (``replace`` inside
        ``jit`` or ``scan``) keeps the branches of this object, and is checked
        where the object is used (see :attr:`guards`).

        A new value for a dynamic argument keeps the placement of the old one
        where that was chosen (``jax.device_put``): a hyperparameter
        replicated over a mesh stays replicated, so a sharded ``jit`` taking
        the optimizer does not retrace.

        Examples:
            >>> import optax, optax_pytree as opx
            >>> tx = opx.wrap(optax.adam, learning_rate=1e-3)
            >>> float(tx.replace(learning_rate=3e-4).learning_rate)
            0.0003000000142492354
        """
        spec = self._core.spec
        for name in changes:
            if name not in spec.roles:
                raise _bind.UnknownArgumentError(
                    f"{spec.info.name}: replace() got unknown argument {name!r}; "
                    f"its arguments are {list(spec.names)}{_bind.did_you_mean(name, spec.names)}"
                )
        python = self._core.python
        arguments = {**self.hyperparams, **python, **changes}
        # The carried values are computed from the Python values where the
        # object still has them; else those of unchanged arguments are kept.
        fresh_from_python = all(n in python or n in changes for n in spec.carried_names)
        kept = None if fresh_from_python else (self._core, frozenset(changes))
        new = make(spec.info, arguments, spec.options, previous=spec, kept=kept)
        return _leaves.keep_placement(self, new)

    def _with_static(self: _W, names: Iterable[str], **changes: Any) -> _W:
        """A copy with arguments ``names`` static too, and ``changes`` (children remade so):
        the smallest static part the verification of a parent needs (``_descend``)."""
        spec = self._core.spec
        python = self._core.python
        fresh_from_python = all(n in python or n in changes for n in spec.carried_names)
        kept = None if fresh_from_python else (self._core, frozenset(changes))
        arguments = {**self.hyperparams, **python, **changes}
        return make(spec.info, arguments, spec.options.with_marks(names, ()), kept=kept)

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

    def __setattr__(self, name: str, value: Any) -> None:
        core = self.__dict__.get("_core")
        owner = core.spec.info.name if core is not None else "?"
        if core is not None and name in core.spec.roles:
            raise AttributeError(
                f"{type(self).__name__} of {owner} is immutable: use tx = tx.replace({name}=...) "
                f"to change argument {name!r}"
            )
        raise AttributeError(f"{type(self).__name__} of {owner} is immutable: use replace(...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: use replace(...)")

    def __dir__(self) -> Iterable[str]:
        return [*super().__dir__(), *self._core.spec.names]

    def __reduce__(self) -> Any:
        spec = self._core.spec
        options = spec.options
        return (
            _rebuild,
            (
                _bind.FactoryRef(spec.info.public),
                self.hyperparams,
                tuple(sorted(options.static)),
                tuple(sorted(options.dynamic)),
                None if options.dynamic_only is None else tuple(sorted(options.dynamic_only)),
                self._core.exact,
            ),
        )

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return jax.tree_util.tree_map(lambda x: copy.deepcopy(x, memo), self)

    def __repr__(self) -> str:
        spec = self._core.spec
        parts = []
        for name, value in self.hyperparams.items():
            role = spec.roles[name]
            if role == Role.DYNAMIC:
                parts.append(f"{name}={_describe_leaf(value, name in spec.guarded)}")
            elif role == Role.STATIC and name in spec.detected:
                parts.append(f"{name}={value!r} <static: detected>")
            elif role == Role.STATIC and name in spec.options.static and _leaves.is_numeric_leaf(value):
                parts.append(f"{name}={value!r} <static>")
            else:
                parts.append(f"{name}={value!r}")
        return f"wrap({spec.info.name}, {', '.join(parts)})"


def _describe_leaf(x: Any, guarded: bool = False) -> str:
    kind = "dynamic, guarded" if guarded else "dynamic"
    if _leaves.is_tracer(x):
        return f"<{kind} {x.aval.str_short()}>"
    if isinstance(x, (jax.Array, np.ndarray)):
        aval = _leaves.aval_text(x.shape, x.dtype)
        if x.size == 1:
            return f"{np.asarray(x).reshape(())[()]!s} <{kind} {aval}>"
        return f"<{kind} {aval}>"
    return f"{x!r} <{kind}>"


class PyTreeTransformation(_Wrapped, optax.GradientTransformationExtraArgs):  # pyright: ignore[reportIncompatibleVariableOverride, reportIncompatibleMethodOverride]
    """An optax transformation that is a pytree of its hyperparameters.

    Made by :func:`~optax_pytree.wrap`. It is an
    ``optax.GradientTransformationExtraArgs`` (a tuple ``(init, update)``), so
    it goes wherever optax takes one. Annotate with it.

    Examples:
        >>> import jax, jax.numpy as jnp, optax, optax_pytree as opx
        >>> tx: opx.PyTreeTransformation = opx.wrap(optax.adam, learning_rate=0.1)
        >>> isinstance(tx, optax.GradientTransformation)
        True
        >>> [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
        ['.learning_rate', '.b1', '.b2', '.eps', '.eps_root', '.exact[0]']
        >>> tx.exact[0].shape  # 1 - b1, 1 - b2 as Python computes them, log2(b1), log2(b2), 2 fingerprints
        (6,)
        >>> params = {"w": jnp.ones(2)}
        >>> updates, state = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
        >>> plain = optax.adam(0.1)
        >>> expected, _ = plain.update({"w": jnp.ones(2)}, plain.init(params), params)
        >>> bool((updates["w"] == expected["w"]).all())  # plain optax's numbers, to the last bit
        True
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
    """An optax schedule (step count -> value) that is a pytree of its arguments.

    Made by :func:`~optax_pytree.wrap` from a schedule factory; callable like
    the schedule, and usable as a hyperparameter of a wrapped transformation,
    whose leaves then include the schedule's.

    Examples:
        >>> import optax, optax_pytree as opx
        >>> schedule: opx.PyTreeSchedule = opx.wrap(optax.linear_schedule, 1.0, 0.0, transition_steps=10)
        >>> float(schedule(5))
        0.5
        >>> tx = opx.wrap(optax.sgd, learning_rate=schedule)
        >>> float(tx.learning_rate.init_value)
        1.0
    """

    def __call__(self, count: Any) -> Any:
        """The schedule's value at step ``count`` (traced or concrete)."""
        core = self._core
        core.check_sources()
        plain = core.concrete_plain()
        if plain is not None:
            # Called eagerly with the Python values at hand: plain optax's own schedule, so a
            # Python step count meets Python numbers as in plain optax (``count / steps`` in
            # double precision, rounded once), whatever the backend's division does.
            out = plain(count)
            return out if isinstance(out, jax.Array) else jnp.asarray(out)
        return _staged.call(core, "__call__", count)

    # A plain object, not a tuple: ``jax.jit(schedule)`` keeps a weak
    # reference to the function it compiles, and tuples cannot be weakly
    # referenced. optax's tree utilities still find its arguments through
    # the key paths of its leaves (``GetAttrKey``).


_CLASSES = {Kind.TRANSFORMATION: PyTreeTransformation, Kind.SCHEDULE: PyTreeSchedule}


_NO_PYTHON: dict[str, Any] = {}


def new(
    spec: Spec,
    leaves: Leaves,
    exact: Exact = None,
    python: dict[str, Any] = _NO_PYTHON,
    plain: Any = None,
    pending: Pending | None = None,
    flat: tuple[Any, ...] | None = None,
) -> Any:
    # Also on the dispatch path (every jitted call that returns or rebuilds
    # a wrapped object): kept to the fewest Python-level steps.
    core = _new_core(Core)
    core.spec = spec
    core.stored_leaves = leaves
    core.stored_exact = exact
    core.python = python
    core.plain = plain
    core.pending = pending
    if spec.kind is Kind.TRANSFORMATION:
        obj = _new_tuple(PyTreeTransformation, (core.init, core.update))
    else:
        obj = _new_core(PyTreeSchedule)
    d = obj.__dict__
    d["_core"] = core
    if pending is None:  # else made by ``_LazyFlat`` at the first flatten
        if flat is None:
            flat = leaves if exact is None else (*leaves, exact)
        d["_flat"] = (flat, spec)
    return obj


class _LazyFlat:
    """``obj._flat`` of an object whose leaves are pending: made, then kept in its ``__dict__``.

    A non-data descriptor: once set, the instance's own ``_flat`` is found first,
    so later flattens are the C-level attribute read of ``_flatten``.
    """

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        core = obj.__dict__["_core"]
        leaves, exact = core.leaves, core.exact
        flat = (leaves if exact is None else (*leaves, exact), core.spec)
        obj.__dict__["_flat"] = flat
        return flat


def make(
    info: _bind.FactoryInfo,
    arguments: dict[str, Any],
    options: Options,
    previous: Spec | None = None,
    kept: Kept = None,
) -> Any:
    """The wrapped object for these arguments: the pipeline's steps, then :func:`new`; watched
    (``_watch``) where a static function of its arguments reads values through an object it holds,
    a config (``_closures.static_reads``)."""
    made = (_pipeline or _import_pipeline()).make(info, arguments, options, make_child, previous, kept)
    obj = new(*made)
    roles = made.spec.roles
    for name, value in arguments.items():
        if roles.get(name) is Role.STATIC and type(value) in _CHECKED_FUNCTIONS:
            reads = _closures.static_reads(name, value)
            if reads is not None:
                obj = _watch.watch(obj, reads)
    return obj


_CHECKED_FUNCTIONS = (types.FunctionType, functools.partial)


def make_child(factory: Any, values: dict[str, Any]) -> Any:
    """The wrapped child of a callable argument, made from its recipe (``_closures``), or None.

    None where the mechanism does not honour it as a schedule: it warned
    (a part made static), it is no schedule, or it is not called as one.
    A callable holding wrapped objects and functions alone is always a
    child: its rebuild calls the same schedules.
    """
    static = getattr(factory, "static_names", frozenset())  # equinox's static fields
    options = Options(static=static) if static else NO_OPTIONS
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        child = make(_bind.factory_info(factory), values, options)
    if _closures.only_wrapped(values):
        return child
    spec = child._core.spec
    if caught or spec.kind is not Kind.SCHEDULE or spec.analysis.level is not Level.CALL:
        return None
    return child


# The pipeline, with the analysis (probe, verification, numpy's evaluation of
# jaxprs), is imported at the first wrap, not with the package
# (tests/test_layout.py); then kept here, so that a rebuild does not pay an
# import statement.
_pipeline: Any = None


def _import_pipeline() -> Any:
    global _pipeline
    from . import _pipeline as pipeline

    _pipeline = pipeline
    return pipeline


def register_with_flax(only_if_loaded: bool = False) -> None:
    """Teaches ``flax.serialization`` the wrapped objects, once (see ``_flax_serialization``).

    ``only_if_loaded``: only where flax's serialization is imported already
    (what reading ``_fields`` asks: importing optax_pytree does not import flax).
    """
    _flax_serialization.register(_FOR_FLAX, only_if_loaded)


_new_core = object.__new__
_new_tuple = tuple.__new__


# Flattening is on the dispatch path of every jitted call: a C-level getter of
# a precomputed (children, aux) pair, no Python frame.
_flatten = operator.attrgetter("_flat")


# The carried host values and the fingerprint of the leaves they were
# computed from (``.exact[0]``): leaves too, so that they follow the
# object through jit, vmap (a batch's members' own), scan and checkpoints;
# their cotangents under jax.grad are zero.
_EXACT_KEY = jax.tree_util.GetAttrKey("exact")


def _flatten_with_keys(obj: Any) -> tuple[tuple[tuple[Any, Any], ...], Spec]:
    core = obj._core
    children = tuple(zip(core.spec.keys, core.leaves))
    if core.exact is not None:
        children += ((_EXACT_KEY, core.exact),)
    return children, core.spec


def _unflatten(spec: Spec, leaves: Iterable[Any]) -> Any:
    flat = tuple(leaves)  # JAX gives a tuple: the same object, kept as the object's flat form
    if spec.carried_dtypes:
        return new(spec, flat[:-1], flat[-1], flat=flat)
    return new(spec, flat)


for _cls in _CLASSES.values():
    _cls._flat = _LazyFlat()  # pyright: ignore[reportAttributeAccessIssue]
    jax.tree_util.register_pytree_with_keys(_cls, _flatten_with_keys, _unflatten, _flatten)


# --------------------------------------------------------------------------
# Pickling.


# Kept importable here: pickles written before the move name them here.
_FactoryRef = _bind.FactoryRef
_resolve_factory = _bind.resolve_factory


def _rebuild(
    factory: Any,
    arguments: dict[str, Any],
    static_argnames: tuple[str, ...],
    dynamic_argnames: tuple[str, ...],
    dynamic_only: tuple[str, ...] | None = None,
    exact: Sequence[Any] | None = None,
) -> Any:
    if isinstance(factory, _bind.FactoryRef):
        factory = factory.factory
    info = _bind.factory_info(factory)
    options = Options(
        frozenset(static_argnames),
        frozenset(dynamic_argnames),
        None if dynamic_only is None else frozenset(dynamic_only),
    )
    obj = make(info, arguments, options)
    return with_exact(obj, exact)


def with_exact(obj: Any, exact: Sequence[Any] | None) -> Any:
    """``obj`` with the carried host values it was saved with, where they are its leaves' (not stale).

    Rebuilt from its leaves alone, an object computes them from float32
    values, not from the Python numbers it was made from. ``exact`` as a
    checkpoint restored it: its vectors as host or device arrays, or None.
    """
    core = obj._core
    if exact is None or core.exact is None or len(exact) != len(core.exact):
        return obj
    exact = tuple(_leaves.restored_leaf(old, x) for old, x in zip(core.exact, exact))
    if _build.fresh(core.spec, core.leaves, exact) is not True:
        return obj
    out = new(core.spec, core.leaves, exact, core.python, core.plain)
    if "_aux" in obj.__dict__:  # watched (``_watch``): the same treedef, the same check
        out = _watch.watch(out, getattr(core, "source", None))
    return out


# What flax's handlers make wrapped objects with (``_flax_serialization`` does not import this module).
_FOR_FLAX = _flax_serialization.Tree((PyTreeTransformation, PyTreeSchedule), new, with_exact)


__all__ = [
    "PyTreeSchedule",
    "PyTreeTransformation",
    "argument_names",
    "make",
    "name_of",
    "new",
    "register_with_flax",
    "spec_of",
    "with_exact",
]
