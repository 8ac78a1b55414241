"""Population-based training (PBT) inside one jitted function.

A population of wrapped Adam optimizers is one batched pytree, so every PBT
operation is a tree operation on it:

- *train*: ``jax.vmap`` over the members, ``STEPS_PER_ROUND`` steps each;
- *exploit*: the worst quarter copies the parameters, optimizer state and
  hyperparameters of the best quarter: ``opx.index(population, parents)``
  with an integer array, the same gather for every pytree;
- *explore*: the copies perturb their learning rate and b1:
  ``population.replace(learning_rate=..., b1=...)`` with batched values.

All rounds run in a ``jax.lax.scan`` inside one ``jax.jit``: one compilation,
no Python in the loop. Compared with the same population trained without
exploit/explore (a random search, also one call).

Writes ``examples/output/population_based_training.png``. Set
``OPTAX_PYTREE_SMOKE=1`` for a quick run.

Run: ``python examples/population_based_training.py``
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _shared import SMOKE, init_mlp, mse, phase, pyplot, save, target

import optax_pytree as opx

POPULATION = 4 if SMOKE else 16
ROUNDS = 2 if SMOKE else 25
STEPS_PER_ROUND = 5 if SMOKE else 40
BATCH = 32


X_VAL = jnp.linspace(-2.0, 2.0, 200)[:, None]


def validation_loss(params: Any) -> jax.Array:
    loss = mse(params, X_VAL, target(X_VAL))
    return jnp.where(jnp.isfinite(loss), loss, jnp.inf)  # a diverged member ranks last


def train_round(tx: Any, params: Any, state: Any, key: jax.Array) -> tuple[Any, Any]:
    """``STEPS_PER_ROUND`` steps of one member on fresh noisy minibatches."""

    def step(carry: Any, key: jax.Array) -> tuple[Any, None]:
        params, state = carry
        k_x, k_noise = jax.random.split(key)
        x = jax.random.uniform(k_x, (BATCH, 1), minval=-2.0, maxval=2.0)
        y = target(x) + 0.1 * jax.random.normal(k_noise, x.shape)
        grads = jax.grad(mse)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), None

    (params, state), _ = jax.lax.scan(step, (params, state), jax.random.split(key, STEPS_PER_ROUND))
    return params, state


def exploit_and_explore(
    population: Any, params: Any, state: Any, losses: jax.Array, key: jax.Array
) -> tuple[Any, Any, Any]:
    n = losses.shape[0]
    k = max(1, n // 4)
    order = jnp.argsort(losses)
    losers, winners = order[-k:], order[:k]
    # Exploit: the losers become copies of the winners (parameters, state, hyperparameters).
    parents = jnp.arange(n).at[losers].set(winners)
    population, params, state = (opx.index(tree, parents) for tree in (population, params, state))
    # Explore: the copies perturb their hyperparameters by a factor 0.8 or 1.25.
    copied = jnp.zeros(n, bool).at[losers].set(True)
    k_lr, k_b1 = jax.random.split(key)
    lr_factor = jnp.where(jax.random.bernoulli(k_lr, 0.5, (n,)), 1.25, 0.8)
    b1_factor = jnp.where(jax.random.bernoulli(k_b1, 0.5, (n,)), 1.25, 0.8)
    learning_rate = jnp.where(copied, population.learning_rate * lr_factor, population.learning_rate)
    b1 = jnp.where(copied, 1 - jnp.clip((1 - population.b1) * b1_factor, 1e-3, 1.0), population.b1)
    return population.replace(learning_rate=learning_rate, b1=b1), params, state


def run(population: Any, params: Any, key: jax.Array, pbt: bool) -> dict[str, jax.Array]:
    """All rounds; returns each round's losses and hyperparameters, member by member."""
    state = jax.vmap(lambda tx, p: tx.init(p))(population, params)

    def one_round(carry: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        population, params, state = carry
        k_train, k_explore = jax.random.split(key)
        keys = jax.random.split(k_train, POPULATION)
        params, state = jax.vmap(train_round)(population, params, state, keys)
        losses = jax.vmap(validation_loss)(params)
        record = {"loss": losses, "learning_rate": population.learning_rate, "b1": population.b1}
        if pbt:
            population, params, state = exploit_and_explore(population, params, state, losses, k_explore)
        return (population, params, state), record

    _, history = jax.lax.scan(one_round, (population, params, state), jax.random.split(key, ROUNDS))
    return history


def main() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    base = opx.wrap(optax.adam, learning_rate=1e-3)
    population = opx.stack(
        [
            base.replace(learning_rate=10 ** rng.uniform(-4, 0), b1=rng.uniform(0.0, 0.99))
            for _ in range(POPULATION)
        ]
    )
    params = jax.vmap(init_mlp)(jax.random.split(jax.random.key(0), POPULATION))
    traces = 0

    @jax.jit
    def pbt(population: Any, params: Any, key: jax.Array) -> dict[str, jax.Array]:
        nonlocal traces
        traces += 1
        return run(population, params, key, pbt=True)

    size = f"{POPULATION} members x {ROUNDS} rounds x {STEPS_PER_ROUND} steps"
    with phase(f"PBT, {size} (one jitted call: compile and run)"):
        start = time.perf_counter()
        history = jax.block_until_ready(pbt(population, params, jax.random.key(1)))
        elapsed = time.perf_counter() - start
    assert traces == 1
    with phase("baseline: the same population without exploit/explore (one jitted call)"):
        baseline = jax.jit(lambda *a: run(*a, pbt=False))(population, params, jax.random.key(1))
        baseline = jax.block_until_ready(baseline)
    history = {k: np.asarray(v) for k, v in history.items()}
    baseline = {k: np.asarray(v) for k, v in baseline.items()}

    best = int(np.argmin(history["loss"][-1]))
    print(
        f"PBT: {POPULATION} members x {ROUNDS} rounds x {STEPS_PER_ROUND} steps in one jitted call "
        f"({traces} trace, {elapsed:.1f} s with compilation)"
    )
    print(
        f"  best final validation loss: PBT {history['loss'][-1].min():.4f}, "
        f"same population without exploit/explore {baseline['loss'][-1].min():.4f}"
    )
    print(
        f"  best member at the end: learning rate {history['learning_rate'][-1, best]:.1e}, "
        f"b1 {history['b1'][-1, best]:.2f} (initial population: learning rates "
        f"{history['learning_rate'][0].min():.0e} to {history['learning_rate'][0].max():.0e})"
    )
    with phase("plot"):
        plot(history, baseline)
    return history


def plot(history: dict[str, np.ndarray], baseline: dict[str, np.ndarray]) -> None:
    plt = pyplot()
    fig, (ax_lr, ax_b1, ax_loss) = plt.subplots(1, 3, figsize=(14, 4))
    rounds = np.arange(1, ROUNDS + 1)
    ax_lr.plot(rounds, history["learning_rate"], color="tab:blue", alpha=0.5, linewidth=1)
    ax_lr.set(xlabel="round", title="learning rate of each member", yscale="log")
    ax_b1.plot(rounds, history["b1"], color="tab:green", alpha=0.5, linewidth=1)
    ax_b1.set(xlabel="round", title="b1 of each member")
    for data, label, color in ((history, "PBT", "tab:red"), (baseline, "no exploit/explore", "gray")):
        ax_loss.plot(rounds, data["loss"].min(axis=1), color=color, label=f"{label}: best")
        ax_loss.plot(
            rounds, np.median(data["loss"], axis=1), color=color, linestyle="--", label=f"{label}: median"
        )
    ax_loss.set(xlabel="round", title="validation loss", yscale="log")
    ax_loss.legend(fontsize=8)
    fig.suptitle("Population-based training in one jitted call")
    save(fig, "population_based_training.png")


if __name__ == "__main__":
    main()
