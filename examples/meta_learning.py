"""Meta-learning hyperparameters: ``jax.grad`` through unrolled training.

The wrapped optimizer is a pytree whose leaves are its hyperparameters, so
the validation loss after ``INNER_STEPS`` steps of training is a differentiable
function of them: ``jax.grad(meta_loss)(tx)`` returns a wrapped Adam whose
``learning_rate`` and ``b1`` are the hypergradients. Here an outer Adam learns
the learning rate (in log space) and b1 (as a logit) of an inner Adam that
trains a small MLP, starting from a poor guess (lr 1e-3, b1 0.2).

Writes ``examples/output/meta_learning.png``: both hyperparameters and the
validation loss over the meta-steps. Set ``OPTAX_PYTREE_SMOKE=1`` for a quick run.

Run: ``python examples/meta_learning.py``
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from _shared import SMOKE, init_mlp, mse, phase, progress, pyplot, save, target

import optax_pytree as opx

INNER_STEPS = 10 if SMOKE else 100
META_STEPS = 3 if SMOKE else 150


def make_data(key: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """Noisy samples of a 1-D function: a training set and a validation set."""
    k_train, k_val, k_noise = jax.random.split(key, 3)
    x_train = jax.random.uniform(k_train, (128, 1), minval=-2.0, maxval=2.0)
    x_val = jax.random.uniform(k_val, (128, 1), minval=-2.0, maxval=2.0)

    y_train = target(x_train) + 0.1 * jax.random.normal(k_noise, x_train.shape)
    return (x_train, y_train), (x_val, target(x_val))


def meta_loss(tx: Any, params: Any, train: Any, val: Any) -> jax.Array:
    """Validation loss after ``INNER_STEPS`` of ``tx``: a function of its hyperparameters.

    Averaged (in log space) over the last quarter of the steps, so that the
    meta-gradient rewards a stable descent rather than one lucky final step.
    """
    state = tx.init(params)

    def step(carry: Any, _: None) -> tuple[Any, jax.Array]:
        params, state = carry
        grads = jax.grad(mse)(params, *train)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        return (params, state), mse(params, *val)

    _, val_losses = jax.lax.scan(step, (params, state), None, length=INNER_STEPS)
    return jnp.mean(jnp.log(val_losses[-max(1, INNER_STEPS // 4) :]))


def to_optimizer(base: Any, meta_params: dict[str, jax.Array]) -> Any:
    """The wrapped Adam for unconstrained meta-parameters: lr = exp(.), b1 = sigmoid(.)."""
    return base.replace(
        learning_rate=jnp.exp(meta_params["log_learning_rate"]),
        b1=jax.nn.sigmoid(meta_params["logit_b1"]),
    )


def main() -> dict[str, list[float]]:
    train, val = make_data(jax.random.key(0))
    params = init_mlp(jax.random.key(1))
    base = opx.wrap(optax.adam, learning_rate=1e-3, b1=0.2)

    # The hypergradient itself: a wrapped Adam whose leaves are d(meta_loss)/d(hyperparameter).
    with phase(f"hypergradient through {INNER_STEPS} unrolled steps (compile and run)"):
        hypergradient = jax.jit(jax.grad(meta_loss))(base, params, train, val)
        jax.block_until_ready(hypergradient)
    print(
        f"d meta_loss / d learning_rate = {float(hypergradient.learning_rate):+.3g}, "
        f"d meta_loss / d b1 = {float(hypergradient.b1):+.3g} at lr=1e-3, b1=0.2"
    )

    # Learn both, with a meta-optimizer over unconstrained parameters; the
    # gradient flows through base.replace(...) into the wrapped optimizer.
    # Strongly typed float32: the hyperparameter leaves are weakly typed, and a
    # weak carry would turn strong after the first update (a second trace).
    meta_params = {
        "log_learning_rate": jnp.log(base.learning_rate).astype(jnp.float32),
        "logit_b1": jnp.log(base.b1 / (1 - base.b1)).astype(jnp.float32),
    }
    meta_opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1))
    meta_state = meta_opt.init(meta_params)
    traces = 0

    @jax.jit
    def meta_step(meta_params: Any, meta_state: Any) -> tuple[Any, Any, jax.Array]:
        nonlocal traces
        traces += 1
        value, grads = jax.value_and_grad(lambda m: meta_loss(to_optimizer(base, m), params, train, val))(
            meta_params
        )
        updates, meta_state = meta_opt.update(grads, meta_state)
        return optax.apply_updates(meta_params, updates), meta_state, value

    history: dict[str, list[float]] = {"learning_rate": [], "b1": [], "val_loss": []}
    with phase(f"{META_STEPS} meta-steps of {INNER_STEPS} inner steps each (the first compiles)"):
        with progress(range(META_STEPS), "meta-steps", unit="step") as bar:
            for _ in bar:
                tx = to_optimizer(base, meta_params)
                meta_params, meta_state, value = meta_step(meta_params, meta_state)
                history["learning_rate"].append(float(tx.learning_rate))
                history["b1"].append(float(tx.b1))
                history["val_loss"].append(float(jnp.exp(value)))
                bar.set_postfix(
                    lr=f"{history['learning_rate'][-1]:.2e}",
                    b1=f"{history['b1'][-1]:.2f}",
                    val_loss=f"{history['val_loss'][-1]:.4f}",
                    refresh=False,
                )
    assert traces == 1

    tx = to_optimizer(base, meta_params)
    first, last = history["val_loss"][0], history["val_loss"][-1]
    print(
        f"after {META_STEPS} meta-steps: learning_rate {history['learning_rate'][0]:.2e} -> "
        f"{float(tx.learning_rate):.2e}, b1 {history['b1'][0]:.2f} -> {float(tx.b1):.2f}; "
        f"validation loss {first:.4f} -> {last:.4f} (one compilation)"
    )
    with phase("plot"):
        plot(history)
    return history


def plot(history: dict[str, list[float]]) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    titles = {
        "learning_rate": "learning rate",
        "b1": "b1",
        "val_loss": f"validation loss after {INNER_STEPS} steps",
    }
    for ax, (key, title) in zip(axes, titles.items()):
        ax.plot(history[key])
        ax.set(xlabel="meta-step", title=title, yscale="linear" if key == "b1" else "log")
    fig.suptitle("Hyperparameters learned by jax.grad through unrolled training")
    save(fig, "meta_learning.png")


if __name__ == "__main__":
    main()
