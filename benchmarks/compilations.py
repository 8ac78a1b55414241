"""Section 1: compilations and wall time for N configurations (see ``run.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import optax

from _common import COMPILES, FULL, TRACES, Log, Settings, ratios, rotated, summary
from _report import Target, check, fmt, on_median, section, table
from _workload import BATCH, STEPS, Workload, approaches

TITLE = "compilations and wall time for N configurations"


def run(s: Settings, log: Log) -> dict[str, Any]:
    w = Workload.make(s.n_configs)
    todo = approaches()
    log(f"  warm-up: {len(todo)} approaches on a toy MLP")
    tiny = Workload.tiny(1)
    for a in todo:
        jax.block_until_ready(a.per_config(tiny)(tiny.lrs[0]))
    results: dict[str, dict[str, Any]] = {
        a.key: {"label": a.label, "wall_s": [], "traces": [], "compiles": [], "compile_s": [], "compiled": []}
        for a in todo
    }
    losses: dict[str, list[float]] = {}
    for r in range(s.rounds):
        # Configuration by configuration, every approach in turn (order rotated):
        # the totals of all approaches span the same minutes, so a change of
        # load on the shared machine hits them alike.
        runs: dict[str, Callable[[float], Any]] = {}
        wall = {a.key: 0.0 for a in todo}
        found: dict[str, list[tuple[str, float]]] = {a.key: [] for a in todo}
        outs: dict[str, list[Any]] = {a.key: [] for a in todo}
        for a in todo:
            TRACES[a.key] = 0
        for i, lr in enumerate(w.lrs):
            for a in rotated(todo, r + i):
                with COMPILES.window() as events:
                    t0 = time.perf_counter()
                    if a.key not in runs:
                        runs[a.key] = a.per_config(w)
                    outs[a.key].append(jax.block_until_ready(runs[a.key](lr)))
                    wall[a.key] += time.perf_counter() - t0
                found[a.key] += events
        for a in todo:
            res = results[a.key]
            res["wall_s"].append(wall[a.key])
            res["traces"].append(TRACES[a.key])
            res["compiles"].append(len(found[a.key]))
            res["compile_s"].append(sum(d for _, d in found[a.key]))
            res["compiled"].append(sorted({name for name, _ in found[a.key]}))
            losses[a.key] = [float(o[1]) for o in outs[a.key]]
            log(
                f"  round {r + 1}/{s.rounds} {a.label}: {wall[a.key]:.2f} s, {TRACES[a.key]} traces, "
                f"{len(found[a.key])} XLA compilations ({res['compile_s'][-1]:.2f} s)"
            )
    ref = losses["b"]
    for key, res in results.items():
        res["wall"] = summary(res["wall_s"])
        res["compile_time"] = summary(res["compile_s"])
        res["ratio_to_b"] = summary(ratios(res["wall_s"], results["b"]["wall_s"]))
        res["max_abs_loss_diff_vs_b"] = max(abs(x - y) for x, y in zip(losses[key], ref))
    return {
        "n_configs": s.n_configs,
        "rounds": s.rounds,
        "n_params": int(optax.tree_utils.tree_size(w.params)),
        "approaches": results,
    }


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    r1 = r["approaches"]
    for key in ("d", "d_eqx", "e", "e_eqx"):
        if key not in r1:  # equinox not installed
            continue
        a = r1[key]
        traces, compiles = max(a["traces"]), max(a["compiles"])
        out.append(
            Target(
                1,
                f"compilations, {a['label']}",
                f"{traces} trace(s), {compiles} XLA",
                "exactly 1",
                check(traces == 1 and compiles == 1),
            )
        )
    for key in ("d", "e"):
        a = r1[key]
        out.append(
            on_median(
                1,
                f"wall time, {s.n_configs} configurations, {a['label'][:3]} / (b)",
                a["ratio_to_b"],
                f"≤ 0.12 (N = {FULL.n_configs})",
                0.12,
                na=f"quick mode: N = {s.n_configs}" if s.quick else "",
            )
        )
    return out


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        f"## 1. Compilations and wall time: {r['n_configs']} learning rates, MLP of {r['n_params']:,} "
        f"parameters, batch {BATCH}, {STEPS} steps in lax.scan ({r['rounds']} round(s))",
        table(
            "approach | traces | XLA compilations | of which compiling (s) | wall time (s) | "
            "ratio to (b) | max abs loss diff vs (b)",
            [
                [
                    a["label"],
                    max(a["traces"]),
                    max(a["compiles"]),
                    fmt(a["compile_time"], 2),
                    fmt(a["wall"], 2),
                    fmt(a["ratio_to_b"]),
                    f"{a['max_abs_loss_diff_vs_b']:.1e}",
                ]
                for a in r["approaches"].values()
            ],
        ),
    )
