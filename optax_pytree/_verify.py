"""Step 2d, verify: the wrapped build computes what the factory computes with the Python values.

Detection (``_detect``) sees what a factory does *with* a stand-in: compare it,
convert it, use it as a shape. It cannot see a decision the factory makes
*about* the value: ``isinstance(clip, float)``, ``type(k) is int``,
``hasattr(lr, "shape")``, ``lr is DEFAULT``, ``f"{lr}"``, a ``try: float(lr)``
that catches JAX's error. A leaf answers those differently from the Python
number, so the factory takes another branch, runs, and computes something
else, silently.

So every new configuration (and every new branch of one) is checked by
differential execution: the wrapped build, with its leaves *traced* (a
concrete array answers ``float()`` and ``str()`` like a number, a tracer does
not), against the factory called with the Python values, on the probe's
stand-in parameters: ``init``, an ``update`` with every extra argument
the probe found the transformation takes (``value``, ``grad``, ``value_fn``,
``obj_fn``, ``grad_fn``), or a schedule at a range of step counts (those near
its integer arguments included). A difference makes the responsible argument
static (found by bisection, re-analysed with it static, checked again), so it
shows in ``detected_static_argnames``.

Both programs are traced to jaxprs and evaluated with NumPy on the host
(:func:`evaluate`: nothing is compiled), and compared bit for bit
(:func:`difference` with ``exact=True``): the object carries the host values
of the Python arithmetic the factory does on its arguments (``1 - b2``, see
``_guard.Guarded.exact``), so its numbers are the factory's exactly. The two
programs must also use the same operations that XLA does not round
correctly (:func:`approximate_ops`: ``exp``, ``pow``, ...), which the NumPy
evaluation cannot tell apart; a ``pow`` whose exponent plain optax has as a
constant XLA specializes (2.0, 3.0, 0.5, -1.0: ``x ** 2.0`` becomes
``x * x``) and the wrapped build has as a leaf is reported as such, and the
argument feeding it (:func:`exponent_inputs`) is static at those values.

What it cannot see: a factory that reads mutable global state when called
(wrapped factories must be pure functions of their arguments, as
``optax.inject_hyperparams`` requires), and a decision taken by string
formatting or identity at values other than the ones analysed (the check runs
once per configuration and branch, not at every value). A difference it
cannot bisect to a numeric argument (even with every one static) makes the
whole configuration static, with a warning (``_pipeline.Degrade``): never a
refusal of what plain optax accepts.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _bind, _detect, _leaves
from ._constants import INLINED, bind, is_literal
from ._expr import SPECIALIZED_EXPONENTS
from ._vocabulary import Kind, Level

# Step counts a schedule is compared at, besides those near its integer arguments.
_COUNTS = (0, 1, 2, 3, 5, 8, 13, 21, 50, 100, 333, 1000, 4321, 10_000, 123_456)


def concrete_params(shapes: Any) -> Any:
    """Deterministic stand-in parameters of the probe's shapes: varied values of both signs."""

    def leaf(i: int, s: Any) -> Any:
        n = int(np.prod(s.shape)) if s.shape else 1
        values = np.sin(np.arange(1, n + 1) * (1.3 + 0.1 * i)) * (1.0 + 0.05 * i)
        return values.reshape(s.shape).astype(s.dtype)  # NumPy: staged as constants without an XLA program

    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    return jax.tree_util.tree_unflatten(treedef, [leaf(i, s) for i, s in enumerate(leaves)])


def smaller(shapes: Any) -> Any:
    """The parameters to compare on: the probe's; for its default ranks 1 to 4 (which
    detection needs for guards on a rank), a bias and a kernel (half the tracing)."""
    first = _detect.default_param_shapes()
    if jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(first[0]):
        return first[1]
    return shapes


def counts_for(values: dict[str, Any]) -> np.ndarray:
    """Step counts for a schedule: a fixed range and each integer argument's neighbourhood."""
    counts: set[int] = set(_COUNTS)
    for v in values.values():
        if _leaves.is_integer(v) and 0 <= v < 2**31 - 2:
            counts.update(c for c in (int(v) - 1, int(v), int(v) + 1, 2 * int(v), int(v) // 2) if c >= 0)
    return np.array(sorted(c for c in counts if c < 2**31), np.int32)


def outputs(built: Any, kind: Kind, level: Level, params: Any, counts: Any) -> Any:
    """What is compared: init and an update, or the schedule at ``counts``."""
    if kind is Kind.SCHEDULE:
        try:
            return jax.vmap(built)(counts)
        except Exception:  # noqa: BLE001 - a schedule with Python control flow on the count
            return [built(c) for c in counts]
    # NumPy parameters become constants of the trace here: JAX arrays made
    # outside it would be staged by small XLA programs of their own.
    params = jax.tree_util.tree_map(jnp.asarray, params)
    value = _detect.sum_of_squares(params)
    return _detect.exercise(built, kind, level, params, counts[0], value)


def traced_outputs(build: Callable[[Any], Any], leaves: Any, run: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``run(build(leaves))`` with ``leaves`` traced, evaluated on their concrete values; and its jaxpr."""
    flat, treedef = jax.tree_util.tree_flatten(leaves)

    def fn(*xs: Any) -> Any:
        return run(build(jax.tree_util.tree_unflatten(treedef, list(xs))))

    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*flat)
    out = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), evaluate(closed, *flat))
    return out, closed


def reference_outputs(built: Any, run: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``run(built)`` for the factory's own result, traced and evaluated like the wrapped one."""
    closed, shapes = jax.make_jaxpr(lambda: run(built), return_shape=True)()
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), evaluate(closed)), closed


# Primitives whose XLA implementation is not correctly rounded: the same
# numbers from both sides need the same ones. JAX picks some from the *kind*
# of a value (``x ** 2.0`` with the Python float is ``integer_pow``, with an
# array ``pow``), which the NumPy evaluation cannot tell apart numerically.
_APPROXIMATE = frozenset(
    "pow integer_pow exp exp2 log log1p expm1 tanh logistic sin cos tan atan2 erf erf_inv "
    "lgamma digamma cbrt".split()
)


# The key of ``approximate_ops`` for the powers whose exponent is a constant XLA specializes.
SPECIALIZED_POW = "pow by a specialized constant"


def _sub_jaxprs(eqn: Any) -> list[tuple[Any, Any]]:
    """The jaxprs an equation calls (pjit, custom_jvp, cond's branches, scan's body), with their consts."""
    out: list[tuple[Any, Any]] = []
    for param in eqn.params.values():
        for sub in param if isinstance(param, (tuple, list)) else (param,):
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                out.append((inner, getattr(sub, "consts", ())))
    return out


def approximate_ops(closed: Any, params: Any = None) -> dict[str, Any]:
    """How many of each not-correctly-rounded primitive a jaxpr has (sub-jaxprs included).

    ``params``: the data both programs share (parameters, a schedule's step
    counts), not hyperparameters.

    With, for ``pow``, which exponents are constants XLA specializes (see
    ``_expr.SPECIALIZED_EXPONENTS``): a hyperparameter leaf as the exponent would
    not get that, so where the factory's own program has one, the wrapped
    one must have it too (the argument is then static).
    """
    counts: dict[str, Any] = {}
    exponents: list[bool] = []

    def walk(jaxpr: Any, consts: dict[int, Any], inputs: tuple[Any, ...] = ()) -> None:
        # Values of the inputs (the wrapped build's leaves) alone are the
        # host arithmetic of carried expressions, replaced by their host
        # values: not counted (the factory's program has them as constants).
        derived = set(map(id, inputs))
        for eqn in jaxpr.eqns:
            alone = all(is_literal(v) or id(v) in derived for v in eqn.invars)
            if alone:
                derived.update(map(id, eqn.outvars))
                continue
            if eqn.primitive.name in _APPROXIMATE:
                counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
            if eqn.primitive.name == "pow":
                exponent = eqn.invars[1]
                value = exponent.val if is_literal(exponent) else consts.get(id(exponent))
                exponents.append(value is not None and _specialized(value))
            for inner, inner_consts in _sub_jaxprs(eqn):
                walk(inner, dict(zip(map(id, inner.constvars), inner_consts)))

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


def exponent_inputs(closed: Any) -> frozenset[int]:
    """The positions of the program's inputs that a ``pow``'s exponent is computed from.

    A leaf there computes the general power, which is plain optax's numbers
    only where XLA would not specialize plain optax's constant: whether it
    would depends on the value, so the analysis remembers these arguments
    (``Analysis.exponents``) and a later value XLA specializes is another
    analysis (verified, and static there).
    """
    found: set[int] = set()
    empty: frozenset[int] = frozenset()

    def walk(jaxpr: Any, sources: dict[int, frozenset[int]]) -> None:
        for eqn in jaxpr.eqns:
            ins = [sources.get(id(v), empty) for v in eqn.invars if not is_literal(v)]
            mine = empty.union(*ins)
            if eqn.primitive.name == "pow" and not is_literal(eqn.invars[1]):
                found.update(sources.get(id(eqn.invars[1]), empty))
            for inner, _ in _sub_jaxprs(eqn):
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
    x = np.asarray(value)
    return x.size > 0 and bool(np.all(np.isin(x, list(SPECIALIZED_EXPONENTS))))


def difference(reference: Any, got: Any, exact: bool = False, rtol: float = 1e-4) -> str | None:
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
# Evaluating a jaxpr with NumPy.
#
# Both sides of the comparison are traced to jaxprs and evaluated here, on
# the host, one NumPy call per equation. Evaluated eagerly by JAX instead,
# every primitive at every shape would be compiled by XLA once per process
# (about a hundred small programs at the first wrap of adam): a cost at every
# start, and entries in a persistent compilation cache. Primitives without a
# rule here (PRNG, scatter, ...) are bound eagerly, as a fallback. The same
# evaluator runs both sides, so its arithmetic cannot make them differ.


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda x, y, **_: fn(x, y)


def _unary(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda x, **_: fn(x)


def _int_div(x: Any, y: Any) -> Any:
    if np.issubdtype(np.result_type(x), np.integer):
        q = np.abs(x) // np.where(y == 0, 1, np.abs(y))  # XLA rounds toward zero
        return (np.sign(x) * np.sign(y) * q).astype(np.result_type(x))
    return np.divide(x, y)


def _broadcast_in_dim(x: Any, shape: Any, broadcast_dimensions: Any, **_: Any) -> Any:
    kept = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        kept[d] = np.shape(x)[i]
    return np.broadcast_to(np.reshape(x, kept), shape).copy()


def _dot_general(x: Any, y: Any, dimension_numbers: Any, preferred_element_type: Any = None, **_: Any) -> Any:
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    left = [next(letters) for _ in range(np.ndim(x))]
    right = [next(letters) for _ in range(np.ndim(y))]
    for i, j in zip((*lc, *lb), (*rc, *rb)):
        right[j] = left[i]
    batch = [left[i] for i in lb]
    free_left = [c for i, c in enumerate(left) if i not in lc and i not in lb]
    free_right = [c for j, c in enumerate(right) if j not in rc and j not in rb]
    out = np.einsum(f"{''.join(left)},{''.join(right)}->{''.join(batch + free_left + free_right)}", x, y)
    return out.astype(preferred_element_type or np.result_type(x, y))


def _select_n(which: Any, *cases: Any) -> Any:
    if np.result_type(which) == np.bool_:
        return np.where(which, cases[1], cases[0])
    return np.choose(np.asarray(which, np.int32), cases)


def _reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, axes, **_: np.asarray(fn(x, axis=tuple(axes)), np.result_type(x))


def _slice(x: Any, start_indices: Any, limit_indices: Any, strides: Any = None, **_: Any) -> Any:
    steps = strides or (1,) * len(start_indices)
    return x[tuple(slice(a, b, c) for a, b, c in zip(start_indices, limit_indices, steps))]


_RULES: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(_int_div),
    "rem": _binary(np.fmod),
    "pow": _binary(np.power),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "atan2": _binary(np.arctan2),
    "nextafter": _binary(np.nextafter),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "not": _unary(np.invert),
    "shift_left": _binary(np.left_shift),
    "shift_right_arithmetic": _binary(np.right_shift),  # arithmetic on signed integers, as XLA's
    "bitcast_convert_type": lambda x, new_dtype, **_: np.asarray(x).view(new_dtype),
    "neg": _unary(np.negative),
    "sign": _unary(np.sign),
    "abs": _unary(np.abs),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _unary(lambda x: np.asarray(1, np.result_type(x)) / np.sqrt(x)),
    "square": _unary(np.square),
    "exp": _unary(np.exp),
    "exp2": _unary(np.exp2),
    "log": _unary(np.log),
    "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1),
    "tanh": _unary(np.tanh),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "is_finite": _unary(np.isfinite),
    "logistic": _unary(lambda x: np.asarray(1, np.result_type(x)) / (1 + np.exp(-x))),
    "copy": _unary(np.copy),
    "copy_p": _unary(np.copy),
    "stop_gradient": _unary(lambda x: x),
    "integer_pow": lambda x, y, **_: (
        np.power(x, np.asarray(y, np.result_type(x))) if y >= 0 else 1 / x ** (-y)
    ),
    "convert_element_type": lambda x, new_dtype, **_: np.asarray(x).astype(new_dtype),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda x, new_sizes, **_: np.reshape(x, new_sizes),
    "squeeze": lambda x, dimensions, **_: np.squeeze(x, tuple(dimensions)),
    "expand_dims": lambda x, dimensions, **_: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, permutation, **_: np.transpose(x, permutation),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "dot_general": _dot_general,
    "select_n": lambda which, *cases, **_: _select_n(which, *cases),
    "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
    "slice": _slice,
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
}


def evaluate(closed: Any, *args: Any) -> list[Any]:
    """The outputs of a closed jaxpr for ``args``, computed with NumPy (see above)."""
    with np.errstate(all="ignore"):
        return _evaluate(closed.jaxpr, list(closed.consts), list(args))


def _value(x: Any) -> Any:
    if isinstance(x, jax.Array) and not jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(x)
    return x


def _evaluate(jaxpr: Any, consts: list[Any], args: list[Any]) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        if is_literal(v):
            return np.asarray(v.val, v.aval.dtype) if hasattr(v.aval, "dtype") else v.val
        return env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = _value(x)
    for v, x in zip(jaxpr.invars, args):
        env[v] = _value(x)
    for eqn in jaxpr.eqns:
        inputs = [read(v) for v in eqn.invars]
        outputs = _apply(eqn, inputs)
        for v, x in zip(eqn.outvars, outputs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _apply(eqn: Any, inputs: list[Any]) -> list[Any]:
    name, params = eqn.primitive.name, eqn.params
    rule = _RULES.get(name)
    if rule is not None and not any(_is_key(x) for x in inputs):
        out = rule(*inputs, **params)
        dtype = eqn.outvars[0].aval.dtype
        return [np.asarray(out).astype(dtype, copy=False)]
    sub = params.get("jaxpr") if name in INLINED else None
    if sub is None and name.startswith("custom_"):
        sub = params.get("call_jaxpr") or params.get("fun_jaxpr")
    if sub is not None and hasattr(sub, "jaxpr"):
        return _evaluate(sub.jaxpr, list(sub.consts), inputs)
    if name == "cond":
        index, operands = inputs[0], inputs[1:]
        branch = params["branches"][int(np.clip(np.asarray(index), 0, len(params["branches"]) - 1))]
        return _evaluate(branch.jaxpr, list(branch.consts), operands)
    if name == "while":
        return _while(params, inputs)
    if name == "scan":  # with NumPy too: a loop of a static length is a scan, of a traced one a while
        return _scan(eqn, inputs)
    # Anything else: JAX's own implementation, eagerly.
    args = [jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x for x in inputs]
    out = bind(eqn, args)
    return [_value(x) for x in (out if eqn.primitive.multiple_results else [out])]


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _scan(eqn: Any, inputs: list[Any]) -> list[Any]:
    params = eqn.params
    nc, ncarry, body = params["num_consts"], params["num_carry"], params["jaxpr"]
    consts, carry, xs = inputs[:nc], inputs[nc : nc + ncarry], inputs[nc + ncarry :]
    steps = range(params["length"])
    ys: list[list[Any]] = []
    for i in reversed(steps) if params["reverse"] else steps:
        out = _evaluate(body.jaxpr, list(body.consts), [*consts, *carry, *(x[i] for x in xs)])
        carry = out[:ncarry]
        ys.append(out[ncarry:])
    if params["reverse"]:
        ys.reverse()
    stacked = [
        np.stack([y[j] for y in ys]) if ys else np.zeros(v.aval.shape, v.aval.dtype)
        for j, v in enumerate(eqn.outvars[ncarry:])
    ]
    return [*carry, *stacked]


def _while(params: Any, inputs: list[Any]) -> list[Any]:
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    cond_consts, body_consts, carry = inputs[:nc], inputs[nc : nc + nb], inputs[nc + nb :]
    while bool(_evaluate(cond.jaxpr, list(cond.consts), [*cond_consts, *carry])[0]):
        carry = _evaluate(body.jaxpr, list(body.consts), [*body_consts, *carry])
    return carry
