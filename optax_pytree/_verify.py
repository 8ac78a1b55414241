"""Analyse: the verification: the wrapped build computes what the factory computes with the Python values.

The probe (``_detect``) sees what a factory does *with* a stand-in: compare
it, convert it, use it as a shape. It cannot see a decision the factory
makes *about* the value: ``isinstance(clip, float)``, ``type(k) is int``,
``hasattr(lr, "shape")``, ``lr is DEFAULT``, ``f"{lr}"``, a ``try:
float(lr)`` that catches JAX's error. A leaf answers those differently from
the Python number, so the factory takes another branch, runs, and computes
something else, silently.

So every new configuration (and every new branch of one) is checked by
differential execution, all of it here:

- **the exerciser** (:func:`exercise`, shared with the probe): ``init``, an
  ``update`` with every extra argument the probe found the transformation
  takes (``value``, ``grad``, ``value_fn``, ``obj_fn``, ``grad_fn``), or a
  schedule at a range of step counts (those near its integer arguments
  included), on the probe's stand-in parameters;
- **the comparison** (:func:`compare`): the wrapped build, with its leaves
  *traced* (a concrete array answers ``float()`` and ``str()`` like a
  number, a tracer does not), against the factory called with the Python
  values. Both programs are traced to jaxprs and evaluated with NumPy on the
  host (``_jaxprs.evaluate``: nothing is compiled), and compared bit for
  bit: the object carries the host values of the Python arithmetic the
  factory does on its arguments (``1 - b2``, see ``_guard.Guarded.exact``),
  so its numbers are the factory's exactly. The two programs must also use
  the same operations that XLA does not round correctly
  (:func:`approximate_ops`: ``exp``, ``pow``, ...), which the NumPy
  evaluation cannot tell apart; a ``pow`` whose exponent plain optax has as
  a constant XLA specializes (the backend's, ``_backends.specializes_exponent``:
  2.0, 3.0, 0.5, -1.0 on the CPU; ``x ** 2.0`` becomes ``x * x``) and the
  wrapped build has as a leaf is reported as such, and
  the argument feeding it (:func:`exponent_inputs`) is static at those
  values. It returns the analysis verified (a new record, with what the
  comparison learned) or a :class:`Difference`, whose ``kind``
  (``_vocabulary.Differs``) is what callers branch on: its ``detail`` is
  words for a message, nothing else;
- **the bisection** (:func:`verify`): a difference makes the responsible
  argument static (the shortest prefix of the candidates that, static,
  removes it), re-analysed with it static and checked again, so it shows
  in ``detected_static_argnames``. The :class:`Verdict` says which analysis
  holds, which difference nothing removes, and which arguments are static
  for every value.

What it cannot see: a factory that reads mutable global state when called
(wrapped factories must be pure functions of their arguments, as
``optax.inject_hyperparams`` requires), and a decision taken by string
formatting or identity at values other than the ones analysed (the check
runs once per configuration and branch, not at every value). A difference
it cannot bisect to a numeric argument (even with every one static) makes
the whole configuration static, with a warning (``_pipeline``): never a
refusal of what plain optax accepts.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _backends, _bind, _build, _carry, _jaxprs, _leaves, _spec, _staged
from ._build import as_transformation
from ._classify import Classified
from ._core import Core
from ._jaxprs import evaluate, is_literal, sub_jaxprs
from ._spec import Analysis
from ._vocabulary import Differs, Kind, Level, Role

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr

# --------------------------------------------------------------------------
# The exerciser: what the probe and the comparison run on a built object.

# How far a transformation is driven, deepest first: update with every extra
# argument optax's transformations take (those of line searches and
# Polyak/plateau rules, of Hessian estimators, of SAM's opaque mode; a
# transformation that takes **extra_args ignores the others), then each
# group alone (a transformation with explicit keywords refuses the rest),
# update alone (then the probe tries init, or construction only).
_EXTRAS = {
    Level.UPDATE_ALL: ("value", "grad", "value_fn", "obj_fn", "grad_fn"),
    Level.UPDATE_LINESEARCH: ("value", "grad", "value_fn"),
    Level.UPDATE_OBJ_FN: ("obj_fn",),
    Level.UPDATE_GRAD_FN: ("grad_fn",),
    Level.UPDATE: (),
}
UPDATE_LEVELS: tuple[Level, ...] = tuple(_EXTRAS)

# The parameters a built object is run on: a pytree of stand-ins (``jax.ShapeDtypeStruct``)
# for the probe, of arrays for the comparison.
Params: TypeAlias = Any
# What a factory returned (an optax transformation, or a schedule), or what it was rebuilt into.
Built: TypeAlias = Any


def sum_of_squares(params: Params) -> jax.Array:
    return sum((jnp.sum(x**2) for x in jax.tree_util.tree_leaves(params)), jnp.zeros(()))


def _gradient(params: Params, i: Any = 0) -> Params:
    """The gradient of ``sum_of_squares``; SAM's ``grad_fn(params, i)`` in opaque mode."""
    del i
    return jax.tree_util.tree_map(lambda x: 2 * x, params)


def _extra_args(level: Level, value: Any, params: Params) -> dict[str, Any]:
    every = {
        "value": value,
        "grad": _gradient(params),
        "value_fn": sum_of_squares,
        "obj_fn": sum_of_squares,
        "grad_fn": _gradient,
    }
    return {k: every[k] for k in _EXTRAS[level]}


def default_param_shapes() -> list[Any]:
    """The stand-in parameters tried after those shaped like a configuration's masks (``_detect``)."""
    f32 = jnp.float32
    return [
        # Ranks 1 to 4 (a bias, a dense kernel, a conv kernel): guards on a
        # parameter's rank (``g.ndim < min_ndim``) are recorded for each.
        {
            "b": jax.ShapeDtypeStruct((3,), f32),
            "c": jax.ShapeDtypeStruct((2, 3, 2, 4), f32),
            "s": jax.ShapeDtypeStruct((3, 2, 4), f32),
            "w": jax.ShapeDtypeStruct((4, 3), f32),
        },
        {"b": jax.ShapeDtypeStruct((3,), f32), "w": jax.ShapeDtypeStruct((4, 3), f32)},
        {"w": jax.ShapeDtypeStruct((4, 3), f32)},
        jax.ShapeDtypeStruct((3,), f32),
    ]


def exercise(built: Built, kind: Kind, level: Level, params: Params, count: Any, value: Any) -> Any:
    """What the probe and the comparison run: init, then an update; a schedule at ``count``."""
    if level is Level.BUILD:
        return None
    if kind is Kind.SCHEDULE:
        return built(count)
    tx = as_transformation(built)
    state = tx.init(params)
    if level is Level.INIT:
        return state
    extra = _extra_args(level, value, params)
    updates, new_state = tx.update(_gradient(params), state, params, **extra)
    return [state, updates, new_state]


# --------------------------------------------------------------------------
# The comparison's inputs and outputs.

# Step counts a schedule is compared at, besides those near its integer arguments.
_COUNTS = (0, 1, 2, 3, 5, 8, 13, 21, 50, 100, 333, 1000, 4321, 10_000, 123_456)


def concrete_params(shapes: Params) -> Params:
    """Deterministic stand-in parameters of the probe's shapes: varied values of both signs."""

    def leaf(i: int, s: Any) -> Any:
        n = int(np.prod(s.shape)) if s.shape else 1
        values = np.sin(np.arange(1, n + 1) * (1.3 + 0.1 * i)) * (1.0 + 0.05 * i)
        return values.reshape(s.shape).astype(s.dtype)  # NumPy: staged as constants without an XLA program

    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    return jax.tree_util.tree_unflatten(treedef, [leaf(i, s) for i, s in enumerate(leaves)])


def smaller(shapes: Params) -> Params:
    """The parameters to compare on: the probe's; for its default ranks 1 to 4 (which
    detection needs for guards on a rank), a bias and a kernel (half the tracing)."""
    first = default_param_shapes()
    if jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(first[0]):
        return first[1]
    return shapes


def counts_for(values: dict[str, Any]) -> np.ndarray:
    """Step counts for a schedule: a fixed range and each integer argument's neighbourhood."""
    counts: set[int] = set(_COUNTS)
    for v in values.values():
        if _leaves.is_integer_scalar(v) and 0 <= v < 2**31 - 2:
            counts.update(c for c in (int(v) - 1, int(v), int(v) + 1, 2 * int(v), int(v) // 2) if c >= 0)
    return np.array(sorted(c for c in counts if c < 2**31), np.int32)


def outputs(built: Built, kind: Kind, level: Level, params: Params, counts: Any) -> Any:
    """What is compared: init and an update, or the schedule at ``counts``."""
    if kind is Kind.SCHEDULE:
        try:
            return jax.vmap(built)(counts)
        except Exception:  # noqa: BLE001 - a schedule with Python control flow on the count
            return [built(c) for c in counts]
    # NumPy parameters become constants of the trace here: JAX arrays made
    # outside it would be staged by small XLA programs of their own.
    params = jax.tree_util.tree_map(jnp.asarray, params)
    value = sum_of_squares(params)
    return exercise(built, kind, level, params, counts[0], value)


def traced_outputs(build: Callable[[Any], Any], leaves: Any, run: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``run(build(leaves))`` with ``leaves`` traced, evaluated on their concrete values; and its jaxpr."""
    flat, treedef = jax.tree_util.tree_flatten(leaves)

    def fn(*xs: Any) -> Any:
        return run(build(jax.tree_util.tree_unflatten(treedef, list(xs))))

    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*flat)
    out = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), evaluate(closed, *flat))
    return out, closed


def reference_outputs(built: Built, run: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``run(built)`` for the factory's own result, traced and evaluated like the wrapped one."""
    closed, shapes = jax.make_jaxpr(lambda: run(built), return_shape=True)()
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), evaluate(closed)), closed


# --------------------------------------------------------------------------
# What the comparison counts in both programs.

# Primitives whose XLA implementation is not correctly rounded: the same
# numbers from both sides need the same ones. JAX picks some from the *kind*
# of a value (``x ** 2.0`` with the Python float is ``integer_pow``, with an
# array ``pow``), which the NumPy evaluation cannot tell apart numerically.
_APPROXIMATE = frozenset(
    "pow integer_pow exp exp2 log log1p expm1 tanh logistic sin cos tan atan2 erf erf_inv "
    "lgamma digamma cbrt".split()
)


# The arithmetic whose counts a term skipped in Python changes (``approximate_ops``' ``every``);
# not ``select_n``, which the wrapped build adds itself (a guard's check, ``_guard``).
_ARITHMETIC = frozenset(
    "add sub mul div neg max min abs sign sqrt rsqrt pow integer_pow exp exp2 log log1p expm1 tanh "
    "logistic dot_general".split()
)

# The key of ``approximate_ops`` for the powers whose exponent is a constant XLA specializes.
SPECIALIZED_POW = "pow by a specialized constant"


def approximate_ops(
    closed: ClosedJaxpr, params: Any = None, every: dict[str, int] | None = None
) -> dict[str, Any]:
    """How many of each not-correctly-rounded primitive a jaxpr has (sub-jaxprs included).

    ``params``: the data both programs share (parameters, a schedule's step
    counts), not hyperparameters.

    With, for ``pow``, which exponents are constants XLA specializes (see
    ``_backends.specializes_exponent``): a hyperparameter leaf as the exponent would
    not get that, so where the factory's own program has one, the wrapped
    one must have it too (the argument is then static). And, where the
    backend unrolls a loop of a constant trip count
    (``_backends.unrolls_constant_loops``), its loops: plain optax's
    ``scan`` is a leaf's ``while`` (the trip count is then static).

    ``every``, where given, gets the count of each arithmetic primitive that
    computes with the data (not from hyperparameters alone), by name: what a
    factory skipped in Python for a zero is missing there
    (``SKIPPED_AT_ZERO``). Arithmetic only: a loop of a leaf's trip count is
    a ``while`` with a comparison, plain optax's a ``scan``.
    """
    counts: dict[str, Any] = {}
    exponents: list[bool] = []
    # A loop: a constant trip count is a ``scan`` (a ``fori_loop`` of Python bounds), a leaf's a
    # ``while``; where the compiler unrolls the first, they are other operations.
    loops = ("scan", "while") if _backends.unrolls_constant_loops() else ()

    def walk(jaxpr: Jaxpr, consts: dict[int, Any], inputs: tuple[Any, ...] = ()) -> None:
        # Values of the inputs (the wrapped build's leaves) alone are the
        # host arithmetic of carried expressions, replaced by their host
        # values: not counted (the factory's program has them as constants).
        derived = set(map(id, inputs))
        for eqn in jaxpr.eqns:
            alone = all(is_literal(v) or id(v) in derived for v in eqn.invars)
            if alone:
                derived.update(map(id, eqn.outvars))
                continue
            if every is not None and eqn.primitive.name in _ARITHMETIC:
                every[eqn.primitive.name] = every.get(eqn.primitive.name, 0) + 1
            if eqn.primitive.name in _APPROXIMATE or eqn.primitive.name in loops:
                counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
            if eqn.primitive.name == "pow":
                exponent = eqn.invars[1]
                value = exponent.val if is_literal(exponent) else consts.get(id(exponent))
                exponents.append(value is not None and _specialized(value))
            for inner, inner_consts in sub_jaxprs(eqn):
                known = dict(zip(map(id, inner.constvars), inner_consts))
                # A constant handed to the sub-program as an operand (a cond's, a scan's, a
                # nested jit's) is a constant there too: plain optax's 2.0 reaches a pow in a branch.
                operands = eqn.invars[1:] if eqn.primitive.name == "cond" else eqn.invars
                if len(inner.invars) == len(operands):
                    for a, b in zip(inner.invars, operands):
                        value = b.val if is_literal(b) else consts.get(id(b))
                        if value is not None:
                            known[id(a)] = value
                walk(inner, known)

    # The hyperparameters' own values: the inputs (leaves) and the constants
    # of the program (what the factory computed from them in Python), but
    # not the parameters (constants of both programs too).
    # JAX may hand a NumPy constant back as its own array type (a
    # ``TypedNdArray`` of a schedule's step counts): the same data by value.
    data = jax.tree_util.tree_leaves(params)

    def is_data(c: Any) -> bool:
        return any(
            c is x or (np.shape(c) == np.shape(x) and np.ndim(x) > 0 and np.array_equal(c, x)) for x in data
        )

    own = [v for v, c in zip(closed.jaxpr.constvars, closed.consts) if not is_data(c)]
    walk(
        closed.jaxpr, dict(zip(map(id, closed.jaxpr.constvars), closed.consts)), (*closed.jaxpr.invars, *own)
    )
    if any(exponents):
        counts[SPECIALIZED_POW] = tuple(exponents)
    return counts


def exponent_inputs(closed: ClosedJaxpr) -> frozenset[int]:
    """The positions of the program's inputs that a ``pow``'s exponent is computed from.

    A leaf there computes the general power, which is plain optax's numbers
    only where XLA would not specialize plain optax's constant: whether it
    would depends on the value, so the analysis remembers these arguments
    (``Analysis.exponents``) and a later value XLA specializes is another
    analysis (verified, and static there).
    """
    found: set[int] = set()
    empty: frozenset[int] = frozenset()

    def walk(jaxpr: Jaxpr, sources: dict[int, frozenset[int]]) -> None:
        for eqn in jaxpr.eqns:
            ins = [sources.get(id(v), empty) for v in eqn.invars if not is_literal(v)]
            mine = empty.union(*ins)
            if eqn.primitive.name == "pow" and not is_literal(eqn.invars[1]):
                found.update(sources.get(id(eqn.invars[1]), empty))
            for inner, _ in sub_jaxprs(eqn):
                if len(inner.invars) == len(eqn.invars):  # pjit, custom_jvp: position by position
                    inner_sources = {
                        id(a): sources.get(id(b), empty)
                        for a, b in zip(inner.invars, eqn.invars)
                        if not is_literal(b)
                    }
                else:  # scan, while, cond: every input may feed every one
                    inner_sources = {id(a): mine for a in inner.invars}
                walk(inner, inner_sources)
            if mine:
                for v in eqn.outvars:
                    sources[id(v)] = mine

    walk(closed.jaxpr, {id(v): frozenset((i,)) for i, v in enumerate(closed.jaxpr.invars)})
    return frozenset(found)


def _specialized(value: Any) -> bool:
    return _backends.specializes_exponent(value)


def where_differs(reference: Any, got: Any, exact: bool = False, rtol: float = 1e-4) -> str | None:
    """Where ``got`` differs from ``reference`` (structure, dtype, shape, value), or None."""
    # Both treedefs from tree_flatten: a node registered with keys (a chex
    # dataclass on older jax) gives other aux data through the keyed flatten.
    ref_leaves, _ = jax.tree_util.tree_flatten_with_path(reference)
    ref_tree = jax.tree_util.tree_structure(reference)
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    if ref_tree != got_tree:
        return f"the structure differs: {got_tree} instead of {ref_tree}"
    for (path, a), b in zip(ref_leaves, got_leaves):
        where = jax.tree_util.keystr(path) or "the output"
        if not isinstance(a, (jax.Array, np.ndarray, np.generic)) or not isinstance(
            b, (jax.Array, np.ndarray, np.generic)
        ):
            if not (a is b or a == b):
                return f"{where}: {b!r} instead of {a!r}"
            continue
        if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(jnp.asarray(b))
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape or x.dtype != y.dtype:
            want, have = _leaves.aval_text(x.shape, x.dtype), _leaves.aval_text(y.shape, y.dtype)
            return f"{where}: {have} instead of {want}"
        if exact or not np.issubdtype(x.dtype, np.inexact):
            same = np.array_equal(x, y, equal_nan=np.issubdtype(x.dtype, np.inexact))
        else:
            finite = np.abs(x[np.isfinite(x)])
            scale = float(finite.max()) if finite.size else 0.0
            same = bool(np.allclose(x, y, rtol=rtol, atol=rtol * 0.1 * scale + 1e-30, equal_nan=True))
        if not same:
            return f"{where}: {_first(y)} instead of {_first(x)}"
    return None


def _first(x: np.ndarray) -> str:
    flat = x.reshape(-1)
    shown = np.array2string(flat[:3], precision=6)
    return shown if flat.size <= 3 else shown[:-1] + " ...]"


def call_reference(info: _bind.FactoryInfo, values: dict[str, Any]) -> Any:
    """The factory called with Python values, quietly (its warnings were the user's once already)."""
    return _bind.call_quietly(info, values)


# --------------------------------------------------------------------------
# The comparison, and the bisection that removes a difference.


class Difference(NamedTuple):
    """How the wrapped build differs from the factory with the Python values."""

    kind: Differs  # what the pipeline branches on
    detail: str  # what differs, in words: for messages only, never compared
    names: tuple[str, ...] = ()  # SKIPPED_AT_ZERO: the zeros the factory skips operations for

    def __str__(self) -> str:
        return self.detail


def _more(counts: dict[str, int], reference: dict[str, int]) -> dict[str, int]:
    """What ``counts`` has more of than ``reference``, where it has nothing less (else nothing)."""
    if any(counts.get(k, 0) < n for k, n in reference.items()):
        return {}
    return {k: n - reference.get(k, 0) for k, n in counts.items() if n > reference.get(k, 0)}


def _nonzero(value: Any) -> Any:
    """A nonzero value of the kind of ``value`` (a zero)."""
    return type(value)(1) if isinstance(value, (int, np.integer)) else type(value)(0.25)


def _arithmetic(
    info: _bind.FactoryInfo, values: dict[str, Any], run: Callable[[Any], Any], data: Any
) -> dict[str, int]:
    """The factory's own program with ``values``: its arithmetic on the data (``approximate_ops``'
    ``every``); none where it fails."""
    every: dict[str, int] = {}
    try:
        approximate_ops(jax.make_jaxpr(lambda: run(call_reference(info, values)))(), data, every)
    except Exception:  # noqa: BLE001 - another branch that fails: nothing to learn from it
        return {}
    return every


def zero_leaves(spec: _spec.Spec, base: dict[str, Any]) -> tuple[str, ...]:
    """The dynamic scalar arguments whose value is zero (``_spec.is_zero``); none for a batch's
    member (``_spec.batch_members``: there a zero is a leaf)."""
    if _spec.in_batch():
        return ()
    return tuple(n for n in spec.dynamic_names if n in base and _spec.is_zero(base[n]))


def _nonzero_leaves(spec: _spec.Spec, base: dict[str, Any]) -> tuple[str, ...]:
    """The dynamic scalar arguments verified at a nonzero value (a batch's member: not verified
    at a zero, whatever its value)."""
    batch = _spec.in_batch()
    return tuple(
        n
        for n in spec.dynamic_names
        if n in base and _leaves.value_as_given(base[n]) is not None and (batch or not _spec.is_zero(base[n]))
    )


def compare(
    info: _bind.FactoryInfo,
    classified: Classified,
    base: dict[str, Any],
    analysis: Analysis,
    zeros: bool = True,
) -> Difference | Analysis:
    """The wrapped build (leaves traced) against the factory with the Python values, bit for bit.

    Returns the analysis verified, as a new record with what the comparison
    learned (``exponents``, ``nonzero``), or how they differ. The object carries the host
    values of the expressions optax computes in Python (see
    ``_guard.Guarded.exact``), so its numbers are exactly the factory's.

    ``zeros``: where a leaf is zero, whether the wrapped program must also
    have the factory's operations, no more (a term the factory skips in
    Python for a zero, ``isinstance(weight_decay, (int, float)) and
    weight_decay == 0.0``, which a leaf cannot answer so: it computes ``g +
    0.0 * p``, the same number, which XLA compiles otherwise).
    """
    if analysis.level is Level.BUILD:
        return analysis  # nothing to run (the probe could not run init or a schedule)
    spec, leaves, exact, run = _exercised(info, classified, base, analysis)
    params, counts = run.params, run.counts
    reference_jaxpr = None
    try:
        reference, reference_jaxpr = reference_outputs(call_reference(info, base), run)
    except Exception as e:  # noqa: BLE001 - compared below
        reference = e
    try:
        got, jaxpr = traced_outputs(lambda lv: _build.build(spec, *lv), (leaves, exact), run)
    except Exception as e:  # noqa: BLE001 - any failure of the wrapped build is a difference
        if isinstance(reference, Exception):
            return analysis  # the factory fails on these stand-in parameters too: nothing to compare
        return Difference(Differs.FAILS, f"it fails: {type(e).__name__}: {_build.first_line(str(e))}")
    if isinstance(reference, Exception) or reference_jaxpr is None:
        return Difference(
            Differs.ONLY_WRAPPED_RUNS,
            f"the factory fails with the Python values ({type(reference).__name__}) but not wrapped",
        )
    every: dict[str, int] = {}
    reference_every: dict[str, int] = {}
    ops, reference_ops = (
        approximate_ops(jaxpr, (params, counts), every),
        approximate_ops(reference_jaxpr, (params, counts), reference_every),
    )
    if ops != reference_ops:
        others, reference_others = (
            {k: v for k, v in o.items() if k != SPECIALIZED_POW} for o in (ops, reference_ops)
        )
        if others == reference_others:
            return Difference(
                Differs.SPECIALIZED_EXPONENT,
                "it takes as a leaf an exponent XLA specializes as a constant: "
                f"{reference_ops.get(SPECIALIZED_POW)} where it has {ops.get(SPECIALIZED_POW)}",
            )
        return Difference(
            Differs.OPERATIONS, f"it computes with {ops} where the factory computes with {reference_ops}"
        )
    if zeros and (zero := zero_leaves(spec, base)) and _more(every, reference_every):
        # The factory's own program, each zero alone made nonzero, says which it skips for (all
        # of them made nonzero first: where it computes no more so, none).
        everywhere = {**base, **{n: _nonzero(base[n]) for n in zero}}
        more = _more(_arithmetic(info, everywhere, run, (params, counts)), reference_every)
        skipped = (
            ()
            if not more
            else zero
            if len(zero) == 1
            else tuple(
                n
                for n in zero
                if _more(
                    _arithmetic(info, {**base, n: _nonzero(base[n])}, run, (params, counts)), reference_every
                )
            )
        )
        if skipped:
            return Difference(
                Differs.SKIPPED_AT_ZERO,
                f"given {_bind.which(skipped)} as zero, the factory skips operations in Python that "
                f"it computes ({_more(every, reference_every)})",
                skipped,
            )
    found = where_differs(reference, got, exact=True)
    if found is not None:
        return Difference(Differs.NUMBERS, found)
    return dataclasses.replace(
        analysis,
        nonzero=_nonzero_leaves(spec, base),
        exponents=_exponent_names(spec, leaves, exponent_inputs(jaxpr)),
        folds=learned_folds(spec, leaves, exact, run),
    )


def with_folds(
    info: _bind.FactoryInfo, classified: Classified, base: dict[str, Any], analysis: Analysis
) -> Analysis:
    """``analysis`` with its folds learned (:func:`learned_folds`), where the verification did not
    run (traced values): every analysis of a configuration has them, whichever way it was made,
    so that its objects share one spec."""
    if analysis.level is Level.BUILD or analysis.folds:
        return analysis
    spec, leaves, exact, run = _exercised(info, classified, base, analysis)
    if not spec.dynamic_names:
        return analysis
    folds = learned_folds(spec, leaves, exact, run)
    return dataclasses.replace(analysis, folds=folds) if folds else analysis


class _Run:
    """What the comparison runs on a built object: ``outputs`` on the stand-in parameters and
    step counts (kept as attributes: the comparison reads them too)."""

    def __init__(self, kind: Kind, level: Level, params: Params, counts: Any):
        self.kind, self.level, self.params, self.counts = kind, level, params, counts

    def __call__(self, built: Built) -> Any:
        return outputs(built, self.kind, self.level, self.params, self.counts)


def _exercised(
    info: _bind.FactoryInfo, classified: Classified, base: dict[str, Any], analysis: Analysis
) -> tuple[_spec.Spec, Any, Any, _Run]:
    """The spec of ``analysis``, its object's leaves and ``exact`` child made as the object
    will be (the same one compiled converter), and what the comparison runs on it."""
    spec = _spec.new_spec(info, classified, analysis)
    leaves, exact = _carry.leaves_and_exact(
        spec, classified, _carry.host_values(spec, base) if spec.carried else {}
    )
    params = concrete_params(smaller(analysis.params))
    counts = counts_for({n: classified.values[n] for n in classified.candidates})
    return spec, leaves, exact, _Run(spec.kind, analysis.level, params, counts)


def learned_folds(spec: _spec.Spec, leaves: Any, exact: Any, run: Callable[[Any], Any]) -> tuple[Any, ...]:
    """What the backend's compiler folds from the object's own hyperparameters alone in its
    calls (``_folds``): its call traced once through the build's rewrites, its leaves traced."""
    flat, treedef = jax.tree_util.tree_flatten((leaves, exact))

    def fn(*xs: Any) -> Any:
        lv, ex = jax.tree_util.tree_unflatten(treedef, list(xs))
        core = Core.of(spec, lv, ex)
        if spec.kind is Kind.SCHEDULE:
            return run(lambda count: _staged.call(core, "__call__", count))
        return run(optax.GradientTransformationExtraArgs(core.init, core.update))

    try:
        with _jaxprs.learning() as found:
            jax.make_jaxpr(fn)(*flat)
    except Exception:  # noqa: BLE001 - what cannot be learned is computed by the device, as before
        return ()
    return tuple(found)


def _exponent_names(spec: _spec.Spec, leaves: tuple[Any, ...], positions: frozenset[int]) -> tuple[str, ...]:
    """The dynamic arguments among the program's inputs at ``positions`` (its leaves, then ``exact``)."""
    if not positions:
        return ()
    names: list[str] = []
    at = 0
    for name, leaf in zip(spec.leaf_names, leaves):
        size = len(jax.tree_util.tree_leaves(leaf))
        if spec.roles[name] == Role.DYNAMIC and any(at <= p < at + size for p in positions):
            names.append(name)
        at += size
    return tuple(names)


class Verdict(NamedTuple):
    """What the verification of one configuration concluded (:func:`verify`)."""

    # The analysis that holds: verified; or, where ``difference`` is not None,
    # the last one tried (every candidate static, or as the probe found it).
    analysis: Analysis
    # None: verified. Else the first difference found, which no static
    # candidate removes: the pipeline decides (a forced-dynamic argument's
    # error, or the configuration degraded) by its ``kind``.
    difference: Difference | None
    # The candidates found static whatever their values (the ``static`` given,
    # and those found here but for a specialized exponent, static at its value only).
    static_for_every_value: tuple[str, ...]


def verify(
    info: _bind.FactoryInfo,
    classified: Classified,
    base: dict[str, Any],
    analyse: Callable[[tuple[str, ...]], Analysis],
    static: tuple[str, ...] = (),
) -> Verdict:
    """Compares the probe's analysis, bisecting each difference to the candidate that must be static.

    ``analyse(names)``: the probe's analysis with ``names`` static. ``static``:
    candidates already known static for every value (a later analysis of the
    configuration starts with them).
    """
    fixed = always = static
    at_zero: tuple[str, ...] = ()
    analysis = analyse(fixed)
    while True:
        found = compare(info, classified, base, analysis)
        if isinstance(found, Analysis):
            if at_zero:
                found = dataclasses.replace(found, at_zero=at_zero)
            return Verdict(found, None, always)
        if found.kind is Differs.SKIPPED_AT_ZERO:
            # The zeros the factory's own program skips operations for (``compare``): static at
            # zero only, with no bisection.
            fixed, at_zero = (*fixed, *found.names), (*at_zero, *found.names)
            analysis = analyse(fixed)
            continue
        order = [n for n in classified.candidates if n not in analysis.static_names]
        # Bisection: the shortest prefix of ``order`` that, made static, removes the difference.
        lo, hi = 0, len(order)
        last = analyse((*fixed, *order)) if order else analysis
        # Another difference is bisected with the zeros' check off (its zeros are found next).
        if not order or not isinstance(compare(info, classified, base, last, False), Analysis):
            return Verdict(last, found, always)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = analyse((*fixed, *order[:mid]))
            if isinstance(compare(info, classified, base, trial, False), Analysis):
                hi, last = mid, trial
            else:
                lo = mid
        fixed = (*fixed, order[hi - 1])
        if found.kind is not Differs.SPECIALIZED_EXPONENT:
            # Static for every value. A specialized exponent is static at its
            # value only (``Analysis.exponents``), as a zero a factory skips
            # operations for is (``Analysis.at_zero``).
            always = (*always, order[hi - 1])
        analysis = analyse(fixed) if hi > 1 else last
