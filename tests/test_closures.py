"""A schedule written as a closure over the swept rate: its numbers are leaves (``_closures``).

flax's examples, MaxText and AlgoPerf write their learning-rate schedules as
closures over the rate, and hand them to an optax factory. Through the
drop-in, such a closure is a child of the optimizer whose captured numbers
are leaves: a sweep of the rate compiles once, with plain optax's numbers. A
function that is not a schedule (a mask, a label function), or whose cells it
writes itself, stays a static value compared by value.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax as plain
import pytest
from corpus import flax_nlp_seq_scheduler as rsqrt_schedule

import optax_pytree as opx
import optax_pytree.optax as dropin

PARAMS = {"kernel": jnp.linspace(-1.0, 1.0, 6).reshape(3, 2), "bias": jnp.array([0.1, -0.2])}
GRADS = jax.tree_util.tree_map(lambda x: 0.3 * x + 0.05, PARAMS)


def negated(optax: Any, peak: float) -> Any:
    """AlgoPerf's ``scale_by_learning_rate``: a lambda over an optax schedule (wrapped, drop-in)."""
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak, 2, 10)
    return optax.chain(optax.scale_by_adam(), optax.scale_by_schedule(lambda count: -schedule(count)))


def _steps(tx: Any, steps: int = 4) -> Any:
    params, state = PARAMS, tx.init(PARAMS)
    for _ in range(steps):
        updates, state = tx.update(GRADS, state, params)
        params = plain.apply_updates(params, updates)
    return params, state


def _one_trace(builds: list[tuple[Any, Any]]) -> int:
    """Runs a jitted step taking each drop-in optimizer as an argument; checks it against plain optax."""
    traces: list[int] = []

    @jax.jit
    def step(tx: Any, params: Any, state: Any) -> Any:
        traces.append(1)
        updates, state = tx.update(GRADS, state, params)
        return plain.apply_updates(params, updates), state

    for tx, plain_tx in builds:
        got = step(tx, PARAMS, tx.init(PARAMS))
        updates, state = plain_tx.update(GRADS, plain_tx.init(PARAMS), PARAMS)
        chex.assert_trees_all_close(got, (plain.apply_updates(PARAMS, updates), state), rtol=1e-6, atol=1e-8)
    return len(traces)


def test_a_schedule_closed_over_the_rate_is_a_child_whose_numbers_are_leaves() -> None:
    def make(optax: Any, rate: float, factors: str = "constant * linear_warmup * rsqrt_decay") -> Any:
        schedule = rsqrt_schedule(factors, base_learning_rate=rate, warmup_steps=4)
        return optax.adamw(schedule, weight_decay=0.1)

    rates = (2e-3, 4e-3, 1e-3)
    builds = [(make(dropin, r), make(plain, r)) for r in rates]
    assert _one_trace(builds) == 1
    tx = builds[0][0]
    assert isinstance(tx.learning_rate, opx.PyTreeSchedule)
    assert tx.learning_rate.dynamic_argnames == ("base_learning_rate", "warmup_steps")
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
    assert ".learning_rate.base_learning_rate" in paths
    for (got, expected), rate in zip(builds, rates):  # eagerly, bit for bit, several steps past the warmup
        chex.assert_trees_all_equal(_steps(got, 6), _steps(expected, 6))
        assert float(got.learning_rate.base_learning_rate) == jnp.float32(rate)
    # Another string (static: parsed in Python) is another configuration.
    other = make(dropin, 2e-3, "constant * linear_warmup")
    assert jax.tree_util.tree_structure(other) != jax.tree_util.tree_structure(tx)
    chex.assert_trees_all_equal(_steps(other), _steps(make(plain, 2e-3, "constant * linear_warmup")))


def test_a_closure_over_a_wrapped_schedule_is_a_child() -> None:
    builds = [(negated(dropin, p), negated(plain, p)) for p in (0.1, 0.05, 0.2)]
    assert _one_trace(builds) == 1
    for got, expected in builds:
        chex.assert_trees_all_equal(_steps(got), _steps(expected))


def test_what_is_not_a_schedule_stays_static() -> None:
    # A mask closed over a number runs on a step count too (a scalar has a
    # rank), but gives a bool: static, compared by value.
    def masked(threshold: int) -> Any:
        return dropin.adamw(
            0.1, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= threshold, p)
        )

    a, b = masked(2), masked(1)
    assert (
        a.static_argnames.count("mask") == 1
        and callable(a.mask)
        and not isinstance(a.mask, opx.PyTreeSchedule)
    )
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
    chex.assert_trees_all_equal(
        _steps(a),
        _steps(plain.adamw(0.1, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p))),
    )


def test_a_closure_that_writes_its_cells_stays_static() -> None:
    # Rebuilt, it would have fresh cells: its state would not persist.
    def counting_schedule(rate: float) -> Any:
        calls = 0

        def schedule(count: Any) -> Any:
            nonlocal calls
            calls += 1
            return rate * jnp.ones(()) / (1.0 + count)

        return schedule

    tx = dropin.sgd(counting_schedule(0.1))
    assert "learning_rate" in tx.static_argnames
    chex.assert_trees_all_equal(_steps(tx), _steps(plain.sgd(counting_schedule(0.1))))


def test_a_closure_needing_a_python_value_keeps_it_static() -> None:
    # range() of a captured number: that number is static, the rate a leaf.
    def stepped(rate: float, pieces: int) -> Any:
        def schedule(count: Any) -> Any:
            value = rate * jnp.ones(())
            for i in range(pieces):
                value = jnp.where(count > 2 * (i + 1), value / 2.0, value)
            return value

        return schedule

    tx = dropin.sgd(stepped(0.1, 3))
    assert tx.learning_rate.detected_static_argnames == ("pieces",)
    assert tx.learning_rate.dynamic_argnames == ("rate",)
    builds = [(dropin.sgd(stepped(r, 3)), plain.sgd(stepped(r, 3))) for r in (0.1, 0.2)]
    assert _one_trace(builds) == 1
    chex.assert_trees_all_equal(_steps(tx, 8), _steps(plain.sgd(stepped(0.1, 3)), 8))


class _Holder:
    """An object of the user's holding a wrapped optimizer, its method calling the optimizer's."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx

    def init(self, params: Any) -> Any:
        return self.tx.init(params)


@pytest.mark.parametrize("init", ["bound method", "holder's method"])
def test_a_wrapped_optimizer_s_bound_methods_in_a_combinator_stay_that_object(init: str) -> None:
    # optax's contrib test_gradient_accumulation: MultiSteps over
    # GradientTransformationExtraArgs(opt.init, opt.update) of a drop-in optimizer;
    # or the init of an object of the user's that holds it (a wrapped optimizer answers
    # ``_fields`` through a property: no NamedTuple to read into).
    def build(o: Any) -> Any:
        opt = o.adam(1e-3)
        given = opt.init if init == "bound method" else _Holder(opt).init
        return o.MultiSteps(o.GradientTransformationExtraArgs(given, opt.update), every_k_schedule=4)

    params = jnp.array([1.0, 2.0])
    grads = 2 * params
    results = []
    for o in (dropin, plain):
        opt = build(o)
        state = jax.jit(opt.init)(params)
        results.append(jax.jit(opt.update)(grads, state, params)[0])
    chex.assert_trees_all_equal(*results)


def test_a_captured_value_may_be_named_self() -> None:
    class Trainer:
        def __init__(self, lr: float) -> None:
            self.lr = lr

        def schedule(self, count: Any) -> Any:
            return self.lr * jnp.minimum(1.0, (count + 1) / 10)

    tx = dropin.adam(Trainer(1e-3).schedule)
    assert tx.learning_rate.dynamic_argnames == ("self.lr",)
    assert jax.tree_util.tree_structure(tx) == jax.tree_util.tree_structure(
        dropin.adam(Trainer(3e-3).schedule)
    )
