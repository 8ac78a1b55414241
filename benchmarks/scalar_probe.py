"""What a hyperparameter read at run time costs a step in a loop, without the library.

A hand-written adam step in a ``lax.scan`` (1,000 steps; 1,024 or 101,386
parameters, the gradient ``sin(p) * 0.1``), its five hyperparameters
constants of the program or arguments of it, one more at a time; then the
five as one packed vector, and as arguments each passed through a scalar
operation in the loop (``launder``: ``x + count * 0``, computed in every
step). Wall time per step, calls taken in turn (ABBA), median of 15::

    python benchmarks/scalar_probe.py 1024

Measured on a TPU v5e (jax 0.10.2, 2026-12-06), at 1,024 parameters: constants
1.53 µs a step; 1 argument (the learning rate) 1.55, 2: 2.32, 3: 3.02, 4:
3.75, 5: 4.50; packed 4.82; each laundered 3.39. At 101,386: 4.88, 4.87,
5.41, 6.07, 6.88, 7.51; packed 7.87; laundered 6.52. So on that chip each
hyperparameter read at run time costs the step about 0.7 µs (all but the
first), whatever reads it: optax's ``inject_hyperparams`` pays it as the
wrapped optimizer does. On the CPU the rows are within noise of each other.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

NAMES = ("lr", "b1", "b2", "eps", "eps_root")
VALUES = {"lr": 1e-3, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0}
STEPS = 1000


def step(p: Any, s: Any, h: dict[str, Any]) -> tuple[Any, Any]:
    count, mu, nu = s
    g = jax.tree.map(lambda x: jnp.sin(x) * 0.1, p)
    count = count + 1
    t = count.astype(jnp.float32)
    b1, b2 = h["b1"], h["b2"]
    mu = jax.tree.map(lambda m, x: b1 * m + (1 - b1) * x, mu, g)
    nu = jax.tree.map(lambda n, x: b2 * n + (1 - b2) * x * x, nu, g)
    c1, c2 = 1 - 0.9**t, 1 - 0.999**t
    u = jax.tree.map(lambda m, n: -h["lr"] * (m / c1) / (jnp.sqrt(n / c2 + h["eps_root"]) + h["eps"]), mu, nu)
    return jax.tree.map(lambda a, b: a + b, p, u), (count, mu, nu)


def program(dynamic: tuple[str, ...], mode: str) -> tuple[Callable[..., Any], Any]:
    """The jitted function's body and its hyperparameter argument."""

    def run(p: Any, s: Any, args: Any) -> Any:
        def body(carry: Any, _: Any) -> Any:
            p, s = carry
            h: dict[str, Any] = dict(VALUES)
            for i, k in enumerate(dynamic):
                x = args[i] if mode == "packed" else args[k]
                h[k] = x + s[0].astype(jnp.float32) * np.float32(0.0) if mode == "launder" else x
            return step(p, s, h), None

        return jax.lax.scan(body, (p, s), None, length=STEPS)[0]

    if mode == "packed":
        return run, jnp.asarray([VALUES[k] for k in dynamic], jnp.float32)
    return run, {k: jnp.float32(VALUES[k]) for k in dynamic}


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    p = {"w": jnp.linspace(-1.0, 1.0, size // 2), "b": jnp.linspace(0.5, -0.5, size - size // 2)}
    z = jax.tree.map(jnp.zeros_like, p)
    s = (jnp.int32(0), z, z)
    cases: dict[str, tuple[tuple[str, ...], str]] = {"constants": ((), "plain")}
    for n in range(1, 6):
        cases[f"{n} argument{'s' if n > 1 else ''}"] = (NAMES[:n], "plain")
    cases["5 packed"] = (NAMES, "packed")
    cases["5 laundered"] = (NAMES, "launder")
    fns: dict[str, Callable[[], Any]] = {}
    for name, (dynamic, mode) in cases.items():
        run, args = program(dynamic, mode)
        compiled = jax.jit(run).trace(p, s, args).lower().compile()
        jax.block_until_ready(compiled(p, s, args))
        fns[name] = lambda c=compiled, a=args: c(p, s, a)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(15):
        for k in list(fns) if i % 2 == 0 else list(fns)[::-1]:
            start = time.perf_counter()
            jax.block_until_ready(fns[k]())
            times[k].append(time.perf_counter() - start)
    base = statistics.median(times["constants"])
    print(f"{jax.devices()[0].device_kind}, {size:,} parameters")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"  {k:14s} {m * 1e6 / STEPS:7.2f} µs a step ({m / base:5.2f})")


if __name__ == "__main__":
    main()
