"""Section 11: training on the accelerator, side by side with optax (see ``run.py``).

Four parts, each wall time around ``block_until_ready``, median [min-max]
over repeats, the rows of a ratio interleaved (their order rotated and
reversed every other repeat: ABBA):

a. the steady-state training step at three model sizes, one step and ten
   steps (``lax.scan``) per call: the wrapped adamw with a wrapped
   warmup-cosine schedule, an argument of the jitted step, against raw optax
   closed over (its numbers constants) and ``optax.inject_hyperparams``
   (its numbers arguments); parameters and optimizer state donated;
b. sweeps end to end, compilations included: raw optax jitted per
   configuration, the wrapped optimizer looped through one compiled program,
   and ``vmap`` over ``opx.grid``'s members;
c. compile time (trace, lower, compile) of the wrapped step against
   inject_hyperparams' (and raw optax's), fresh functions every repeat, the
   persistent compilation cache off, one XLA compilation per sample checked;
d. populations: ``vmap`` over ``opx.stack`` against a loop over one compiled
   program, the run time of compiled programs per population, the crossover,
   and a population run as chunks through one vmapped program.

Sizes come from the scale (``Settings.accel_scale``): ``accelerator`` (about
0.4M, 16M and 100M parameters; ``--accelerator`` or any backend but the
CPU), ``cpu`` (the full profile on the CPU: up to 1.6M) and ``tiny`` (quick
mode and ``--tiny``: seconds on the CPU). Parts and sizes that would not end
within the run's budget (``_common.BUDGET``) are skipped, with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

import optax_pytree as opx
from _common import (
    BUDGET,
    COMPILES,
    WALL_CLOCK,
    Log,
    Settings,
    compile_sample,
    fresh,
    interleaved,
    no_persistent_cache,
    ratios,
    rotated,
    summary,
)
from _report import Target, check, fmt, on_median, ratio, section, table
from _workload import mlp_loss, mlp_params

TITLE = "accelerator: training step by model size, sweeps, compile time, populations"
SECTION = 11
PARTIAL = True  # run() takes save=: run.py writes the report after each part

PEAK = 1e-3
WARMUP_STEPS, DECAY_STEPS = 10, 100
WEIGHT_DECAY = 1e-4
TARGET_FROM = 16_000_000  # parameters: the steady-state targets hold from this size up
STEADY_LIMIT = 1.02
COMPILE_LIMIT = 1.1
APPROACHES = ("raw", "inject", "wrapped")
LABELS = {
    "raw": "raw optax closed over (constants)",
    "inject": "optax.inject_hyperparams (arguments)",
    "wrapped": "wrapped, an argument of jax.jit",
}


# --------------------------------------------------------------------------
# The optimizers: adamw with a warmup-cosine schedule, three ways.


def raw_tx(peak: float) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak, WARMUP_STEPS, DECAY_STEPS)
    return optax.adamw(schedule, weight_decay=WEIGHT_DECAY)


def wrapped_tx(peak: Any) -> Any:
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, peak, WARMUP_STEPS, DECAY_STEPS)
    return opx.wrap(optax.adamw, learning_rate=schedule, weight_decay=WEIGHT_DECAY)


# optax's warmup_cosine_decay_schedule compares peak_value with 0.0 in Python,
# so a traced peak cannot go through it: an inject_hyperparams user writes the
# schedule as the peak times the schedule of peak 1 (equal for init and end 0).
UNIT_SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 1.0, WARMUP_STEPS, DECAY_STEPS)


def inject_tx(peak: Any) -> optax.GradientTransformation:
    """adamw through ``optax.inject_hyperparams``: ``peak`` may be traced, weight decay is in the state."""
    return optax.inject_hyperparams(optax.adamw)(
        learning_rate=lambda count: peak * UNIT_SCHEDULE(count), weight_decay=WEIGHT_DECAY
    )


# --------------------------------------------------------------------------
# Models and the training functions.


@dataclasses.dataclass(frozen=True)
class Model:
    sizes: tuple[int, ...]  # layer widths, input first
    batch: int

    @property
    def n_params(self) -> int:
        return sum(a * b + b for a, b in itertools.pairwise(self.sizes))

    @property
    def name(self) -> str:
        n = self.n_params
        return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n / 1e3:.1f}k"

    def describe(self) -> str:
        return f"MLP {'-'.join(map(str, self.sizes))} ({self.n_params:,} parameters), batch {self.batch}"

    def data(self) -> tuple[Any, Any]:
        """The initial parameters and one batch, on the default device: new buffers every call."""
        return jax.block_until_ready(_make_data(self.sizes, self.batch))

    def abstract(self) -> tuple[Any, Any]:
        return jax.eval_shape(_make_data, self.sizes, self.batch)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _make_data(sizes: tuple[int, ...], batch: int) -> tuple[Any, Any]:
    """One program per model (made eagerly, each operation would be a compilation of its own)."""
    key = jax.random.key(0)
    x = jax.random.normal(jax.random.fold_in(key, 100), (batch, sizes[0]))
    y = jax.random.randint(jax.random.fold_in(key, 101), (batch,), 0, sizes[-1])
    return mlp_params(key, sizes), (x, y)


@dataclasses.dataclass(frozen=True)
class Steady:
    model: Model
    estimate_s: float  # on a TPU v5e, compiles included (conservative): the budget check
    multi: bool = True  # also the multi-step program (tiny sizes: on one model only)


@dataclasses.dataclass(frozen=True)
class Sweep:
    model: Model
    configs: int
    steps: int
    estimate_s: float


@dataclasses.dataclass(frozen=True)
class Population:
    model: Model
    sizes: tuple[int, ...]  # members
    chunk: int  # members per chunk of the chunked population
    estimate_s: float


@dataclasses.dataclass(frozen=True)
class Scale:
    name: str
    steady: tuple[Steady, ...]
    steady_repeats: int
    steady_seconds: float  # one sample: about this long
    multi_steps: int  # steps per call of the multi-step program
    sweeps: tuple[Sweep, ...]
    compile_model: Model
    compile_pairs: int  # ABBA pairs of repeats: 2 x this samples of each approach
    compile_estimate_s: float
    populations: tuple[Population, ...]
    pop_steps: int
    pop_repeats: int
    pop_seconds: float


# Tiny: one hidden layer (fewer operations to compile: a CI smoke run).
_T1, _T2, _T3 = Model((8, 16, 4), 8), Model((16, 32, 4), 8), Model((32, 64, 4), 8)
_C01 = Model((128, 256, 256, 10), 128)  # section 1's MLP, 101,386 parameters
_M04 = Model((256, 512, 512, 10), 128)  # 399,370
_C16 = Model((512, 1024, 1024, 10), 128)  # 1,586,186
_M3 = Model((1024, 1024, 1024, 1024, 10), 128)  # 3,158,026
_M16 = Model((2048,) * 5 + (10,), 256)  # 16,805,898
_M100 = Model((4096,) * 7 + (10,), 256)  # 100,704,266

SCALES: dict[str, Scale] = {
    "tiny": Scale(
        name="tiny",
        steady=(Steady(_T1, 0), Steady(_T2, 0, multi=False), Steady(_T3, 0, multi=False)),
        steady_repeats=5,
        steady_seconds=0.005,
        multi_steps=10,
        sweeps=(Sweep(_T1, 3, 5, 0), Sweep(_T2, 2, 5, 0)),
        compile_model=_T1,
        compile_pairs=1,
        compile_estimate_s=0,
        populations=(Population(_T1, (4, 8), 4, 0),),
        pop_steps=5,
        pop_repeats=3,
        pop_seconds=0.005,
    ),
    "cpu": Scale(
        name="cpu",
        steady=(Steady(_C01, 0), Steady(_M04, 0), Steady(_C16, 0)),
        steady_repeats=7,
        steady_seconds=0.2,
        multi_steps=10,
        sweeps=(Sweep(_C01, 8, 50, 0), Sweep(_M04, 4, 20, 0)),
        compile_model=_M04,
        compile_pairs=3,
        compile_estimate_s=0,
        populations=(Population(_C01, (16, 64), 16, 0),),
        pop_steps=10,
        pop_repeats=3,
        pop_seconds=0.1,
    ),
    # Estimates for a TPU v5e: a compile of a small step ~0.3-1 s, of a 100M
    # step a few seconds; the timed samples as set here.
    "accelerator": Scale(
        name="accelerator",
        steady=(Steady(_M04, 20), Steady(_M16, 20), Steady(_M100, 45)),
        steady_repeats=15,
        steady_seconds=0.1,
        multi_steps=10,
        sweeps=(Sweep(_M04, 16, 100, 25), Sweep(_M16, 8, 50, 25)),
        compile_model=_M16,
        compile_pairs=3,
        compile_estimate_s=30,
        populations=(
            Population(_M04, (16, 64), 16, 12),
            Population(_M3, (16, 64), 16, 15),
            Population(_M16, (16, 64), 16, 20),  # if the budget allows; 64 in one vmap does not fit
        ),
        pop_steps=10,
        pop_repeats=5,
        pop_seconds=0.05,
    ),
}


def one_step(tx: Any, params: Any, state: Any, batch: Any) -> tuple[Any, Any, jax.Array]:
    loss, grads = jax.value_and_grad(mlp_loss)(params, batch)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


def steps(tx: Any, params: Any, state: Any, batch: Any, n: int) -> tuple[Any, Any, jax.Array]:
    """``n`` training steps on one batch (``lax.scan`` for ``n > 1``); the last loss."""
    if n == 1:
        return one_step(tx, params, state, batch)

    def body(carry: Any, _: Any) -> tuple[Any, jax.Array]:
        p, s, loss = one_step(tx, carry[0], carry[1], batch)
        return (p, s), loss

    (params, state), losses = lax.scan(body, (params, state), None, length=n)
    return params, state, losses[-1]


def inject_steps(peak: Any, params: Any, state: Any, batch: Any, n: int) -> tuple[Any, Any, jax.Array]:
    return steps(inject_tx(peak), params, state, batch, n)


def train(tx: Any, params: Any, batch: Any, n: int) -> jax.Array:
    """A run from scratch: ``tx.init``, then ``n`` steps; the last loss."""
    return steps(tx, params, tx.init(params), batch, n)[2]


TRAIN = "train_run"  # the name XLA's compilations of ``trainer``'s programs go by


def trainer(n: int) -> Callable[[Any, Any, Any], jax.Array]:
    """A new ``train`` of ``n`` steps (a fresh JAX cache), named ``TRAIN`` for counting."""

    def train_run(tx: Any, params: Any, batch: Any) -> jax.Array:
        return train(tx, params, batch, n)

    return train_run


def _programs(found: Sequence[tuple[str, float]]) -> int:
    """How many of the compilations ``found`` are of a training program (not eager operations)."""
    return sum(TRAIN in name for name, _ in found)


def _program(kind: str, n: int) -> tuple[Any, tuple[Any, ...]]:
    """A fresh jitted ``n``-step program of ``kind`` (parameters and state donated) and its leading
    arguments: ``fn(*head, params, state, batch)``."""
    if kind == "raw":
        tx = raw_tx(PEAK)
        fn = fresh(lambda p, s, b: steps(tx, p, s, b, n))
        return jax.jit(fn, donate_argnums=(0, 1)), ()
    if kind == "inject":
        # The peak on the device, as the wrapped optimizer's leaves are: no transfer per call.
        peak = jnp.asarray(PEAK)
        return jax.jit(fresh(functools.partial(inject_steps, n=n)), donate_argnums=(1, 2)), (peak,)
    return jax.jit(fresh(functools.partial(steps, n=n)), donate_argnums=(1, 2)), (wrapped_tx(PEAK),)


def _init(kind: str, params: Any) -> Any:
    """The optimizer state for ``params`` (eagerly, as a training script makes it)."""
    tx = raw_tx(PEAK) if kind == "raw" else inject_tx(PEAK) if kind == "inject" else wrapped_tx(PEAK)
    return tx.init(params)


def _memory() -> dict[str, int] | None:
    """The device's memory figures (None where the backend gives none: the CPU)."""
    stats = jax.devices()[0].memory_stats()
    if not stats:
        return None
    keys = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
    return {k: int(stats[k]) for k in keys if k in stats}


def _fits(model: Model, members: int) -> tuple[bool, str]:
    """Whether ``members`` copies of the model's training state fit on the device, and if not, why.

    Parameters, gradients, updates and adamw's two moments: about 6 copies of the parameters.
    """
    need = members * model.n_params * 4 * 6
    limit = (_memory() or {}).get("bytes_limit")
    if limit is None or need <= 0.8 * limit:
        return True, ""
    return False, f"does not fit: about {need / 2**30:.1f} GiB of {limit / 2**30:.1f} GiB"


def _free() -> None:
    """Drops what the last part left (its arrays on the device, its compiled programs)."""
    gc.collect()


def _skip(log: Log, what: str, estimate: float) -> str:
    """Why ``what`` is skipped ("" to run it): the run's budget."""
    if BUDGET.allows(estimate):
        return ""
    why = f"skipped: about {estimate:.0f} s needed, {max(BUDGET.left(), 0):.0f} s left of the run's budget"
    log(f"  {what}: {why}")
    return why


# --------------------------------------------------------------------------
# a. The steady-state step.


def _warm(fn: Callable[[], Any]) -> dict[str, Any]:
    """Two calls (a third if the second compiled): the first call's seconds, the compilations of
    each, and the loss of the second (after one update from the common start)."""
    out: dict[str, Any] = {"compiles": []}
    for i in range(3):
        with COMPILES.window() as found:
            t0 = WALL_CLOCK()
            res = jax.block_until_ready(fn())
            if i == 0:
                out["first_call_s"] = WALL_CLOCK() - t0
        out["compiles"].append(len(found))
        if i == 1:
            out["loss"] = float(res[-1])
            if not found:
                break
    return out


def _steady_model(case: Steady, sc: Scale, log: Log) -> dict[str, Any]:
    model = case.model
    batch = model.data()[1]
    # Each approach its own parameters (the same numbers, new buffers: they are donated) and state.
    carry: dict[str, tuple[Any, Any]] = {}
    for kind in APPROACHES:
        params = model.data()[0]
        carry[kind] = (params, _init(kind, params))
    row: dict[str, Any] = {"model": model.describe(), "n_params": model.n_params, "calls": {}}
    for n in (1, sc.multi_steps) if case.multi else (1,):
        calls: dict[str, Callable[[], Any]] = {}
        for kind in APPROACHES:
            fn, head = _program(kind, n)

            def call(kind: str = kind, fn: Callable[..., Any] = fn, head: tuple[Any, ...] = head) -> Any:
                p, s = carry[kind]
                p, s, loss = fn(*head, p, s, batch)
                carry[kind] = (p, s)
                return p, s, loss

            calls[kind] = call
        # The same warm-up calls for all from the same start: after one step, raw and wrapped
        # give the same loss (compared for one step a call; the carries then part ways).
        warm = {kind: _warm(calls[kind]) for kind in APPROACHES}
        with COMPILES.window() as during:
            t = interleaved(calls, sc.steady_repeats, sc.steady_seconds, clock=WALL_CLOCK)
        res: dict[str, Any] = {
            "steps_per_call": n,
            "warm_up": warm,
            "compiles_while_timed": len(during),
            **{f"{k}_s": summary(t[k]) for k in APPROACHES},
            "wrapped_over_raw": summary(ratios(t["wrapped"], t["raw"])),
            "wrapped_over_inject": summary(ratios(t["wrapped"], t["inject"])),
            "inject_over_raw": summary(ratios(t["inject"], t["raw"])),
        }
        if n == 1:
            res["loss_diff_wrapped_vs_raw"] = abs(warm["wrapped"]["loss"] - warm["raw"]["loss"])
        row["calls"][str(n)] = res
        log(
            f"  (a) {model.name}, {n} step(s) a call: wrapped {fmt(res['wrapped_s'], 2, 1e3)} ms, "
            f"/ raw {fmt(res['wrapped_over_raw'])}, / inject {fmt(res['wrapped_over_inject'])}"
            + (f"; {len(during)} compilations while timed" if during else "")
        )
    row["memory"] = _memory()
    return row


# --------------------------------------------------------------------------
# b. Sweeps end to end.


def _sweep(sw: Sweep, log: Log) -> dict[str, Any]:
    params, batch = sw.model.data()
    lrs = [float(v) for v in np.geomspace(1e-4, 1e-2, sw.configs)]
    n = sw.steps

    def raw() -> list[float]:
        out = []
        for lr in lrs:
            f = jax.jit(functools.partial(trainer(n), raw_tx(lr)))  # constants: a new program
            out.append(float(f(params, batch)))
        return out

    def loop() -> list[float]:
        f = jax.jit(trainer(n))
        losses = [f(wrapped_tx(lr), params, batch) for lr in lrs]
        return [float(x) for x in losses]

    def vmapped() -> list[float]:
        population, _ = opx.grid(wrapped_tx(lrs[0]), {"learning_rate.peak_value": lrs})
        f = jax.jit(jax.vmap(trainer(n), in_axes=(0, None, None)))
        return [float(x) for x in f(population, params, batch)]

    fns = {"raw": raw, "loop": loop, "vmap": vmapped}
    out: dict[str, Any] = {"model": sw.model.describe(), "configs": sw.configs, "steps": n}
    losses: dict[str, list[float]] = {}
    for k in fns:  # one run each; the warm-up paid the process's one-time costs
        with COMPILES.window() as found:
            t0 = WALL_CLOCK()
            losses[k] = fns[k]()
            wall = WALL_CLOCK() - t0
        out[k] = {
            "wall_s": wall,
            "compiles": _programs(found),  # of the training program
            "all_compiles": len(found),  # and eager operations (opx.grid's, the first time)
            "compile_s": sum(d for _, d in found),
        }
        log(
            f"  (b) {sw.configs} x {n} steps, {sw.model.name}, {k}: {wall:.2f} s, "
            f"{out[k]['compiles']} XLA compilations of the training program ({len(found)} in all)"
        )
    for k in fns:
        out[k]["speedup_vs_raw"] = ratio(out["raw"]["wall_s"], out[k]["wall_s"])
        out[k]["max_abs_loss_diff_vs_raw"] = max(abs(a - b) for a, b in zip(losses[k], losses["raw"]))
    return out


# --------------------------------------------------------------------------
# c. Compile time.


def _compile_once(kind: str, abstract: tuple[Any, Any, Any], compile: bool = True) -> dict[str, float]:
    """Trace, lower and compile a fresh one-step program of ``kind`` (``compile=False``: no compile)."""
    params, state, batch = abstract
    fn, head = _program(kind, 1)  # a fresh function: nothing cached
    return compile_sample(fn, (*head, params, state, batch), compile)


def _compile_times(sc: Scale, log: Log) -> dict[str, Any]:
    params, batch = sc.compile_model.abstract()
    abstract = {k: (params, jax.eval_shape(functools.partial(_init, k), params), batch) for k in APPROACHES}
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in APPROACHES}
    with no_persistent_cache():
        for k in APPROACHES:  # warm-up: the process's first trace of each (imports, first wrap)
            _compile_once(k, abstract[k], compile=False)
        for r in range(sc.compile_pairs * 2):
            order = rotated(list(APPROACHES), r)
            for k in order if r % 2 == 0 else order[::-1]:
                samples[k].append(_compile_once(k, abstract[k]))
    out: dict[str, Any] = {"model": sc.compile_model.describe(), "repeats": sc.compile_pairs * 2}
    for k in APPROACHES:
        xs = samples[k]
        out[k] = {f: summary([x[f] for x in xs]) for f in ("trace_s", "lower_s", "compile_s", "total_s")}
        out[k]["compiles"] = sorted({int(x["compiles"]) for x in xs})
        out[k]["cache_hits"] = sum(int(x["cache_hits"]) for x in xs)
    total = {k: [x["total_s"] for x in samples[k]] for k in APPROACHES}
    out["wrapped_over_inject"] = summary(ratios(total["wrapped"], total["inject"]))
    out["wrapped_over_raw"] = summary(ratios(total["wrapped"], total["raw"]))
    out["one_compile_each"] = all(out[k]["compiles"] == [1] and out[k]["cache_hits"] == 0 for k in APPROACHES)
    log(
        f"  (c) compile, {sc.compile_model.name}: wrapped {fmt(out['wrapped']['total_s'], 2)} s, "
        f"/ inject {fmt(out['wrapped_over_inject'])}, / raw {fmt(out['wrapped_over_raw'])}; "
        f"one XLA compilation each, no cache hit: {out['one_compile_each']}"
    )
    return out


# --------------------------------------------------------------------------
# d. Populations.


def _crossover(sizes: Sequence[int], loop: Sequence[float], vmap: Sequence[float]) -> dict[str, Any]:
    """Where one vmapped call of P members gets faster than P calls of one compiled program.

    An estimate from the medians: the loop costs P times its cost per member at the largest
    size measured; the vmapped call is the line through its two smallest sizes, a + b P; they
    cross at P* = a / (t1 - b).
    """
    if len(sizes) < 2:
        return {"members": None, "text": "vmap measured at one size only: no crossover"}
    (p1, v1), (p2, v2) = (sizes[0], vmap[0]), (sizes[1], vmap[1])
    b = ratio(v2 - v1, p2 - p1)
    a = v1 - b * p1
    t1 = loop[-1] / sizes[-1]
    if not t1 > b:  # NaN included
        return {"members": None, "text": "the loop stays faster (a member costs vmap more than a call)"}
    p = a / (t1 - b)
    if p <= 1:
        return {"members": 1.0, "text": "vmap faster at every population size"}
    return {"members": p, "text": f"vmap faster from about {math.ceil(p)} members (estimated)"}


def _population(pop: Population, sc: Scale, log: Log) -> dict[str, Any]:
    model, chunk, n = pop.model, pop.chunk, sc.pop_steps
    ok, why = _fits(model, chunk)
    if not ok:
        raise RuntimeError(f"{model.describe()}: a chunk of {chunk} members {why}")
    params, batch = model.data()
    biggest = max(pop.sizes)
    lrs = [float(v) for v in np.geomspace(1e-4, 1e-2, biggest)]
    members = [wrapped_tx(lr) for lr in lrs]
    single = jax.jit(trainer(n))
    batched = jax.jit(jax.vmap(trainer(n), in_axes=(0, None, None)))
    fns: dict[str, Callable[[], Any]] = {}
    out: dict[str, Any] = {"model": model.describe(), "steps": n, "chunk": chunk, "sizes": {}}
    for size in pop.sizes:
        row: dict[str, Any] = {}
        group = members[:size]
        fns[f"loop {size}"] = lambda group=group: [single(m, params, batch) for m in group]
        ok, why = _fits(model, size)
        if ok:
            stacked = opx.stack(group)
            fns[f"vmap {size}"] = lambda stacked=stacked: batched(stacked, params, batch)
        else:
            row["vmap_missing"] = why
        if size > chunk and size % chunk == 0:
            chunks = [opx.stack(group[i : i + chunk]) for i in range(0, size, chunk)]
            fns[f"chunked {size}"] = lambda chunks=chunks: [batched(c, params, batch) for c in chunks]
        out["sizes"][str(size)] = row
    first: dict[str, float] = {}
    for k, f in fns.items():  # compile (each vmapped size once; the chunks reuse the chunk's)
        with COMPILES.window() as found:
            t0 = WALL_CLOCK()
            jax.block_until_ready(f())
            first[k] = WALL_CLOCK() - t0
        if found:
            first[f"{k} compiles"] = len(found)
    with COMPILES.window() as during:
        t = interleaved(fns, sc.pop_repeats, sc.pop_seconds, clock=WALL_CLOCK)
    out["first_call_s"] = first
    out["compiles_while_timed"] = len(during)
    for size in pop.sizes:
        row = out["sizes"][str(size)]
        loop = t[f"loop {size}"]
        row["loop_s"] = summary(loop)
        for k in ("vmap", "chunked"):
            if f"{k} {size}" in t:
                row[f"{k}_s"] = summary(t[f"{k} {size}"])
                row[f"loop_over_{k}"] = summary(ratios(loop, t[f"{k} {size}"]))
        if "vmap_s" in row and "chunked_s" in row:
            row["chunked_over_vmap"] = summary(ratios(t[f"chunked {size}"], t[f"vmap {size}"]))
        vmap = f"{fmt(row['vmap_s'], 1, 1e3)} ms" if "vmap_s" in row else row["vmap_missing"]
        chunked = (
            f", {size // chunk} chunks of {chunk} {fmt(row['chunked_s'], 1, 1e3)} ms"
            if "chunked_s" in row
            else ""
        )
        log(f"  (d) {model.name}, {size} members: loop {fmt(row['loop_s'], 1, 1e3)} ms, vmap {vmap}{chunked}")
    measured = [sz for sz in pop.sizes if "vmap_s" in out["sizes"][str(sz)]]
    out["crossover"] = _crossover(
        measured,
        [out["sizes"][str(sz)]["loop_s"]["median"] for sz in measured],
        [out["sizes"][str(sz)]["vmap_s"]["median"] for sz in measured],
    )
    log(f"  (d) {model.name}: {out['crossover']['text']}")
    return out


# --------------------------------------------------------------------------
# The section.


def run(s: Settings, log: Log, save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    sc = SCALES[s.accel_scale]
    out: dict[str, Any] = {
        "scale": sc.name,
        "backend": jax.default_backend(),
        "device": str(getattr(jax.devices()[0], "device_kind", jax.devices()[0])),
        "steady": [],
        "sweeps": [],
        "compile": None,
        "populations": [],
        "skipped": [],
    }

    def done() -> None:
        if save is not None:
            save(out)

    log(f"  sizes: {sc.name} ({', '.join(c.model.name for c in sc.steady)} parameters for (a))")
    # The process's one-time costs before anything is timed: the first wrap of this
    # configuration (its analysis), the first opx.grid and opx.stack.
    population, _ = opx.grid(wrapped_tx(PEAK), {"learning_rate.peak_value": [PEAK, 2 * PEAK]})
    jax.block_until_ready(jax.tree.leaves(opx.stack(opx.unstack(population))))
    for case in sc.steady:
        why = _skip(log, f"(a) {case.model.name}", case.estimate_s)
        if why:
            out["skipped"].append(f"(a) {case.model.describe()}: {why}")
            continue
        out["steady"].append(_steady_model(case, sc, log))
        _free()
        done()
    why = _skip(log, "(c) compile time", sc.compile_estimate_s)
    if why:
        out["skipped"].append(f"(c) compile time: {why}")
    else:
        out["compile"] = _compile_times(sc, log)
        done()
    for sw in sc.sweeps:
        why = _skip(log, f"(b) sweep {sw.configs} x {sw.steps}, {sw.model.name}", sw.estimate_s)
        if why:
            out["skipped"].append(f"(b) {sw.configs} x {sw.steps} steps, {sw.model.describe()}: {why}")
            continue
        out["sweeps"].append(_sweep(sw, log))
        _free()
        done()
    for pop in sc.populations:
        why = _skip(log, f"(d) populations, {pop.model.name}", pop.estimate_s)
        if why:
            out["skipped"].append(f"(d) {pop.model.describe()}: {why}")
            continue
        out["populations"].append(_population(pop, sc, log))
        _free()
        done()
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    big = [row for row in r["steady"] if row["n_params"] >= TARGET_FROM]
    for row in big:
        for n, res in row["calls"].items():
            for ref in ("raw", "inject"):
                what = f"steady state, {row['model']}, {n} step(s) a call, wrapped / {ref}"
                out.append(
                    on_median(SECTION, what, res[f"wrapped_over_{ref}"], f"≤ {STEADY_LIMIT}", STEADY_LIMIT)
                )
    if not big:
        largest = max((row["n_params"] for row in r["steady"]), default=0)
        out.append(
            Target(
                SECTION,
                "steady state from 16M parameters, wrapped / raw and / inject_hyperparams",
                "n/a",
                f"≤ {STEADY_LIMIT}",
                "n/a",
                f"{r['scale']} sizes: the largest model has {largest:,} parameters",
            )
        )
    c = r["compile"]
    if c is not None:
        out.append(
            on_median(
                SECTION,
                f"compile time (trace + lower + compile), wrapped / inject_hyperparams, {c['model']}",
                c["wrapped_over_inject"],
                f"≤ {COMPILE_LIMIT}",
                COMPILE_LIMIT,
                na="tiny sizes: a smoke run" if r["scale"] == "tiny" else "",
            )
        )
        out.append(
            Target(
                SECTION,
                "compile-time samples: one XLA compilation each, no persistent-cache hit",
                str(c["one_compile_each"]),
                "True",
                check(c["one_compile_each"]),
            )
        )
    for sw in r["sweeps"]:
        for k in ("loop", "vmap"):
            n = sw[k]["compiles"]
            what = (
                f"sweep {sw['configs']} x {sw['steps']} steps, {sw['model']}, wrapped {k}: XLA compilations"
            )
            out.append(Target(SECTION, what, str(n), "exactly 1", check(n == 1)))
    return out


def _short(model: str) -> str:
    """``MLP 256-512-512-10`` of ``Model.describe()``'s text."""
    return model.split(" (")[0]


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f}"


def _ms(stat: dict[str, Any] | None) -> str:
    return "" if stat is None else fmt(stat, 2, 1e3)


def markdown(r: dict[str, Any]) -> list[str]:
    parts: list[str | list[str]] = [
        f"Backend {r['backend']} ({r['device']}), {r['scale']} sizes. adamw with "
        f"`warmup_cosine_decay_schedule(0.0, {PEAK:g}, {WARMUP_STEPS}, {DECAY_STEPS})` and weight decay "
        f"{WEIGHT_DECAY:g}: raw optax closed over (its numbers are constants), `optax.inject_hyperparams("
        "optax.adamw)` built in the step from the peak as an argument (the schedule written as the peak "
        "times optax's schedule of peak 1: optax's compares a traced peak with 0.0), and "
        "`opx.wrap(optax.adamw, learning_rate=opx.wrap(optax.warmup_cosine_decay_schedule, ...), "
        "weight_decay=...)` as an argument of `jax.jit`. Wall time around `block_until_ready`.",
    ]
    if r["steady"]:
        rows = []
        for row in r["steady"]:
            for n, res in row["calls"].items():
                warm = res["warm_up"]
                rows.append(
                    [
                        row["model"],
                        n,
                        _ms(res["raw_s"]),
                        _ms(res["inject_s"]),
                        _ms(res["wrapped_s"]),
                        fmt(res["wrapped_over_raw"]),
                        fmt(res["wrapped_over_inject"]),
                        fmt(res["inject_over_raw"]),
                        " / ".join(f"{warm[k]['first_call_s']:.2f}" for k in APPROACHES),
                        f"{res['loss_diff_wrapped_vs_raw']:.1e}" if "loss_diff_wrapped_vs_raw" in res else "",
                    ]
                )
        parts += [
            "(a) Steady state: one call of the compiled step (one step, or several in `lax.scan`), "
            "parameters and state donated and carried from call to call, the three interleaved "
            "(order rotated, reversed every other repeat), several calls a sample:",
            table(
                "model | steps a call | raw (ms) | inject (ms) | wrapped (ms) | wrapped / raw | "
                "wrapped / inject | inject / raw | first call, raw / inject / wrapped (s) | "
                "loss after one step, wrapped vs raw (abs diff)",
                rows,
            ),
        ]
        mem = [row for row in r["steady"] if row.get("memory")]
        if mem:
            parts.append(
                "Device memory after each model: "
                + "; ".join(
                    f"{_short(row['model'])}: peak {_gib(row['memory'].get('peak_bytes_in_use', 0))} "
                    f"of {_gib(row['memory'].get('bytes_limit', 0))} GiB"
                    for row in mem
                )
                + "."
            )
    c = r["compile"]
    if c is not None:
        parts += [
            f"(c) Compile time of the one-step program, {c['model']}: a fresh function each sample "
            "(`jax.jit(f).trace(...)`, `.lower()`, `.compile()`), the persistent compilation cache "
            f"off, {c['repeats']} samples each, interleaved; one XLA compilation per sample and no "
            f"cache hit: {'yes' if c['one_compile_each'] else 'NO'}.",
            table(
                "approach | trace (s) | lower (s) | compile (s) | total (s) | wrapped / it",
                [
                    [
                        LABELS[k],
                        fmt(c[k]["trace_s"]),
                        fmt(c[k]["lower_s"]),
                        fmt(c[k]["compile_s"]),
                        fmt(c[k]["total_s"]),
                        "" if k == "wrapped" else fmt(c[f"wrapped_over_{k}"]),
                    ]
                    for k in APPROACHES
                ],
            ),
        ]
    if r["sweeps"]:
        names = {
            "raw": "raw optax, a new jax.jit per configuration",
            "loop": "wrapped, a loop over one compiled program",
            "vmap": "wrapped, vmap over opx.grid's members",
        }
        parts += [
            "(b) Sweeps end to end (building, tracing, compiling, running, waiting; one run each). "
            "All compilations include the eager operations of `opx.grid` for a population size not "
            "seen before (stacking and broadcasting the leaves):",
            table(
                "sweep | approach | wall (s) | XLA compilations: training program (all) | "
                "compiling, all (s) | speedup vs raw | max abs loss diff vs raw",
                [
                    [
                        f"{sw['configs']} x {sw['steps']} steps, {sw['model']}",
                        names[k],
                        f"{sw[k]['wall_s']:.2f}",
                        f"{sw[k]['compiles']} ({sw[k]['all_compiles']})",
                        f"{sw[k]['compile_s']:.2f}",
                        f"{sw[k]['speedup_vs_raw']:.2f}",
                        f"{sw[k]['max_abs_loss_diff_vs_raw']:.1e}",
                    ]
                    for sw in r["sweeps"]
                    for k in ("raw", "loop", "vmap")
                ],
            ),
        ]
    if r["populations"]:
        rows = []
        for pop in r["populations"]:
            for size, row in pop["sizes"].items():
                chunks = f" ({int(size) // pop['chunk']} x {pop['chunk']})" if "chunked_s" in row else ""
                rows.append(
                    [
                        pop["model"],
                        size,
                        _ms(row["loop_s"]),
                        _ms(row.get("vmap_s")) or f"n/a ({row.get('vmap_missing', '')})",
                        _ms(row.get("chunked_s")) + chunks,
                        fmt(row["loop_over_vmap"], 2) if "loop_over_vmap" in row else "",
                        fmt(row["loop_over_chunked"], 2) if "loop_over_chunked" in row else "",
                        fmt(row["chunked_over_vmap"], 2) if "chunked_over_vmap" in row else "",
                    ]
                )
        parts += [
            "(d) Populations: the run time of compiled programs (compilation excluded) for a whole "
            "population, each member a run from scratch (`init`, then the steps) of the wrapped "
            "adamw with its own peak: a loop over one compiled program, one `vmap` over `opx.stack` "
            "of the members, and chunks of `opx.stack` through one compiled vmapped program:",
            table(
                "model | members | loop (ms) | vmap (ms) | chunked (ms) | loop / vmap | loop / chunked | "
                "chunked / vmap",
                rows,
            ),
            "Crossover (from the medians): "
            + "; ".join(f"{_short(pop['model'])}: {pop['crossover']['text']}" for pop in r["populations"])
            + ".",
        ]
    if r["skipped"]:
        parts.append("Skipped: " + "; ".join(r["skipped"]) + ".")
    return section("## 11. On the accelerator: training steps, sweeps, compile time, populations", *parts)
