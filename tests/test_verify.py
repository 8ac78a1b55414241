"""Never silently wrong, for any factory: the wrapped build is verified against the raw one.

Each factory below makes a decision in Python that a leaf answers differently
from the Python number (issue 15). Wrapped with one value and then another,
in both orders, the wrapped optimizer must compute what the raw factory
computes with the same Python value, or raise what it raises.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_tree_allclose, counting_jit

import optax_pytree as opx
import optax_pytree.optax as dropin
from optax_pytree import _spec

# A bias, a dense kernel, a conv kernel: ranks 1, 2 and 4.
PARAMS = {
    "b": jnp.array([0.5, -1.0, 2.0]),
    "w": jnp.arange(1.0, 7.0).reshape(2, 3),
    "k": jnp.linspace(-1.0, 1.0, 24).reshape(2, 3, 2, 2),
}
GRADS = jax.tree_util.tree_map(lambda x: 0.1 * x + 0.3, PARAMS)


def _two_steps(tx: Any) -> Any:
    state = tx.init(PARAMS)
    updates, state = tx.update(GRADS, state, PARAMS)
    updates, state = tx.update(GRADS, state, PARAMS)
    return updates


_jitted_steps = jax.jit(_two_steps)  # the wrapped object is an argument


def _two_updates(tx: Any, state: Any, params: Any, grads: Any) -> Any:
    updates, state = tx.update(grads, state, params)
    updates, state = tx.update(grads, state, params)
    return updates


def _assert_as_raw(factory: Any, **values: Any) -> Any:
    """The wrapped optimizer (under jit, as an argument) computes what the raw one does.

    Like with like: both under jit, the state and the data arguments of the
    program (plain optax eagerly, or with its first steps folded by XLA at
    compile time, computes other numbers by itself on a TPU).
    """
    tx = opx.wrap(factory, **values)
    raw = factory(**values)
    expected = jax.jit(lambda s, p, g: _two_updates(raw, s, p, g))(raw.init(PARAMS), PARAMS, GRADS)
    got = jax.jit(_two_updates)(tx, tx.init(PARAMS), PARAMS, GRADS)
    assert_tree_allclose(got, expected, rtol=1e-6, atol=1e-7)
    return tx


@pytest.fixture(autouse=True)
def _fresh_caches() -> None:
    _spec.clear_caches()  # each test sees the order of wraps it makes


# --------------------------------------------------------------------------
# Decisions about a value that are not comparisons.

_DEFAULT = 0.1


def clip_if_float(learning_rate: Any = 0.1, clip: Any = 1.0) -> Any:
    clipping = [optax.clip_by_global_norm(clip)] if isinstance(clip, float) else []
    return optax.chain(*clipping, optax.sgd(learning_rate))


def double_if_int(learning_rate: Any = 0.1, k: Any = 2) -> Any:
    return optax.sgd(learning_rate * (2 if type(k) is int else 1))


def triple_if_array(learning_rate: Any = 0.1) -> Any:
    return optax.sgd(learning_rate * 3 if hasattr(learning_rate, "shape") else learning_rate)


def half_if_default(learning_rate: Any = _DEFAULT) -> Any:
    return optax.sgd(0.5 if learning_rate is _DEFAULT else learning_rate)


def by_its_text(learning_rate: Any = 0.1) -> Any:
    return optax.sgd(learning_rate * (2 if f"{learning_rate}".startswith("0.1") else 1))


def converted(learning_rate: Any = 0.1) -> Any:
    try:
        learning_rate = float(learning_rate) * 2
    except TypeError:  # JAX's ConcretizationTypeError is one
        pass
    return optax.sgd(learning_rate)


@pytest.mark.parametrize(
    ("factory", "argument", "values"),
    [
        (clip_if_float, "clip", (0.1, 1)),
        (double_if_int, "k", (2, 2.0)),
        (triple_if_array, "learning_rate", (0.1, np.float32(0.2))),
        (half_if_default, "learning_rate", (_DEFAULT, 0.2)),
        (converted, "learning_rate", (0.1, 0.3)),
    ],
    ids=["isinstance", "type-is", "hasattr", "identity", "try-float"],
)
@pytest.mark.parametrize("order", [1, -1], ids=["forward", "reversed"])
def test_a_python_decision_about_a_value_is_caught(
    factory: Any, argument: str, values: Any, order: int
) -> None:
    for value in values[::order]:
        _assert_as_raw(factory, **{argument: value})
    # Where the decision goes the other way for a leaf, the argument is static.
    assert argument in opx.wrap(factory, **{argument: values[0]}).detected_static_argnames


def test_a_decision_by_text_at_the_value_analysed() -> None:
    tx = _assert_as_raw(by_its_text, learning_rate=0.1)  # f"{0.1}" starts with "0.1": doubled
    assert tx.detected_static_argnames == ("learning_rate",)
    _assert_as_raw(by_its_text, learning_rate=0.2)


def test_a_verified_static_argument_is_static_from_its_next_value_on() -> None:
    first = opx.wrap(clip_if_float, clip=0.5)
    assert first.detected_static_argnames == ("clip",)
    assert first.dynamic_argnames == ("learning_rate",)
    again = opx.wrap(clip_if_float, clip=0.25)  # a new static value: analysed with clip static at once
    assert again.detected_static_argnames == ("clip",)
    step, traces = counting_jit(_two_steps)
    step(first)
    step(first.replace(learning_rate=0.3))  # the leaf changes: one trace
    assert traces == [1]


# --------------------------------------------------------------------------
# Signed zeros, the factory's own exceptions, integers past int32.


def signed_sgd(learning_rate: Any = 0.1, d: Any = 0.0) -> Any:
    return optax.sgd(learning_rate * math.copysign(1.0, d))


def test_negative_zero_is_not_zero() -> None:
    plus, minus = _assert_as_raw(signed_sgd, d=0.0), _assert_as_raw(signed_sgd, d=-0.0)
    assert jax.tree_util.tree_structure(plus) != jax.tree_util.tree_structure(minus)
    expected = _two_steps(signed_sgd(d=-0.0))
    np.testing.assert_array_equal(_jitted_steps(plus.replace(d=-0.0))["b"], expected["b"])
    with pytest.raises(ValueError, match="'d'"):
        opx.stack([plus, minus])


def momentum_scaled(learning_rate: Any = 0.1, m: Any = 0.5) -> Any:
    return optax.sgd(learning_rate / (1.0 - m))


@pytest.mark.parametrize("order", [1, -1], ids=["forward", "reversed"])
def test_the_factorys_own_exceptions_on_every_wrap(order: int) -> None:
    for m in (0.5, 1.0)[::order]:
        if m == 1.0:
            with pytest.raises(ZeroDivisionError):
                opx.wrap(momentum_scaled, m=m)
        else:
            _assert_as_raw(momentum_scaled, m=m)
    tx = opx.wrap(momentum_scaled, m=0.25)
    with pytest.raises(ZeroDivisionError):
        tx.replace(m=1.0)
    with pytest.raises(ZeroDivisionError):
        opx.grid(tx, {"m": [0.5, 1.0]})
    with pytest.raises(ValueError, match="factor"):  # optax's own check, on a cached configuration
        dropin.contrib.reduce_on_plateau(factor=0.5).replace(factor=1.5)


def test_the_factorys_warnings_on_every_wrap() -> None:
    def warns(learning_rate: Any = 0.1) -> Any:
        import warnings

        warnings.warn("deprecated: use something else", DeprecationWarning, stacklevel=2)
        return optax.sgd(learning_rate)

    for _ in range(2):  # the cached configuration warns too
        with pytest.warns(DeprecationWarning, match="use something else"):
            opx.wrap(warns, 0.1)
    # With traced values too (optax.inject_hyperparams calling a drop-in
    # factory inside jit; optax's own alias_test checks optimistic_adam so).
    with warnings.catch_warnings(record=True) as caught:  # once, as optax warns it, not twice
        warnings.simplefilter("always")
        jax.jit(lambda lr: opx.wrap(warns, lr).learning_rate)(0.2)
    assert [str(w.message) for w in caught] == ["deprecated: use something else"]
    injected = optax.inject_hyperparams(dropin.optimistic_adam)(learning_rate=1e-2)
    with pytest.warns(DeprecationWarning, match="optimistic_adam"):
        jax.jit(injected.init)(PARAMS)


def squared_steps(learning_rate: Any = 0.1, steps: Any = 10) -> Any:
    return optax.sgd(learning_rate * (steps * steps) / 1e10)


def power_of_two(learning_rate: Any = 0.1, k: Any = 3) -> Any:
    return optax.sgd(learning_rate * 2.0**40 / 2**k)


@pytest.mark.parametrize(
    ("factory", "argument", "values"),
    [(squared_steps, "steps", (10, 100_000)), (power_of_two, "k", (3, 40))],
    ids=["product", "power"],
)
@pytest.mark.parametrize("order", [1, -1], ids=["forward", "reversed"])
def test_integer_arithmetic_past_int32_is_pythons(
    factory: Any, argument: str, values: Any, order: int
) -> None:
    for value in values[::order]:
        tx = _assert_as_raw(factory, **{argument: value})
        small = value == values[0]
        assert (argument in tx.dynamic_argnames) is small  # the overflowing value is static


@pytest.mark.parametrize("make", [opx.wrap, dropin.cosine_decay_schedule.__call__], ids=["wrap", "drop-in"])
def test_step_counts_past_int32(make: Any) -> None:
    args = (1.0, 10_000_000_000) if make is not opx.wrap else (optax.cosine_decay_schedule, 1.0, 10**10)
    schedule = make(*args)
    raw = optax.cosine_decay_schedule(1.0, 10**10)
    assert "decay_steps" in schedule.detected_static_argnames
    counts = jnp.array([0, 5, 2**30, 2**31 - 1])
    np.testing.assert_array_equal(jax.jit(jax.vmap(schedule))(counts), jax.vmap(raw)(counts))


# --------------------------------------------------------------------------
# Regressions found by optax's own test files.


def test_jit_of_a_wrapped_schedule_and_of_update() -> None:
    schedule = dropin.linear_schedule(1.0, 0.0, 10)
    assert weakref.ref(schedule)() is schedule
    assert float(jax.jit(schedule)(3)) == pytest.approx(0.7)
    tx = dropin.adam(0.1)
    updates, _ = jax.jit(tx.update)(GRADS, jax.jit(tx.init)(PARAMS), PARAMS)
    expected, _ = optax.adam(0.1).update(GRADS, optax.adam(0.1).init(PARAMS), PARAMS)
    np.testing.assert_allclose(updates["w"], expected["w"], rtol=1e-5)  # pyright: ignore[reportIndexIssue, reportArgumentType, reportCallIssue] - optax's Updates type


def _sam(sync_period: int) -> Any:
    return dropin.contrib.sam(dropin.sgd(0.1), dropin.sgd(0.05), sync_period=sync_period, opaque_mode=True)


def test_sam_opaque_mode_sync_period_is_static() -> None:
    tx = _sam(3)
    assert tx.detected_static_argnames == ("sync_period",)
    raw = optax.contrib.sam(optax.sgd(0.1), optax.sgd(0.05), sync_period=3, opaque_mode=True)

    def grad_fn(params: Any, i: int) -> Any:
        return jax.tree_util.tree_map(lambda p: p * (1.0 + i), params)

    def step(tx: Any) -> Any:
        return tx.update(GRADS, tx.init(PARAMS), PARAMS, grad_fn=grad_fn)[0]

    np.testing.assert_allclose(jax.jit(step)(tx)["w"], step(raw)["w"], rtol=1e-6)
    jax.jit(lambda: step(tx))()  # closed over rather than passed in


def needs_a_loop_bound(learning_rate: Any = 0.1, k: Any = 3) -> Any:
    def update(updates: Any, state: Any, params: Any = None) -> Any:
        for _ in range(k - 1):  # arithmetic on a traced leaf is traced
            updates = jax.tree_util.tree_map(lambda g: 0.5 * g, updates)
        return jax.tree_util.tree_map(lambda g: -learning_rate * g, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


@pytest.mark.parametrize("closed_over", [False, True], ids=["argument", "closed-over"])
def test_a_trace_failure_names_the_argument(closed_over: bool) -> None:
    tx = opx.wrap(needs_a_loop_bound, k=opx.dynamic(2))  # forced dynamic: no detection
    if closed_over:
        # Closed over, its leaves concrete: plain optax's object for its numbers runs (k = 2).
        got, plain = jax.jit(lambda: _two_steps(tx))(), jax.jit(lambda: _two_steps(needs_a_loop_bound(k=2)))()
        jax.tree.map(np.testing.assert_array_equal, got, plain)
        return
    with pytest.raises(TypeError, match=r"argument 'k'.*static_argnames=\('k',\)"):
        _jitted_steps(tx)


# --------------------------------------------------------------------------
# Guards: ranks, children, jitted helpers, promotion.


def rank_scaled(learning_rate: Any = 0.1, min_ndim: Any = 2) -> Any:
    """Scales the updates of parameters of rank ``min_ndim`` and more (compared at call time)."""

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        scale = lambda g: 2.0 if g.ndim >= min_ndim else 1.0  # noqa: E731
        return jax.tree_util.tree_map(lambda g: -learning_rate * scale(g) * g, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


@pytest.mark.parametrize("min_ndim", [2, 3, 4])
def test_guards_on_a_parameters_rank_up_to_4(min_ndim: int) -> None:
    tx = _assert_as_raw(rank_scaled, min_ndim=min_ndim)
    assert "min_ndim" in tx.guarded_argnames


def test_a_parent_leaves_its_childs_call_time_stand_ins_alone() -> None:
    child = opx.wrap(rank_scaled, min_ndim=3)
    tx = opx.wrap(optax.MultiSteps, child, every_k_schedule=2)
    assert tx.detected_static_argnames == ("every_k_schedule",)  # isinstance(every_k_schedule, int)
    raw = optax.MultiSteps(rank_scaled(min_ndim=3), every_k_schedule=2)
    np.testing.assert_allclose(_jitted_steps(tx)["k"], _two_steps(raw)["k"], rtol=1e-6)


def bias_corrected(learning_rate: Any = 0.1, b1: Any = 0.9) -> Any:
    """Compares ``b1`` in Python and hands it to optax's jitted ``tree_bias_correction``."""

    def init(params: Any) -> Any:
        return {"m": optax.tree_utils.tree_zeros_like(params), "count": jnp.zeros([], jnp.int32)}

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], updates)
        count = state["count"] + 1
        corrected = optax.tree_utils.tree_bias_correction(m, b1, count) if b1 > 0 else m
        return jax.tree_util.tree_map(lambda x: -learning_rate * x, corrected), {"m": m, "count": count}

    return optax.GradientTransformation(init, update)


def test_a_guarded_value_passed_to_a_jitted_helper_stays_a_leaf() -> None:
    tx = _assert_as_raw(bias_corrected, b1=0.9)
    assert tx.guarded_argnames == ("b1",) and tx.detected_static_argnames == ()
    _assert_as_raw(bias_corrected, b1=0.0)


def above_2_24(learning_rate: Any = 0.1, steps: Any = 10) -> Any:
    return optax.sgd(learning_rate * (2.0 if steps > 16777216.5 else 1.0))


def above_2_31(learning_rate: Any = 0.1, steps: Any = 10) -> Any:
    return optax.sgd(learning_rate * (2.0 if steps > 2**31 else 1.0))


@pytest.mark.parametrize(
    ("factory", "steps"), [(above_2_24, 2**24 + 1), (above_2_31, 10)], ids=["2**24+1", "2**31"]
)
def test_host_and_traced_guard_checks_agree(factory: Any, steps: int) -> None:
    tx = _assert_as_raw(factory, steps=steps)
    expected = _two_steps(factory(steps=steps))

    @jax.jit
    def traced_replace(tx: Any, steps: Any) -> Any:
        return _two_steps(tx.replace(steps=steps))  # the leaf is traced: the traced check runs

    got = traced_replace(tx, jnp.asarray(steps, jnp.int32))
    np.testing.assert_allclose(got["b"], expected["b"], rtol=1e-6)  # not NaN, no OverflowError
    assert bool(jnp.all(jnp.isnan(traced_replace(tx, jnp.asarray(2**24 - 5, jnp.int32))["b"]))) is (
        factory is above_2_24
    )


# --------------------------------------------------------------------------
# The limits, as documented.


def test_limit_a_decision_by_text_at_a_value_not_analysed() -> None:
    # Analysed at 0.2 ("0.2" does not start with "0.1"), the leaf takes the
    # branch every traced value takes; verification saw no difference, so the
    # argument stays a leaf. At 0.1 the raw factory would double it: a
    # decision by string formatting at values other than the analysed ones is
    # not seen (README, "How wrapping is checked").
    tx = opx.wrap(by_its_text, 0.2)
    assert tx.dynamic_argnames == ("learning_rate",)
    other = tx.replace(learning_rate=0.1)
    got = _jitted_steps(other)["b"]
    np.testing.assert_allclose(got, _two_steps(optax.sgd(0.1))["b"], rtol=1e-6)
    assert not np.allclose(got, _two_steps(by_its_text(0.1))["b"])


def test_limit_a_factory_reading_global_state() -> None:
    # Wrapped factories must be pure: the wrapped object calls the factory
    # again when it is used, and sees the global as it is then.
    config = {"scale": 1.0}

    def impure(learning_rate: Any = 0.1) -> Any:
        return optax.sgd(learning_rate * config["scale"])

    tx = opx.wrap(impure, 0.1)
    config["scale"] = 3.0
    np.testing.assert_allclose(_jitted_steps(tx)["b"], _two_steps(optax.sgd(0.3))["b"], rtol=1e-6)
