"""What a hyperparameter read at run time costs a step in a loop, without the library.

A hand-written adam step in a ``lax.scan`` (1,000 steps; 1,024 or 101,386
parameters, the gradient ``sin(p) * 0.1``), its five hyperparameters
constants of the program or arguments of it, one more at a time; then the
five as one packed vector, as one vector behind an ``optimization_barrier``
with the step's count (so that XLA cannot move its slices out of the loop),
and as arguments each computed in the step (``launder``: ``x - count * 0``,
the library's treatment on a TPU, ``optax_pytree/_backends.py``). Then the
same with a warmup-cosine schedule of six more arguments (``S``: 11 values).
Each case's numbers are checked against the arguments' own, bit for bit.
Wall time per step, calls taken in turn (ABBA), median of 15::

    python benchmarks/scalar_probe.py 1024

Measured on a TPU v5e (jax 0.10.2, 2026-12-06), at 1,024 parameters: constants
1.53 µs a step; 1 argument (the learning rate) 1.55, 2: 2.32, 3: 3.02, 4:
3.75, 5: 4.50; packed 4.82; each laundered 3.39. At 101,386: 4.88, 4.87,
5.41, 6.07, 6.88, 7.51; packed 7.87; laundered 6.52. So on that chip each
hyperparameter read at run time costs the step about 0.7 µs (all but the
first), whatever reads it: optax's ``inject_hyperparams`` pays it as the
wrapped optimizer once did. Computed in the step, about 0.35 µs. On
2026-12-07 (two runs): 5 behind a barrier 5.91 and 6.08 (9.02, 9.25); with
the schedule, constants 1.84 (5.11), 5 arguments 4.69 (7.90), 11 arguments
8.20 (11.35), 11 laundered 5.81 (9.04), 11 behind a barrier 11.22 (14.43).
On the CPU the rows are within noise of each other.
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
from jax import lax

NAMES: tuple[str, ...] = (
    "lr",
    "b1",
    "b2",
    "eps",
    "eps_root",
    "init",
    "peak",
    "warmup",
    "decay",
    "end",
    "exponent",
)
VALUES: dict[str, float] = dict(zip(NAMES, (1e-3, 0.9, 0.999, 1e-8, 0.0, 0.0, 1e-3, 10.0, 1000.0, 0.0, 1.0)))
STEPS = 1000


def _learning_rate(h: dict[str, Any], t: Any) -> Any:
    """A warmup-cosine schedule of ``h``'s six schedule values at step ``t``."""
    warm = h["init"] + (h["peak"] - h["init"]) * (jnp.minimum(t, h["warmup"]) / h["warmup"])
    d = jnp.minimum(t - h["warmup"], h["decay"])
    cosine = 0.5 * (1 + jnp.cos(np.pi * d / h["decay"]))
    alpha = h["end"] / h["peak"]
    decayed = (1 - alpha) * jnp.where(h["exponent"] == 1, cosine, cosine ** h["exponent"]) + alpha
    return jnp.where(t < h["warmup"], warm, h["peak"] * decayed)


def step(p: Any, s: Any, h: dict[str, Any], schedule: bool) -> tuple[Any, Any]:
    count, mu, nu = s
    g = jax.tree.map(lambda x: jnp.sin(x) * 0.1, p)
    count = count + 1
    t = count.astype(jnp.float32)
    b1, b2 = h["b1"], h["b2"]
    mu = jax.tree.map(lambda m, x: b1 * m + (1 - b1) * x, mu, g)
    nu = jax.tree.map(lambda n, x: b2 * n + (1 - b2) * x * x, nu, g)
    c1, c2 = 1 - 0.9**t, 1 - 0.999**t
    lr = _learning_rate(h, t) if schedule else h["lr"]
    u = jax.tree.map(lambda m, n: -lr * (m / c1) / (jnp.sqrt(n / c2 + h["eps_root"]) + h["eps"]), mu, nu)
    return jax.tree.map(lambda a, b: a + b, p, u), (count, mu, nu)


def program(dynamic: tuple[str, ...], mode: str, schedule: bool) -> tuple[Callable[..., Any], Any]:
    """The jitted function's body and its hyperparameter argument."""

    def run(p: Any, s: Any, args: Any) -> Any:
        def body(carry: Any, _: Any) -> Any:
            p, s = carry
            h: dict[str, Any] = dict(VALUES)
            a = lax.optimization_barrier((args, s[0]))[0] if mode == "barrier" else args
            zero = s[0].astype(jnp.float32) * np.float32(0.0)
            for i, k in enumerate(dynamic):
                x = a[i] if mode in ("packed", "barrier") else a[k]
                h[k] = x - zero if mode == "launder" else x
            return step(p, s, h, schedule), None

        return jax.lax.scan(body, (p, s), None, length=STEPS)[0]

    if mode in ("packed", "barrier"):
        return run, jnp.asarray([VALUES[k] for k in dynamic], jnp.float32)
    return run, {k: jnp.float32(VALUES[k]) for k in dynamic}


def cases() -> dict[str, tuple[tuple[str, ...], str, bool]]:
    """name -> (the dynamic hyperparameters, how they are read, with the schedule)."""
    out: dict[str, tuple[tuple[str, ...], str, bool]] = {"constants": ((), "plain", False)}
    for n in range(1, 6):
        out[f"{n} argument{'s' if n > 1 else ''}"] = (NAMES[:n], "plain", False)
    for mode in ("packed", "barrier", "launder"):
        out[f"5 {mode}"] = (NAMES[:5], mode, False)
    out["S constants"] = ((), "plain", True)
    out["S 5 arguments"] = (NAMES[:5], "plain", True)
    out["S 11 arguments"] = (NAMES, "plain", True)
    for mode in ("barrier", "launder"):
        out[f"S 11 {mode}"] = (NAMES, mode, True)
    return out


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    p = {"w": jnp.linspace(-1.0, 1.0, size // 2), "b": jnp.linspace(0.5, -0.5, size - size // 2)}
    z = jax.tree.map(jnp.zeros_like, p)
    s = (jnp.int32(0), z, z)
    fns: dict[str, Callable[[], Any]] = {}
    results: dict[str, Any] = {}
    for name, (dynamic, mode, schedule) in cases().items():
        run, args = program(dynamic, mode, schedule)
        compiled = jax.jit(run).trace(p, s, args).lower().compile()
        results[name] = jax.block_until_ready(compiled(p, s, args))
        fns[name] = lambda c=compiled, a=args: c(p, s, a)
    for name in results:  # the same numbers as the arguments read as they are
        reference = None
        if name.startswith("S 11 "):
            reference = "S 11 arguments"
        elif name.startswith("5 "):
            reference = "5 arguments"
        if reference is not None:
            same = jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), results[name], results[reference])
            assert jax.tree.all(same), f"{name} computes other numbers than {reference}"
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
        print(f"  {k:16s} {m * 1e6 / STEPS:7.2f} µs a step ({m / base:5.2f})")


if __name__ == "__main__":
    main()
