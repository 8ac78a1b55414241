"""Wrap: the entry points, any optax factory's result as a JAX pytree.

``wrap`` and ``pytree_transformation`` bind the arguments to the factory's
signature (``_bind``), read the user's options (``_classify.make_options``)
and hand both to ``_tree.make``, which runs the pipeline (``_pipeline.make``:
classify, analyse, spec) and makes the object; the object rebuilds the real
optax transformation from its leaves on every use (``_build``). The path,
step by step: ``optax_pytree/ARCHITECTURE.md``.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, Protocol, overload

from . import _bind, _spec
from ._classify import make_options
from ._tree import PyTreeSchedule as PyTreeSchedule
from ._tree import PyTreeTransformation as PyTreeTransformation
from ._tree import make

P = ParamSpec("P")
Names = str | Iterable[str]


class Transformation(Protocol):
    """What a transformation factory returns: anything with ``init`` and ``update``.

    ``optax.GradientTransformation`` and ``optax.MultiSteps`` alike.
    """

    @property
    def init(self) -> Callable[..., Any]: ...

    @property
    def update(self) -> Callable[..., Any]: ...


# What a schedule factory returns: a callable of the step count.
Schedule = Callable[[Any], Any]

# Kept importable from here: what benchmarks call between samples.
clear_caches = _spec.clear_caches


# Typed so that an editor checks and completes the factory's own arguments
# (ParamSpec). The options cannot share a ParamSpec signature: a call that
# gives one is typed by the overloads below, each requiring it; opx.static()
# and opx.dynamic() around a value are the typed spelling for one argument.
@overload
def wrap_transformation_as_pytree(
    factory: Callable[P, Transformation], /, *args: P.args, **kwargs: P.kwargs
) -> PyTreeTransformation: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[P, Schedule], /, *args: P.args, **kwargs: P.kwargs
) -> PyTreeSchedule: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[..., Transformation],
    /,
    *args: Any,
    static_argnames: Names,
    dynamic_argnames: Names = (),
    dynamic_only: Names | None = None,
    **kwargs: Any,
) -> PyTreeTransformation: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[..., Transformation],
    /,
    *args: Any,
    dynamic_argnames: Names,
    dynamic_only: Names | None = None,
    **kwargs: Any,
) -> PyTreeTransformation: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[..., Transformation], /, *args: Any, dynamic_only: Names, **kwargs: Any
) -> PyTreeTransformation: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[..., Schedule],
    /,
    *args: Any,
    static_argnames: Names,
    dynamic_argnames: Names = (),
    dynamic_only: Names | None = None,
    **kwargs: Any,
) -> PyTreeSchedule: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[..., Schedule],
    /,
    *args: Any,
    dynamic_argnames: Names,
    dynamic_only: Names | None = None,
    **kwargs: Any,
) -> PyTreeSchedule: ...
@overload
def wrap_transformation_as_pytree(
    factory: Callable[..., Schedule], /, *args: Any, dynamic_only: Names, **kwargs: Any
) -> PyTreeSchedule: ...
def wrap_transformation_as_pytree(
    factory: Callable[..., Any],
    /,
    *args: Any,
    static_argnames: Names = (),
    dynamic_argnames: Names = (),
    dynamic_only: Names | None = None,
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
    - a numeric argument the factory only *compares* in Python (``peak_value
      == 0.0``, ``transition_steps <= 0``, a validation ``if``) stays a leaf;
      the outcomes of its comparisons (:attr:`guards`) are static, so values
      on the same branches share one compilation;
    - a numeric argument the factory needs as a Python value (a shape,
      ``int()``, ``range``, a dict key) is found automatically and made
      static; see ``detected_static_argnames``;
    - wrapped transformations and schedules given as arguments, also inside a
      tuple, list or dict, are child pytrees;
    - everything else (bools, None, strings, dtypes, callables, masks) is
      static aux data, compared by value;
    - ``static_argnames`` / ``dynamic_argnames`` (or :func:`static` /
      :func:`dynamic` around a value) override these rules, and
      ``dynamic_only`` makes every numeric argument it does not name static.

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
        dynamic_only: if given, the only numeric arguments that may be
            dynamic; every other numeric argument is static, as in raw optax
            (for bit-identical optax numerics of the rest).
        **kwargs: keyword arguments of ``factory``.

    Returns:
        A wrapped transformation (an ``optax.GradientTransformationExtraArgs``)
        or a wrapped schedule (callable with a step count), which is a pytree.

    Raises:
        TypeError: unknown or missing arguments, a non-numeric value forced
            dynamic, a string where the factory's annotation wants a number,
            or a factory that returns neither a transformation nor a schedule.
        ValueError: an argument both static and dynamic, or a name that is
            not an argument.

    Examples:
        The optimizer is an ordinary argument of a jitted function, and a new
        learning rate is a new leaf value, not a new compilation:

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
        ...     params = step(opx.wrap(optax.adam, learning_rate=lr), params, grads)
        >>> traces
        1
        >>> tx = opx.wrap(optax.adam, learning_rate=1e-3)
        >>> tx.dynamic_argnames, tx.static_argnames
        (('learning_rate', 'b1', 'b2', 'eps', 'eps_root'), ('mu_dtype', 'nesterov'))
        >>> tx.replace(learning_rate=3e-4).learning_rate
        Array(0.0003, dtype=float32, weak_type=True)

        A schedule's parameters are leaves too, and values that a factory only
        compares in Python (``peak_value == 0.0``) share one compilation:

        >>> traces = 0
        >>> for peak in (0.1, 0.01, 0.001):  # optax compares peak_value with 0.0 in Python
        ...     schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, peak, 10, 100)
        ...     params = step(opx.wrap(optax.adamw, learning_rate=schedule), params, grads)
        >>> traces
        1
        >>> schedule.guarded_argnames
        ('peak_value', 'warmup_steps', 'decay_steps')
        >>> opx.wrap(optax.lbfgs).detected_static_argnames
        ('memory_size',)
    """
    info = _bind.factory_info(factory)
    options = make_options(info, static_argnames, dynamic_argnames, dynamic_only)
    return make(info, info.bind(args, kwargs), options)


wrap = wrap_transformation_as_pytree
"""Short alias of :func:`wrap_transformation_as_pytree`: the same function."""


class Decorator(Protocol):
    """What ``pytree_transformation(static_argnames=...)`` returns: a typed decorator."""

    @overload
    def __call__(self, factory: Callable[P, Transformation], /) -> Callable[P, PyTreeTransformation]: ...
    @overload
    def __call__(self, factory: Callable[P, Schedule], /) -> Callable[P, PyTreeSchedule]: ...


@overload
def pytree_transformation(factory: Callable[P, Transformation], /) -> Callable[P, PyTreeTransformation]: ...
@overload
def pytree_transformation(factory: Callable[P, Schedule], /) -> Callable[P, PyTreeSchedule]: ...
@overload
def pytree_transformation(
    factory: None = None,
    /,
    *,
    static_argnames: Names = (),
    dynamic_argnames: Names = (),
    dynamic_only: Names | None = None,
) -> Decorator: ...
def pytree_transformation(
    factory: Callable[..., Any] | None = None,
    /,
    *,
    static_argnames: Names = (),
    dynamic_argnames: Names = (),
    dynamic_only: Names | None = None,
) -> Any:
    """Decorates a factory so that calling it returns a wrapped object.

    Name, docstring and signature of the factory are kept. Works on built-ins
    too: ``pytree_transformation(optax.adam)``.

    Args:
        factory: the factory to decorate (omit to get a decorator with options).
        static_argnames: as in :func:`wrap`.
        dynamic_argnames: as in :func:`wrap`.
        dynamic_only: as in :func:`wrap`.

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
            pytree_transformation,
            static_argnames=static_argnames,
            dynamic_argnames=dynamic_argnames,
            dynamic_only=dynamic_only,
        )
    inner = getattr(factory, _bind.MARK, factory)
    info = _bind.factory_info(inner)
    options = make_options(info, static_argnames, dynamic_argnames, dynamic_only)

    # A class (optax.MultiSteps) must not lend its members to the function.
    @functools.wraps(inner, updated=() if inspect.isclass(inner) else functools.WRAPPER_UPDATES)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return make(info, info.bind(args, kwargs), options)

    setattr(decorated, _bind.MARK, inner)
    setattr(decorated, "__signature__", info.signature)  # noqa: B010 - not a plain attribute to pyright
    return decorated
