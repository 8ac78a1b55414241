"""Section 4: construction (see ``run.py``)."""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Iterator
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optax_pytree as opx
from _common import Log, Settings, interleaved, micro_clock, ratios, summary
from _report import Target, fmt, on_median, section, table, us
from optax_pytree import _wrap

TITLE = "construction"

# The guarded schedule: ``peak_value``, ``warmup_steps`` and ``decay_steps``
# are compared in Python by optax; they stay leaves, the outcomes are static.
WARMUP, DECAY = 100, 10_000
SCHEDULE = "warmup-cosine"


def _wrap_schedule(peak: float) -> Any:
    return opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, peak, WARMUP, DECAY)


def _raw_schedule(peak: float) -> Any:
    return optax.warmup_cosine_decay_schedule(0.0, peak, WARMUP, DECAY)


# Waited for: the leaves, which a wrap makes at their first use (here), as
# ``inject_hyperparams`` makes its arrays at ``init``.
WRAP_LEAVES = "wrap (cached) + its leaves made"
# What a builder called once per trial pays before its first step: the object,
# its state, and every array of both made (waited for).
WRAP_INIT_LEAVES = "wrap + init + its leaves made"
# The rows that make arrays; the others are construction alone (nothing to wait for).
WAITED = frozenset(
    (WRAP_LEAVES, WRAP_INIT_LEAVES, "wrap + init", "optax.adam + init", "inject_hyperparams + init")
)

FIRST_ADAM = "wrap (first call for the factory)"
FIRST_SCHEDULE = f"wrap {SCHEDULE} (first call for the factory)"


@dataclasses.dataclass
class Group:
    """Calls timed together with their references: an inject-style one and raw optax's.

    Every row of the group (the references included) gets a ratio to each.
    """

    inject: str
    optax: str
    calls: dict[str, Callable[[], Any]]


def _init_and_leaves(tx: Any, params: Any) -> Any:
    return tx.init(params), jax.tree_util.tree_leaves(tx)


def _groups(it: Iterator[float], params: Any) -> list[Group]:
    # inject_hyperparams expects a transformation factory: given a schedule it
    # binds the arguments, and fails only at init. Its construction is the
    # reference for what binding the same arguments costs optax's own wrapper.
    inject_sched = optax.inject_hyperparams(cast(Any, optax.warmup_cosine_decay_schedule))
    inject_adamw = optax.inject_hyperparams(optax.adamw)
    return [
        Group(
            "inject_hyperparams",
            "optax.adam",
            {
                "wrap (cached)": lambda: opx.wrap(optax.adam, learning_rate=next(it)),
                "optax.adam": lambda: optax.adam(next(it)),
                "inject_hyperparams": lambda: optax.inject_hyperparams(optax.adam)(learning_rate=next(it)),
                WRAP_LEAVES: lambda: jax.tree_util.tree_leaves(opx.wrap(optax.adam, learning_rate=next(it))),
            },
        ),
        Group(
            "inject_hyperparams + init",
            "optax.adam + init",
            {
                "wrap + init": lambda: opx.wrap(optax.adam, learning_rate=next(it)).init(params),
                WRAP_INIT_LEAVES: lambda: _init_and_leaves(
                    opx.wrap(optax.adam, learning_rate=next(it)), params
                ),
                "optax.adam + init": lambda: optax.adam(next(it)).init(params),
                "inject_hyperparams + init": lambda: optax.inject_hyperparams(optax.adam)(
                    learning_rate=next(it)
                ).init(params),
            },
        ),
        Group(
            f"inject_hyperparams({SCHEDULE}) [construction only]",
            f"optax {SCHEDULE}",
            {
                f"wrap {SCHEDULE} (cached)": lambda: _wrap_schedule(next(it)),
                f"optax {SCHEDULE}": lambda: _raw_schedule(next(it)),
                f"inject_hyperparams({SCHEDULE}) [construction only]": lambda: inject_sched(
                    0.0, next(it), WARMUP, DECAY
                ),
            },
        ),
        Group(
            f"inject_hyperparams(adamw)(learning_rate=optax {SCHEDULE})",
            f"optax.adamw(optax {SCHEDULE})",
            {
                f"wrap adamw(learning_rate=wrapped {SCHEDULE}) (cached)": lambda: opx.wrap(
                    optax.adamw, learning_rate=_wrap_schedule(next(it))
                ),
                f"optax.adamw(optax {SCHEDULE})": lambda: optax.adamw(_raw_schedule(next(it))),
                f"inject_hyperparams(adamw)(learning_rate=optax {SCHEDULE})": lambda: inject_adamw(
                    learning_rate=_raw_schedule(next(it))
                ),
            },
        ),
    ]


def run(s: Settings, log: Log) -> dict[str, Any]:
    lrs = [float(v) for v in np.geomspace(1e-4, 1e-2, 97)]
    it = itertools.cycle(lrs)
    first: dict[str, list[float]] = {FIRST_ADAM: [], FIRST_SCHEDULE: []}
    makers = {FIRST_ADAM: lambda lr: opx.wrap(optax.adam, learning_rate=lr), FIRST_SCHEDULE: _wrap_schedule}
    clock = micro_clock()
    for i in range(s.first_wrap_samples):
        for name in list(makers) if i % 2 == 0 else list(makers)[::-1]:
            _wrap.clear_caches()
            lr = next(it)
            t0 = clock()
            makers[name](lr)
            first[name].append(clock() - t0)
    groups = _groups(it, {"w": jnp.ones(3)})
    calls = {k: f for g in groups for k, f in g.calls.items()}
    t = interleaved(calls, s.micro_repeats, s.micro_seconds, pure=[k for k in calls if k not in WAITED])
    out: dict[str, Any] = {name: {"s": summary(v)} for name, v in first.items()}
    for g in groups:
        for name in g.calls:
            row: dict[str, Any] = {
                "s": summary(t[name]),
                "inject_reference": g.inject,
                "optax_reference": g.optax,
                "ratio_to_inject": summary(ratios(t[name], t[g.inject])),
                "ratio_to_optax": summary(ratios(t[name], t[g.optax])),
            }
            if g.optax.startswith("optax.adam +") or g.optax == "optax.adam":
                row["ratio_to_optax_adam"] = row["ratio_to_optax"]  # the key of earlier results
            out[name] = row
    for k, v in out.items():
        log(f"  {k}: {us(v['s'])} us")
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    c = r["wrap (cached)"]["ratio_to_inject"]
    out = [on_median(4, "construction, cached wrap / inject_hyperparams", c, "< 1", 1.0, operator.lt)]
    if WRAP_INIT_LEAVES in r:  # results of before 2026-12-07 have no such row
        made = r[WRAP_INIT_LEAVES]["ratio_to_inject"]
        what = "made and initialized, every array made: wrap + init + leaves / inject_hyperparams + init"
        out.append(on_median(4, what, made, "≤ 1", 1.0))
    return out


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        "## 4. Construction",
        f"The {SCHEDULE} schedule is `warmup_cosine_decay_schedule(0.0, peak, {WARMUP}, {DECAY:_})` "
        "(guarded: `peak_value`, `warmup_steps`, `decay_steps` leaves, the outcomes of optax's comparisons "
        f"static). `inject_hyperparams({SCHEDULE})` is construction only: it does not make a schedule's "
        "parameters dynamic and its result is not usable. Construction makes no array (not waited for): "
        "a wrap makes its leaves at their first use (flattened, passed to `jit`), `inject_hyperparams` "
        f"its arrays at `init`. Waited for: `{WRAP_LEAVES}` (the leaves read), the `+ init` rows, and "
        f"`{WRAP_INIT_LEAVES}`, what a builder called once per trial pays before its first step "
        "(`inject_hyperparams + init` its reference): on a TPU's host any array made and waited for "
        "costs about a millisecond.",
        table(
            "call | time (us) | ratio to inject-style reference | ratio to raw optax | references",
            [
                [
                    k,
                    us(v["s"]),
                    fmt(v["ratio_to_inject"], 2) if "ratio_to_inject" in v else "",
                    fmt(v["ratio_to_optax"], 2) if "ratio_to_optax" in v else "",
                    f"{v['inject_reference']}; {v['optax_reference']}"
                    if k.startswith("wrap") and "inject_reference" in v
                    else "",
                ]
                for k, v in r.items()
            ],
        ),
    )
