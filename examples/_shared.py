"""What the examples share: the smoke-test switch, progress output, where plots go, a small MLP."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:  # a test extra: the demo runs with `pip install .` alone, printing plain lines
    from tqdm import tqdm
except ImportError:  # pragma: no cover - depends on the environment
    tqdm = None

# Reduced sizes (a few steps) when run as a test: OPTAX_PYTREE_SMOKE=1 or --smoke.
SMOKE = "--smoke" in sys.argv or os.environ.get("OPTAX_PYTREE_SMOKE", "") not in ("", "0")
OUTPUT = Path(__file__).resolve().parent / "output"

# Output appears as it is printed, also when piped or captured (a pipe is block-buffered).
for _stream in (sys.stdout, sys.stderr):
    if isinstance(_stream, io.TextIOWrapper):
        _stream.reconfigure(line_buffering=True)

_START = time.perf_counter()


def log(message: str) -> None:
    """Prints ``message`` on stdout at once, after the seconds since the example started."""
    line = f"[{time.perf_counter() - _START:6.1f} s] {message}"
    if tqdm is None:
        print(line, flush=True)
    else:
        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Prints a line when the phase ``name`` starts and one, with its duration, when it ends."""
    log(f"{name} ...")
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        log(f"{name}: failed after {time.perf_counter() - start:.2f} s")
        raise
    log(f"{name}: done in {time.perf_counter() - start:.2f} s")


def progress(iterable: Iterable[Any], desc: str, *, total: int | None = None, unit: str = "it") -> Any:
    """A ``tqdm`` progress bar over ``iterable``, on stderr (stdout keeps the results).

    On a terminal it redraws ten times a second; piped or captured (as in the
    smoke tests), every few seconds, so a log does not fill with redraws.
    Without tqdm, a line on stderr every few seconds.
    """
    if tqdm is None:
        return _Lines(iterable, desc, total, unit)
    return tqdm(
        iterable,
        desc,
        total=total,
        unit=unit,
        file=sys.stderr,
        mininterval=0.1 if sys.stderr.isatty() else 3.0,
        dynamic_ncols=True,
    )


class _Lines:
    """What the examples use of a tqdm bar, as a line on stderr every few seconds."""

    def __init__(self, iterable: Iterable[Any], desc: str, total: int | None, unit: str):
        self.iterable, self.desc, self.unit = iterable, desc, unit
        self.total = total if total is not None else getattr(iterable, "__len__", lambda: None)()
        self.postfix = ""

    def __iter__(self) -> Iterator[Any]:
        last = time.perf_counter()
        for n, item in enumerate(self.iterable, 1):
            yield item
            if time.perf_counter() - last > 3.0 or n == self.total:
                last = time.perf_counter()
                of = f"/{self.total}" if self.total else ""
                print(f"{self.desc}: {n}{of} {self.unit}{self.postfix}", file=sys.stderr, flush=True)

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        del refresh
        self.postfix = "".join(f", {k}={v}" for k, v in values.items())


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


def noisy_data(key: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """Few noisy training points of :func:`target` (so weight decay matters) and a clean validation set."""
    k_x, k_noise = jax.random.split(key)
    x_train = jax.random.uniform(k_x, (48, 1), minval=-2.0, maxval=2.0)
    y_train = target(x_train) + 0.2 * jax.random.normal(k_noise, x_train.shape)
    x_val = jnp.linspace(-2.0, 2.0, 200)[:, None]
    return (x_train, y_train), (x_val, target(x_val))


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


def train_and_validate(tx: Any, params: Any, train_data: Any, val_data: Any, steps: int) -> jax.Array:
    """``steps`` full-batch steps of ``tx`` on ``train_data`` (a scan); the final validation loss."""
    import optax

    state = tx.init(params)

    def step(carry: Any, _: None) -> tuple[Any, None]:
        params, state = carry
        grads = jax.grad(mse)(params, *train_data)
        updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, state), None, length=steps)
    return mse(params, *val_data)
