"""What the examples share: the smoke-test switch, where plots go, a small MLP on a 1-d task."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Reduced sizes (a few steps) when run as a test: OPTAX_PYTREE_SMOKE=1 or --smoke.
SMOKE = "--smoke" in sys.argv or os.environ.get("OPTAX_PYTREE_SMOKE", "") not in ("", "0")
OUTPUT = Path(__file__).resolve().parent / "output"


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, name: str) -> None:
    """Writes ``fig`` to ``examples/output/name`` and closes it."""
    OUTPUT.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(OUTPUT / name, dpi=120)
    pyplot().close(fig)
    print(f"wrote {OUTPUT / name}")


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


def mse(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean squared error of the MLP on ``(x, y)``."""
    return jnp.mean((mlp(params, x) - y) ** 2)
