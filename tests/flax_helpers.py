"""Shared flax fixtures: the data, the nnx and linen models, their training steps.

flax is an optional dependency: only the flax tests import this module, after
skipping where flax is missing, so that ``helpers`` imports without it. It
skips itself likewise (pytest imports every module of the folder to look for
doctests).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest

nnx = pytest.importorskip("flax.nnx", reason="flax is an optional dependency")
linen = pytest.importorskip("flax.linen", reason="flax is an optional dependency")
if not hasattr(nnx, "as_pure"):  # came with flax 0.12.7, which needs Python >= 3.11
    pytest.skip("needs flax>=0.12.7, the floor of optax_pytree.nnx", allow_module_level=True)

# A small regression batch.
X = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
Y = jnp.sin(X[:, :1]) + X[:, 1:]


# --------------------------------------------------------------------------
# flax.nnx


class MLP(nnx.Module):
    def __init__(self, rngs: Any):
        self.hidden = nnx.Linear(2, 8, rngs=rngs)
        self.out = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))


def nnx_loss(model: Any, x: jax.Array = X, y: jax.Array = Y) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def nnx_step(model: Any, optimizer: Any, x: jax.Array = X, y: jax.Array = Y) -> jax.Array:
    """One step of an ``nnx.Optimizer`` (flax's or ours) on :func:`nnx_loss`; returns the loss."""
    loss, grads = nnx.value_and_grad(nnx_loss)(model, x, y)
    optimizer.update(model, grads)
    return loss


def nnx_params(model: Any) -> Any:
    """The model's parameters as arrays."""
    return nnx.as_pure(nnx.state(model, nnx.Param))


def train_with_flax(
    learning_rates: Any, factory: Any = optax.adam, model: Any = None, **kwargs: Any
) -> tuple[Any, jax.Array]:
    """The reference: flax's ``nnx.Optimizer`` with raw optax, one step per learning rate in turn.

    Each step has a new optimizer, ``factory(lr, **kwargs)``, carrying the
    state (adam's and adamw's do not depend on the learning rate): what a
    wrapped optimizer whose learning rate is replaced between steps must
    equal. Repeat a learning rate for more steps at it. ``model`` defaults to
    a fresh :class:`MLP`. Returns (:func:`nnx_params`, the losses).
    """
    model = MLP(nnx.Rngs(0)) if model is None else model
    step = nnx.jit(nnx_step)
    carried: Any = None
    losses = []
    optimizer: Any = None
    previous: Any = None
    for lr in learning_rates:
        if optimizer is None or lr != previous:  # a repeated rate keeps its optimizer (and compilation)
            optimizer = nnx.Optimizer(model, factory(lr, **kwargs), wrt=nnx.Param)
            if carried is not None:
                optimizer.opt_state, optimizer.step = carried
        previous = lr
        losses.append(step(model, optimizer))
        carried = (optimizer.opt_state, optimizer.step)
    return nnx_params(model), jnp.stack(losses)


# --------------------------------------------------------------------------
# flax.linen

# One module, hence one apply_fn: part of a TrainState's treedef (a bound
# method compares its module by identity), so states made apart share it.
LINEN_MODEL = linen.Dense(1)


def linen_state(cls: Any, tx: Any) -> Any:
    """A ``cls.create`` (flax's ``TrainState``, ours, a subclass) of :data:`LINEN_MODEL` with ``tx``."""
    params = LINEN_MODEL.init(jax.random.key(0), X)["params"]
    return cls.create(apply_fn=LINEN_MODEL.apply, params=params, tx=tx)


def linen_step(state: Any, x: jax.Array = X, y: jax.Array = Y) -> Any:
    def loss(params: Any) -> jax.Array:
        return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

    return state.apply_gradients(grads=jax.grad(loss)(state.params))
