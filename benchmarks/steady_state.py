"""Section 2: steady state, and XLA's cost analysis (see ``run.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from _common import Log, Settings, cpu_ratios, paired_abba, ratios, summary
from _report import Target, cost_targets, fmt, on_median, pct, section, table
from _workload import (
    Approach,
    Workload,
    approaches,
    lowered_closure,
    lowered_closure_schedule,
    lowered_wrapped_schedule,
    lowered_wrapped_static_eps_root,
    per_config_wrapped,
    steady_closure_schedule,
    steady_inject_state,
    steady_wrapped,
    steady_wrapped_rate,
    steady_wrapped_schedule,
)

TITLE = "steady state"

B_SCHED = "(b') optax adamw + warmup-cosine schedule, closure"
D_SCHED = "(d') wrapped adamw + wrapped warmup-cosine schedule (guarded), jax.jit"
C_ALL = "(c*) optax.inject_hyperparams, its state an argument: every hyperparameter read at run time"
D_RATE = "(d*) wrapped, the learning rate its only dynamic argument (dynamic_only)"


def _cost(lowered: Any) -> dict[str, float]:
    analysis = lowered.compile().cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older jax: one dict per computation
        analysis = analysis[0]
    return {k: float(analysis[k]) for k in ("flops", "bytes accessed", "transcendentals") if k in analysis}


def _paired(
    label: str, ref_label: str, ref: Callable[[], Any], fn: Callable[[], Any], s: Settings
) -> dict[str, Any]:
    jax.block_until_ready(fn())
    t_fn, t_ref, c_fn, c_ref = paired_abba(ref, fn, s.steady_pairs)
    # None (and the reason) where process CPU time means nothing: an accelerator, a zero sample.
    cpu, why = cpu_ratios(c_fn, c_ref)
    return {
        "label": label,
        "reference": ref_label,
        "per_call_s": summary(t_fn),
        "reference_per_call_s": summary(t_ref),
        "ratio_to_ref": summary(ratios(t_fn, t_ref)),
        "cpu_ratio_to_ref": cpu,
        **({"cpu_ratio_note": why} if why else {}),
    }


def _relative(cost: dict[str, float], base: dict[str, float]) -> dict[str, float]:
    return {f"rel_diff_{k}": (cost[k] - base[k]) / base[k] for k in cost if base.get(k)}


def run(s: Settings, log: Log) -> dict[str, Any]:
    w = Workload.make(2)
    todo = approaches()
    b = next(a for a in todo if a.key == "b")
    ref = b.steady(w)
    jax.block_until_ready(ref())
    out: dict[str, Any] = {"approaches": {}, "cost": {}}
    for a in todo:
        if a.key == "b":
            continue
        row = _paired(a.label, "(b)", ref, a.steady(w), s)
        row["ratio_to_b"], row["cpu_ratio_to_b"] = row["ratio_to_ref"], row["cpu_ratio_to_ref"]
        out["approaches"][a.key] = row
        log(f"  {a.label}: ratio to (b) {fmt(row['ratio_to_ref'])}")
    # Like with like: (c) has the learning rate alone dynamic (its state, made inside the
    # jitted function, holds the other hyperparameters as constants); these two rows pair
    # every hyperparameter dynamic, and the learning rate alone, for both.
    for key, label, fn in (
        ("c_all", C_ALL, steady_inject_state(w)),
        ("d_rate", D_RATE, steady_wrapped_rate(w)),
    ):
        row = _paired(label, "(b)", ref, fn, s)
        out["approaches"][key] = row
        log(f"  {label}: ratio to (b) {fmt(row['ratio_to_ref'])}")
    ref_sched = steady_closure_schedule(w)
    jax.block_until_ready(ref_sched())
    row = _paired(D_SCHED, "(b')", ref_sched, steady_wrapped_schedule(w), s)
    out["approaches"]["d_sched"] = row
    log(f"  {D_SCHED}: ratio to (b') {fmt(row['ratio_to_ref'])}")

    base = _cost(lowered_closure(w))
    out["cost"]["b"] = {"label": "(b) optax, closure", "reference": "", **base}
    extra = Approach(
        "d_static_eps_root",
        "(d) wrapped, static_argnames=('eps_root',)",
        per_config_wrapped,
        steady_wrapped,
        lowered_wrapped_static_eps_root,
    )
    for a in [*todo, extra]:
        if a.lowered is None:
            continue
        cost = _cost(a.lowered(w))
        rel = _relative(cost, base)
        out["cost"][a.key] = {"label": a.label, "reference": "(b)", **cost, **rel}
        log(f"  XLA cost {a.label}: " + ", ".join(f"{k} {pct(v)}" for k, v in rel.items()))
    base_sched = _cost(lowered_closure_schedule(w))
    out["cost"]["b_sched"] = {"label": B_SCHED, "reference": "", **base_sched}
    cost = _cost(lowered_wrapped_schedule(w))
    rel = _relative(cost, base_sched)
    out["cost"]["d_sched"] = {"label": D_SCHED, "reference": "(b')", **cost, **rel}
    log(f"  XLA cost {D_SCHED}: " + ", ".join(f"{k} {pct(v)}" for k, v in rel.items()))
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    for key in ("d", "e"):
        a = r["approaches"][key]
        out.append(
            on_median(2, f"steady state, {a['label'][:3]} / (b)", a["ratio_to_ref"], "median ≤ 1.02", 1.02)
        )
        out += cost_targets(2, key, "(b)", r["cost"][key])
    a = r["approaches"]["d_sched"]
    out.append(
        on_median(
            2,
            "steady state, (d') adamw + guarded warmup-cosine, wrapped / (b') raw closure",
            a["ratio_to_ref"],
            "median ≤ 1.02",
            1.02,
        )
    )
    out += cost_targets(2, "d'", "(b')", r["cost"]["d_sched"])
    likes = (("every hyperparameter dynamic", "d", "c_all", "(d)", "(c*)"),
             ("the learning rate alone dynamic", "d_rate", "c", "(d*)", "(c)"))  # fmt: skip
    for what, ours, theirs, our_label, their_label in likes if "c_all" in r["approaches"] else ():
        a, b = r["approaches"][ours]["ratio_to_ref"], r["approaches"][theirs]["ratio_to_ref"]
        out.append(
            on_median(
                2,
                f"steady state, {what}: {our_label} wrapped / {their_label} inject_hyperparams",
                summary(ratios(a["samples"], b["samples"])),
                "median ≤ 1.03",
                1.03,
            )
        )
    return out


def _cpu_note(r: dict[str, Any]) -> list[str]:
    notes = sorted({a["cpu_ratio_note"] for a in r["approaches"].values() if "cpu_ratio_note" in a})
    return [f"CPU-time ratio n/a: {'; '.join(notes)}."] if notes else []


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        "## 2. Steady state (compiled; paired with the reference, ABBA)",
        "Reference: (b), raw optax adam closed over; for (d'), (b'): "
        "`optax.adamw(optax.warmup_cosine_decay_schedule(0.0, lr, 10, 100))` closed over.",
        table(
            "approach | per call (ms) | reference | reference per call (ms) | ratio to reference, wall | "
            "ratio to reference, CPU time",
            [
                [
                    a["label"],
                    fmt(a["per_call_s"], 2, 1e3),
                    a["reference"],
                    fmt(a["reference_per_call_s"], 2, 1e3),
                    fmt(a["ratio_to_ref"]),
                    fmt(a["cpu_ratio_to_ref"]) if a["cpu_ratio_to_ref"] else "n/a",
                ]
                for a in r["approaches"].values()
            ],
        ),
        *_cpu_note(r),
        "XLA cost analysis of the compiled program (noise-free):",
        table(
            "program | flops | bytes accessed | transcendentals | reference | flops vs reference | "
            "bytes vs reference",
            [
                [
                    c["label"],
                    f"{c.get('flops', 0):,.0f}",
                    f"{c.get('bytes accessed', 0):,.0f}",
                    f"{c.get('transcendentals', 0):,.0f}",
                    c["reference"],
                    pct(c["rel_diff_flops"]) if "rel_diff_flops" in c else "",
                    pct(c["rel_diff_bytes accessed"]) if "rel_diff_bytes accessed" in c else "",
                ]
                for c in r["cost"].values()
            ],
        ),
    )
