"""A sweep through the user's own builder compiles once (issue 23).

Programs build their optimizer in a function called once per trial, and write
the weight-decay mask, the label function or the schedule there: a fresh
``lambda``, ``functools.partial`` or closure on every call. Two callables made
by the same code from equal captured values are one static value (see
``optax_pytree._static``), so the builder's objects share one treedef; other
captured values are another treedef, with plain optax's numbers for them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax as plain
import pytest
from jax.core import Tracer

import optax_pytree.optax as dropin
from optax_pytree import _leaves
from optax_pytree._static import freeze

PARAMS = {"kernel": jnp.linspace(-1.0, 1.0, 6).reshape(3, 2), "bias": jnp.array([0.1, -0.2])}
GRADS = jax.tree_util.tree_map(lambda x: 0.3 * x + 0.05, PARAMS)
RATES = (1e-3, 3e-3, 1e-2)


def _decays(params: Any, names: tuple[str, ...]) -> Any:
    return {k: k in names for k in params}


# Each builder takes the optax module (plain or the drop-in), the swept rate,
# and the captured value that is the same for every call of a sweep.
def lambda_mask(optax: Any, rate: float, min_ndim: int = 2) -> Any:
    return optax.adamw(rate, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= min_ndim, p))


def partial_mask(optax: Any, rate: float, names: tuple[str, ...] = ("kernel",)) -> Any:
    return optax.adamw(rate, weight_decay=0.1, mask=functools.partial(_decays, names=names))


def closure_over_a_list(optax: Any, rate: float, names: tuple[str, ...] = ("kernel",)) -> Any:
    layers = list(names)  # a list, unhashable: compared item by item

    def mask(params: Any) -> Any:
        return {k: k in layers for k in params}

    return optax.adamw(rate, weight_decay=0.1, mask=mask)


def label_function(optax: Any, rate: float, frozen: str = "bias") -> Any:
    return optax.multi_transform(
        {"train": optax.adam(rate), "freeze": optax.set_to_zero()},
        lambda p: {k: "freeze" if k == frozen else "train" for k in p},
    )


def schedule_closure(optax: Any, rate: float, shape: str = "inverse") -> Any:
    # A decay closed over the config (as big_vision's builder makes it): its
    # number is a leaf (see test_closures.py), its string static.
    half_life = 4.0

    def decay(count: Any) -> Any:
        if shape == "inverse":
            return 1.0 / (1.0 + count / half_life)
        return jnp.exp(-count / half_life)

    return optax.chain(optax.scale_by_adam(), optax.scale_by_schedule(decay), optax.scale(-rate))


def skip_function(optax: Any, rate: float, bound: float = 1e3) -> Any:
    def should_skip(updates: Any, gradient_step: Any, params: Any) -> Any:
        del gradient_step, params
        norm = optax.tree.norm(updates) if hasattr(optax, "tree") else optax.global_norm(updates)
        return norm > bound, {"norm": norm}

    return optax.MultiSteps(optax.sgd(rate), every_k_schedule=2, should_skip_update_fn=should_skip)


BUILDERS: dict[str, Callable[..., Any]] = {
    "lambda_mask": lambda_mask,
    "partial_mask": partial_mask,
    "closure_over_a_list": closure_over_a_list,
    "label_function": label_function,
    "schedule_closure": schedule_closure,
    "skip_function": skip_function,
}
# Another captured value for each: another treedef.
OTHER = {
    "lambda_mask": {"min_ndim": 1},
    "partial_mask": {"names": ("kernel", "bias")},
    "closure_over_a_list": {"names": ("bias",)},
    "label_function": {"frozen": "kernel"},
    "schedule_closure": {"shape": "exponential"},
    "skip_function": {"bound": 1e-3},
}


def _steps(tx: Any, steps: int = 3) -> Any:
    params, state = PARAMS, tx.init(PARAMS)
    for _ in range(steps):
        updates, state = tx.update(GRADS, state, params)
        params = plain.apply_updates(params, updates)
    return params, state


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_sweep_through_the_builder_compiles_once(name: str) -> None:
    build = BUILDERS[name]
    traces: list[int] = []

    @jax.jit
    def step(tx: Any, params: Any, state: Any) -> Any:
        traces.append(1)
        updates, state = tx.update(GRADS, state, params)
        return plain.apply_updates(params, updates), state

    for rate in RATES:
        tx = build(dropin, rate)
        params, _ = step(tx, PARAMS, tx.init(PARAMS))
        plain_tx = build(plain, rate)
        expected = plain.apply_updates(PARAMS, plain_tx.update(GRADS, plain_tx.init(PARAMS), PARAMS)[0])
        chex.assert_trees_all_close(params, expected, rtol=1e-6, atol=1e-7)
    assert len(traces) == 1


@pytest.mark.parametrize("name", list(BUILDERS))
def test_other_captured_values_are_another_configuration_with_optax_numbers(name: str) -> None:
    build, other = BUILDERS[name], OTHER[name]
    same, changed = build(dropin, RATES[0]), build(dropin, RATES[0], **other)
    assert jax.tree_util.tree_structure(build(dropin, RATES[1])) == jax.tree_util.tree_structure(same)
    assert jax.tree_util.tree_structure(changed) != jax.tree_util.tree_structure(same)
    chex.assert_trees_all_equal(_steps(changed), _steps(build(plain, RATES[0], **other)))
    chex.assert_trees_all_equal(_steps(same), _steps(build(plain, RATES[0])))


class _Opaque:
    """Neither hashable nor a pytree: nothing to compare by value."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        raise TypeError("not comparable")


def test_a_closure_over_an_uncomparable_object_is_compared_by_identity() -> None:
    def build(rate: float, thing: Any) -> Any:
        return dropin.adamw(
            rate, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda _: thing is not None, p)
        )

    shared = _Opaque()
    # Each new one is a new compilation: said once for this code location.
    match = "argument .mask., the function .* holds _Opaque compared by identity"
    with pytest.warns(UserWarning, match=match):
        a = build(1e-3, shared)
    b, c = build(3e-3, shared), build(1e-3, _Opaque())
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(c)


def test_what_makes_two_callables_the_same_static_value() -> None:
    def make(scale: Any) -> Any:
        return lambda x: x * scale

    assert freeze(make(2.0)) == freeze(make(2.0))
    assert freeze(make(2.0)) != freeze(make(2))  # 2.0 and 2: other numbers
    assert freeze(make(0.0)) != freeze(make(-0.0))  # by their bits
    assert freeze(make(jnp.ones(3))) == freeze(make(jnp.ones(3)))  # arrays by content
    assert freeze(make(jnp.ones(3))) != freeze(make(jnp.zeros(3)))
    assert freeze(make(make(1.0))) == freeze(make(make(1.0)))  # nested functions, recursively
    assert freeze(functools.partial(make, 1.0)) == freeze(functools.partial(make, 1.0))
    assert freeze(jax.tree_util.Partial(make, 1.0)) == freeze(jax.tree_util.Partial(make, 1.0))
    assert freeze(functools.partial(make, 1.0)) != freeze(jax.tree_util.Partial(make, 1.0))
    assert freeze(lambda x: x) != freeze(lambda x: -x)  # other code
    sched = dropin.linear_schedule(0.1, 0.0, 10)
    assert freeze(make(sched)) == freeze(make(dropin.linear_schedule(0.1, 0.0, 10)))  # by leaves
    assert freeze(make(sched)) != freeze(make(dropin.linear_schedule(0.2, 0.0, 10)))

    # A plain optax transformation (a named tuple of two closures), built anew.
    assert freeze(plain.transforms.freeze({"a": True})) == freeze(plain.transforms.freeze({"a": True}))
    assert freeze(plain.transforms.freeze({"a": True})) != freeze(plain.transforms.freeze({"a": False}))
    assert freeze(plain.adam(0.1)) == freeze(plain.adam(0.1))
    assert freeze(plain.adam(0.1)) != freeze(plain.adam(0.2))

    class Holder:
        def method(self) -> None: ...

    one = Holder()
    assert freeze(one.method) == freeze(one.method)
    assert freeze(one.method) != freeze(Holder().method)  # the same self, by identity

    def recursive() -> Any:
        def countdown(n: int) -> int:
            return countdown(n - 1) if n else 0

        return countdown

    assert freeze(recursive()) == freeze(recursive())  # reaches itself: compared by shape


@dataclasses.dataclass
class _Config:
    """A config object a builder's closure holds (levanter's optimizer configs)."""

    learning_rate: float
    beta1: float = 0.9
    log_name: str = "run"

    def clip(self) -> float:
        return 1.0 if self.beta1 > 0.5 else 0.5

    def build(self) -> Any:
        def _optimizer(learning_rate: Any) -> Any:  # reads beta1, and through clip() beta1 again
            return plain.chain(plain.clip_by_global_norm(self.clip()), plain.adam(learning_rate, self.beta1))

        return _optimizer

    def build_passing_self(self) -> Any:
        def _optimizer(learning_rate: Any) -> Any:
            return _describe(self, learning_rate)  # self given away: what is read of it is unknown

        return _optimizer


@dataclasses.dataclass
class _Scaled(_Config):
    """A method calling super(): the parent's reads of self count too."""

    def clip(self) -> float:
        return super().clip() * self.learning_rate


def _describe(config: Any, learning_rate: Any) -> Any:
    return plain.adam(learning_rate * config.learning_rate)


def test_a_closure_over_a_config_object_is_compared_by_what_it_reads() -> None:
    one, other_rate, other_beta = _Config(1e-3), _Config(3e-3, log_name="b"), _Config(1e-3, beta1=0.8)
    assert freeze(one.build()) == freeze(other_rate.build())  # learning_rate and log_name unread
    assert freeze(one.build()) != freeze(other_beta.build())
    assert freeze(one.build_passing_self()) != freeze(other_rate.build_passing_self())
    assert freeze(one.build_passing_self()) == freeze(_Config(1e-3).build_passing_self())  # equal objects
    assert freeze(_Scaled(1e-3).build()) != freeze(_Scaled(3e-3).build())  # read through super()
    traces: list[int] = []

    @jax.jit
    def step(tx: Any, params: Any) -> Any:
        traces.append(1)
        return tx.update(GRADS, tx.init(params), params)[0]

    for config in (_Config(1e-3), _Config(3e-3), _Config(1e-2)):
        tx = dropin.inject_hyperparams(config.build())(learning_rate=config.learning_rate)
        expected = plain.inject_hyperparams(config.build())(learning_rate=config.learning_rate)
        chex.assert_trees_all_close(
            step(tx, PARAMS), expected.update(GRADS, expected.init(PARAMS), PARAMS)[0]
        )
    assert len(traces) == 1


def test_leaves_made_at_first_use_inside_jit_are_concrete() -> None:
    # A rebuild makes its leaves when first used (Pending); a first use inside
    # a trace (the object closed over) must not leave the trace's values in it.
    # An eager init is no use of them: it runs the object the factory returned.
    made = dropin.adamw(0.1, b1=0.8, weight_decay=0.01)
    made.init(PARAMS)
    assert made._core.pending is not None  # pyright: ignore[reportPrivateUsage]
    # Made on the host and placed in one dispatch: JAX's own conversion of the numbers
    # (values, dtypes, weak types), and the exact child JAX computes from those leaves.
    pending = made._core.pending  # pyright: ignore[reportPrivateUsage]
    spec = pending.spec
    n = len(pending.numbers)

    @jax.jit
    def reference_maker(numbers: Any, hosts: Any, folds: Any) -> Any:
        of = [numbers[i] for i in spec.fingerprint_of]
        return (*numbers, *_leaves.exact_child(hosts, of, spec.carried_dtypes, folds))

    reference = reference_maker(pending.numbers, pending.hosts, list(pending.folds))
    got = [*made._core.leaves[:n], *made._core.exact]  # pyright: ignore[reportPrivateUsage]
    assert spec.leaf_names[:n] == spec.dynamic_names
    for x, y in zip(got, reference, strict=True):
        assert (x.dtype, x.shape, x.weak_type) == (y.dtype, y.shape, y.weak_type)
        chex.assert_trees_all_equal(x, y)
    tx = dropin.adamw(0.1, weight_decay=0.01)

    @jax.jit
    def updates(params: Any) -> Any:
        return tx.update(GRADS, tx.init(params), params)[0]

    got = updates(PARAMS)
    leaves = jax.tree_util.tree_leaves(tx)
    assert leaves and not any(isinstance(x, Tracer) for x in leaves)
    plain_tx = plain.adamw(0.1, weight_decay=0.01)
    chex.assert_trees_all_close(got, plain_tx.update(GRADS, plain_tx.init(PARAMS), PARAMS)[0], rtol=1e-6)
    chex.assert_trees_all_equal(
        tx.update(GRADS, tx.init(PARAMS), PARAMS), plain_tx.update(GRADS, plain_tx.init(PARAMS), PARAMS)
    )
