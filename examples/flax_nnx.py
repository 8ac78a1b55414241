"""Training a flax.nnx model with ``optax_pytree.nnx.Optimizer`` under ``nnx.jit``.

``nnx.Optimizer`` keeps its ``tx`` as a static attribute: a plain optax
optimizer is baked into the compiled step, so a new learning rate means a new
optimizer (and a new compilation), and a wrapped one is refused there
("Found data ... assigned to static attribute 'tx'"). ``optax_pytree.nnx.Optimizer``
is the one-line replacement: same constructor, same ``update(model, grads)``,
and its transformation's hyperparameters are nnx variables, traced by
``nnx.jit``. The learning rate changes mid-training without recompiling.

Run:  python examples/flax_nnx.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a few steps)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from _shared import SMOKE, phase, progress
from flax import nnx

import optax_pytree as opx
from optax_pytree.nnx import Optimizer

STEPS_PER_PHASE = 5 if SMOKE else 300
LEARNING_RATES = (1e-2, 3e-3, 1e-3)  # a hand-made step schedule, set from Python


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(1, 32, rngs=rngs)
        self.out = nnx.Linear(32, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))


def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


traces = 0


@nnx.jit
def train_step(model: MLP, optimizer: Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    global traces
    traces += 1  # runs once per trace, not per step
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def main() -> None:
    x = jnp.linspace(-2.0, 2.0, 128)[:, None]
    y = jnp.sin(2.0 * x)
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adamw, learning_rate=LEARNING_RATES[0]), wrt=nnx.Param)
    print(f"initial loss {float(loss_fn(model, x, y)):.4f}", flush=True)
    for lr in LEARNING_RATES:
        with phase(f"{STEPS_PER_PHASE} steps at lr={lr:g}"):
            optimizer.set_hyperparams(learning_rate=lr)  # new value, same state, same program
            loss = jnp.nan
            for _ in progress(range(STEPS_PER_PHASE), f"lr={lr:g}", unit="step"):
                loss = train_step(model, optimizer, x, y)
            print(f"lr={lr:g}: loss {float(loss):.4f} after step {int(optimizer.step[...])}", flush=True)
    print(f"traces of train_step: {traces}")
    assert traces == 1


if __name__ == "__main__":
    main()
