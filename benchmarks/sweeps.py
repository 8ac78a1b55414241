"""Section 5: sweeps (see ``run.py``)."""

from __future__ import annotations

import operator
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optax_pytree as opx
from _common import COMPILES, FULL, Log, Settings, fresh, ratios, rotated, summary
from _report import Target, fmt, on_median, section, table
from _workload import Workload, per_config_closure, per_config_wrapped, train

TITLE = "sweeps"

KEYS = ("raw optax loop", "wrapped, Python loop", "wrapped, vmap")


def run(s: Settings, log: Log) -> dict[str, Any]:
    w = Workload.make(s.sweep_configs)

    def vmapped(w: Workload = w) -> Any:
        stacked = opx.stack([opx.wrap(optax.adam, learning_rate=lr) for lr in w.lrs])
        f = jax.jit(jax.vmap(fresh(train), in_axes=(0, None, None)))
        return jax.block_until_ready(f(stacked, w.params, w.batch))[1]

    def loop(w: Workload = w) -> Any:
        run = per_config_wrapped(w, key=None)
        return jnp.stack([jax.block_until_ready(run(lr))[1] for lr in w.lrs])

    def raw(w: Workload = w) -> Any:
        run = per_config_closure(w)
        return jnp.stack([jax.block_until_ready(run(lr))[1] for lr in w.lrs])

    fns = {"raw optax loop": raw, "wrapped, Python loop": loop, "wrapped, vmap": vmapped}
    log("  warm-up")
    tiny = Workload.tiny(s.sweep_configs)
    for f in fns.values():
        f(tiny)
    times: dict[str, list[float]] = {k: [] for k in fns}
    compiles: dict[str, list[int]] = {k: [] for k in fns}
    results: dict[str, Any] = {}
    for r in range(s.sweep_rounds):
        for k in rotated(list(fns), r):
            with COMPILES.window() as found:
                t0 = time.perf_counter()
                results[k] = np.asarray(fns[k]())
                times[k].append(time.perf_counter() - t0)
            compiles[k].append(len(found))
            log(f"  round {r + 1}/{s.sweep_rounds} {k}: {times[k][-1]:.2f} s, {len(found)} XLA compilations")
    out: dict[str, Any] = {"n_configs": s.sweep_configs, "rounds": s.sweep_rounds}
    for k in fns:
        out[k] = {
            "s": summary(times[k]),
            "compiles": compiles[k],
            "speedup_vs_raw": summary(ratios(times["raw optax loop"], times[k])),
            "max_abs_loss_diff_vs_raw": float(np.max(np.abs(results[k] - results["raw optax loop"]))),
        }
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    return [
        on_median(
            5,
            f"sweep of {s.sweep_configs} end to end, raw loop / {k}",
            r[k]["speedup_vs_raw"],
            f"≥ 5x ({FULL.sweep_configs} configurations)",
            5.0,
            operator.ge,
            digits=2,
            na=f"quick mode: {s.sweep_configs} configurations" if s.quick else "",
        )
        for k in ("wrapped, vmap", "wrapped, Python loop")
    ]


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        f"## 5. Sweep of {r['n_configs']} learning rates, end to end ({r['rounds']} round(s))",
        table(
            "approach | time (s) | XLA compilations | speedup vs raw loop | max abs loss diff",
            [
                [
                    k,
                    fmt(r[k]["s"], 2),
                    max(r[k]["compiles"]),
                    fmt(r[k]["speedup_vs_raw"], 2),
                    f"{r[k]['max_abs_loss_diff_vs_raw']:.1e}",
                ]
                for k in KEYS
            ],
        ),
    )
