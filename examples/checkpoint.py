"""Checkpointing a stateful wrapped optimizer with orbax, and resuming exactly.

The optimizer (hyperparameters and state) is one pytree, saved with the
parameters by ``opx.save_checkpoint`` (an orbax ``StandardCheckpointer`` save
plus the static configuration in the checkpoint's metadata). A fresh "process"
rebuilds a template the same way and ``opx.restore_checkpoint`` fills it:
training then goes on bit for bit as if it had never stopped, without
retracing the jitted step. A template of another configuration (here
``nesterov=True``) is refused, where plain orbax would restore into it
silently.

Run:  python examples/checkpoint.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a few steps)
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _shared import SMOKE, phase, progress

import optax_pytree as opx

STEPS = 6 if SMOKE else 200

X = jnp.linspace(-2.0, 2.0, 64)[:, None]
Y = jnp.sin(2.0 * X)


def init_params() -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "w1": jax.random.normal(k1, (1, 32)),
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32, 1)) / jnp.sqrt(32.0),
        "b2": jnp.zeros(1),
    }


def loss_fn(params: dict[str, jax.Array]) -> jax.Array:
    hidden = jnp.tanh(X @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - Y) ** 2)


def make_optimizer(nesterov: bool = False) -> Any:
    """How every process builds the optimizer (the template's configuration)."""
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-2, STEPS // 10, STEPS)
    return opx.wrap_transformation_as_pytree_with_state(
        optax.chain,
        opx.wrap(optax.clip_by_global_norm, 1.0),
        opx.wrap(optax.adamw, schedule, weight_decay=1e-4, nesterov=nesterov),
    )


traces = 0


@jax.jit
def train_step(train_state: dict[str, Any]) -> dict[str, Any]:
    global traces
    traces += 1
    params, opt = train_state["params"], train_state["opt"]
    params, opt = opt.apply_gradients(jax.grad(loss_fn)(params), params)
    return {"params": params, "opt": opt}


def fresh_state() -> dict[str, Any]:
    params = init_params()
    return {"params": params, "opt": make_optimizer().init(params)}


def main() -> None:
    # The reference: STEPS steps in one go.
    with phase(f"uninterrupted run: {STEPS} steps"):
        uninterrupted = fresh_state()
        for _ in progress(range(STEPS), "uninterrupted", unit="step"):
            uninterrupted = train_step(uninterrupted)
        jax.block_until_ready(uninterrupted)

    # The same run, stopped half way and saved...
    with phase(f"interrupted run: first {STEPS // 2} steps"):
        state = fresh_state()
        for _ in progress(range(STEPS // 2), "first half", unit="step"):
            state = train_step(state)
        jax.block_until_ready(state)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "step_half")
        with phase("save, then restore into a fresh template"):
            opx.save_checkpoint(path, state)
            print(f"saved at step {int(state['opt'].state[1][0].count)}")

            # ... and restored into a template built afresh (shapes and static
            # configuration only; jax.eval_shape(fresh_state) would do as well).
            restored = opx.restore_checkpoint(path, fresh_state())
        with phase("restore into a template of another configuration (nesterov=True)"):
            try:
                template = fresh_state()
                template["opt"] = make_optimizer(nesterov=True).init(template["params"])
                opx.restore_checkpoint(path, template)
            except ValueError as e:
                print(f"a template of another configuration is refused:\n{e}")

    with phase(f"resumed run: last {STEPS - STEPS // 2} steps"):
        for _ in progress(range(STEPS - STEPS // 2), "second half", unit="step"):
            restored = train_step(restored)
        jax.block_until_ready(restored)
    for a, b in zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(uninterrupted)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    print(
        f"resumed run equals the uninterrupted one bit for bit; loss {float(loss_fn(restored['params'])):.5f}"
    )
    print(f"traces of train_step: {traces}")
    assert traces == 1


if __name__ == "__main__":
    main()
