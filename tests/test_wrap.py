"""The wrapper's promises, one by one (the catalogue is in test_catalogue.py)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
from helpers import (
    PARAMS,
    assert_tree_allclose,
    counting_jit,
    loss,
    needs_params_x,
    raw,
    raw_adam,
    run_steps,
    version,
)

import optax_pytree as opx
from optax_pytree import _detect, _wrap


def train(tx: Any, params: Any) -> Any:
    return run_steps(tx, params, steps=3)[0]


# --------------------------------------------------------------------------
# Classification and leaves.


def test_numeric_arguments_are_leaves_and_the_rest_is_static() -> None:
    tx = opx.wrap(optax.adam, learning_rate=1e-3, mu_dtype=jnp.float32)
    assert tx.dynamic_argnames == ("learning_rate", "b1", "b2", "eps", "eps_root")
    assert tx.static_argnames == ("mu_dtype", "nesterov")
    leaves = jax.tree_util.tree_leaves(tx)
    assert all(isinstance(x, jax.Array) for x in leaves)
    assert all(x.weak_type for x in leaves)  # Python floats keep JAX's weak typing
    assert tx.hyperparams["nesterov"] is False and tx.mu_dtype is jnp.float32


def test_arguments_are_bound_to_the_signature_with_defaults() -> None:
    positional = opx.wrap(optax.sgd, 0.1, 0.9)
    keywords = opx.wrap(optax.sgd, learning_rate=0.1, momentum=0.9)
    assert jax.tree_util.tree_structure(positional) == jax.tree_util.tree_structure(keywords)
    assert list(positional.hyperparams) == ["learning_rate", "momentum", "nesterov", "accumulator_dtype"]
    assert opx.wrap(optax.sgd, 0.1).momentum is None  # a default: static


@pytest.mark.parametrize(
    "value",
    [0.01, np.float64(0.01), np.float32(0.01), np.array(0.01, np.float32), jnp.float32(0.01)],
    ids=["python", "np.float64", "np.float32", "0-d np.ndarray", "0-d jax.Array"],
)
def test_equivalent_scalars_share_one_compilation(value: Any) -> None:
    step, traces = counting_jit(train)
    step(opx.wrap(optax.adam, learning_rate=0.02), PARAMS)
    step(opx.wrap(optax.adam, learning_rate=value), PARAMS)
    assert traces[0] == 1
    assert opx.wrap(optax.adam, learning_rate=value).learning_rate.weak_type


def test_explicit_dtype_is_kept() -> None:
    lr = jnp.asarray(0.01, jnp.bfloat16)
    tx = opx.wrap(optax.sgd, learning_rate=lr)
    assert tx.learning_rate.dtype == jnp.bfloat16 and not tx.learning_rate.weak_type
    step, traces = counting_jit(train)
    step(tx, PARAMS)
    step(opx.wrap(optax.sgd, learning_rate=0.01), PARAMS)  # float32: another program
    assert traces[0] == 2


@pytest.mark.parametrize("factory", [optax.adam, optax.sgd, optax.adamw, optax.lion])
def test_low_precision_parameters_see_raw_optax_dtypes(factory: Any) -> None:
    # optax issue #1414: a strongly typed float32 hyperparameter would promote
    # bf16 updates to float32. A weak leaf behaves like the Python float.
    params = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    raw_tx, tx = factory(0.01), opx.wrap(factory, 0.01)
    expected, _ = raw_tx.update(grads, raw_tx.init(params), params)
    got, _ = jax.jit(lambda tx, p: tx.update(grads, tx.init(p), p))(tx, params)
    assert jax.tree_util.tree_map(lambda x: x.dtype, got) == jax.tree_util.tree_map(
        lambda x: x.dtype, expected
    )
    assert_tree_allclose(got, expected, rtol=1e-2, atol=1e-3)


def test_static_values_compare_by_value_unhashable_masks_included() -> None:
    step, traces = counting_jit(train)
    for lr in (0.1, 0.2):
        mask = {"b": False, "w": True}  # a new dict each time: equal, not identical
        step(opx.wrap(optax.adamw, learning_rate=lr, mask=mask), PARAMS)
    assert traces[0] == 1
    step(opx.wrap(optax.adamw, learning_rate=0.1, mask={"b": True, "w": True}), PARAMS)
    assert traces[0] == 2


# --------------------------------------------------------------------------
# Recompilation, both ways.


def test_dynamic_change_one_trace_static_change_new_trace() -> None:
    step, traces = counting_jit(train)
    for lr in (0.1, 0.01, 0.001):
        step(opx.wrap(optax.adam, learning_rate=lr, b1=0.8), PARAMS)
    assert traces[0] == 1
    step(opx.wrap(optax.adam, learning_rate=0.1, nesterov=True), PARAMS)
    assert traces[0] == 2
    step(opx.wrap(optax.adam, learning_rate=0.5, nesterov=True), PARAMS)
    assert traces[0] == 2


def test_one_trace_under_equinox_filter_jit() -> None:
    def step(tx: Any, params: Any) -> Any:
        return train(tx, params)

    step, traces = counting_jit(step, jit=eqx.filter_jit)

    for lr in (0.1, 0.01, 0.001):
        step(opx.wrap(optax.adam, learning_rate=lr), PARAMS)
    assert traces == [1]
    step(opx.wrap(optax.adam, learning_rate=0.1, nesterov=True), PARAMS)
    assert traces == [2]


def test_results_follow_the_leaf_values() -> None:
    step, traces = counting_jit(train)
    for lr in (0.1, 0.01):
        expected = jax.jit(lambda p, lr=lr: train(optax.adam(lr), p))(PARAMS)
        assert_tree_allclose(
            step(opx.wrap(optax.adam, learning_rate=lr), PARAMS), expected, rtol=1e-4, atol=1e-5
        )
    assert traces[0] == 1


# --------------------------------------------------------------------------
# JAX transformations.


def test_vmap_over_learning_rates_equals_the_loop() -> None:
    lrs = jnp.array([0.3, 0.1, 0.03, 0.01])
    tx = opx.wrap(optax.adam, learning_rate=0.1)
    # A batch made by hand from an array of values: no Python values, so
    # float32 arithmetic on them (the documented fallback).
    batched = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (*lrs.shape, *x.shape)), tx)
    batched = batched.replace(learning_rate=lrs)
    got = jax.jit(jax.vmap(train, in_axes=(0, None)))(batched, PARAMS)
    # A batch of wrapped members (stack, grid): each member's host values.
    stacked = opx.stack([opx.wrap(optax.adam, learning_rate=float(lr)) for lr in lrs])
    exact = jax.jit(jax.vmap(train, in_axes=(0, None)))(stacked, PARAMS)
    for i, lr in enumerate(lrs):
        expected = jax.jit(train)(opx.wrap(optax.adam, learning_rate=float(lr)), PARAMS)
        assert_tree_allclose(jax.tree_util.tree_map(lambda x, i=i: x[i], got), expected, atol=1e-5)
        assert_tree_allclose(jax.tree_util.tree_map(lambda x, i=i: x[i], exact), expected)


def test_grad_wrt_learning_rate_matches_finite_differences() -> None:
    def final_loss(tx: Any) -> jax.Array:
        return loss(train(tx, PARAMS))

    tx = opx.wrap(optax.adam, learning_rate=0.05)
    grads = jax.jit(jax.grad(final_loss))(tx)
    assert type(grads) is type(tx)  # a cotangent with the optimizer's structure
    h = 1e-3
    f = jax.jit(final_loss)
    fd = (f(tx.replace(learning_rate=0.05 + h)) - f(tx.replace(learning_rate=0.05 - h))) / (2 * h)
    np.testing.assert_allclose(grads.learning_rate, fd, rtol=2e-2)
    # b1 is a leaf too: its gradient flows through the traced 1 - b1, whose
    # value is the carried host one.
    assert jnp.isfinite(grads.b1) and grads.b1 != 0
    # The carried host values are leaves of the gradient, with zero cotangents.
    # 1 - b1, 1 - b2, their fingerprint; the logarithms of b1 and b2 (a TPU's compiler folds
    # them for the bias correction's powers), their fingerprint.
    assert grads.exact[0].shape == tx.exact[0].shape == (6,)
    chex.assert_trees_all_equal(grads.exact, jax.tree_util.tree_map(jnp.zeros_like, tx.exact))


def test_scan_carries_the_optimizer() -> None:
    def body(carry: Any, lr: Any) -> Any:
        tx, params, state = carry
        tx = tx.replace(learning_rate=lr)  # traced value: classified like wrap
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        return (tx, optax.apply_updates(params, updates), state), loss(params)

    tx = opx.wrap(optax.adam, learning_rate=0.1)
    lrs = jnp.array([0.1, 0.05, 0.02])
    (tx_out, params, _), _ = jax.jit(lambda c: jax.lax.scan(body, c, lrs))((tx, PARAMS, tx.init(PARAMS)))
    assert float(tx_out.learning_rate) == pytest.approx(0.02)
    assert_tree_allclose(params, raw_adam([0.1, 0.05, 0.02]), rtol=1e-4, atol=1e-5)


def test_flatten_with_path_names_each_leaf() -> None:
    tx = opx.wrap(
        optax.chain,
        opx.wrap(optax.clip_by_global_norm, 1.0),
        opx.wrap(optax.adam, learning_rate=opx.wrap(optax.linear_schedule, 0.1, 0.01, 100)),
    )
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
    assert paths == [
        ".args[0].max_norm",
        ".args[1].learning_rate.init_value",
        ".args[1].learning_rate.end_value",
        ".args[1].learning_rate.transition_steps",  # compared with 0 in Python: guarded
        ".args[1].learning_rate.transition_begin",
        # The host values of what the factory computes in Python before it
        # meets an array (``end_value - init_value``) and their fingerprint.
        ".args[1].learning_rate.exact[0]",
        ".args[1].b1",
        ".args[1].b2",
        ".args[1].eps",
        ".args[1].eps_root",
        ".args[1].exact[0]",  # 1 - b1, 1 - b2, their fingerprint
    ]


# --------------------------------------------------------------------------
# Children: combinators, schedules as hyperparameters, mixed containers.


def test_wrapped_schedule_as_learning_rate() -> None:
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 0.1, 2, 10)
    assert isinstance(schedule, _wrap.PyTreeSchedule)
    assert schedule.detected_static_argnames == ()
    assert schedule.guarded_argnames == ("peak_value", "warmup_steps", "decay_steps")
    tx = opx.wrap(optax.adamw, learning_rate=schedule, weight_decay=1e-2)
    expected = jax.jit(
        lambda p: train(
            optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 0.1, 2, 10), weight_decay=1e-2), p
        )
    )(PARAMS)
    step, traces = counting_jit(train)
    assert_tree_allclose(step(tx, PARAMS), expected, rtol=1e-4, atol=1e-5)
    step(tx.replace(learning_rate=schedule.replace(init_value=0.01)), PARAMS)
    assert traces[0] == 1


def test_multi_transform_with_a_dict_of_wrapped_transforms() -> None:
    labels = {"b": "slow", "w": "fast"}

    def build(w: Any) -> Any:
        return w(optax.multi_transform, {"fast": w(optax.adam, 0.1), "slow": w(optax.sgd, 0.01)}, labels)

    tx = build(opx.wrap)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
    assert ".transforms['fast'].learning_rate" in paths
    expected = jax.jit(lambda p: train(build(raw), p))(PARAMS)
    assert_tree_allclose(jax.jit(train)(tx, PARAMS), expected, rtol=1e-4, atol=1e-5)


def test_named_chain_mixed_container() -> None:
    def build(w: Any) -> Any:
        return w(optax.named_chain, ("clip", w(optax.clip, 0.5)), ("opt", w(optax.sgd, 0.1)))

    tx = build(opx.wrap)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
    assert paths == [".args[0][1].max_delta", ".args[1][1].learning_rate"]
    state = tx.init(PARAMS)
    assert list(state) == ["clip", "opt"]
    expected = jax.jit(lambda p: train(build(raw), p))(PARAMS)
    assert_tree_allclose(jax.jit(train)(tx, PARAMS), expected, rtol=1e-4, atol=1e-5)


def test_accepted_wherever_optax_takes_a_transformation() -> None:
    tx = opx.wrap(optax.adam, 0.1)
    assert isinstance(tx, optax.GradientTransformation)
    assert isinstance(tx, optax.GradientTransformationExtraArgs)
    init, update = tx  # unpacks like any optax transformation
    assert callable(init) and callable(update)
    cases = [
        (optax.chain(opx.wrap(optax.clip, 1.0), tx), optax.chain(optax.clip(1.0), optax.adam(0.1))),
        (
            optax.MultiSteps(tx, 2).gradient_transformation(),
            optax.MultiSteps(optax.adam(0.1), 2).gradient_transformation(),
        ),
        (optax.apply_if_finite(tx, 3), optax.apply_if_finite(optax.adam(0.1), 3)),
    ]
    for composite, reference in cases:
        got = jax.jit(lambda p, c=composite: run_steps(c, p, steps=3))(PARAMS)
        expected = jax.jit(lambda p, r=reference: run_steps(r, p, steps=3))(PARAMS)
        assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_extra_args_are_forwarded() -> None:
    tx = opx.wrap(optax.polyak_sgd, max_learning_rate=1.0)
    raw_tx = optax.polyak_sgd(max_learning_rate=1.0)
    grads = jax.grad(loss)(PARAMS)
    got, _ = tx.update(grads, tx.init(PARAMS), PARAMS, value=loss(PARAMS))
    expected, _ = raw_tx.update(grads, raw_tx.init(PARAMS), PARAMS, value=loss(PARAMS))
    assert_tree_allclose(got, expected)


# --------------------------------------------------------------------------
# The object.


def test_object_api() -> None:
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    assert tx.factory is optax.adam
    assert float(tx.learning_rate) == pytest.approx(1e-3)
    assert set(tx.hyperparams) == set(inspect.signature(optax.adam).parameters)
    tx2 = tx.replace(learning_rate=3e-4, nesterov=True)
    assert float(tx2.learning_rate) == pytest.approx(3e-4) and tx2.nesterov is True
    assert float(tx.learning_rate) == pytest.approx(1e-3)  # unchanged
    built = tx.build()
    assert isinstance(built, optax.GradientTransformation) and not isinstance(
        built, _wrap.PyTreeTransformation
    )
    assert "learning_rate" in dir(tx)
    text = repr(tx)
    assert text.startswith("wrap(optax.adam, learning_rate=0.001 <dynamic float32[]>")
    assert "nesterov=False" in text
    assert "memory_size=10 <static: detected>" in repr(opx.wrap(optax.lbfgs))
    assert "sync_period=5 <dynamic, guarded int32[]>" in repr(
        opx.wrap(optax.lookahead, opx.wrap(optax.sgd, 0.1), sync_period=5, slow_step_size=0.5)
    )
    assert_tree_allclose(tx.init(PARAMS), optax.adam(1e-3).init(PARAMS))


def test_replace_keeps_the_placement_of_placed_leaves() -> None:
    # A hyperparameter placed with device_put is committed; a fresh value
    # would not be, and jit keys its cache on that: replace keeps it placed.
    device = jax.devices()[0]
    tx = jax.device_put(opx.wrap(optax.chain, opx.wrap(optax.adam, 0.1), opx.wrap(optax.sgd, 0.1)), device)
    new = tx.replace(args=(tx.args[0].replace(learning_rate=0.2), tx.args[1]))
    assert all(x.committed for x in jax.tree_util.tree_leaves(new))
    assert float(new.args[0].learning_rate) == pytest.approx(0.2)
    step, traces = counting_jit(train)
    for lr in (0.1, 0.2, 0.3):
        step(tx.replace(args=(opx.wrap(optax.adam, lr), tx.args[1])), PARAMS)
    assert traces == [1]
    # Unplaced objects stay unplaced (no device_put on the common path).
    assert not any(x.committed for x in jax.tree_util.tree_leaves(opx.wrap(optax.adam, 0.1).replace(b1=0.5)))


def test_pickle_round_trip() -> None:
    tx = opx.wrap(
        optax.chain,
        opx.wrap(optax.clip_by_global_norm, 1.0),
        opx.wrap(optax.adamw, opx.wrap(optax.linear_schedule, 0.1, 0.0, 10), mask={"b": False, "w": True}),
    )
    again = pickle.loads(pickle.dumps(tx))
    assert jax.tree_util.tree_structure(again) == jax.tree_util.tree_structure(tx)
    assert_tree_allclose(again, tx)
    assert all(x.weak_type for x in jax.tree_util.tree_leaves(again))
    decorated = pickle.loads(pickle.dumps(clipped_sgd(0.1)))
    assert decorated.factory is inspect.unwrap(clipped_sgd) and float(
        decorated.learning_rate
    ) == pytest.approx(0.1)


# --------------------------------------------------------------------------
# The decorator.


@opx.pytree_transformation
def clipped_sgd(learning_rate: float, max_norm: float = 1.0) -> optax.GradientTransformation:
    """SGD after global-norm clipping."""
    return optax.chain(optax.clip_by_global_norm(max_norm), optax.sgd(learning_rate))


@opx.pytree_transformation(static_argnames="steps")
def warm(learning_rate: float, steps: int = 3) -> optax.GradientTransformation:
    return optax.adam(optax.linear_schedule(0.0, learning_rate, steps))


def test_pytree_transformation_decorator() -> None:
    assert clipped_sgd.__name__ == "clipped_sgd"
    assert clipped_sgd.__doc__ == "SGD after global-norm clipping."
    assert str(inspect.signature(clipped_sgd)) == str(inspect.signature(inspect.unwrap(clipped_sgd)))
    tx = clipped_sgd(0.1)
    assert isinstance(tx, _wrap.PyTreeTransformation) and tx.dynamic_argnames == ("learning_rate", "max_norm")
    w = warm(0.1)
    assert w.static_argnames == ("steps",) and w.detected_static_argnames == ()
    adam = opx.pytree_transformation(optax.adam)
    assert adam.__name__ == "adam" and inspect.signature(adam) == inspect.signature(optax.adam)
    assert jax.tree_util.tree_structure(adam(0.1)) == jax.tree_util.tree_structure(opx.wrap(optax.adam, 0.1))
    step, traces = counting_jit(train)
    step(clipped_sgd(0.1), PARAMS)
    step(clipped_sgd(0.2, max_norm=2.0), PARAMS)
    assert traces[0] == 1


# --------------------------------------------------------------------------
# Automatic static detection.

# (make, detected static, guarded): static where the factory needs a Python
# value (a shape, a dict key, isinstance), guarded where it only compares.
DETECTED = [
    (lambda: opx.wrap(optax.adafactor, 0.1), ("min_dim_size_to_factor",), ()),
    (
        lambda: opx.wrap(optax.adafactor, 0.1, multiply_by_parameter_scale=1),  # pyright: ignore[reportArgumentType, reportCallIssue]
        ("min_dim_size_to_factor",),
        ("multiply_by_parameter_scale",),  # `if multiply_by_parameter_scale:`
    ),
    (lambda: opx.wrap(optax.lbfgs), ("memory_size",), ()),
    (lambda: opx.wrap(optax.scale_by_sm3), (), ("b2",)),  # `b2 != 1.0` inside update
    (lambda: opx.wrap(optax.lookahead, opx.wrap(optax.sgd, 0.1), 2, 0.5), (), ("sync_period",)),
    (lambda: opx.wrap(optax.MultiSteps, opx.wrap(optax.sgd, 0.1), 3), ("every_k_schedule",), ()),
    (
        lambda: opx.wrap(optax.contrib.sam, opx.wrap(optax.sgd, 0.1), opx.wrap(optax.sgd, 0.1)),
        (),
        ("sync_period",),
    ),
    *(
        # weight_decay: static at its default 0.0 only, for which optax skips its term in Python
        [(lambda: opx.wrap(optax.contrib.galore, 0.1), ("rank", "weight_decay"), ())]
        if hasattr(optax.contrib, "galore")
        else []
    ),
    (lambda: opx.wrap(optax.contrib.mechanize, opx.wrap(optax.sgd, 0.1)), ("num_betas",), ()),
    (lambda: opx.wrap(optax.contrib.reduce_on_plateau), (), ("factor", "rtol", "atol")),
    (
        lambda: opx.wrap(optax.exponential_decay, 1.0, 10, 0.5),
        (),
        ("transition_steps", "decay_rate", "transition_begin"),
    ),
    (
        lambda: opx.wrap(optax.cosine_onecycle_schedule, 100, 1.0),
        ("transition_steps", "pct_start"),
        ("div_factor", "final_div_factor"),
    )
    if version(optax) >= (0, 2, 7)
    else (  # optax<0.2.7 computes the schedule's values with np.cumprod: all static
        lambda: opx.wrap(optax.cosine_onecycle_schedule, 100, 1.0),
        ("transition_steps", "peak_value", "pct_start", "div_factor", "final_div_factor"),
        (),
    ),
    (lambda: opx.wrap(optax.adam, 0.1), (), ()),
]


@pytest.mark.parametrize("make,static,guarded", DETECTED, ids=[str(i) for i in range(len(DETECTED))])
def test_automatic_static_detection(make: Any, static: tuple[str, ...], guarded: tuple[str, ...]) -> None:
    tx = make()
    assert tx.detected_static_argnames == static
    assert tx.guarded_argnames == guarded
    for name in static:
        assert name in tx.static_argnames and name not in tx.dynamic_argnames
    for name in guarded:
        assert name in tx.dynamic_argnames


def test_detection_runs_once_per_configuration_and_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = _detect.search

    def spy(probe: Any, candidates: Any, proxiable: Any) -> Any:
        calls.append(probe.info.name)
        return original(probe, candidates, proxiable)

    monkeypatch.setattr(_detect, "search", spy)
    _wrap.clear_caches()
    for sync in (2, 3, 4):  # guarded: the same branch, the same probe result
        opx.wrap(optax.lookahead, opx.wrap(optax.sgd, 0.1), sync_period=sync, slow_step_size=0.5)
    assert calls.count("optax.lookahead") == 1
    for memory in (5, 6, 5):  # static: each value its own configuration
        opx.wrap(optax.lbfgs, memory_size=memory)
    assert calls.count("optax.lbfgs") == 2


def test_dynamic_argnames_turns_detection_off_and_trace_time_error_names_it() -> None:
    tx = opx.wrap(optax.lbfgs, dynamic_argnames=("memory_size",))
    with pytest.raises(
        TypeError, match=r"optax\.lbfgs: argument 'memory_size'.*static_argnames=\('memory_size',\)"
    ):
        jax.jit(lambda tx, p: tx.init(p))(tx, PARAMS)
    # Forcing it dynamic once does not leak into the cached detection of the
    # same configuration without the option.
    assert opx.wrap(optax.lbfgs).detected_static_argnames == ("memory_size",)


def test_undetectable_static_argument_is_named_at_trace_time() -> None:
    tx = opx.wrap(needs_params_x, 3)
    assert tx.detected_static_argnames == ()
    params = {"x": jnp.ones(2)}
    with pytest.raises(TypeError, match=r"argument 'n' is dynamic.*static_argnames=\('n',\)"):
        jax.jit(lambda tx, p: tx.init(p))(tx, params)
    fixed = opx.wrap(needs_params_x, 3, static_argnames="n")
    assert jax.jit(lambda tx, p: tx.init(p))(fixed, params).shape == (3,)


# --------------------------------------------------------------------------
# Bad input: a clear error, naming the factory and the argument.


def not_a_factory(x: float) -> float:
    return x


# Each call is a misuse pyright would flag: the table calls the API untyped.
untyped: Any = opx


@pytest.mark.parametrize(
    "call,error,pattern",
    [
        (lambda: untyped.wrap(optax.adam, 0.1, learnin_rate=0.1), TypeError, r"optax\.adam.*'learnin_rate'"),
        (
            lambda: untyped.wrap(optax.adam),
            TypeError,
            r"optax\.adam: missing required argument 'learning_rate'",
        ),
        (
            lambda: untyped.wrap(optax.chain, untyped.wrap(optax.sgd, 1.0), bogus=1),
            TypeError,
            r"optax\.chain.*'bogus'",
        ),
        (
            lambda: untyped.wrap(optax.adam, 0.1, static_argnames="b1", dynamic_argnames="b1"),
            ValueError,
            r"optax\.adam: argument 'b1' is in both static_argnames and dynamic_argnames",
        ),
        (lambda: untyped.wrap(optax.adam, 0.1, static_argnames="beta1"), ValueError, r"optax\.adam.*'beta1'"),
        (
            lambda: untyped.wrap(optax.adam, 0.1, dynamic_argnames="nesterov"),
            TypeError,
            r"optax\.adam: argument 'nesterov' is forced dynamic .* but its value False is not numeric",
        ),
        (lambda: untyped.wrap(not_a_factory, 1.0), TypeError, r"not_a_factory returned float.*neither"),
        (
            lambda: untyped.wrap(optax.adam, 0.1).replace(lr=0.2),
            ValueError,
            r"optax\.adam: replace\(\) got unknown argument 'lr'",
        ),
        (lambda: untyped.wrap(3.0), TypeError, r"must be callable"),
        (
            lambda: untyped.pytree_transformation(optax.sgd, static_argnames="lr"),
            ValueError,
            r"optax\.sgd.*'lr'",
        ),
        (
            lambda: untyped.wrap(optax.lookahead, untyped.wrap(optax.sgd, 0.1), 0, 0.5),
            ValueError,
            r"lookahead.*sync_period=0",
        ),
    ],
    ids=[
        "unknown",
        "missing",
        "unknown-kw-varargs",
        "static-and-dynamic",
        "static-unknown",
        "non-numeric-dynamic",
        "not-a-transformation",
        "replace-unknown",
        "not-callable",
        "decorator-unknown",
        "factory-own-check",
    ],
)
def test_bad_input(call: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()
