"""Section 3: dispatch overhead, flatten and unflatten (see ``run.py``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

import optax_pytree as opx
from _common import Log, Settings, compared, eqx, interleaved, ratios, summary
from _report import Target, fmt, on_median, section, stateful_parts, table, us
from _workload import plain_hyperparams, plain_tiny_step, stateful_carried, tiny_step, tree_fns

TITLE = "dispatch overhead"


def chain3() -> Any:
    return opx.wrap(
        optax.chain,
        opx.wrap(optax.clip_by_global_norm, max_norm=1.0),
        opx.wrap(optax.scale_by_adam),
        opx.wrap(optax.scale_by_learning_rate, learning_rate=1e-3),
    )


def _flatten_rows(name: str, tx: Any, s: Settings) -> dict[str, Any]:
    leaves = jax.tree_util.tree_leaves(tx)
    fns = tree_fns(tx, tuple(leaves), ref="tuple")
    t = interleaved(fns, s.micro_repeats, s.micro_seconds, pure=fns)
    return {
        "what": name,
        "n_leaves": len(leaves),
        **compared(t, "flatten", ref="tuple"),
        **compared(t, "unflatten", ref="tuple"),
    }


def run(s: Settings, log: Log) -> dict[str, Any]:
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    hp = plain_hyperparams(tx)
    params = {"w": jnp.linspace(-1.0, 1.0, 3)}
    grads = {"w": jnp.full(3, 0.1)}
    out: dict[str, Any] = {"n_hyperparameter_leaves": len(jax.tree_util.tree_leaves(tx))}
    jits: list[tuple[str, Any]] = [("jax.jit", jax.jit)]
    if eqx is not None:
        jits.append(("eqx.filter_jit", eqx.filter_jit))
    for jit_name, jit in jits:
        f, g = jit(tiny_step), jit(plain_tiny_step)
        t = interleaved(
            {"wrapped": lambda f=f: f(tx, params, grads), "plain": lambda g=g: g(hp, params, grads)},
            s.micro_repeats,
            s.micro_seconds,
        )
        out[jit_name] = {
            "wrapped_s": summary(t["wrapped"]),
            "plain_s": summary(t["plain"]),
            "ratio": summary(ratios(t["wrapped"], t["plain"])),
        }
        log(f"  dispatch under {jit_name}: ratio {fmt(out[jit_name]['ratio'])}")
    out["stateful"] = stateful_carried(params, grads, s)
    st = out["stateful"]
    extra = fmt(st["step_ratio_extra"])
    log(f"  (e) carried through jax.jit: ratio {fmt(st['step_ratio'])}, to plain + 1 array {extra}")
    out["flatten"] = [_flatten_rows("wrapped adam", tx, s), _flatten_rows("wrapped chain of 3", chain3(), s)]
    for row in out["flatten"]:
        log(
            f"  {row['what']}: flatten {us(row['flatten_s'], 2)} us, unflatten {us(row['unflatten_s'], 2)} us"
        )
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    return [
        on_median(
            3,
            "dispatch, wrapped / plain hyperparameter arrays (jax.jit)",
            r["jax.jit"]["ratio"],
            "≤ 1.0",
            1.0,
        ),
        on_median(
            3,
            "dispatch, (e) carried through jax.jit / plain (arrays, state)",
            r["stateful"]["step_ratio"],
            "≤ 1.0",
            1.0,
        ),
    ]


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        f"## 3. Dispatch: adam init + one update on 3 parameters "
        f"({r['n_hyperparameter_leaves']} hyperparameter leaves)",
        table(
            "jit | wrapped (us) | plain tuple of arrays (us) | ratio",
            [
                [j, us(r[j]["wrapped_s"]), us(r[j]["plain_s"]), fmt(r[j]["ratio"])]
                for j in ("jax.jit", "eqx.filter_jit")
                if j in r
            ],
        ),
        table(
            "pytree | leaves | flatten (us) | vs tuple | unflatten (us) | vs tuple",
            [
                [
                    row["what"],
                    row["n_leaves"],
                    us(row["flatten_s"], 2),
                    fmt(row["flatten_ratio"], 2),
                    us(row["unflatten_s"], 2),
                    fmt(row["unflatten_ratio"], 2),
                ]
                for row in r["flatten"]
            ],
        ),
        *stateful_parts([("3 floats, 1 leaf", r["stateful"])]),
    )
