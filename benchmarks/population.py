"""A population run three ways, and the way ``opx.map_population`` chooses: a paired measurement.

Each member of the population is adamw (its own learning rate from ``opx.grid``) with its own
MLP parameters and optimizer state; ``fn`` is ``STEPS`` training steps of one member in
``lax.scan`` (a step of a training loop, the members' states carried from call to call).
The three fixed ways (a loop over one compiled program, ``vmap`` of all, chunks of
``members // 4``) and ``how="auto"`` after its probe are timed in turn, their order rotated
every repeat; wall time of a whole population's call, median [min-max] over the repeats.

    python benchmarks/population.py            # the CPU sizes (seconds to minutes)
    python benchmarks/population.py --large    # the issue's sizes (1.1M, 4.2M, 16.8M, 100.7M parameters)
    python benchmarks/population.py --large --donate --cases 6,7,8    # the population held once

The TPU table of issue 49 is to be measured with ``--large`` on the chip.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optax_pytree as opx

STEPS = 10
BATCH = 64


def mlp(key: Any, width: int, depth: int) -> list[dict[str, Any]]:
    sizes = [width] * (depth + 1) + [10]
    return [
        {
            "w": jax.random.normal(jax.random.fold_in(key, i), (a, b)) / np.sqrt(a),
            "b": jnp.zeros(b),
        }
        for i, (a, b) in enumerate(itertools.pairwise(sizes))
    ]


def loss(params: Any, x: Any, y: Any) -> Any:
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def steps(member: Any, x: Any, y: Any) -> Any:
    """``STEPS`` adamw steps of one member; its new parameters and state, and its last loss."""
    tx, params, state = member

    def step(carry: Any, _: Any) -> Any:
        params, state = carry
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), value

    (params, state), values = jax.lax.scan(step, (params, state), None, length=STEPS)
    return (tx, params, state), values[-1]


def measure(width: int, depth: int, members: int, repeats: int, donate: bool = False) -> dict[str, Any]:
    x = jax.random.normal(jax.random.key(1), (BATCH, width))
    y = jax.random.randint(jax.random.key(2), (BATCH,), 0, 10)
    base = opx.wrap(optax.adamw, 1e-3, weight_decay=1e-4)
    batch, _ = opx.grid(base, learning_rate=np.geomspace(1e-4, 1e-2, members).tolist())
    # Made batched (no member's own copy beside the stack: 64 members of 16.8M parameters and
    # their adam states take 12.9 GB).
    params = jax.jit(jax.vmap(lambda i: mlp(jax.random.key(i), width, depth)))(jnp.arange(members))
    population = (batch, params, jax.jit(jax.vmap(base.init))(params))
    size = sum(leaf[0].size for leaf in jax.tree.leaves(params))

    def fn(member: Any, x: Any, y: Any) -> Any:  # a new function object: nothing remembered
        return steps(member, x, y)

    ways = {
        "loop": {"how": "loop"},
        "vmap": {"how": "vmap"},
        f"chunks of {members // 4}": {"how": "chunks", "chunk_size": members // 4},
        "auto": {"how": "auto"},
    }

    def run(**options: Any) -> None:
        # Donated: each call a training loop's step, the population the last call's outputs.
        nonlocal population
        out = opx.map_population(fn, population, x, y, donate=donate, **options)
        jax.block_until_ready(out)
        if donate:
            population = out[0]

    start = time.perf_counter()
    out, choice = opx.map_population(
        fn, population, x, y, with_choice=True, donate=donate
    )  # compiles, probes
    jax.block_until_ready(out)
    first = time.perf_counter() - start
    if donate:
        population = out[0]
    del out
    refused: dict[str, str] = {}
    for name, options in ways.items():
        try:
            run(**options)  # compiled, warm
        except Exception as e:  # a way forced past the device's memory
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            refused[name] = "does not fit"
    times: dict[str, list[float]] = {name: [] for name in ways if name not in refused}
    order = list(times)
    for r in range(repeats):
        order = order[1:] + order[:1]
        for name in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            run(**ways[name])
            times[name].append(time.perf_counter() - start)
    return {
        "parameters": size,
        "members": members,
        "times": times,
        "choice": choice,
        "first": first,
        "refused": refused,
        "memory": {way: choice.memory.get(way) for way in ("loop", "vmap", "chunks")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="A population run three ways, and auto's choice, paired")
    parser.add_argument("--large", action="store_true", help="the issue's model sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", default="", help="comma-separated case numbers (from 1) to run, e.g. 1,2")
    parser.add_argument(
        "--donate",
        action="store_true",
        help="donate=True: each call on the last call's outputs (a training loop), the population held once",
    )
    options = parser.parse_args()
    # (width, depth, members): 2K, 0.1M and 0.5M parameters on the CPU; the sizes on the
    # chip (1.1M, 4.2M, 16.8M and 100.7M parameters a member).
    cases = (
        [
            (1024, 1, 16),
            (1024, 1, 64),
            (1024, 4, 16),
            (1024, 4, 64),
            (2048, 4, 16),
            (2048, 4, 64),
            (4096, 6, 4),
            (4096, 6, 8),
        ]
        if options.large
        else [(32, 1, 8), (32, 1, 64), (256, 2, 8), (256, 2, 32), (512, 2, 8), (512, 2, 32)]
    )
    donated = ", donated (each call on the last call's outputs)" if options.donate else ""
    print(
        f"{jax.devices()[0].device_kind}, jax {jax.__version__}, {STEPS} steps a call, batch {BATCH}{donated}"
    )
    print("| parameters | members | loop | vmap | chunks of members/4 | auto (its choice) |")
    print("|---|---|---|---|---|---|")
    picked = {int(c) for c in options.cases.split(",") if c}
    for number, (width, depth, members) in enumerate(cases, 1):
        if picked and number not in picked:
            continue
        r = measure(width, depth, members, options.repeats, options.donate)

        def cell(name: str, r: dict[str, Any] = r) -> str:
            if name in r["refused"]:
                return f"n/a ({r['refused'][name]})"
            samples = r["times"][name]
            low, high = min(samples) * 1e3, max(samples) * 1e3
            return f"{statistics.median(samples) * 1e3:.1f} ms [{low:.1f}-{high:.1f}]"

        choice = r["choice"]
        chunks = f"chunks of {members // 4}"
        auto = f"{cell('auto')} ({choice.how}, {choice.chunk_size}; first call {r['first']:.2f} s)"
        ways = f"{cell('loop')} | {cell('vmap')} | {cell(chunks)}"
        print(f"| {r['parameters']:,} | {members} | {ways} | {auto} |")
        gib = {way: f"{need / 2**30:.2f}" for way, need in r["memory"].items() if need is not None}
        limit = "not reported" if choice.limit is None else f"{choice.limit / 2**30:.2f}"
        print(f"  memory (GiB) by way: {gib}; the device's: {limit}")


if __name__ == "__main__":
    main()
