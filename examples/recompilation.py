"""optax issue #197, reproduced and fixed.

An optax optimizer is a pair of closures, not a pytree. To pass one to a
jitted function it must be a static argument, and a static argument is hashed
by identity: every new ``optax.adam(lr)`` object is a new program, compiled
again, even when the learning rate is the same. Wrapped with optax_pytree the
optimizer is an ordinary argument: its hyperparameters are leaves, and a new
learning rate is new data for the same program.

Progress (each phase, a bar with the running count of compilations) goes
to the terminal as it runs; the four-line summary is printed at the end.

Run:  python examples/recompilation.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: 5 optimizers)
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import optax
from _shared import SMOKE, phase, progress

import optax_pytree as opx

N = 5 if SMOKE else 100


def loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def init_params(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (8, 32)) / jnp.sqrt(8.0),
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32, 1)) / jnp.sqrt(32.0),
        "b2": jnp.zeros(1),
    }


compilations = {"static": 0, "wrapped": 0}


def steps(opt: Any, params: Any, x: jax.Array, y: jax.Array) -> Any:
    """Ten optimizer steps (the body shared by both versions)."""
    state = opt.init(params)

    def body(carry: Any, _: Any) -> Any:
        params, state = carry
        updates, state = opt.update(jax.grad(loss)(params, x, y), state, params)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(body, (params, state), None, length=10)
    return loss(params, x, y)


# The usual work-around today: the optimizer as a static argument.
@functools.partial(jax.jit, static_argnums=0)
def train_static(opt: optax.GradientTransformation, params: Any, x: jax.Array, y: jax.Array) -> Any:
    compilations["static"] += 1  # runs once per trace, i.e. per compilation
    return steps(opt, params, x, y)


# With optax_pytree: the optimizer is an ordinary argument.
@jax.jit
def train_wrapped(opt: Any, params: Any, x: jax.Array, y: jax.Array) -> Any:
    compilations["wrapped"] += 1
    return steps(opt, params, x, y)


def main() -> None:
    key_x, key_p = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(key_x, (64, 8))
    y = jnp.sin(x.sum(axis=1, keepdims=True))
    params = init_params(key_p)
    learning_rates = jnp.logspace(-4, -1, N).tolist()

    def sweep(kind: str, make: Any, train: Any) -> tuple[list[jax.Array], float]:
        """One ``train(make(lr), ...)`` call per learning rate, timed, with a bar counting compilations."""
        start = time.perf_counter()
        losses = []
        with progress(learning_rates, f"{kind} loop", unit="lr") as bar:
            for lr in bar:
                losses.append(train(make(lr), params, x, y))
                bar.set_postfix(compilations=compilations[kind], refresh=False)
            jax.block_until_ready(losses)
        return losses, time.perf_counter() - start

    with phase(f"optax, optimizer as a static argument ({N} learning rates)"):
        static_losses, static_time = sweep("static", optax.adam, train_static)
    with phase(f"optax_pytree, optimizer as an argument ({N} learning rates)"):
        wrapped_losses, wrapped_time = sweep(
            "wrapped", lambda lr: opx.wrap(optax.adam, learning_rate=lr), train_wrapped
        )
    print()

    worst = max(abs(float(a) - float(b)) for a, b in zip(static_losses, wrapped_losses))
    print(f"{N} learning rates, adam, 10 steps each")
    static, wrapped = compilations["static"], compilations["wrapped"]
    print(f"  optax, optimizer as a static argument:  {static:3d} compilations, {static_time:6.2f} s")
    print(f"  optax_pytree, optimizer as an argument: {wrapped:3d} compilation,  {wrapped_time:6.2f} s")
    print(f"  speed-up {static_time / wrapped_time:.1f}x; largest difference in final loss {worst:.1e}")
    assert compilations["wrapped"] == 1 and compilations["static"] == N


if __name__ == "__main__":
    main()
