"""The entry points: any optax factory's result as a JAX pytree.

``wrap`` runs the steps, each in its own module: bind the arguments to the
factory's signature (``_bind``), classify them (``_classify``), find which
numeric ones must be static and which are guarded (``_detect``, ``_guard``),
intern the static configuration (``_spec``), and make the object
(``_tree``); the object rebuilds the real optax transformation from its
leaves on every use (``_build``).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, Protocol, overload

import jax
import numpy as np

from . import _bind, _build, _checks, _detect, _expr, _leaves, _spec, _tree, _verify
from ._bind import FactoryInfo
from ._classify import Classified, Options, classify, make_options
from ._detect import Analysis
from ._tree import PyTreeSchedule as PyTreeSchedule
from ._tree import PyTreeTransformation as PyTreeTransformation
from ._vocabulary import Kind, Level, Role

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

# Kept importable from here: the names other modules and tests know.
is_wrapped = _tree.is_wrapped
name_of = _tree.name_of
argument_names = _tree.argument_names
clear_caches = _spec.clear_caches


def _statics_of_children(children: Any) -> list[Any]:
    """The static values of every wrapped object in ``children``, at any depth (masks, labels)."""
    out: list[Any] = []
    for w in jax.tree_util.tree_leaves(children, is_leaf=is_wrapped):
        if is_wrapped(w):
            out.extend(w._core.spec.static.values())
            out.extend(_statics_of_children(w._core.leaves))
    return out


def _base(classified: Classified) -> dict[str, Any]:
    """The factory's arguments as it takes them: values as given, wrapped children built."""
    from ._build import build_child

    if classified.python:
        return classified.values  # the common case: Python numbers and static values
    base = dict(classified.values)
    for name in classified.candidates:
        base[name] = _leaves.as_python(base[name])
    for name, role in classified.roles.items():
        if role == Role.CHILD:
            t = classified.templates.get(name)
            base[name] = t.merge(base[name], build_child) if t is not None else build_child(base[name])
    return base


def _traced(classified: Classified) -> list[str]:
    values = classified.values
    return [n for n in (*classified.candidates, *classified.forced) if _leaves.is_tracer(values[n])]


def _call_factory(
    info: FactoryInfo, classified: Classified, base: dict[str, Any], tolerant: bool = False
) -> Kind | None:
    """Calls the factory with the values given, as optax would be called: its checks, its
    exceptions and its warnings happen here, on every wrap. Returns the kind of its result.

    ``tolerant``: the values are traced (a wrap inside ``jit``,
    ``optax.inject_hyperparams`` calling a drop-in factory), no Python values
    to check; the call gives the factory's warnings as optax would, and a
    failure on tracers returns None (the analysis, if one is needed, says why).
    """
    try:
        result = info.call(base)
    except Exception as e:
        if tolerant:
            return None
        traced = _traced(classified)
        if traced and isinstance(e, (jax.errors.ConcretizationTypeError, TypeError)):
            raise TypeError(
                f"{info.name}: wrap got traced values for {traced} (it was called inside jit, vmap "
                "or grad), and the factory needs a Python value of one of them; wrap it outside "
                "and pass the wrapped object in, or replace() the value of an object wrapped "
                f"outside: {type(e).__name__}: {e}"
            ) from e
        values, roles = classified.values, classified.roles
        shown = ", ".join(f"{n}={values[n]!r}" for n, r in roles.items() if r != Role.CHILD)
        note = f"(raised by {info.name} when optax_pytree.wrap called it with {shown})"
        if hasattr(e, "add_note"):
            e.add_note(note)  # pyright: ignore[reportAttributeAccessIssue]
        else:  # Python 3.10: PEP 678's attribute itself (pytest and the exceptiongroup backport show it)
            e.__notes__ = [*getattr(e, "__notes__", ()), note]  # pyright: ignore[reportAttributeAccessIssue]
        raise
    kind = _detect.callable_kind(result)
    if kind is None:
        raise TypeError(
            f"optax_pytree.wrap: {info.name} returned {type(result).__name__}, which is neither an "
            "optax transformation (init/update) nor a schedule (a callable of the step count)"
        )
    return kind


def _analyse(info: FactoryInfo, classified: Classified, base: dict[str, Any], kind: Kind) -> Analysis:
    """Probes the candidates, then verifies the result (see ``_verify``)."""
    values, roles = classified.values, classified.roles
    candidates = {n: values[n] for n in classified.candidates}
    if not candidates:
        return Analysis(kind)
    leaves = _leaves.to_leaves(candidates)
    probe_base = {n: v for n, v in base.items() if n not in candidates}
    probe_base.update(_leaves.to_leaves({n: values[n] for n in classified.forced}))
    own = [v for n, v in values.items() if roles[n] != Role.CHILD]
    children = [values[n] for n, r in roles.items() if r == Role.CHILD]
    shapes = _detect.stand_in_params([*own, *_statics_of_children(children)])

    def analyse(static: tuple[str, ...]) -> Analysis:
        return _detect.analyse(info, kind, probe_base, candidates, leaves, shapes, static)

    fixed = _spec.verified_static(classified.analysis_key)
    analysis = analyse(fixed)
    if _traced(classified):
        return analysis  # no Python values to compare with: checked where it is used
    while True:
        found = _difference(info, classified, base, analysis)
        if found is None:
            return analysis
        order = [n for n in candidates if n not in analysis.static]
        # Bisection: the shortest prefix of ``order`` that, made static, removes the difference.
        lo, hi = 0, len(order)
        last = analyse((*fixed, *order)) if order else analysis
        if not order or _difference(info, classified, base, last) is not None:
            forced = list(classified.forced)
            if forced and found.startswith(_FAILS):
                # Forced dynamic, and the build fails with it traced: the error
                # at trace time names it (no detection was asked for).
                return last
            raise TypeError(
                f"{info.name}: the wrapped build computes other numbers than the factory with the "
                f"same values ({found}), "
                + (
                    f"because of {_which(forced)} forced dynamic; let it be static"
                    if forced
                    else "even with every numeric argument static: it is not a pure function of "
                    "its arguments (wrapped factories must be, as for optax.inject_hyperparams)"
                )
            )
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = analyse((*fixed, *order[:mid]))
            if _difference(info, classified, base, trial) is None:
                hi, last = mid, trial
            else:
                lo = mid
        fixed = (*fixed, order[hi - 1])
        _spec.remember_verified_static(classified.analysis_key, fixed)
        analysis = analyse(fixed) if hi > 1 else last


_FAILS = "it fails: "


def _which(names: list[str]) -> str:
    return f"argument {names[0]!r}" if len(names) == 1 else f"arguments {names}"


def _difference(
    info: FactoryInfo, classified: Classified, base: dict[str, Any], analysis: Analysis
) -> str | None:
    """How the wrapped build (leaves traced) differs from the factory with the Python values, or None.

    Bit for bit: the object carries the host values of the expressions optax
    computes in Python (see ``_guard.Guarded.exact``), so its numbers are
    exactly the factory's.
    """
    if analysis.level is Level.BUILD:
        return None  # nothing to run (the probe could not run init or a schedule)
    spec = _spec.new_spec(info, classified, analysis)
    # Made as the object will be (the same one compiled converter).
    leaves, exact = _leaves_and_exact(spec, classified, _host_values(spec, base) if spec.carried else {})
    params = _verify.concrete_params(_verify.smaller(analysis.params))
    counts = _verify.counts_for({n: classified.values[n] for n in classified.candidates})

    def run(built: Any) -> Any:
        return _verify.outputs(built, spec.kind, analysis.level, params, counts)

    reference_jaxpr = None
    try:
        reference, reference_jaxpr = _verify.reference_outputs(_verify.call_reference(info, base), run)
    except Exception as e:  # noqa: BLE001 - compared below
        reference = e
    try:
        got, jaxpr = _verify.traced_outputs(lambda lv: _build.build(spec, *lv), (leaves, exact), run)
    except Exception as e:  # noqa: BLE001 - any failure of the wrapped build is a difference
        if isinstance(reference, Exception):
            return None  # the factory fails on these stand-in parameters too: nothing to compare
        return f"{_FAILS}{type(e).__name__}: {_build.first_line(str(e))}"
    if isinstance(reference, Exception) or reference_jaxpr is None:
        return f"the factory fails with the Python values ({type(reference).__name__}) but not wrapped"
    ops, reference_ops = (
        _verify.approximate_ops(jaxpr, params),
        _verify.approximate_ops(reference_jaxpr, params),
    )
    if ops != reference_ops:
        return f"it computes with {ops} where the factory computes with {reference_ops}"
    return _verify.difference(reference, got, exact=True)


def _host_values(spec: _spec.Spec, base: dict[str, Any], kept: Any = None) -> dict[Any, Any]:
    """Expression -> its host value for the values given (Python's precision and integers).

    With traced values (a ``replace`` inside ``jit``), traced: the float32
    fallback. ``kept`` (see :func:`make`): an expression of unchanged
    arguments keeps the host value the replaced object carried, if that
    object is not stale.
    """
    previous = _kept_values(kept, spec)
    if all(type(base[n]) in _PYTHON_NUMBERS for n in spec.carried_names):  # Python's arithmetic: no warnings
        return {e: previous[e] if e in previous else _expr.evaluate(e, base) for e in spec.carried}
    env = {n: _host(base[n]) for n in spec.tracked}
    with np.errstate(all="ignore"):
        return {e: previous[e] if e in previous else _expr.evaluate(e, env) for e in spec.carried}


def _carried_values(spec: _spec.Spec, hosts: dict[Any, Any], leaves: tuple[Any, ...]) -> Any:
    """The object's ``exact`` child (a scalar leaf per expression, then the fingerprint), in general."""
    of = [leaves[spec.leaf_index[n]] for n in spec.carried_names]
    return _leaves.exact_child([hosts[e] for e in spec.carried], of, spec.carried_dtypes)


def _host(x: Any) -> Any:
    """A concrete array as NumPy (a batch of values): evaluated on the host, not by XLA."""
    return np.asarray(x) if isinstance(x, jax.Array) and not _leaves.is_tracer(x) else x


def _kept_values(kept: Any, spec: _spec.Spec) -> dict[Any, Any]:
    """Expression -> the carried host value of the replaced object, for unchanged arguments.

    Only from an object that is not stale (its fingerprint matches its leaves).
    """
    if kept is None:
        return {}
    old, changed = kept
    core = old._core
    if core.exact is None or _build.fresh(core.spec, core.leaves, core.exact) is not True:
        return {}
    out = {}
    old_values = _leaves.exact_values(core.exact, core.spec.carried_dtypes)
    for expr in core.spec.carried:
        if expr in spec.carried_index and not _expr.names_in(expr) & changed:
            value = np.asarray(old_values[core.spec.carried_index[expr]])
            out[expr] = value.item() if value.ndim == 0 else value
    return out


def _leaf_values(spec: _spec.Spec, classified: Classified) -> tuple[Any, ...]:
    values = classified.values
    dynamic = [n for n, r in spec.roles.items() if r == Role.DYNAMIC]
    converted = _leaves.to_leaves({n: values[n] for n in dynamic}) if dynamic else {}
    return tuple(converted[n] if n in converted else values[n] for n in spec.leaf_names)


def _find_analysis(
    info: FactoryInfo,
    classified: Classified,
    previous: _spec.Spec | None,
    base: dict[str, Any],
    kind: Kind | None,
) -> Analysis:
    """The cached analysis these values match, or a new one."""
    values = classified.values
    for analysis in _spec.analyses(classified.analysis_key):
        if analysis.matches(values):
            return analysis
    if previous is not None and previous.config_key == classified.key:
        # Traced values (replace inside jit) cannot be matched: they keep the
        # branches of the object they replace, checked where it is used.
        if previous.analysis.matches(values) is not False:
            return previous.analysis
    if kind is None:
        # The factory failed on traced values: called again to say why (its
        # warnings were given by that first call).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kind = _call_factory(info, classified, base)
        assert kind is not None
    analysis = _analyse(info, classified, base, kind)
    _spec.remember(classified.analysis_key, analysis)
    return analysis


def _check_leaves(info: FactoryInfo, classified: Classified, analysis: Analysis) -> None:
    """The leaves must take the branches their Python values took (float32 round-off)."""
    values = classified.values
    for name in analysis.static:
        if _leaves.is_tracer(values[name]):
            raise TypeError(
                f"{info.name}: argument {name!r} must be static (the factory needs it as a Python "
                "value), but its value is traced here (wrap or replace inside jit, vmap or grad); "
                "give it a concrete value"
            )
    if not analysis.guards:
        return
    guarded = {n: values[n] for n in analysis.modes}
    if any(_leaves.is_tracer(v) for v in guarded.values()):
        return
    host = {n: _leaves.host_leaf_value(v) for n, v in guarded.items()}
    bad = _checks.mismatches(analysis.guards, host)
    if bad:
        key, recorded, _ = bad[0]
        names = sorted(_expr.key_names(key))
        shown = ", ".join(f"{n}={values[n]!r} (as a leaf: {host[n]!r})" for n in names)
        raise ValueError(
            f"{info.name}: {shown}: the leaf's value takes another branch of the factory than the "
            f"value given ({_expr.key_text(key)} is {recorded} for the value given); pass it as "
            "an array of the precision you need, or mark it static"
        )


def make(
    info: FactoryInfo,
    arguments: dict[str, Any],
    options: Options,
    previous: _spec.Spec | None = None,
    kept: Any = None,
) -> Any:
    """Classifies, analyses (or finds the cached analysis) and makes the wrapped object.

    ``kept``: for ``replace``, the object replaced; the carried values of its
    expressions whose arguments did not change are kept (they were computed
    from Python values that its leaves no longer tell exactly).
    """
    classified = classify(info, arguments, options)
    base = _base(classified)
    # Traced values (wrap or replace inside jit, optax.inject_hyperparams
    # calling a drop-in factory) are no Python values to check: the factory
    # is called with them for its warnings only (as optax would warn), its
    # failures on tracers left to the analysis.
    kind = _call_factory(info, classified, base, tolerant=bool(_traced(classified)))
    analysis = _find_analysis(info, classified, previous, base, kind)
    _check_leaves(info, classified, analysis)
    spec = _spec.spec_for(info, classified, analysis)
    python = {n: base[n] for n in classified.candidates if type(base[n]) in _PYTHON_NUMBERS}
    leaves, exact = _leaves_and_exact(
        spec, classified, _host_values(spec, base, kept) if spec.carried else {}
    )
    return _tree.new(spec, leaves, exact, python)


def _leaves_and_exact(spec: _spec.Spec, classified: Classified, hosts: dict[Any, Any]) -> tuple[Any, Any]:
    """The object's leaves and its ``exact`` child (None where nothing is carried)."""
    if not spec.carried:
        return _leaf_values(spec, classified), None
    values = classified.values
    dynamic = spec.dynamic_names
    if all(type(values[n]) in _PYTHON_NUMBERS for n in dynamic) and all(
        type(h) in _PYTHON_NUMBERS for h in hosts.values()
    ):
        # The common case (wrap, replace with Python numbers; children kept as
        # they are): one dispatch.
        converted, exact = _leaves.make_exact(
            [values[n] for n in dynamic],
            [hosts[e] for e in spec.carried],
            spec.carried_dtypes,
            spec.fingerprint_of,
        )
        by_name = dict(zip(dynamic, converted))
        return tuple(by_name[n] if n in by_name else values[n] for n in spec.leaf_names), exact
    leaves = _leaf_values(spec, classified)
    return leaves, _carried_values(spec, hosts, leaves)


_PYTHON_NUMBERS = (int, float, complex)


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
