"""The small model the sweep examples share: a tanh MLP on a 1-d regression task."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def target(x: jax.Array) -> jax.Array:
    """The function to fit."""
    return jnp.sin(3.0 * x) + 0.5 * x


def init_mlp(key: jax.Array, sizes: tuple[int, ...] = (1, 32, 32, 1)) -> list[dict[str, jax.Array]]:
    """A list of ``{"w", "b"}`` layers, LeCun-normal weights and zero biases."""
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (m, n)) / np.sqrt(m), "b": jnp.zeros(n)}
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """``tanh`` hidden layers, a linear output."""
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]
