"""Section 6: scaling with the parameter tree and with a chain (see ``run.py``)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

import optax_pytree as opx
from _common import Log, Settings, compared, interleaved, ratios, summary
from _report import Target, check, fmt, on_median, ratio, section, stateful_parts, table, us
from _workload import plain_hyperparams, plain_tiny_step, stateful_carried, tiny_step, tree_fns

TITLE = "scaling"


def _leafy_params(n: int) -> dict[str, jax.Array]:
    return {f"p{i:04d}": jnp.linspace(-1.0, 1.0, 8) * (1 + i % 7) for i in range(n)}


def run(s: Settings, log: Log) -> dict[str, Any]:
    rows = []
    for n in s.leaf_counts:
        params = _leafy_params(n)
        grads = jax.tree_util.tree_map(lambda x: 0.1 * x, params)
        tx = opx.wrap(optax.adam, learning_rate=1e-3)
        raw_tx = optax.adam(1e-3)
        hp = plain_hyperparams(tx)
        state = raw_tx.init(params)
        f = jax.jit(tiny_step)
        h = jax.jit(plain_tiny_step)
        g = jax.jit(lambda p, gr, raw_tx=raw_tx: tiny_step(raw_tx, p, gr))
        steady = interleaved(
            {
                "wrapped": lambda f=f, tx=tx, p=params, gr=grads: f(tx, p, gr),
                "plain": lambda h=h, hp=hp, p=params, gr=grads: h(hp, p, gr),
                "raw": lambda g=g, p=params, gr=grads: g(p, gr),
            },
            s.micro_repeats,
            s.micro_seconds * 2,
        )
        # tree_flatten of the jit arguments only.
        fns = tree_fns((tx, params, state), (hp, params, state))
        fns = {k: fns[k] for k in ("flatten", "flatten_plain")}
        flat = interleaved(fns, s.micro_repeats, s.micro_seconds, pure=fns)
        row = {
            "n_leaves": n,
            "steady_wrapped_s": summary(steady["wrapped"]),
            "steady_plain_s": summary(steady["plain"]),
            "steady_raw_s": summary(steady["raw"]),
            "steady_ratio_to_plain": summary(ratios(steady["wrapped"], steady["plain"])),
            "steady_ratio_to_raw": summary(ratios(steady["wrapped"], steady["raw"])),
            "plain_ratio_to_raw": summary(ratios(steady["plain"], steady["raw"])),
            **compared(flat, "flatten"),
            "stateful": stateful_carried(params, grads, s),
        }
        rows.append(row)
        log(f"  {n} parameter leaves, (e) carried: {fmt(row['stateful']['step_ratio'])}")
        log(
            f"  {n} parameter leaves: wrapped / plain {fmt(row['steady_ratio_to_plain'])}, "
            f"wrapped / raw {fmt(row['steady_ratio_to_raw'])}, "
            f"flatten overhead {us(row['flatten_overhead_s'], 2)} us"
        )
    chains = []
    makers = [
        (lambda: opx.wrap(optax.clip_by_global_norm, 1.0), lambda: optax.clip_by_global_norm(1.0)),
        (lambda: opx.wrap(optax.add_decayed_weights, 1e-4), lambda: optax.add_decayed_weights(1e-4)),
        (lambda: opx.wrap(optax.scale_by_adam), lambda: optax.scale_by_adam()),
        (lambda: opx.wrap(optax.scale, -1e-3), lambda: optax.scale(-1e-3)),
    ]
    for k in s.chain_lengths:
        picks = [makers[i % len(makers)] for i in range(k)]

        def wrapped_chain(picks: Any = picks) -> Any:
            return opx.wrap(optax.chain, *[m() for m, _ in picks])

        def raw_chain(picks: Any = picks) -> Any:
            return optax.chain(*[m() for _, m in picks])

        tx = wrapped_chain()
        leaves = jax.tree_util.tree_leaves(tx)
        flat = tree_fns(tx, tuple(leaves))
        del flat["unflatten_plain"]  # not reported for chains
        # Not waited for, as section 9's rebuilds: the wrap is Python work, its
        # leaves are made at first use. (Waiting for the last call of a sample
        # charged the conversion of 16 children's numbers to samples of one
        # call, and of 4 children's to samples of nine: not one cost per transform.)
        t = interleaved(
            {"wrap": wrapped_chain, "optax.chain": raw_chain, **flat},
            s.micro_repeats,
            s.micro_seconds,
            pure=[*flat, "wrap", "optax.chain"],
        )
        row = {
            "n_transforms": k,
            "n_leaves": len(leaves),
            "wrap_s": summary(t["wrap"]),
            "wrap_per_transform_s": summary([x / k for x in t["wrap"]]),
            "optax_chain_s": summary(t["optax.chain"]),
            "wrap_ratio_to_optax": summary(ratios(t["wrap"], t["optax.chain"])),
            "flatten_s": summary(t["flatten"]),
            "flatten_per_leaf_s": summary([ratio(x, len(leaves)) for x in t["flatten"]]),
            "flatten_ratio_to_tuple": summary(ratios(t["flatten"], t["flatten_plain"])),
            "unflatten_s": summary(t["unflatten"]),
        }
        chains.append(row)
        log(f"  chain of {k}: wrap {us(row['wrap_s'])} us, flatten {us(row['flatten_s'], 2)} us")
    return {"param_tree": rows, "chain": chains}


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    rows = r["param_tree"]
    for row in rows:
        out.append(
            on_median(
                6,
                f"one step, wrapped / plain arrays, {row['n_leaves']} parameter leaves",
                row["steady_ratio_to_plain"],
                "median ≤ 1.02",
                1.02,
            )
        )
    lo, hi = rows[0], rows[-1]
    growth = [
        ("flatten", "flatten of (tx, params, state)", lo, hi),
        ("flatten", "(e) flatten of opt", lo["stateful"], hi["stateful"]),
        ("unflatten", "(e) unflatten of opt", lo["stateful"], hi["stateful"]),
        ("step", "(e) carried step", lo["stateful"], hi["stateful"]),
    ]
    for key, what, a, b in growth:
        grow = b[f"{key}_overhead_s"]["median"] - a[f"{key}_overhead_s"]["median"]
        plain = b[f"{key}_plain_s"]["median"]
        allowed = 1e-6 + 0.05 * plain
        out.append(
            Target(
                6,
                f"overhead growth, {what}, {lo['n_leaves']} → {hi['n_leaves']} parameter leaves",
                f"{grow * 1e6:+.2f} us (plain: {plain * 1e6:.1f} us)",
                f"≤ 1 us + 5% of plain ({allowed * 1e6:.1f} us)",
                check(grow <= allowed),
            )
        )
    chains = r["chain"]
    mid, big = chains[-2], chains[-1]
    for key, unit in (("wrap_per_transform_s", "transform"), ("flatten_per_leaf_s", "leaf")):
        g = ratio(big[key]["median"], mid[key]["median"])
        out.append(
            Target(
                6,
                f"{key.split('_')[0]} cost per {unit}, chain of {big['n_transforms']} / of "
                f"{mid['n_transforms']}",
                f"{g:.2f}",
                "≤ 1.25 (linear growth)",
                "n/a" if math.isnan(g) else check(g <= 1.25),
                "a zero time" if math.isnan(g) else "",
            )
        )
    return out


def markdown(r: dict[str, Any]) -> list[str]:
    return section(
        "## 6. Scaling",
        "Parameter tree of n leaves of 8 floats, adam init + one update, jitted: wrapped (d), "
        "the same function with the hyperparameters as a plain tuple of arrays, and raw optax "
        "with constant hyperparameters; then `tree_flatten` of the jit arguments "
        "`(tx, params, state)` against `(tuple of hyperparameter arrays, params, state)`:",
        table(
            "leaves | (d) per call (us) | (d) / plain arrays | (d) / raw optax | "
            "plain arrays / raw optax | flatten (us) | same, plain tuple (us) | overhead (us)",
            [
                [
                    row["n_leaves"],
                    us(row["steady_wrapped_s"]),
                    fmt(row["steady_ratio_to_plain"]),
                    fmt(row["steady_ratio_to_raw"]),
                    fmt(row["plain_ratio_to_raw"]),
                    us(row["flatten_s"]),
                    us(row["flatten_plain_s"]),
                    us(row["flatten_overhead_s"], 2),
                ]
                for row in r["param_tree"]
            ],
        ),
        *stateful_parts([(f"{row['n_leaves']} leaves", row["stateful"]) for row in r["param_tree"]]),
        "Wrapped `optax.chain` of k transforms (cached wrap of the children and the chain; not "
        "waited for: the leaves are made at first use):",
        table(
            "k | leaves | wrap (us) | per transform (us) | optax.chain (us) | flatten (us) | "
            "per leaf (us) | flatten vs tuple | unflatten (us)",
            [
                [
                    row["n_transforms"],
                    row["n_leaves"],
                    us(row["wrap_s"]),
                    us(row["wrap_per_transform_s"]),
                    us(row["optax_chain_s"]),
                    us(row["flatten_s"], 2),
                    us(row["flatten_per_leaf_s"], 2),
                    fmt(row["flatten_ratio_to_tuple"], 2),
                    us(row["unflatten_s"], 2),
                ]
                for row in r["chain"]
            ],
        ),
    )
