"""``wrap_transformation_as_pytree_with_state``: hyperparameters and state in one pytree."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    PARAMS,
    apply_gradients,
    assert_tree_allclose,
    counting_jit,
    loss,
    raw,
    raw_adam,
    run_steps,
)

import optax_pytree as opx
from optax_pytree._stateful import PyTreeTransformationWithState

with_state = opx.wrap_transformation_as_pytree_with_state


def _raw_train(tx: Any, params: Any, steps: int) -> tuple[Any, Any]:
    """``(params, state)`` after ``steps`` plain steps of a raw optax transformation."""
    return run_steps(tx, params, steps, extra="", scan=False)[:2]


CASES = {
    "adam": (lambda w: w(optax.adam, learning_rate=0.05), 1e-4),
    "sgd-momentum": (lambda w: w(optax.sgd, 0.05, momentum=0.9, nesterov=True), 1e-5),
    "adamw-masked": (
        lambda w: w(optax.adamw, 0.05, weight_decay=0.1, mask={"b": False, "w": True}),
        1e-4,
    ),
    "chain": (
        lambda w: w(optax.chain, w(optax.clip_by_global_norm, 1.0), w(optax.adam, 0.05)),
        1e-4,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_raw_optax_under_jit(case: str) -> None:
    make, rtol = CASES[case]
    opt = with_state(make(opx.wrap)).init(PARAMS)
    reference = make(raw)
    assert jax.tree_util.tree_structure(opt.state) == jax.tree_util.tree_structure(reference.init(PARAMS))

    step, traces = counting_jit(apply_gradients)

    params = PARAMS
    for _ in range(5):
        params, opt = step(opt, params)
    expected_params, expected_state = _raw_train(reference, PARAMS, 5)
    assert_tree_allclose(params, expected_params, rtol=rtol, atol=1e-6)
    assert_tree_allclose(opt.state, expected_state, rtol=rtol, atol=1e-6)
    assert traces == [1]


def test_update_is_update_andapply_gradients_applies() -> None:
    opt = with_state(optax.adam, 0.1).init(PARAMS)
    grads = jax.grad(loss)(PARAMS)
    updates, opt1 = opt.update(grads, PARAMS)
    state = optax.adam(0.1).init(PARAMS)
    expected_updates, expected_state = optax.adam(0.1).update(grads, state, PARAMS)
    assert_tree_allclose(updates, expected_updates, rtol=1e-4)
    assert_tree_allclose(opt1.state, expected_state, rtol=1e-4)
    params, opt2 = opt.apply_gradients(grads, PARAMS)
    assert_tree_allclose(params, optax.apply_updates(PARAMS, updates))
    assert_tree_allclose(opt2.state, opt1.state)
    # Functional: the original is untouched.
    assert int(opt.state[0].count) == 0


def test_extra_args_are_forwarded() -> None:
    # lbfgs's line search needs value, grad and value_fn.
    opt = with_state(optax.lbfgs, learning_rate=None, memory_size=3).init(PARAMS)

    @jax.jit
    def step(opt: Any, params: Any) -> Any:
        value, grad = jax.value_and_grad(loss)(params)
        return opt.apply_gradients(grad, params, value=value, grad=grad, value_fn=loss)

    params = PARAMS
    for _ in range(3):
        params, opt = step(opt, params)
    # run_steps passes value, grad and value_fn too (jitted: its line search eagerly takes seconds).
    reference = optax.lbfgs(learning_rate=None, memory_size=3)
    expected = jax.jit(lambda p: run_steps(reference, p, steps=3, scan=False)[0])(PARAMS)
    assert_tree_allclose(params, expected, rtol=1e-4, atol=1e-6)
    assert opt.transformation.detected_static_argnames == ("memory_size",)


def test_replace_keeps_the_state_and_does_not_retrace() -> None:
    step, traces = counting_jit(apply_gradients)

    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    params = PARAMS
    for lr in (0.05, 0.01, 0.002):
        opt = opt.replace(learning_rate=lr)
        params, opt = step(opt, params)
    assert traces == [1]
    assert int(opt.state[0].count) == 3
    assert float(opt.learning_rate) == pytest.approx(0.002)
    assert_tree_allclose(params, raw_adam([0.05, 0.01, 0.002]), rtol=1e-4, atol=1e-6)

    # A static change is a new program (one more trace) and keeps the state.
    params, opt = step(opt.replace(nesterov=True), params)
    assert traces == [2]
    assert int(opt.state[0].count) == 4
    assert opt.nesterov is True


def test_replace_validates() -> None:
    opt = with_state(optax.adam, learning_rate=0.05)
    with pytest.raises(ValueError, match=r"optax.adam: replace\(\) got unknown argument 'lr'"):
        opt.replace(lr=0.1)
    with pytest.raises(TypeError, match=r"did you mean 'learning_rate'\?"):  # the same exception as wrap's
        opt.replace(lr=0.1)
    # Before init, anything goes: there is no state to keep.
    assert opt.replace(mu_dtype=jnp.bfloat16).mu_dtype is jnp.bfloat16
    opt = opt.init(PARAMS)
    with pytest.raises(
        ValueError, match=r"(?s)optax.adam: replace\(mu_dtype=.*no longer fits.*expected: .*bfloat16\[4,3\]"
    ):
        opt.replace(mu_dtype=jnp.bfloat16)
    # Starting afresh is explicit.
    fresh = opt.replace(learning_rate=0.1).transformation.replace(mu_dtype=jnp.bfloat16)
    assert with_state(fresh).init(PARAMS).state[0].mu["w"].dtype == jnp.bfloat16


def test_use_before_init_is_a_clear_error() -> None:
    opt = with_state(optax.adam, learning_rate=0.05)
    assert not opt.initialized
    grads = jax.grad(loss)(PARAMS)
    message = r"optax.adam: .* used before init\(params\).*opt = opt.init\(params\)"
    with pytest.raises(ValueError, match=message):
        _ = opt.state
    with pytest.raises(ValueError, match=message):
        opt.update(grads, PARAMS)
    with pytest.raises(ValueError, match=message):
        opt.apply_gradients(grads, PARAMS)
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda o: o.update(grads, PARAMS))(opt)
    # Hyperparameters are there before init.
    assert float(opt.learning_rate) == pytest.approx(0.05)
    assert opt.init(PARAMS).initialized


def test_made_from_a_wrapped_transformation() -> None:
    tx = opx.wrap(optax.sgd, 0.1, momentum=0.9)
    opt = with_state(tx)
    assert opt.transformation is tx
    assert opt.factory is optax.sgd
    assert opt.hyperparams == tx.hyperparams
    with pytest.raises(TypeError, match="given alone"):
        with_state(tx, 0.1)  # pyright: ignore[reportCallIssue, reportArgumentType]
    with pytest.raises(TypeError, match="plain optax transformation"):
        with_state(optax.sgd(0.1))  # pyright: ignore[reportArgumentType, reportCallIssue]
    with pytest.raises(TypeError, match=r"optax\.linear_schedule gives a schedule"):
        with_state(optax.linear_schedule, 1.0, 0.1, 10)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="unknown argument 'lr'"):
        with_state(optax.sgd, lr=0.1)  # pyright: ignore[reportCallIssue]
    # From a state made elsewhere (raw optax's init gives the same structure).
    opt = PyTreeTransformationWithState(tx, optax.sgd(0.1, momentum=0.9).init(PARAMS))
    assert opt.initialized
    assert_tree_allclose(opt.update(PARAMS, PARAMS)[0], with_state(tx).init(PARAMS).update(PARAMS, PARAMS)[0])
    how = r"expected a wrapped transformation.*opx\.wrap\(optax\.adam, learning_rate=1e-3\)"
    with pytest.raises(TypeError, match=how):
        PyTreeTransformationWithState(optax.sgd(0.1))  # pyright: ignore[reportArgumentType]


def test_static_argnames_are_passed_to_wrap() -> None:
    opt = with_state(optax.sgd, 0.1, momentum=0.9, static_argnames=("momentum",))
    assert opt.transformation.static_argnames == ("momentum", "nesterov", "accumulator_dtype")
    assert [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(opt)[0]] == [
        ".transformation.learning_rate"
    ]


def test_leaves_are_named_by_path() -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(opt)[0]]
    assert paths == [
        ".transformation.learning_rate",
        ".transformation.b1",
        ".transformation.b2",
        ".transformation.eps",
        ".transformation.eps_root",
        ".transformation.exact[0]",  # 1 - b1 and 1 - b2 computed by Python, their fingerprint
        ".state[0].count",
        ".state[0].mu['b']",
        ".state[0].mu['w']",
        ".state[0].nu['b']",
        ".state[0].nu['w']",
    ]
    # Before init there are only the hyperparameters, and another treedef.
    fresh = with_state(optax.adam, learning_rate=0.05)
    assert len(jax.tree_util.tree_leaves(fresh)) == 6  # five arguments, the vector of host values
    assert jax.tree_util.tree_structure(fresh) != jax.tree_util.tree_structure(opt)


def test_equal_configurations_share_a_treedef() -> None:
    a = with_state(optax.adamw, 0.1, mask={"b": False, "w": True}).init(PARAMS)
    b = with_state(optax.adamw, 0.2, mask={"b": False, "w": True}).init(PARAMS)
    c = with_state(optax.adamw, 0.2, mask={"b": True, "w": True}).init(PARAMS)
    d = with_state(optax.adamw, 0.2, mask={"b": False, "w": True}).init({"b": jnp.ones(5), "w": PARAMS["w"]})
    structure = jax.tree_util.tree_structure
    assert structure(a) == structure(b)
    assert structure(a) != structure(c)
    assert structure(a) != structure(d)


def test_attributes_and_immutability() -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    assert float(opt.b1) == pytest.approx(0.9)
    assert opt.nesterov is False
    assert "learning_rate" in dir(opt)
    with pytest.raises(AttributeError, match=r"optax\.adam has no attribute or argument 'lr'"):
        _ = opt.lr  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(AttributeError, match=r"immutable; use opt\.replace"):
        opt.learning_rate = 0.1
    with pytest.raises(AttributeError, match="immutable"):
        delattr(opt, "state")


def test_repr() -> None:
    opt = with_state(optax.sgd, 0.1)
    assert repr(opt) == (
        "with_state(wrap(optax.sgd, learning_rate=0.1 <dynamic float32[]>, momentum=None, "
        "nesterov=False, accumulator_dtype=None), state=<uninitialized>)"
    )
    opt = with_state(optax.adam, 0.1).init(PARAMS)
    assert repr(opt).endswith(
        "state=(ScaleByAdamState(count=int32[](0), mu={'b': float32[3], 'w': float32[4,3]}, "
        "nu={'b': float32[3], 'w': float32[4,3]}), EmptyState()))"
    )


def test_pickles_and_copies() -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    params, opt = opt.apply_gradients(jax.grad(loss)(PARAMS), PARAMS)
    for clone in (pickle.loads(pickle.dumps(opt)), copy.copy(opt), copy.deepcopy(opt)):
        assert jax.tree_util.tree_structure(clone) == jax.tree_util.tree_structure(opt)
        assert_tree_allclose(clone, opt, rtol=0, atol=0)
        # ... and trains on identically.
        grads = jax.grad(loss)(params)
        assert_tree_allclose(clone.apply_gradients(grads, params), opt.apply_gradients(grads, params))
    fresh = pickle.loads(pickle.dumps(with_state(optax.adam, learning_rate=0.05)))
    assert not fresh.initialized


def test_init_under_jit_and_eval_shape() -> None:
    opt = with_state(optax.adam, learning_rate=0.05)
    jitted = jax.jit(lambda opt, params: opt.init(params))(opt, PARAMS)
    assert_tree_allclose(jitted, opt.init(PARAMS), rtol=0, atol=0)
    abstract = jax.eval_shape(opt.init, PARAMS)
    assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(jitted)
    assert abstract.state[0].mu["w"].shape == (4, 3)


def test_scan_carry() -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)

    def body(carry: Any, _: Any) -> Any:
        params, opt = carry
        return opt.apply_gradients(jax.grad(loss)(params), params), None

    (params, opt), _ = jax.lax.scan(body, (PARAMS, opt), None, length=5)
    expected, _ = _raw_train(optax.adam(0.05), PARAMS, 5)
    assert_tree_allclose(params, expected, rtol=1e-4, atol=1e-6)
    assert int(opt.state[0].count) == 5


def test_vmap_over_learning_rates() -> None:
    lrs = jnp.array([0.1, 0.01, 0.001])
    opt = with_state(optax.adam, learning_rate=0.05)

    def train(lr: Any) -> Any:
        o = opt.replace(learning_rate=lr).init(PARAMS)
        params = PARAMS
        for _ in range(3):
            params, o = o.apply_gradients(jax.grad(loss)(params), params)
        return params, o

    params, batched = jax.jit(jax.vmap(train))(lrs)
    assert batched.learning_rate.shape == (3,)
    assert batched.state[0].mu["w"].shape == (3, 4, 3)
    for i, lr in enumerate([0.1, 0.01, 0.001]):
        # Like with like: plain optax under jit too (eagerly, a TPU computes
        # adam's bias correction otherwise than its compiled program).
        expected, _ = jax.jit(lambda p, lr=lr: _raw_train(optax.adam(lr), p, 3))(PARAMS)
        assert_tree_allclose(
            jax.tree_util.tree_map(lambda x, i=i: x[i], params), expected, rtol=1e-4, atol=1e-5
        )


def test_grad_with_respect_to_the_learning_rate() -> None:
    opt = with_state(optax.sgd, learning_rate=0.05).init(PARAMS)

    def final_loss(lr: Any) -> Any:
        o, params = opt.replace(learning_rate=lr), PARAMS
        for _ in range(2):
            params, o = o.apply_gradients(jax.grad(loss)(params), params)
        return loss(params)

    got = jax.grad(final_loss)(0.05)
    eps = 1e-3
    fd = (final_loss(0.05 + eps) - final_loss(0.05 - eps)) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-2)


def test_weak_types_survive_a_jitted_step() -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    _, opt = jax.jit(lambda o, p: o.apply_gradients(jax.grad(loss)(p), p))(opt, PARAMS)
    assert opt.learning_rate.weak_type
    # So a bf16 model gets bf16 updates, as with raw optax and a Python float.
    params = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    opt = with_state(optax.sgd, learning_rate=0.05).init(params)
    new, _ = opt.apply_gradients(params, params)
    assert new["w"].dtype == jnp.bfloat16


# --------------------------------------------------------------------------
# Buffer donation: a donated optimizer's buffers are reused for the new one.

BIG = {"b": jnp.ones(128), "w": jnp.ones((256, 128))}


def _big_loss(params: Any) -> Any:
    return sum((jnp.sum(x**2) for x in jax.tree_util.tree_leaves(params)), jnp.zeros(()))


def test_donation_deletes_the_donated_buffers() -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(BIG)
    params = jax.tree_util.tree_map(jnp.copy, BIG)

    def _step(params: Any, opt: Any) -> Any:
        return opt.apply_gradients(jax.grad(_big_loss)(params), params)

    step = jax.jit(_step, donate_argnums=(0, 1))
    old_state = jax.tree_util.tree_leaves(opt.state)
    old_hyperparams = jax.tree_util.tree_leaves(opt.transformation)
    old_params = jax.tree_util.tree_leaves(params)
    new_params, new_opt = step(params, opt)
    # JAX honours donation on CPU too: every donated input buffer is gone.
    assert all(x.is_deleted() for x in old_state + old_hyperparams + old_params)
    # The new optimizer is whole, with its hyperparameters.
    assert float(new_opt.learning_rate) == pytest.approx(0.05)
    assert int(new_opt.state[0].count) == 1
    # ... and can be donated again at the next step.
    _, again = step(new_params, new_opt)
    assert int(again.state[0].count) == 2


def test_donation_memory_equals_raw_optax() -> None:
    tx = optax.adam(0.05)

    def raw_step(params: Any, state: Any) -> Any:
        updates, state = tx.update(jax.grad(_big_loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    def wrapped_step(params: Any, opt: Any) -> Any:
        return opt.apply_gradients(jax.grad(_big_loss)(params), params)

    opt = with_state(optax.adam, learning_rate=0.05).init(BIG)

    def memory(f: Any, *args: Any, donate: tuple[int, ...] = (0, 1)) -> Any:
        stats = jax.jit(f, donate_argnums=donate).lower(*args).compile().memory_analysis()
        if stats is None:  # pragma: no cover - a backend without memory analysis
            pytest.skip("this backend reports no memory analysis")
        return stats

    def raw_step_with(params: Any, state: Any, hyperparameters: Any) -> Any:
        # Raw optax, the same hyperparameter arrays passed (and donated) beside it.
        return (*raw_step(params, state), hyperparameters)

    injected = optax.inject_hyperparams(optax.adam)(learning_rate=0.05)

    def injected_step(params: Any, state: Any) -> Any:  # optax's own route: the hyperparameters values
        updates, state = injected.update(jax.grad(_big_loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    hyperparameters = tuple(jax.tree_util.tree_leaves(opt.transformation))
    plain = memory(raw_step, BIG, tx.init(BIG))
    with_arrays = memory(raw_step_with, BIG, tx.init(BIG), hyperparameters, donate=(0, 1, 2))
    wrapped = memory(wrapped_step, BIG, opt)
    # Every argument byte is aliased to an output (donated), as with raw optax;
    # the arguments differ by the hyperparameters only (as the backend lays
    # them out: a TPU pads each scalar).
    assert plain.alias_size_in_bytes == plain.argument_size_in_bytes
    assert wrapped.alias_size_in_bytes == wrapped.argument_size_in_bytes
    assert wrapped.argument_size_in_bytes == with_arrays.argument_size_in_bytes
    assert wrapped.argument_size_in_bytes > plain.argument_size_in_bytes
    if jax.default_backend() == "cpu":  # the temporaries not at all
        assert wrapped.temp_size_in_bytes == plain.temp_size_in_bytes
    else:
        # A TPU's program that reads two or more scalars out of one small vector argument
        # (the object's ``exact`` child) has a fixed amount of temporaries: plain optax's adam
        # reading its learning rate and b1 from one 3-vector has 419,328 bytes, from two
        # scalars or two 1-vectors none (TPU v5e, jax 0.10.2; the deviceless compile of
        # benchmarks/tpu_programs.py gives the chip's figures). One leaf per carried value
        # would cost every call a dispatch per value, so the vector stays; what is checked is
        # that the amount is fixed: it does not grow with the model (516,096 bytes here,
        # 387,072 beside 252 MB of arguments), and donation still aliases every argument.
        larger = {"b": jnp.ones(512), "w": jnp.ones((1024, 512))}
        opt_larger = with_state(optax.adam, learning_rate=0.05).init(larger)
        temps = memory(wrapped_step, larger, opt_larger).temp_size_in_bytes
        assert temps <= wrapped.temp_size_in_bytes <= 1 << 20, (temps, wrapped.temp_size_in_bytes)
