"""flax: the one-line replacements optax_pytree.nnx.Optimizer and optax_pytree.linen.TrainState.

With flax's own classes the optimizer is static (``nnx.Optimizer.tx``,
``TrainState.tx``): a new learning rate is a new compilation, and a wrapped
optimizer is refused (nnx) or silently static (linen). The replacements keep
the hyperparameters dynamic: one trace across learning rates, results equal
to flax with raw optax, and ``nnx.state``/``split``/checkpoints carry them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_tree_allclose, counting_jit

import optax_pytree as opx

nnx = pytest.importorskip("flax.nnx", reason="flax is an optional dependency")
linen = pytest.importorskip("flax.linen", reason="flax is an optional dependency")
from flax.training import train_state  # noqa: E402

from optax_pytree.linen import TrainState  # noqa: E402
from optax_pytree.nnx import Optimizer  # noqa: E402

X = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
Y = jnp.sin(X[:, :1]) + X[:, 1:]
LEARNING_RATES = (0.05, 0.02, 0.01)


class MLP(nnx.Module):
    def __init__(self, rngs: Any):
        self.hidden = nnx.Linear(2, 8, rngs=rngs)
        self.out = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))


def nnx_loss(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def nnx_step(model: Any, optimizer: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(nnx_loss)(model, x, y)
    optimizer.update(model, grads)
    return loss


def nnx_params(model: Any) -> Any:
    return nnx.to_pure_dict(nnx.state(model, nnx.Param)) if hasattr(nnx, "to_pure_dict") else nnx.state(model)


# --------------------------------------------------------------------------
# flax.nnx


def test_nnx_optimizer_keeps_hyperparameters_dynamic_and_equals_flax() -> None:
    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    model, reference = MLP(nnx.Rngs(0)), MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adamw, LEARNING_RATES[0], weight_decay=1e-2), wrt=nnx.Param)
    carried: Any = None
    for lr in LEARNING_RATES:  # the documented way to change one
        optimizer.set_hyperparams(learning_rate=lr)
        step(model, optimizer, X, Y)
        # flax with raw optax, one new optimizer per learning rate (adamw's state
        # does not depend on it), carrying the state: the same trajectory.
        raw = nnx.Optimizer(reference, optax.adamw(lr, weight_decay=1e-2), wrt=nnx.Param)
        if carried is not None:
            raw.opt_state, raw.step = carried
        nnx.jit(nnx_step)(reference, raw, X, Y)
        carried = (raw.opt_state, raw.step)
    assert traces == [1]
    assert int(optimizer.step[...]) == 3
    assert_tree_allclose(nnx_params(model), nnx_params(reference), rtol=1e-4, atol=1e-6)
    # A static change replaces the transformation: another program.
    optimizer.set_hyperparams(nesterov=True)
    assert optimizer.transformation.nesterov is True
    step(model, optimizer, X, Y)
    assert traces == [2]
    with pytest.raises(ValueError, match="unknown argument 'lr'"):
        optimizer.set_hyperparams(lr=0.1)


def test_nnx_new_optimizer_objects_reuse_the_compiled_step() -> None:
    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    for lr in LEARNING_RATES:
        model = MLP(nnx.Rngs(0))
        step(model, Optimizer(model, opx.wrap(optax.adam, lr), wrt=nnx.Param), X, Y)
    assert traces == [1]


def test_flax_nnx_optimizer_refuses_a_wrapped_transformation() -> None:
    # The problem the replacement solves.
    with pytest.raises((ValueError, TypeError)):
        nnx.Optimizer(MLP(nnx.Rngs(0)), opx.wrap(optax.adam, 0.1), wrt=nnx.Param)


def test_nnx_optimizer_with_a_plain_transformation_is_flax_s() -> None:
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    nnx.jit(nnx_step)(model, optimizer, X, Y)
    assert int(optimizer.step[...]) == 1


def test_nnx_state_split_merge_and_checkpoint(tmp_path: Any) -> None:
    pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is a test extra")
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adam, 0.05), wrt=nnx.Param)
    state = nnx.state(optimizer)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    assert any(p.startswith("['tx']['learning_rate']") for p in paths), paths
    graphdef, split = nnx.split(optimizer)
    merged = nnx.merge(graphdef, split)
    assert float(merged.hyperparams["learning_rate"]) == pytest.approx(0.05)
    assert float(merged.transformation.learning_rate) == pytest.approx(0.05)

    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    step(model, optimizer, X, Y)
    opx.save_checkpoint(tmp_path / "opt", nnx.state(optimizer))
    step(model, optimizer, X, Y)  # the uninterrupted run
    expected = nnx_params(model)

    # Resume: a fresh model and optimizer, restored, then one more step.
    resumed_model = MLP(nnx.Rngs(0))
    resumed = Optimizer(resumed_model, opx.wrap(optax.adam, 0.05), wrt=nnx.Param)
    step(resumed_model, resumed, X, Y)  # the same first step: params as saved
    nnx.update(resumed, opx.restore_checkpoint(tmp_path / "opt", nnx.state(resumed)))
    step(resumed_model, resumed, X, Y)
    assert_tree_allclose(nnx_params(resumed_model), expected, rtol=1e-6, atol=1e-7)
    assert traces == [1]  # restored hyperparameters keep their weak types: no retrace


def test_nnx_without_flax_is_a_clear_import_error() -> None:
    code = "import sys; sys.modules['flax'] = None\n"
    code += "try:\n    import optax_pytree.nnx\nexcept ImportError as e:\n    print(e)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert "optax_pytree.nnx needs flax" in out.stdout, out.stdout + out.stderr
    code = code.replace("optax_pytree.nnx", "optax_pytree.linen")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert "optax_pytree.linen needs flax" in out.stdout, out.stdout + out.stderr


# --------------------------------------------------------------------------
# flax.linen


def linen_state(cls: Any, tx: Any) -> Any:
    model = linen.Dense(1)
    params = model.init(jax.random.key(0), X)["params"]
    return cls.create(apply_fn=model.apply, params=params, tx=tx)


def linen_step(state: Any, x: jax.Array, y: jax.Array) -> Any:
    def loss(params: Any) -> jax.Array:
        return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

    return state.apply_gradients(grads=jax.grad(loss)(state.params))


def test_linen_train_state_keeps_hyperparameters_dynamic_and_equals_flax() -> None:
    step, traces = counting_jit(linen_step)
    state = linen_state(TrainState, opx.wrap(optax.adam, LEARNING_RATES[0]))
    reference = linen_state(train_state.TrainState, optax.adam(LEARNING_RATES[0]))
    for lr in LEARNING_RATES:
        state = step(state.replace(tx=state.tx.replace(learning_rate=lr)), X, Y)
        reference = jax.jit(linen_step)(reference.replace(tx=optax.adam(lr)), X, Y)
    assert traces == [1]
    assert int(state.step) == 3
    assert_tree_allclose(state.params, reference.params, rtol=1e-4, atol=1e-6)
    assert_tree_allclose(state.opt_state, reference.opt_state, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(state.tx.learning_rate), LEARNING_RATES[-1], rtol=1e-6)


def test_flax_train_state_treats_the_optimizer_as_static() -> None:
    # The problem the replacement solves: tx is a static field there.
    step, traces = counting_jit(linen_step)
    for lr in LEARNING_RATES:
        step(linen_state(train_state.TrainState, opx.wrap(optax.adam, lr)), X, Y)
    assert traces == [3]


def test_linen_train_state_refuses_a_plain_transformation() -> None:
    with pytest.raises(TypeError, match=r"tx is a plain optax transformation.*optax_pytree\.wrap"):
        linen_state(TrainState, optax.adam(0.1))


def test_linen_train_state_vmaps_over_a_population() -> None:
    batch = opx.stack([opx.wrap(optax.sgd, lr) for lr in LEARNING_RATES])
    states = jax.vmap(lambda tx: linen_state(TrainState, tx))(batch)
    states = jax.jit(jax.vmap(linen_step, in_axes=(0, None, None)))(states, X, Y)
    for i, lr in enumerate(LEARNING_RATES):
        expected = linen_step(linen_state(train_state.TrainState, optax.sgd(lr)), X, Y)
        assert_tree_allclose(jax.tree_util.tree_map(lambda x, i=i: x[i], states.params), expected.params)
