"""Section 12: one update a step of a ``lax.scan``, and its compile time (see ``run.py``).

The case that shows a per-step cost: thousands of updates in one
``lax.scan`` (reinforcement learning's whole training loops, most
hyperparameter searches, every member of a vmapped population), the
gradient a cheap function of the parameters (``sin(p) * 0.1``), so the
update is most of the step. Three optimizers (adam, adamw with a
warmup-cosine schedule, sgd) at two sizes (1,024 and 101,386 parameters):
raw optax closed over (its numbers constants of the program),
``optax.inject_hyperparams`` (its numbers arguments, optax's own dynamic
route) and the wrapped optimizer, an argument of the jitted function. Wall
time per step: a call's time over its steps, median [min-max] of calls
taken in turn (ABBA). Then the compile time (trace, lower, compile) of the
scan programs of inject_hyperparams and of the wrapped optimizer: each a new
function (nothing of it in JAX's caches; every kind was traced and compiled
once before, so no first-use cost of the process is timed), the persistent
cache off, one XLA compilation each and no cache hit checked, six rounds in
turn (two with ``--quick`` on the CPU); wrapped over inject_hyperparams. A
third kind in each round compiles the wrapped program with the package's
staged programs forgotten too (``_staged``: a configuration's first program in
the process, a builder's first trial), reported beside it.

Targets (issue 46): wrapped / inject_hyperparams per step within 10% at
1,024 parameters and 3% from 101,386 up, compile time within 10%.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

import optax_pytree as opx
from _common import (
    WALL_CLOCK,
    Log,
    Settings,
    compile_sample,
    fresh,
    interleaved,
    no_persistent_cache,
    ratios,
    summary,
)
from _report import Target, check, fmt, on_median, section, table
from optax_pytree import _staged

TITLE = "a step in a lax.scan, and its compile time"

SIZES = (1_024, 101_386)
SMALL_LIMIT, LARGE_LIMIT, COMPILE_LIMIT = 1.10, 1.03, 1.10


def _schedule(make: Callable[..., Any]) -> Any:
    return make(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000)


# name -> make(f): f(factory, *args) is plain optax's call, or opx.wrap
OPTIMIZERS: dict[str, Callable[[Callable[..., Any]], Any]] = {
    "adam": lambda f: f(optax.adam, 1e-3),
    "adamw + warmup-cosine": lambda f: f(optax.adamw, _schedule(f)),
    "sgd": lambda f: f(optax.sgd, 1e-2),
}


def _rate_alone(f: Callable[..., Any]) -> Callable[..., Any]:
    """``opx.wrap`` with the learning rate (a schedule's peak) the only dynamic argument."""

    def wrap(factory: Any, *args: Any) -> Any:
        if factory is optax.warmup_cosine_decay_schedule:
            return f(factory, *args, dynamic_only=("peak_value",))
        return f(factory, *args, dynamic_only=("learning_rate",))

    return wrap


def _inject(name: str) -> Any:
    if name == "adam":
        return optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    if name == "sgd":
        return optax.inject_hyperparams(optax.sgd)(learning_rate=1e-2)
    return optax.inject_hyperparams(optax.adamw)(learning_rate=_schedule(lambda f, *a: f(*a)))


def _params(size: int) -> dict[str, jax.Array]:
    half = size // 2
    return {"w": jnp.linspace(-1.0, 1.0, half), "b": jnp.linspace(0.5, -0.5, size - half)}


def _scan(tx: Any, params: Any, state: Any, steps: int) -> Any:
    def body(carry: Any, _: Any) -> Any:
        p, s = carry
        updates, s = tx.update(jax.tree.map(lambda x: jnp.sin(x) * 0.1, p), s, p)
        return (optax.apply_updates(p, updates), s), None

    return jax.lax.scan(body, (params, state), None, length=steps)[0]


def _programs(
    name: str, steps: int
) -> tuple[dict[str, tuple[Callable[..., Any], tuple[Any, ...]]], dict[str, Any]]:
    """kind -> (the function to jit, its arguments but the parameters and the state); kind -> its
    optimizer."""
    raw = OPTIMIZERS[name](lambda f, *a, **k: f(*a, **k))
    injected = _inject(name)
    wrapped = OPTIMIZERS[name](opx.wrap)
    rate = OPTIMIZERS[name](_rate_alone(opx.wrap))
    return {
        "raw": (lambda p, s: _scan(raw, p, s, steps), ()),
        "inject": (lambda p, s: _scan(injected, p, s, steps), ()),
        "wrapped": (lambda p, s, tx: _scan(tx, p, s, steps), (wrapped,)),
        "rate": (lambda p, s, tx: _scan(tx, p, s, steps), (rate,)),
    }, {"raw": raw, "inject": injected, "wrapped": wrapped, "rate": rate}


def _compile_samples(
    programs: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]],
    args: dict[str, tuple[Any, ...]],
    rounds: int,
) -> dict[str, list[dict[str, float]]]:
    """``rounds`` compiles of each of inject_hyperparams' and the wrapped program, in turn (order
    reversed every other round), each a new function (nothing of it in JAX's caches), the
    persistent cache off; ``cold``: the wrapped program with the package's staged programs
    forgotten as well (a configuration's first program in the process, ``_staged``)."""
    kinds = ("inject", "wrapped", "cold")
    out: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    with no_persistent_cache():
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                if kind == "cold":
                    _staged._PROGRAMS.clear()  # pyright: ignore[reportPrivateUsage]
                same = "wrapped" if kind == "cold" else kind
                out[kind].append(compile_sample(jax.jit(fresh(programs[same][0])), args[same]))
    return out


def _one(name: str, size: int, steps: int, calls: int, rounds: int, log: Log) -> dict[str, Any]:
    programs, txs = _programs(name, steps)
    params = _params(size)
    fns: dict[str, Callable[[], Any]] = {}
    args: dict[str, tuple[Any, ...]] = {}
    for kind, (fn, extra) in programs.items():
        args[kind] = (params, txs[kind].init(params), *extra)
        jitted = jax.jit(fn)
        jax.block_until_ready(jitted(*args[kind]))  # compiled and warm (and each kind traced once)
        fns[kind] = lambda jitted=jitted, a=args[kind]: jitted(*a)
    t = interleaved(fns, calls, 0.0, clock=WALL_CLOCK)
    per_step = {k: [x / steps for x in v] for k, v in t.items()}
    compiled = _compile_samples(programs, args, rounds)
    out = {
        "optimizer": name,
        "parameters": size,
        "steps": steps,
        **{f"{k}_step_s": summary(v) for k, v in per_step.items()},
        "wrapped_over_inject": summary(ratios(per_step["wrapped"], per_step["inject"])),
        "wrapped_over_raw": summary(ratios(per_step["wrapped"], per_step["raw"])),
        "rate_over_raw": summary(ratios(per_step["rate"], per_step["raw"])),
        "compile_s": {k: summary([x["total_s"] for x in v]) for k, v in compiled.items()},
        "compile_ratio": summary(
            ratios([x["total_s"] for x in compiled["wrapped"]], [x["total_s"] for x in compiled["inject"]])
        ),
        "compile_cold_ratio": summary(
            ratios([x["total_s"] for x in compiled["cold"]], [x["total_s"] for x in compiled["inject"]])
        ),
        "one_compile_each": all(
            x["compiles"] == 1 and x["cache_hits"] == 0 for v in compiled.values() for x in v
        ),
    }
    log(
        f"  {name}, {size:,} parameters: a step {_us(out['raw_step_s'])} raw, "
        f"{_us(out['inject_step_s'])} inject_hyperparams, {_us(out['wrapped_step_s'])} wrapped "
        f"(wrapped / inject {fmt(out['wrapped_over_inject'])}); the rate alone dynamic "
        f"{_us(out['rate_step_s'])} (/ raw {fmt(out['rate_over_raw'])}); compile wrapped / inject "
        f"{fmt(out['compile_ratio'])} (its staged programs forgotten {fmt(out['compile_cold_ratio'])})"
    )
    return out


def run(s: Settings, log: Log) -> dict[str, Any]:
    on_accelerator = jax.default_backend() != "cpu"
    steps = 1000 if on_accelerator else (100 if s.quick else 1000)
    calls = 15 if (on_accelerator or not s.quick) else 5
    sizes = SIZES if (on_accelerator or not s.quick) else SIZES[:1]
    rounds = 6 if (on_accelerator or not s.quick) else 2
    rows = [_one(name, size, steps, calls, rounds, log) for size in sizes for name in OPTIMIZERS]
    return {"rows": rows, "backend": jax.default_backend()}


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    del s
    out = []
    for row in r["rows"]:
        if row["optimizer"] == "sgd":
            continue
        limit = SMALL_LIMIT if row["parameters"] < 100_000 else LARGE_LIMIT
        out.append(
            on_median(
                12,
                f"a step in a scan, wrapped / inject_hyperparams: {row['optimizer']}, "
                f"{row['parameters']:,} parameters",
                row["wrapped_over_inject"],
                f"≤ {limit}",
                limit,
            )
        )
        out.append(
            on_median(
                12,
                f"compile, wrapped / inject_hyperparams: {row['optimizer']}, "
                f"{row['parameters']:,} parameters",
                row["compile_ratio"],
                f"≤ {COMPILE_LIMIT}",
                COMPILE_LIMIT,
            )
        )
    if r["rows"]:
        once = all(row.get("one_compile_each", False) for row in r["rows"])
        out.append(
            Target(
                12,
                "compile-time samples: one XLA compilation each, no persistent-cache hit",
                str(once),
                "True",
                check(once),
            )
        )
    return out


def _us(stat: dict[str, Any]) -> str:
    return f"{stat['median'] * 1e6:.2f} µs"


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        f"## 12. A step in a `lax.scan` ({r['backend']})",
        table(
            "optimizer | parameters | raw optax | inject_hyperparams | wrapped | wrapped / inject | "
            "wrapped, the rate alone dynamic | its / raw | "
            "compile (s): inject_hyperparams | wrapped | wrapped / inject | "
            "staged programs forgotten (s) | its / inject",
            [
                [
                    row["optimizer"],
                    f"{row['parameters']:,}",
                    _us(row["raw_step_s"]),
                    _us(row["inject_step_s"]),
                    _us(row["wrapped_step_s"]),
                    fmt(row["wrapped_over_inject"]),
                    _us(row["rate_step_s"]),
                    fmt(row["rate_over_raw"]),
                    fmt(row["compile_s"]["inject"], 3),
                    fmt(row["compile_s"]["wrapped"], 3),
                    fmt(row["compile_ratio"]),
                    fmt(row["compile_s"]["cold"], 3),
                    fmt(row["compile_cold_ratio"]),
                ]
                for row in r["rows"]
            ],
        ),
    )
