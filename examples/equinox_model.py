"""Training an equinox model with a stateful wrapped optimizer under ``eqx.filter_jit``.

``eqx.filter_jit`` traces arrays and keeps everything else static. A plain
optax optimizer is a pair of closures, hence static: a new learning rate is a
new optimizer, a new static argument and a new compilation. A wrapped one
stores its hyperparameters as arrays, so ``filter_jit`` traces them: the
learning rate changes mid-training and the step is traced once.

Run:  python examples/equinox_model.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a few steps)
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from _shared import SMOKE, phase, progress

import optax_pytree as opx

STEPS_PER_PHASE = 5 if SMOKE else 300
LEARNING_RATES = (1e-2, 3e-3, 1e-3)


class TrainState(eqx.Module):
    model: eqx.nn.MLP
    opt: Any  # a PyTreeTransformationWithState: hyperparameters and optimizer state


def loss_fn(model: eqx.nn.MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


traces = 0


@eqx.filter_jit
def train_step(ts: TrainState, x: jax.Array, y: jax.Array) -> tuple[TrainState, jax.Array]:
    global traces
    traces += 1  # runs once per trace, not per step
    loss, grads = eqx.filter_value_and_grad(loss_fn)(ts.model, x, y)
    updates, opt = ts.opt.update(grads, eqx.filter(ts.model, eqx.is_inexact_array))
    return TrainState(eqx.apply_updates(ts.model, updates), opt), loss


def main() -> None:
    x = jnp.linspace(-2.0, 2.0, 128)[:, None]
    y = jnp.sin(2.0 * x)
    model = eqx.nn.MLP(1, 1, width_size=32, depth=1, activation=jnp.tanh, key=jax.random.key(0))
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adamw, learning_rate=LEARNING_RATES[0])
    ts = TrainState(model, opt.init(eqx.filter(model, eqx.is_inexact_array)))
    print(f"initial loss {float(loss_fn(ts.model, x, y)):.4f}")
    for lr in LEARNING_RATES:
        with phase(f"{STEPS_PER_PHASE} steps at lr={lr:g}"):
            ts = eqx.tree_at(lambda t: t.opt, ts, ts.opt.replace(learning_rate=lr))
            loss = jnp.nan
            for _ in progress(range(STEPS_PER_PHASE), f"lr={lr:g}", unit="step"):
                ts, loss = train_step(ts, x, y)
            print(f"lr={lr:g}: loss {float(loss):.4f} after step {int(ts.opt.state[0].count)}")
    print(f"traces of train_step: {traces}")
    assert traces == 1


if __name__ == "__main__":
    main()
