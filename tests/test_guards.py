"""Guarded hyperparameters (issue #11): what optax only compares in Python stays dynamic.

optax decides some things in Python from a hyperparameter's value
(``peak_value == 0.0``, ``transition_steps <= 0``, ``decay_rate < 1.0``). Such
an argument is a leaf; the outcomes of its comparisons are static. Values on
the same branches share one compilation and equal raw optax; a value on
another branch is another program, also equal to raw optax; and a value that
left its branch without the object being re-made is caught, never run on the
wrong branch.
"""

from __future__ import annotations

import warnings
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
from helpers import (
    PARAMS,
    assert_jit_bit_for_bit,
    assert_tree_allclose,
    counting_jit,
    loss,
    needs_params_x,
    raw,
    run_in_fresh_python,
    run_steps,
    wrapped,
)

import optax_pytree as opx
import optax_pytree.optax as dropin


def train(tx: Any, params: Any = PARAMS, steps: int = 6) -> Any:
    return run_steps(tx, params, steps=steps, extra="")[0]


def raw_train(tx: Any, params: Any = PARAMS, steps: int = 6) -> Any:
    return jax.jit(lambda p: train(tx, p, steps))(params)


def warmup_cosine(w: Any, peak: float, warmup: int = 2, decay: int = 10) -> Any:
    return w(optax.warmup_cosine_decay_schedule, 0.0, peak, warmup, decay, end_value=1e-3)


# --------------------------------------------------------------------------
# One compilation per branch, raw optax's results on each.


def test_peak_learning_rate_sweep_compiles_once_and_equals_optax() -> None:
    step, traces = counting_jit(train)
    for peak in (0.1, 0.05, 0.02):
        tx = opx.wrap(optax.adamw, learning_rate=warmup_cosine(wrapped, peak), weight_decay=1e-2)
        expected = raw_train(optax.adamw(warmup_cosine(raw, peak), weight_decay=1e-2))
        assert_tree_allclose(step(tx, PARAMS), expected, rtol=1e-4, atol=1e-5)
    assert traces == [1]
    schedule = warmup_cosine(wrapped, 0.1)
    assert schedule.guarded_argnames == ("peak_value", "warmup_steps", "decay_steps")
    assert schedule.detected_static_argnames == ()
    assert "peak_value == 0.0 is False" in schedule.guards


def test_the_other_branch_is_another_program_and_equals_optax() -> None:
    step, traces = counting_jit(train)
    step(opx.wrap(optax.adamw, learning_rate=warmup_cosine(wrapped, 0.1)), PARAMS)
    zero = opx.wrap(optax.adamw, learning_rate=warmup_cosine(wrapped, 0.0))
    assert "peak_value == 0.0 is True" in zero.learning_rate.guards
    assert_tree_allclose(step(zero, PARAMS), raw_train(optax.adamw(warmup_cosine(raw, 0.0))), atol=1e-6)
    assert traces == [2]
    # The schedule's own values, eagerly and traced, on both branches.
    steps = jnp.arange(12)
    for peak in (0.0, 0.3):
        expected = jax.vmap(warmup_cosine(raw, peak))(steps)
        assert_tree_allclose(jax.vmap(warmup_cosine(wrapped, peak))(steps), expected)
        assert_tree_allclose(warmup_cosine(wrapped, peak)(5), warmup_cosine(raw, peak)(5))


def test_warmup_steps_sweep_compiles_once() -> None:
    step, traces = counting_jit(train)
    for warmup in (1, 2, 4):
        tx = opx.wrap(optax.adam, learning_rate=warmup_cosine(wrapped, 0.1, warmup=warmup))
        assert_tree_allclose(
            step(tx, PARAMS),
            raw_train(optax.adam(warmup_cosine(raw, 0.1, warmup=warmup))),
            rtol=1e-4,
            atol=1e-5,
        )
    assert traces == [1]


def test_exponential_decay_rate_branches() -> None:
    def values(schedule: Any) -> Any:
        return jax.vmap(schedule)(jnp.arange(0, 40, 3))

    values, traces = counting_jit(values)
    for rate in (0.5, 0.9):
        schedule = opx.wrap(optax.exponential_decay, 1.0, 10, rate, end_value=0.3)
        assert_tree_allclose(
            values(schedule),
            jax.vmap(optax.exponential_decay(1.0, 10, rate, end_value=0.3))(jnp.arange(0, 40, 3)),
        )
    assert traces == [1]
    # decay_rate > 1: optax clips with jnp.minimum instead of jnp.maximum.
    growing = opx.wrap(optax.exponential_decay, 1.0, 10, 1.5, end_value=3.0)
    expected = jax.vmap(optax.exponential_decay(1.0, 10, 1.5, end_value=3.0))(jnp.arange(0, 40, 3))
    assert_tree_allclose(values(growing), expected)
    assert float(values(growing)[-1]) == pytest.approx(3.0)
    assert traces == [2]


def test_reduce_on_plateau_factor_sweep_compiles_once() -> None:
    def plateau(tx: Any) -> Any:
        state = tx.init(PARAMS)
        updates = jax.tree_util.tree_map(jnp.ones_like, PARAMS)
        for _ in range(6):  # a loss that never improves: the scale drops
            updates, state = tx.update(updates, state, PARAMS, value=jnp.asarray(1.0))
        return updates, state

    step, traces = counting_jit(plateau)
    for factor in (0.5, 0.2):
        got = step(opx.wrap(optax.contrib.reduce_on_plateau, factor=factor, patience=1))
        reference = optax.contrib.reduce_on_plateau(factor=factor, patience=1)
        expected = jax.jit(plateau, static_argnums=0)(reference)
        assert_tree_allclose(got, expected)
    assert traces == [1]


def test_grid_over_peak_value_under_vmap_equals_the_loop() -> None:
    base = opx.wrap(optax.adam, learning_rate=warmup_cosine(wrapped, 0.1))
    batch, labels = opx.grid(base, {"learning_rate.peak_value": [0.1, 0.03, 0.01]})
    got = jax.jit(jax.vmap(train, in_axes=(0, None)))(batch, PARAMS)
    for i, label in enumerate(labels):
        expected = raw_train(optax.adam(warmup_cosine(raw, label["learning_rate.peak_value"])))
        assert_tree_allclose(jax.tree_util.tree_map(lambda x, i=i: x[i], got), expected, rtol=1e-4, atol=1e-5)


def test_call_time_guard_kept_in_update() -> None:
    # scale_by_sm3 compares b2 with 1.0 inside update, not at construction.
    step, traces = counting_jit(train)
    for b2 in (0.9, 0.95):
        got = step(opx.wrap(optax.scale_by_sm3, b2=b2), PARAMS)
        assert_tree_allclose(got, raw_train(optax.scale_by_sm3(b2=b2)), rtol=1e-5)
    assert traces == [1]
    one = opx.wrap(optax.scale_by_sm3, b2=1.0)
    assert_tree_allclose(step(one, PARAMS), raw_train(optax.scale_by_sm3(b2=1.0)), rtol=1e-5)
    assert traces == [2]


# --------------------------------------------------------------------------
# Never silently wrong: a value that left its branch without re-making the object.


def _halve_floats(x: Any) -> Any:
    return x * 0.5 if jnp.issubdtype(x.dtype, jnp.floating) else x


def _nan_everywhere(tree: Any) -> bool:
    return all(bool(jnp.all(jnp.isnan(x))) for x in jax.tree_util.tree_leaves(tree))


def test_tree_map_to_another_branch_is_caught() -> None:
    schedule = warmup_cosine(wrapped, 0.1)
    stale = jax.tree_util.tree_map(lambda x: x * 0, schedule)  # peak_value 0.0: the other branch
    with pytest.raises(ValueError, match=r"peak_value=0\.0 takes another branch.*replace\(\)"):
        stale(3)
    with pytest.raises(ValueError, match=r"peak_value"):
        opx.wrap(optax.adam, stale).init(PARAMS)
    # Inside jit nothing can raise: the values are NaN, never the wrong branch's.
    assert _nan_everywhere(jax.jit(lambda s: s(3))(stale))
    tx = opx.wrap(optax.adam, learning_rate=schedule)
    stale_tx = jax.tree_util.tree_map(lambda x: x * 0, tx)
    params = jax.jit(train)(stale_tx, PARAMS)
    assert _nan_everywhere(params)
    # Changing it on its branch is fine, and replace() re-checks.
    halved = jax.tree_util.tree_map(_halve_floats, schedule)
    assert_tree_allclose(halved(3), schedule.replace(peak_value=0.05, end_value=5e-4, exponent=0.5)(3))
    assert "peak_value == 0.0 is True" in schedule.replace(peak_value=0.0).guards


def test_traced_replace_inside_jit_keeps_the_branch_and_is_checked() -> None:
    tx = opx.wrap(optax.adam, learning_rate=warmup_cosine(wrapped, 0.1))

    @jax.jit
    def run(tx: Any, peak: Any) -> Any:
        schedule = tx.learning_rate.replace(peak_value=peak)  # a traced value
        return train(tx.replace(learning_rate=schedule), PARAMS)

    expected = raw_train(optax.adam(warmup_cosine(raw, 0.04)))
    assert_tree_allclose(run(tx, 0.04), expected, rtol=1e-4, atol=1e-5)
    assert _nan_everywhere(run(tx, 0.0))  # the other branch: NaN, not 0.1's branch with 0.0

    # In a scan carry, replaced step by step.
    def body(carry: Any, peak: Any) -> Any:
        tx, params, state = carry
        tx = tx.replace(learning_rate=tx.learning_rate.replace(peak_value=peak))
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        return (tx, optax.apply_updates(params, updates), state), None

    (_, params, _), _ = jax.jit(lambda c, p: jax.lax.scan(body, c, p))(
        (tx, PARAMS, tx.init(PARAMS)), jnp.array([0.1, 0.0, 0.1])
    )
    assert _nan_everywhere(params)


def test_vmapped_members_on_another_branch_are_nan_the_others_exact() -> None:
    schedule = warmup_cosine(wrapped, 0.1)
    # A batch made by hand, bypassing stack/grid: member 1 has peak_value 0.0.
    half = jax.tree_util.tree_map(_halve_floats, schedule)
    mixed = jax.tree_util.tree_map(lambda x, h: jnp.stack([x, x * 0, h]), schedule, half)
    values = jax.jit(jax.vmap(lambda s: s(3)))(mixed)
    assert float(values[0]) == pytest.approx(float(warmup_cosine(raw, 0.1)(3)))
    assert bool(jnp.isnan(values[1]))
    assert float(values[2]) == pytest.approx(float(half(3)), rel=1e-5)
    with pytest.raises(ValueError, match="peak_value"):  # used eagerly: an error
        mixed(3)


def test_stack_and_grid_refuse_members_on_different_branches() -> None:
    with pytest.raises(ValueError, match=r"'peak_value'.*peak_value == 0\.0.*False.*True"):
        opx.stack([warmup_cosine(wrapped, 0.1), warmup_cosine(wrapped, 0.0)])
    with pytest.raises(ValueError, match=r"peak_value=0\.0.*'peak_value'.*another branch"):
        opx.grid(warmup_cosine(wrapped, 0.1), peak_value=[0.1, 0.0])


def test_float32_round_off_across_a_branch_makes_the_value_static() -> None:
    # 1e-46 is not 0.0 in Python, but it is in float32: the leaf would run
    # the branch of 0.0 while the value given took the other. Plain optax
    # takes it: static, with a warning (test_real_programs.py has the rest).
    warmup_cosine(wrapped, 0.1)
    with pytest.warns(UserWarning, match=r"'peak_value' as a float32 leaf takes another branch"):
        schedule = warmup_cosine(wrapped, 1e-46)
    assert "peak_value" in schedule.static_argnames


def test_traced_value_given_to_wrap_for_a_guarded_argument_is_an_error() -> None:
    with pytest.raises(TypeError, match="peak_value"):
        jax.jit(lambda p: warmup_cosine(wrapped, p)(3))(0.1)


# --------------------------------------------------------------------------
# Detection that sees the real configuration: MultiSteps over masks, labels,
# extra arguments.

MASK = {"b": False, "w": True}


def _masked_adamw(w: Any) -> Any:
    return w(optax.adamw, 0.05, weight_decay=0.1, mask=MASK)


def _labelled(w: Any) -> Any:
    return w(optax.multi_transform, {"a": w(optax.adam, 0.05), "s": w(optax.sgd, 0.1)}, {"b": "s", "w": "a"})


def _accumulated(w: Any, inner: Any) -> Any:
    return w(optax.MultiSteps, inner(w), every_k_schedule=2)


def _dropin(f: Any, *args: Any, **kwargs: Any) -> Any:
    return getattr(dropin, f.__name__)(*args, **kwargs)


@pytest.mark.parametrize("inner", [_masked_adamw, _labelled], ids=["masked-adamw", "multi-transform"])
@pytest.mark.parametrize("w", [wrapped, _dropin], ids=["wrap", "drop-in"])
def test_multi_steps_over_masks_and_labels(inner: Any, w: Any) -> None:
    tx = _accumulated(w, inner)
    assert tx.detected_static_argnames == ("every_k_schedule",)
    assert not tx._core.spec.undecided
    got = jax.jit(lambda tx, p: run_steps(tx, p, steps=8, extra=""))(tx, PARAMS)
    expected = jax.jit(lambda p: run_steps(_accumulated(raw, inner), p, steps=8, extra=""))(PARAMS)
    assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("w", [wrapped, _dropin], ids=["wrap", "drop-in"])
def test_multi_steps_over_polyak_sgd_passes_value(w: Any) -> None:
    tx = w(optax.MultiSteps, w(optax.polyak_sgd, max_learning_rate=0.5), every_k_schedule=2)
    assert tx.detected_static_argnames == ("every_k_schedule",)
    reference = optax.MultiSteps(optax.polyak_sgd(max_learning_rate=0.5), every_k_schedule=2)
    got = jax.jit(lambda tx, p: run_steps(tx, p, steps=8))(tx, PARAMS)
    # optax's gradient_transformation() drops `value`: compare with MultiSteps itself.
    expected = jax.jit(lambda p: run_steps(_multi_steps_tx(reference), p, steps=8))(PARAMS)
    assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)


def _multi_steps_tx(ms: Any) -> Any:
    return optax.GradientTransformationExtraArgs(ms.init, ms.update)


def scaled(factor: float = 1.0) -> optax.GradientTransformationExtraArgs:
    """An update with an optional extra argument, ``scale``."""

    def update(updates: Any, state: Any, params: Any = None, *, scale: float = 1.0, **extra: Any) -> Any:
        del params, extra
        return jax.tree_util.tree_map(lambda g: factor * scale * g, updates), state

    return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update)


def test_extra_update_arguments_reach_the_inner_transformation() -> None:
    grads = {"w": jnp.array([1.0, 2.0])}
    reference = optax.MultiSteps(scaled(2.0), every_k_schedule=1)
    expected, _ = reference.update(grads, reference.init(grads), scale=3.0)
    tx = opx.wrap(optax.MultiSteps, opx.wrap(scaled, 2.0), every_k_schedule=1)
    got, _ = tx.update(grads, tx.init(grads), scale=3.0)
    np.testing.assert_allclose(np.asarray(expected["w"]), [6.0, 12.0])  # pyright: ignore[reportIndexIssue, reportArgumentType]
    assert_tree_allclose(got, expected)
    got, _ = jax.jit(lambda tx, g: tx.update(g, tx.init(g), scale=3.0))(tx, grads)
    assert_tree_allclose(got, expected)


def _needs_params_x_and_an_int(n: int) -> optax.GradientTransformation:
    """:func:`needs_params_x` whose ``init`` refuses an ``n`` that is not a Python int, with an
    error of its own (not one about a tracer)."""

    def init(params: Any) -> Any:
        if not isinstance(n, int):
            raise ValueError(f"n must be an int, got {type(n).__name__}")
        return params["x"].sum() + jnp.zeros((n,))

    return optax.GradientTransformation(init, needs_params_x(n).update)


def test_undecided_configuration_names_its_dynamic_arguments_on_a_failure_plain_optax_has_not() -> None:
    tx = opx.wrap(_needs_params_x_and_an_int, 3)
    assert tx._core.spec.undecided
    with pytest.raises(TypeError, match=r"argument 'n' was not checked.*static_argnames=\('n',\)") as info:
        jax.jit(lambda tx, p: tx.init(p))(tx, {"x": jnp.ones(2)})  # n traced: "n must be an int"
    cause = info.value.__cause__
    # On Python 3.10, JAX's traceback filtering puts a SimplifiedTraceback of its own between the two.
    if cause is not None and type(cause).__name__ == "SimplifiedTraceback":
        cause = cause.__cause__
    assert isinstance(cause, ValueError)
    # The parameters lack "x": plain optax's own KeyError, not the mechanism's, stands.
    with pytest.raises(KeyError) as plain:
        needs_params_x(3).init({"y": jnp.ones(2)})
    tx = opx.wrap(needs_params_x, 3)
    assert tx._core.spec.undecided
    with pytest.raises(KeyError) as got:
        jax.jit(lambda tx, p: tx.init(p))(tx, {"y": jnp.ones(2)})
    assert str(got.value) == str(plain.value)


# --------------------------------------------------------------------------
# Exact optax numerics on demand.


def test_dynamic_only_gives_bit_identical_optax_numerics() -> None:
    expected = raw_train(optax.adam(0.05))
    every_leaf = opx.wrap(optax.adam, 0.05)
    only_lr = opx.wrap(optax.adam, 0.05, dynamic_only=("learning_rate",))
    assert only_lr.dynamic_argnames == ("learning_rate",)
    assert set(only_lr.static_argnames) >= {"b1", "b2", "eps", "eps_root"}
    step, traces = counting_jit(train)
    # Exact either way: every argument a leaf (1 - b2 carried as its host
    # value), or only the learning rate.
    assert_jit_bit_for_bit(step(every_leaf, PARAMS), expected)
    chex.assert_trees_all_equal(step(only_lr, PARAMS), expected)
    step(opx.wrap(optax.adam, 0.01, dynamic_only="learning_rate"), PARAMS)
    assert traces == [2]  # one for each static configuration, not one per learning rate


def test_static_marker_works_through_the_drop_in_and_replace() -> None:
    tx = dropin.adam(0.05, b2=opx.static(0.999))
    assert "b2" in tx.static_argnames and tx.b2 == 0.999
    assert "b2" in tx.replace(b2=0.99).static_argnames  # stays static
    again = tx.replace(b1=opx.static(0.8))
    assert {"b1", "b2"} <= set(again.static_argnames)
    assert opx.wrap(optax.sgd, opx.dynamic(0.1)).dynamic_argnames == ("learning_rate",)
    with pytest.raises(TypeError, match="already marked"):
        opx.static(opx.static(1.0))


# --------------------------------------------------------------------------
# Immutable objects, validated values.


def test_assigning_an_attribute_is_refused_naming_replace() -> None:
    tx = opx.wrap(optax.adam, 1e-3)
    with pytest.raises(AttributeError, match=r"immutable: use tx = tx\.replace\(learning_rate=\.\.\.\)"):
        tx.learning_rate = 1e-4  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(AttributeError, match="immutable"):
        warmup_cosine(wrapped, 0.1).peak_value = 0.2  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(AttributeError, match="immutable"):
        del tx.learning_rate
    assert float(tx.learning_rate) == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "call",
    [
        lambda: opx.wrap(optax.adam, learning_rate="1e-3"),  # pyright: ignore[reportCallIssue, reportArgumentType]
        lambda: dropin.adam("1e-3"),  # pyright: ignore[reportArgumentType]
        lambda: opx.wrap(optax.adam, 1e-3).replace(learning_rate="1e-3"),
    ],
    ids=["wrap", "drop-in", "replace"],
)
def test_a_string_for_a_number_is_refused_naming_the_argument(call: Any) -> None:
    with pytest.raises(
        TypeError, match=r"optax\.adam: argument 'learning_rate' got the string '1e-3'.*learning_rate=1e-3"
    ):
        call()


def test_strings_where_optax_takes_strings_still_work() -> None:
    schedule = opx.wrap(optax.piecewise_interpolate_schedule, "cosine", 1.0, {5: 0.5})
    assert schedule.interpolate_type == "cosine"


# --------------------------------------------------------------------------
# optax's warnings, as optax gives them.


def test_deprecated_factory_warns_once_per_call_never_from_init_or_update() -> None:
    with pytest.warns(DeprecationWarning, match="optimistic_adam") as caught:
        raw_tx = optax.optimistic_adam(0.1)
    expected = [
        (str(w.message), w.filename, w.lineno) for w in caught if issubclass(w.category, DeprecationWarning)
    ]
    tx = None
    for _ in range(2):  # the first call and a cached one alike
        with pytest.warns(DeprecationWarning, match="optimistic_adam") as caught:
            tx = dropin.optimistic_adam(0.1)
        got = [
            (str(w.message), w.filename, w.lineno)
            for w in caught
            if issubclass(w.category, DeprecationWarning)
        ]
        assert got == expected
    assert tx is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = tx.init(PARAMS)
        tx.update(PARAMS, state, PARAMS)
        jax.jit(lambda tx, p: tx.update(p, tx.init(p), p))(tx, PARAMS)
    del raw_tx


def test_importing_the_drop_in_warns_nothing() -> None:
    run_in_fresh_python("import optax_pytree.optax", timeout=120, PYTHONWARNINGS="error::DeprecationWarning")


def test_grad_with_respect_to_a_guarded_peak_learning_rate() -> None:
    def final_loss(schedule: Any) -> Any:
        return loss(train(opx.wrap(optax.sgd, learning_rate=schedule), PARAMS, steps=4))

    schedule = warmup_cosine(wrapped, 0.05)
    grads = jax.jit(jax.grad(final_loss, allow_int=True))(schedule)  # warmup_steps is an int leaf
    h = 1e-3
    f = jax.jit(final_loss)
    fd = (f(schedule.replace(peak_value=0.05 + h)) - f(schedule.replace(peak_value=0.05 - h))) / (2 * h)
    np.testing.assert_allclose(grads.peak_value, fd, rtol=2e-2)
