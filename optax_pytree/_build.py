"""Build: a spec and its leaves -> the real optax transformation or schedule, under ``jit``.

Called on every ``init``, ``update`` and schedule call, so inside ``jit`` the
factory runs on tracers: a new learning rate is a new leaf value, not a new
program. Guarded arguments are passed as :class:`~optax_pytree._guard.Guarded`
stand-ins answering from the spec's guards; their leaves are checked against
the guards where they are concrete, and the outputs are NaN where traced
leaves do not satisfy them (see ``_guard`` and ``_checks``). Children are
built first, into the plain optax objects the factory takes. The factory is
called quietly (its warnings, log lines and output were the user's once, at
``wrap``: see ``_quiet``); the carried host values replace the traced
arithmetic where they are fresh (``carried``).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _bind, _checks, _detach, _expr, _guard, _leaves, _quiet
from ._bind import is_wrapped
from ._caches import cache
from ._leaves import Exact, Leaves
from ._spec import Spec
from ._vocabulary import Kind, Phase, Role


def as_transformation(built: Any) -> optax.GradientTransformationExtraArgs:
    """The optax transformation behind what a factory returned.

    An object with ``init``/``update`` of its own (``optax.MultiSteps``) is
    used as it is: its ``update`` takes the extra arguments itself and passes
    them on (its ``gradient_transformation()`` would drop them).
    """
    if isinstance(built, optax.GradientTransformation):
        return optax.with_extra_args_support(built)
    update = built.update
    if _takes_extra_args(getattr(update, "__func__", update)):
        return optax.GradientTransformationExtraArgs(built.init, update)
    return optax.with_extra_args_support(optax.GradientTransformation(built.init, update))


@functools.lru_cache(maxsize=256)
def _takes_extra_args(update: Any) -> bool:
    """Whether an ``update`` function takes ``**extra_args`` (read once per function: every build asks)."""
    try:
        return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(update).parameters.values())
    except (TypeError, ValueError):
        return False


def _identity(x: Any) -> Any:
    return x


def build_child(w: Any) -> Any:
    """A wrapped child as the plain optax object its parent's factory takes: what its factory
    returned for its Python values where nothing of it is traced (``Core.concrete_plain``),
    else built from its leaves."""
    if is_wrapped(w):
        core = w._core
        plain = core.concrete_plain()
        return plain if plain is not None else build(core.spec, core.leaves, core.exact)
    return w


def argument(spec: Spec, leaves: tuple[Any, ...], name: str, build_children: bool = False) -> Any:
    """One argument's value; children built into plain optax objects if asked."""
    role = spec.roles[name]
    if role == Role.STATIC:
        return spec.static[name]
    value = leaves[spec.leaf_index[name]]
    if role == Role.DYNAMIC:
        return _as_array(value)
    fn = build_child if build_children else _identity
    return spec.templates[name].merge(value, fn) if name in spec.templates else fn(value)


def arguments(spec: Spec, leaves: tuple[Any, ...], build_children: bool) -> dict[str, Any]:
    return {name: argument(spec, leaves, name, build_children) for name in spec.roles}


def build_raw(spec: Spec, leaves: Leaves, exact: Exact = None) -> Any:
    """What the factory returns, as it returns it (stand-ins detached)."""
    return _call(spec, leaves, exact)[0]


def _as_array(x: Any) -> Any:
    """A leaf's array: one held in a container of its own (an nnx Variable, in
    optax_pytree.nnx.Optimizer) as its array, which is what the factory sees.

    Asked of the container itself (``__jax_array__``), not through
    ``jnp.asarray``: a container that is a JAX type of its own (a hijax nnx
    Variable) is a tracer under ``jit``, which ``jnp.asarray`` returns as it
    is, with no dtype or shape (only arrays are ``jax.Array`` instances).
    """
    if not isinstance(x, (jax.Array, np.ndarray, np.generic)) and hasattr(x, "__jax_array__"):
        return jnp.asarray(x.__jax_array__())
    return x


def fresh(spec: Spec, leaves: Leaves, exact: tuple[jax.Array, ...]) -> Any:
    """Whether the leaves are those the carried values were computed from (a bool, or traced)."""
    if spec.fingerprint_at is None:  # no carried expressions (folds alone: ``_jaxprs`` checks those)
        return True
    values = [_as_array(leaves[spec.leaf_index[n]]) for n in spec.carried_names]
    stored = _leaves.exact_values(tuple(_as_array(x) for x in exact), spec.carried_dtypes)[
        spec.fingerprint_at
    ]
    now = _leaves.fingerprint(values, _leaves.FINGERPRINT_DTYPE)
    if _leaves.is_tracer(now) or _leaves.is_tracer(stored):
        return jnp.all(now == stored)
    return bool(np.array_equal(now, np.asarray(stored)))


def carried(spec: Spec, leaves: Leaves, exact: Exact) -> dict[Any, tuple[Any, Any]]:
    """Expression -> (its host value, whether the leaves it was computed from are unchanged).

    Host values weakly typed, as the Python numbers they stand for (bf16
    parameters). Concrete, remembered per object (its leaves and exact
    child, immutable): a parent rebuilds its children at every wrap, an
    eager update rebuilds its transformation.
    """
    if exact is None or not spec.carried:
        return {}
    key = (id(leaves), id(exact))
    found = _CARRIED.get(key)
    if found is not None and found[0] is leaves and found[1] is exact:
        return found[2]
    ok = fresh(spec, leaves, exact)
    values = _leaves.exact_values(tuple(_as_array(x) for x in exact), spec.carried_dtypes)
    out = {expr: (_weak_scalar(x), ok) for expr, x in zip(spec.carried, values)}
    if ok is True or ok is False:  # concrete
        _CARRIED.set(key, (leaves, exact, out))
    return out


# The entries keep their keys' objects alive, so an id is not reused while it is a key.
_CARRIED = cache("(id(leaves), id(exact)) -> (leaves, exact, carried host values)", 1024)


def _weak_scalar(x: Any) -> Any:
    """A carried value, weakly typed: concrete, the Python number it stands for (as optax has
    it; exactly the float32 value), else a weakly typed array."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    return _leaves.weak(jnp.asarray(x))


def _call(spec: Spec, leaves: Leaves, exact: Exact = None) -> tuple[Any, Any]:
    """(what the factory returned, the traced guard check or None)."""
    values = arguments(spec, leaves, build_children=True)
    ok = ctx = None
    if spec.tracked:
        env = {n: values[n] for n in spec.tracked}
        host = _leaves.leaves_on_host(env)
        ctx = _guard.Context(
            spec.info.name, record=False, recorded=spec.outcomes, carried=carried(spec, leaves, exact)
        )
        if host is not None:  # concrete leaves: check them now, raise if they left their branch
            if spec.guards:
                _check(spec, host)
            pyvals = {n: _leaves.value_as_given(host[n]) for n in spec.tracked}
        else:
            if spec.guards:
                ok = _checks.traced_ok(spec.guards, env)
            pyvals = dict.fromkeys(spec.tracked)
        for n in spec.tracked:
            values[n] = _guard.Guarded(ctx, (_expr.ARG, n), values[n], pyvals[n])
    try:
        built = _bind.call_quietly(spec.info, values)
        if ctx is not None:
            built = _detach.detach(built, ctx, spec.keep)
            ctx.phase = Phase.CALL
    except Exception as e:
        raise_traced_failure(e, spec, leaves, "building it")
        raise
    return built, ok


def _check(spec: Spec, host: dict[str, Any]) -> None:
    _checks.check(
        spec.info.name,
        spec.guards,
        host,
        lambda n: _checks.value_text(host[n]),
        "this object was made for",
        "its leaves were changed without re-making it (jax.tree.map, tree_unflatten, ...): change "
        "hyperparameters with replace(), which re-checks them",
    )


def build(spec: Spec, leaves: Leaves, exact: Exact = None) -> Any:
    """The plain optax transformation (``MultiSteps`` unwrapped) or schedule."""
    built, ok = _call(spec, leaves, exact)
    if spec.kind is Kind.TRANSFORMATION:
        tx = as_transformation(built)
        if not spec.keep and ok is None:
            return tx
        return optax.GradientTransformationExtraArgs(*_guarded_transformation(tx, ok))
    if not spec.keep and ok is None:
        return built
    return _guarded_schedule(built, ok)


def _finish(ok: Any) -> Callable[[Any], Any]:
    if ok is None:
        return _guard.unwrap
    return lambda out: _checks.poison(_guard.unwrap(out), ok)


def _guarded_transformation(tx: Any, ok: Any) -> tuple[Any, Any]:
    finish = _finish(ok)

    def init(params: Any) -> Any:
        return finish(tx.init(params))

    def update(updates: Any, state: Any, params: Any = None, **extra_args: Any) -> Any:
        return finish(tx.update(updates, state, params, **extra_args))

    return init, update


def _guarded_schedule(schedule: Any, ok: Any) -> Any:
    finish = _finish(ok)

    def guarded(count: Any) -> Any:
        return finish(schedule(count))

    return guarded


def raise_traced_failure(
    e: Exception,
    spec: Spec,
    leaves: tuple[Any, ...],
    where: str,
    again: Callable[[Any], Any] = _identity,
) -> None:
    """Turns "a dynamic argument had to be concrete" into an error that names it.

    Where the probe could not run ``init``/``update`` (``spec.undecided``),
    a failure names the dynamic arguments it could not check, unless plain
    optax fails so too: ``again`` (what failed, given what the factory
    returned) is run with every dynamic argument a Python value, and an
    error of the same type and message is plain optax's (a mask that does
    not fit the parameters): it stands, as optax raises it.
    """
    if isinstance(e, _guard.GuardError):
        return  # names its argument already
    concreteness = (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerBoolConversionError,
        jax.errors.TracerIntegerConversionError,
        jax.errors.TracerArrayConversionError,
    )
    text = str(e)
    about_tracers = isinstance(e, concreteness) or (
        isinstance(e, TypeError) and any(w in text for w in ("Traced<", "Tracer", "concrete"))
    )
    dynamic = [n for n in spec.leaf_names if spec.roles[n] == Role.DYNAMIC]
    if not about_tracers and not (spec.undecided and dynamic):
        return  # not about a traced value: the factory's own error stands
    traced = [
        n
        for n, leaf in zip(spec.leaf_names, leaves)
        if spec.roles[n] == Role.DYNAMIC
        and any(_leaves.is_tracer(x) for x in jax.tree_util.tree_leaves(leaf))
    ]
    if about_tracers and dynamic:
        # Traced leaves (the object passed into jit), or concrete ones closed
        # over, whose arithmetic inside jit is traced all the same.
        suspects = traced or dynamic
        if isinstance(e, jax.errors.TracerIntegerConversionError):  # an index, a range, a shape
            integers = [n for n in suspects if _leaves.has_integer_dtype(leaves[spec.leaf_index[n]])]
            suspects = integers or suspects
        named = [n for n in suspects if f".{n}" in text or f"'{n}'" in text or f"`{n}`" in text]
        culprits = named or suspects
        why = "is dynamic (a traced JAX value) but the factory needs it as a concrete Python value"
        detection = (
            "could not run init/update for this configuration" if spec.undecided else "did not catch it"
        )
    elif spec.undecided and dynamic:
        if _fails_alike_with_python_values(e, spec, leaves, again):
            return  # the user's error, as plain optax raises it
        culprits = dynamic
        why = "was not checked: it is dynamic and may need to be a concrete Python value"
        detection = (
            "could not run init/update for this configuration (its stand-in parameters, shaped "
            "like the masks and labels it holds, did not fit)"
        )
    else:
        return
    which = f"argument {culprits[0]!r}" if len(culprits) == 1 else f"one of the arguments {culprits}"
    raise TypeError(
        f"{spec.info.name}: {which} {why} ({where} failed: {type(e).__name__}: {first_line(text)}). "
        f"Automatic static detection {detection}; {_bind.mark_static(spec.info.name, culprits[:1])}."
    ) from e


def _fails_alike_with_python_values(
    e: Exception, spec: Spec, leaves: tuple[Any, ...], again: Callable[[Any], Any]
) -> bool:
    """Whether the factory, with a Python value for every dynamic argument, then ``again``
    fails as ``e`` did (same type, same message): then ``e`` is plain optax's error.

    The values: a concrete scalar leaf's own, else (traced, inside ``jit``)
    the one the analysis was made with (``Analysis.example``). Without one,
    it cannot tell (False).
    """
    python: dict[str, Any] = {}
    for name in spec.leaf_names:
        if spec.roles[name] == Role.DYNAMIC:
            value = _leaves.value_as_given(leaves[spec.leaf_index[name]])
            python[name] = spec.analysis.example.get(name) if value is None else value
    if any(v is None for v in python.values()):
        return False
    try:
        values = {**arguments(spec, leaves, build_children=True), **python}
        built = _bind.call_quietly(spec.info, values)
        with _quiet.quietly():
            again(as_transformation(built) if spec.kind is Kind.TRANSFORMATION else built)
    except Exception as plain:  # noqa: BLE001 - compared with the first failure
        return type(plain) is type(e) and str(plain) == str(e)
    return False


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 160 else line[:157] + "..."
