"""Training a flax.nnx model with a stateful wrapped optimizer under ``nnx.jit``.

``nnx.Optimizer`` keeps its ``tx`` as a static attribute: a plain optax
optimizer is baked into the compiled step, so a new learning rate means a new
optimizer (and a new compilation), and a wrapped one is refused there
("Found data ... assigned to static attribute 'tx'"). Here the optimizer is
``opx.wrap_transformation_as_pytree_with_state``: hyperparameters and state
in one pytree, held by the train state as ``nnx.data``. Its learning rate is
an array under ``nnx.jit``, changed mid-training without recompiling.

Run:  python examples/flax_nnx.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a few steps)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from _shared import SMOKE
from flax import nnx

import optax_pytree as opx

STEPS_PER_PHASE = 5 if SMOKE else 300
LEARNING_RATES = (1e-2, 3e-3, 1e-3)  # a hand-made step schedule, set from Python


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(1, 32, rngs=rngs)
        self.out = nnx.Linear(32, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))


class TrainState(nnx.Module):
    """The model and its optimizer; ``nnx.data`` makes the optimizer's arrays nnx state."""

    def __init__(self, model: MLP, opt: Any):
        self.model = model
        params = nnx.as_pure(nnx.state(model, nnx.Param))
        self.opt = nnx.data(opt.init(params))


def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


traces = 0


@nnx.jit
def train_step(ts: TrainState, x: jax.Array, y: jax.Array) -> jax.Array:
    global traces
    traces += 1  # runs once per trace, not per step
    loss, grads = nnx.value_and_grad(loss_fn)(ts.model, x, y)
    params = nnx.as_pure(nnx.state(ts.model, nnx.Param))
    params, ts.opt = ts.opt.apply_gradients(nnx.as_pure(grads), params)
    nnx.update(ts.model, params)
    return loss


def main() -> None:
    x = jnp.linspace(-2.0, 2.0, 128)[:, None]
    y = jnp.sin(2.0 * x)
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adamw, learning_rate=LEARNING_RATES[0])
    ts = TrainState(MLP(nnx.Rngs(0)), opt)
    loss = loss_fn(ts.model, x, y)
    print(f"initial loss {float(loss):.4f}")
    for lr in LEARNING_RATES:
        ts.opt = ts.opt.replace(learning_rate=lr)  # new value, same state, same program
        for _ in range(STEPS_PER_PHASE):
            loss = train_step(ts, x, y)
        print(f"lr={lr:g}: loss {float(loss):.4f} after step {int(ts.opt.state[0].count)}")
    print(f"traces of train_step: {traces}")
    assert traces == 1


if __name__ == "__main__":
    main()
