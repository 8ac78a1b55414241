"""Where a step's time goes on an accelerator: one training loop, its optimizer's parts made
dynamic one group at a time, timed side by side, with each program's loop body summarized.

Sections 2 and 12 measure the wrapped optimizer against plain optax; this probe takes the
difference apart. Each variant is a jitted ``lax.scan`` of updates (the MLP of section 2,
or section 12's cheap-gradient step), timed in turn with the others (ABBA), and its
compiled program's loop body counted: fusions, the operations outside them (on a TPU the
scalar unit's), the scalar operands of the fusions, conditionals and general powers.

    python benchmarks/step_probe.py                 # on the accelerator: times and programs
    python benchmarks/step_probe.py --deviceless    # on a CPU machine with libtpu: programs

Variants: ``raw`` (plain optax, its numbers constants), ``inject`` (inject_hyperparams, its
state an argument), ``wrapped`` (the wrapped optimizer, an argument), the wrapped optimizer
with only some arguments dynamic (``lr``; ``lr+b``: lr, b1, b2; ``lr+eps``: lr, eps,
eps_root), and hand-written adams (``hand``: the hyperparameters scalar arguments;
``hand-packed``: one vector of them).

Measured on a TPU v5e (jax 0.10.2, 2026-12-06), µs a step, raw / inject / wrapped / lr /
lr+eps / hand: section 12's adam at 1,024 parameters 1.25 / 5.00 / 5.73 / 1.27 / 2.72 /
4.54; at 101,386: 4.43 / 8.29 / 8.96 / 4.47 / 5.86 / 7.67; adamw with warmup-cosine 1.45 /
6.02 / 8.90 and 4.62 / 9.18 / 12.18 (raw / inject / wrapped). Every hyperparameter read at
run time costs the step, whoever reads it (``scalar_probe.py``).
A build that computed the general power only in a ``lax.cond`` branch that needs it
(commit 44ddd2c) took 4.91 and 8.17 µs for adam (0.98 and 0.99 of inject_hyperparams),
7.92 and 10.96 for adamw; it was reverted: a branch is compiled apart from the program
around it (on the chip, ``noisy_sgd``'s power by its exponent in a branch was no longer
plain optax's bits). A build that kept the folded power outside the branch and computed
only the general one in it (for a base outside the rule's range) took 5.71 µs against
5.86 (``step_profile.py`` says why such builds do not pay). The build kept since computes the
general power in a branch whose other side computes nothing (XLA keeps such a conditional),
taken for a base out of the rule's range: adam 5.66 µs at 1,024 parameters, 8.84 at 101,386
(inject_hyperparams 5.05 and 8.11; 2026-12-06); adamw with warmup-cosine 8.89 and 11.73
(5.99 and 8.98). The branch chosen by ``t * log2(c) == 0`` instead (a value of the step, no
predicate of the base in the loop's state): 5.65, 8.77, 8.78 and 11.87, the same.
The build since (2026-12-07) makes each power of scalars one conditional whose
branches compute one power each, the folded one or the general one (the
44ddd2c build's, without its branch for a schedule's exponent): adam 4.89 µs at
1,024 parameters and 8.08 at 101,386 (inject_hyperparams 5.02 and 8.18); adamw
with warmup-cosine 8.13 and 11.25 (6.08 and 9.02). The ``sched-static`` and
``peak`` variants of adamw make the schedule's arguments static as
inject_hyperparams' are, or leave its peak alone dynamic.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

if "--deviceless" in sys.argv:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")

import jax
import jax.numpy as jnp
import optax

import optax_pytree as opx
from optax_pytree import _backends

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _workload
import tpu_programs


def _hand_update(g: Any, s: Any, lr: Any, b1: Any, b2: Any, eps: Any) -> tuple[Any, Any]:
    count, mu, nu = s
    count = count + 1
    mu = jax.tree.map(lambda m, x: b1 * m + (1 - b1) * x, mu, g)
    nu = jax.tree.map(lambda n, x: b2 * n + (1 - b2) * x * x, nu, g)
    t = count.astype(jnp.float32)
    c1, c2 = 1 - b1**t, 1 - b2**t
    u = jax.tree.map(lambda m, n: -lr * (m / c1) / (jnp.sqrt(n / c2) + eps), mu, nu)
    return u, (count, mu, nu)


class Hand:
    """A hand-written adam whose hyperparameters are arguments (scalars, or one packed vector)."""

    def __init__(self, packed: bool) -> None:
        self.packed = packed

    def init(self, params: Any) -> Any:
        z = jax.tree.map(jnp.zeros_like, params)
        return (jnp.int32(0), z, z)

    def hp(self) -> Any:
        values = (1e-3, 0.9, 0.999, 1e-8)
        if self.packed:
            return jnp.asarray(values, jnp.float32)
        return tuple(jnp.float32(v) for v in values)

    def update(self, g: Any, s: Any, hp: Any) -> tuple[Any, Any]:
        lr, b1, b2, eps = (hp[i] for i in range(4))
        return _hand_update(g, s, lr, b1, b2, eps)


def _mlp_scan(update: Callable[[Any, Any, Any], Any], params: Any, state: Any, batch: Any) -> Any:
    def body(carry: Any, _: Any) -> Any:
        p, s = carry
        loss, grads = jax.value_and_grad(_workload.mlp_loss)(p, batch)
        u, s = update(grads, s, p)
        return (optax.apply_updates(p, u), s), loss

    (params, _), losses = jax.lax.scan(body, (params, state), None, length=_workload.STEPS)
    return params, losses[-1]


def _cheap_scan(update: Callable[[Any, Any, Any], Any], params: Any, state: Any, steps: int) -> Any:
    def body(carry: Any, _: Any) -> Any:
        p, s = carry
        u, s = update(jax.tree.map(lambda x: jnp.sin(x) * 0.1, p), s, p)
        return (optax.apply_updates(p, u), s), None

    return jax.lax.scan(body, (params, state), None, length=steps)[0]


def variants(optimizer: str) -> dict[str, tuple[Any, Any]]:
    """name -> (the optimizer, how it enters the program: 'closed', 'state' (inject: the state
    an argument), 'argument', or 'hand')."""
    if optimizer == "adam":
        factory, lr = optax.adam, 1e-3
    else:
        factory, lr = optax.adamw, optax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 1000)

    def wrap(*dynamic: str) -> Any:
        if optimizer != "adam":  # the schedule: its own arguments; the rate: its peak
            schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000)
            return opx.wrap(factory, schedule, **({"dynamic_only": dynamic} if dynamic else {}))
        return opx.wrap(factory, lr, **({"dynamic_only": dynamic} if dynamic else {}))

    out: dict[str, tuple[Any, Any]] = {
        "raw": (factory(lr), "closed"),
        "inject": (optax.inject_hyperparams(factory)(learning_rate=lr), "state"),
        "wrapped": (wrap(), "argument"),
    }
    if optimizer != "adam":
        # The schedule's own arguments static, as inject_hyperparams' (its constants), and the
        # peak alone dynamic (a sweep of it).
        out["sched-static"] = (opx.wrap(factory, opx.static(lr)), "argument")
        peak = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000, dynamic_only=("peak_value",))
        out["peak"] = (opx.wrap(factory, peak), "argument")
    if optimizer == "adam":
        out["lr"] = (wrap("learning_rate"), "argument")
        out["lr+b"] = (wrap("learning_rate", "b1", "b2"), "argument")
        out["lr+eps"] = (wrap("learning_rate", "eps", "eps_root"), "argument")
        out["hand"] = (Hand(packed=False), "hand")
        out["hand-packed"] = (Hand(packed=True), "hand")
    return out


def program(kind: str, tx: Any, params: Any, workload: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The function to jit and its arguments."""

    def scan(update: Callable[[Any, Any, Any], Any], p: Any, s: Any) -> Any:
        if workload == "mlp":
            return _mlp_scan(update, p, s, batch)
        return _cheap_scan(update, p, s, workload)

    batch = _BATCH
    state = tx.init(params)
    if kind == "closed" or kind == "state":
        return (lambda p, s: scan(tx.update, p, s)), (params, state)
    if kind == "hand":
        return (lambda p, s, hp: scan(lambda g, s, p: tx.update(g, s, hp), p, s)), (params, state, tx.hp())
    return (lambda p, s, tx: scan(tx.update, p, s)), (params, state, tx)


_BATCH: Any = None
_OP = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = (.+?) ([\w\-]+)\(")


def loop_body(text: str) -> dict[str, Any]:
    """The largest while loop's body: its fusions, the operations outside them, the scalar
    operands of its fusions, conditionals and powers."""
    bodies = re.findall(r"body=%?([\w.\-]+)", text)
    computations = {m.group(1): m.group(0) for m in re.finditer(r"^%([\w.\-]+) \(.*?^\}", text, re.M | re.S)}
    found = [computations[b] for b in bodies if b in computations]
    if not found:
        return {}
    body = max(found, key=len)
    ops: collections.Counter[str] = collections.Counter()
    scalar_operands = 0
    scalars: set[str] = set()
    for line in body.splitlines():
        m = _OP.match(line)
        if not m:
            continue
        shape, op = m.groups()
        ops[op] += 1
        if op == "fusion":
            args = line.split(" fusion(", 1)[1].split("), kind=")[0]
            scalar_operands += sum(1 for a in re.findall(r"%[\w.\-]+", args) if a in scalars)
        elif shape.startswith(("f32[] ", "s32[] ", "pred[] ")) or shape in ("f32[]", "s32[]", "pred[]"):
            scalars.add(line.split("=", 1)[0].replace("ROOT", "").strip())
    free = {k: v for k, v in ops.items() if k not in ("get-tuple-element", "tuple", "parameter", "constant")}
    return {
        "fusions": ops["fusion"],
        "outside": sum(v for k, v in free.items() if k != "fusion"),
        "fusion_operands": scalar_operands,
        "conditionals": ops["conditional"],
        "powers": ops["power"],
        "ops": dict(sorted(free.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--deviceless", action="store_true", help="compile for a TPU without one")
    parser.add_argument("--calls", type=int, default=21)
    parser.add_argument("--only", default="", help="comma-separated workloads: mlp,cheap1k,cheap101k")
    parser.add_argument("--out", default="", help="a folder for each program's optimized HLO")
    args = parser.parse_args()
    global _BATCH
    sharding = None
    if args.deviceless:
        _backends._platforms = lambda: ("cpu", "tpu")  # pyright: ignore[reportPrivateUsage]
        sharding = tpu_programs._tpu_sharding("v5e:1x1")  # pyright: ignore[reportPrivateUsage]
    w = _workload.Workload.make(1)
    _BATCH = w.batch
    cases: list[tuple[str, str, Any, Any]] = [
        ("mlp", "adam", w.params, "mlp"),
        ("mlp", "adamw-wc", w.params, "mlp"),
    ]
    for size in (1_024, 101_386):
        half = size // 2
        p = {"w": jnp.linspace(-1.0, 1.0, half), "b": jnp.linspace(0.5, -0.5, size - half)}
        label = f"cheap{size // 1000}k"
        cases += [(label, "adam", p, 1000), (label, "adamw-wc", p, 1000)]
    only = set(filter(None, args.only.split(",")))
    print(f"jax {jax.__version__}, optax {optax.__version__}, {jax.devices()[0].device_kind}")
    for label, optimizer, params, workload in cases:
        if only and label not in only:
            continue
        steps = _workload.STEPS if isinstance(workload, str) else workload
        fns: dict[str, Callable[[], Any]] = {}
        print(f"== {label}, {optimizer} ({steps} steps a call)")
        for name, (tx, kind) in variants(optimizer).items():
            fn, fargs = program(kind, tx, params, workload)
            start = time.perf_counter()
            if sharding is not None:
                text = tpu_programs.compiled(fn, fargs, sharding)
                compiled = None
            else:
                compiled = jax.jit(fn).trace(*fargs).lower().compile()
                text = compiled.as_text() or ""
            compile_s = time.perf_counter() - start
            body = loop_body(text)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, f"{label}-{optimizer}-{name}.hlo"), "w") as f:
                    f.write(text)
            print(f"  {name:12s} compile {compile_s:6.2f} s; loop body {body}")
            if compiled is not None:
                jax.block_until_ready(compiled(*fargs))
                fns[name] = lambda c=compiled, a=fargs: c(*a)
        if not fns:
            continue
        times: dict[str, list[float]] = {k: [] for k in fns}
        names = list(fns)
        for i in range(args.calls):
            order = names if i % 2 == 0 else names[::-1]
            for k in order:
                start = time.perf_counter()
                jax.block_until_ready(fns[k]())
                times[k].append(time.perf_counter() - start)
        base = statistics.median(times["raw"])
        for k, v in times.items():
            m = statistics.median(v)
            print(f"  {k:12s} {m * 1e6 / steps:8.2f} µs a step  ({m / base:5.2f} of raw)")


if __name__ == "__main__":
    main()
