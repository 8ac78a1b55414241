"""Benchmarks: zero overhead and one compilation, side by side with optax.

Every ratio is taken against a reference measured in the same process (raw
optax, plain-argument functions, ``inject_hyperparams`` or tuples of the same
leaves: each table names its reference), interleaved with it, after warm-up,
over several repeats: the table gives the median and the min-max of the
per-repeat ratios. Absolute times depend on the machine and its load; the
ratios are what the README quotes.

Run::

    python benchmarks/run.py            # full: a few minutes
    python benchmarks/run.py --quick    # about a minute, fewer configurations
    python benchmarks/run.py --out DIR  # where results.md / results.json go
    python benchmarks/run.py --only 1,3 # some sections only (for development)

What is measured (section numbers match the output):

1. **Compilations and wall time for N configurations.** A 128-256-256-10 MLP
   (101,386 parameters, batch 128) trained for 50 steps in ``lax.scan`` by
   ``train(tx, params, batch)``, once for each of N learning rates (N = 20),
   end to end: building the optimizer, tracing, compiling, running, waiting
   for the result. Approaches:

   - (a) ``jax.jit(train, static_argnums=0)`` with ``optax.adam(lr)``;
   - (b) a new ``jax.jit`` closure over ``optax.adam(lr)`` per configuration:
     raw optax, the zero-overhead reference of sections 1, 2 and 5;
   - (c) ``optax.inject_hyperparams(optax.adam)(learning_rate=lr)`` built
     inside the jitted function, ``lr`` an argument;
   - (d) ``opx.wrap(optax.adam, learning_rate=lr)`` as an ordinary argument of
     ``jax.jit(train)``, also under ``eqx.filter_jit``;
   - (e) ``opx.wrap_transformation_as_pytree_with_state(optax.adam, ...)``.

   Traces are counted by a counter in the traced Python function; XLA
   compilations by a ``jax.monitoring`` listener on
   ``/jax/core/compile/backend_compile_duration`` (the event behind
   ``jax_log_compiles``; the two are cross-checked at start-up). Each round
   uses fresh Python functions, so no JAX cache carries over between rounds;
   one-time process costs (backend start-up, the first ``wrap`` of
   ``optax.adam``) are paid in a warm-up round that is not counted.

2. **Steady state.** Per-call time of each approach once compiled, paired
   with (b): the calls alternate (ABBA), and the ratio is taken per pair. The
   noise-free check: XLA's cost analysis (flops, bytes accessed) of the
   compiled programs of (d) and (e) against (b).

3. **Dispatch overhead.** A tiny workload (adam ``init`` + one ``update`` on
   three parameters): the jitted function called with the wrapped optimizer,
   against the same function called with its hyperparameters as a plain
   tuple of the same arrays; and (e) carried through ``jax.jit``
   (``params, opt = step(opt, params, grads)``), against the same loop
   carrying ``(hyperparameter arrays, optax state)``. Also
   ``tree_flatten``/``tree_unflatten`` of a wrapped adam and of a wrapped
   ``chain`` of three transforms, against a tuple of the same leaves.

4. **Construction.** ``opx.wrap(optax.adam, learning_rate=lr)`` the first time
   for a factory (``optax_pytree._wrap.clear_caches()`` before each sample:
   signature, binding, automatic static detection) and cached, against
   ``optax.adam(lr)`` and ``optax.inject_hyperparams(optax.adam)(learning_rate=lr)``
   (a ratio to each); also each followed by ``init``, where inject_hyperparams
   converts its values.

5. **Sweeps.** 16 learning rates end to end (first call included): the
   wrapped optimizer stacked and ``jax.vmap``-ed (one program, one call), and
   in a Python loop (one program, 16 calls), against raw optax compiled per
   configuration.

6. **Scaling.** For parameter trees of 10, 100 and 1,000 leaves: one jitted
   adam step with the wrapped optimizer against the same step with plain
   hyperparameter arrays (the wrapper's own cost) and against raw optax with
   constant hyperparameters (not approach (b): what dynamic hyperparameters
   cost XLA), the extra ``tree_flatten`` time of the jit arguments, and (e)
   carried through ``jax.jit`` (its state grows with the tree). Then ``wrap`` and
   ``tree_flatten`` of a ``chain`` of 1, 4 and 16 wrapped transforms (cost
   per transform and per leaf). A growth row passes when the overhead at the
   largest tree exceeds the one at the smallest by at most 1 us + 5% of the
   plain time (the noise floor), or, for chains, when the cost per transform
   (per leaf) grows by at most 25% from 4 to 16 transforms.

Sections 3, 4 and 6 are timed in process CPU time (a busy neighbour on a
shared machine does not inflate it), sections 1, 2 and 5 in wall time;
section 2 also reports the CPU-time ratio.

Each target of issue #6 is printed with PASS or MISS next to its measured
value; a target that needs the full configuration count reads n/a in
``--quick`` mode.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import functools
import itertools
import json
import logging
import operator
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

import optax_pytree as opx
from optax_pytree import _wrap

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------
# Settings.


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    n_configs: int  # section 1: learning rates per round
    rounds: int  # section 1: rounds (each compiles everything afresh)
    steady_pairs: int  # section 2: ABBA pairs per approach
    micro_repeats: int  # sections 3, 4, 6: interleaved samples
    micro_seconds: float  # sections 3, 4, 6: target duration of one sample
    first_wrap_samples: int  # section 4: samples of wrap after clear_caches()
    sweep_configs: int  # section 5
    sweep_rounds: int  # section 5
    leaf_counts: tuple[int, ...]  # section 6
    chain_lengths: tuple[int, ...]  # section 6

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(True, 4, 1, 11, 41, 0.002, 5, 4, 1, (10, 100), (1, 4, 16))
        return cls(False, 20, 3, 61, 101, 0.002, 15, 16, 3, (10, 100, 1000), (1, 4, 16))


FULL = Settings.make(quick=False)  # for the configuration counts the targets name


# --------------------------------------------------------------------------
# Statistics and timing.


def summary(samples: Sequence[float]) -> dict[str, Any]:
    xs = [float(x) for x in samples]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs), "samples": xs}


def fmt(stat: dict[str, Any], digits: int = 3, scale: float = 1.0) -> str:
    m, lo, hi = (stat[k] * scale for k in ("median", "min", "max"))
    if stat["n"] == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def rotated(seq: Sequence[Any], r: int) -> list[Any]:
    """``seq`` rotated left by ``r`` places (modulo its length)."""
    r %= len(seq)
    return [*seq[r:], *seq[:r]]


# Micro-benchmarks (sections 3, 4, 6) are single-threaded Python work timed
# in process CPU time, which a busy neighbour on a shared machine does not
# inflate (preemption is not counted); sections 1, 2 and 5 are wall time.
CPU_CLOCK = time.process_time
WALL_CLOCK = time.perf_counter


def time_calls(
    fn: Callable[[], Any], number: int, clock: Callable[[], float] = CPU_CLOCK, wait: bool = True
) -> float:
    """Seconds per call over ``number`` calls of ``fn``, waiting for the last result.

    ``wait=False`` for pure Python work (flatten, unflatten): nothing to wait
    for, and ``block_until_ready`` would flatten the result again.
    """
    res: Any = None
    t0 = clock()
    for _ in range(number):
        res = fn()
    if wait:
        jax.block_until_ready(res)
    return (clock() - t0) / number


def calibrate(
    fn: Callable[[], Any], seconds: float, clock: Callable[[], float] = CPU_CLOCK, wait: bool = True
) -> int:
    """Calls per sample so that one sample lasts about ``seconds``."""
    if wait:
        jax.block_until_ready(fn())
    number = 1
    while True:
        elapsed = time_calls(fn, number, clock, wait) * number
        if elapsed >= seconds / 4 or number >= 1 << 20:
            return max(1, int(number * seconds / max(elapsed, 1e-9)))
        number *= 4


def interleaved(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    seconds: float,
    clock: Callable[[], float] = CPU_CLOCK,
    pure: Collection[str] = (),
) -> dict[str, list[float]]:
    """Seconds per call of each function, sampled in turn (order rotated each repeat).

    Sample ``i`` of every function is taken within the same short window, so
    ratios of samples with the same index are paired against load changes.
    The functions named in ``pure`` return nothing asynchronous (no waiting).
    """
    numbers = {k: calibrate(f, seconds, clock, k not in pure) for k, f in fns.items()}
    keys = list(fns)
    out: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(repeats):
        order = rotated(keys, r)
        if r % 2:
            order.reverse()
        for k in order:
            out[k].append(time_calls(fns[k], numbers[k], clock, k not in pure))
    return out


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    return [a / b for a, b in zip(num, den)]


# --------------------------------------------------------------------------
# Counting traces and XLA compilations.

TRACES: collections.Counter[str] = collections.Counter()


def fresh(fn: Callable[..., Any], count: str | None = None) -> Callable[..., Any]:
    """A new function object (so a fresh JAX cache), counting its traces in ``TRACES[count]``."""

    @functools.wraps(fn)
    def traced(*args: Any) -> Any:
        if count is not None:
            TRACES[count] += 1
        return fn(*args)

    return traced


class CompileLog:
    """XLA compilations, from the ``jax.monitoring`` event ``jax_log_compiles`` logs."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        jax.monitoring.register_event_duration_secs_listener(self._listener)

    def _listener(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE_EVENT:
            self.events.append((str(kwargs.get("fun_name", "?")), duration_secs))

    @contextlib.contextmanager
    def window(self) -> Iterator[list[tuple[str, float]]]:
        found: list[tuple[str, float]] = []
        start = len(self.events)
        try:
            yield found
        finally:
            found.extend(self.events[start:])


COMPILES = CompileLog()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def check_compile_counting() -> dict[str, Any]:
    """The monitoring listener and ``jax_log_compiles`` agree on a fresh function."""
    logger = logging.getLogger("jax")
    capture = _Capture()
    logger.addHandler(capture)
    propagate, logger.propagate = logger.propagate, False
    jax.config.update("jax_log_compiles", True)
    try:
        x = jax.block_until_ready(jnp.ones(3))
        f = jax.jit(lambda x: jnp.sin(x) * 2.0)
        counts = []
        for _ in range(2):
            capture.messages.clear()
            with COMPILES.window() as found:
                jax.block_until_ready(f(x))
            logged = sum("Finished XLA compilation" in m for m in capture.messages)
            counts.append((len(found), logged))
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(capture)
        logger.propagate = propagate
    ok = counts == [(1, 1), (0, 0)]
    return {
        "method": f"jax.monitoring duration listener on {BACKEND_COMPILE_EVENT}",
        "cross_check": "jax_log_compiles + logging handler",
        "calls": counts,  # first and second call: (monitoring, jax_log_compiles)
        "agree": ok,
    }


# --------------------------------------------------------------------------
# The workload: a small MLP trained for 50 steps in lax.scan.

SIZES = (128, 256, 256, 10)
BATCH = 128
STEPS = 50


def mlp_params(key: jax.Array, sizes: Sequence[int] = SIZES) -> list[dict[str, jax.Array]]:
    params = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        w = jax.random.normal(jax.random.fold_in(key, i), (n_in, n_out)) / np.sqrt(n_in)
        params.append({"w": w, "b": jnp.zeros(n_out)})
    return params


def mlp_loss(params: list[dict[str, jax.Array]], batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    x, y = batch
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def train(tx: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    """``STEPS`` steps of ``tx`` on one batch; returns the parameters and the last loss."""
    state = tx.init(params)

    def body(carry: Any, _: Any) -> tuple[Any, jax.Array]:
        p, s = carry
        loss, grads = jax.value_and_grad(mlp_loss)(p, batch)
        updates, s = tx.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), loss

    (params, _), losses = lax.scan(body, (params, state), None, length=STEPS)
    return params, losses[-1]


def train_inject(lr: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    return train(optax.inject_hyperparams(optax.adam)(learning_rate=lr), params, batch)


def train_stateful(opt: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    """As ``train``, with the optimizer state folded into the wrapped object."""
    opt = opt.init(params)

    def body(carry: Any, _: Any) -> tuple[Any, jax.Array]:
        p, o = carry
        loss, grads = jax.value_and_grad(mlp_loss)(p, batch)
        p, o = o.apply_gradients(grads, p)
        return (p, o), loss

    (params, _), losses = lax.scan(body, (params, opt), None, length=STEPS)
    return params, losses[-1]


@dataclasses.dataclass
class Workload:
    params: Any
    batch: Any
    lrs: list[float]

    @classmethod
    def make(cls, n: int, sizes: Sequence[int] = SIZES, batch: int = BATCH) -> Workload:
        key = jax.random.key(0)
        x = jax.random.normal(jax.random.fold_in(key, 100), (batch, sizes[0]))
        y = jax.random.randint(jax.random.fold_in(key, 101), (batch,), 0, sizes[-1])
        lrs = [float(v) for v in np.geomspace(1e-4, 1e-2, n)]
        return cls(mlp_params(key, sizes), (x, y), lrs)

    @classmethod
    def tiny(cls, n: int) -> Workload:
        """Same program shape on a toy MLP: pays one-time process costs cheaply."""
        return cls.make(n, sizes=(4, 8, 8, 2), batch=4)


# --------------------------------------------------------------------------
# The approaches of section 1 (and 2).


@dataclasses.dataclass
class Approach:
    key: str
    label: str
    # A fresh "learning rate -> result" for one round (new jit caches).
    per_config: Callable[[Workload], Callable[[float], Any]]
    # A compiled zero-argument call for the steady-state measurement.
    steady: Callable[[Workload], Callable[[], Any]]
    # The lowered program, for XLA's cost analysis (None: not analysed).
    lowered: Callable[[Workload], Any] | None = None


def _static(w: Workload) -> Callable[[float], Any]:
    f = jax.jit(fresh(train, count="a"), static_argnums=0)
    return lambda lr: f(optax.adam(lr), w.params, w.batch)


def _closure(w: Workload) -> Callable[[float], Any]:
    body = fresh(train, count="b")

    def run(lr: float) -> Any:
        tx = optax.adam(lr)
        return jax.jit(lambda p, b: body(tx, p, b))(w.params, w.batch)

    return run


def _inject(w: Workload) -> Callable[[float], Any]:
    f = jax.jit(fresh(train_inject, count="c"))
    return lambda lr: f(lr, w.params, w.batch)


def _wrapped(
    w: Workload, jit: Callable[[Any], Any] = jax.jit, key: str | None = "d"
) -> Callable[[float], Any]:
    f = jit(fresh(train, count=key))
    return lambda lr: f(opx.wrap(optax.adam, learning_rate=lr), w.params, w.batch)


def _stateful(w: Workload, jit: Callable[[Any], Any] = jax.jit, key: str = "e") -> Callable[[float], Any]:
    f = jit(fresh(train_stateful, count=key))
    make = opx.wrap_transformation_as_pytree_with_state
    return lambda lr: f(make(optax.adam, learning_rate=lr), w.params, w.batch)


def _steady_static(w: Workload) -> Callable[[], Any]:
    f, tx = jax.jit(train, static_argnums=0), optax.adam(w.lrs[0])
    return lambda: f(tx, w.params, w.batch)


def _steady_closure(w: Workload) -> Callable[[], Any]:
    tx = optax.adam(w.lrs[0])
    f = jax.jit(lambda p, b: train(tx, p, b))
    return lambda: f(w.params, w.batch)


def _steady_wrapped(w: Workload, jit: Callable[[Any], Any] = jax.jit) -> Callable[[], Any]:
    f, tx = jit(train), opx.wrap(optax.adam, learning_rate=w.lrs[0])
    return lambda: f(tx, w.params, w.batch)


def _steady_stateful(w: Workload, jit: Callable[[Any], Any] = jax.jit) -> Callable[[], Any]:
    f = jit(train_stateful)
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=w.lrs[0])
    return lambda: f(opt, w.params, w.batch)


def _steady_inject(w: Workload) -> Callable[[], Any]:
    f, lr = jax.jit(train_inject), w.lrs[0]
    return lambda: f(lr, w.params, w.batch)


def _lowered_closure(w: Workload) -> Any:
    tx = optax.adam(w.lrs[0])
    return jax.jit(lambda p, b: train(tx, p, b)).lower(w.params, w.batch)


def _lowered_wrapped(w: Workload) -> Any:
    return jax.jit(train).lower(opx.wrap(optax.adam, learning_rate=w.lrs[0]), w.params, w.batch)


def _lowered_wrapped_static_eps_root(w: Workload) -> Any:
    tx = opx.wrap(optax.adam, learning_rate=w.lrs[0], static_argnames=("eps_root",))
    return jax.jit(train).lower(tx, w.params, w.batch)


def _lowered_inject(w: Workload) -> Any:
    return jax.jit(train_inject).lower(w.lrs[0], w.params, w.batch)


def _lowered_stateful(w: Workload) -> Any:
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=w.lrs[0])
    return jax.jit(train_stateful).lower(opt, w.params, w.batch)


def approaches() -> list[Approach]:
    return [
        Approach("a", "(a) optax, optimizer as a static argument", _static, _steady_static),
        Approach("b", "(b) optax, new jitted closure per configuration", _closure, _steady_closure),
        Approach("c", "(c) optax.inject_hyperparams inside jit", _inject, _steady_inject, _lowered_inject),
        Approach(
            "d", "(d) wrapped, ordinary argument of jax.jit", _wrapped, _steady_wrapped, _lowered_wrapped
        ),
        Approach(
            "d_eqx",
            "(d) wrapped, under eqx.filter_jit",
            functools.partial(_wrapped, jit=eqx.filter_jit, key="d_eqx"),
            functools.partial(_steady_wrapped, jit=eqx.filter_jit),
        ),
        Approach("e", "(e) wrapped with state, jax.jit", _stateful, _steady_stateful, _lowered_stateful),
        Approach(
            "e_eqx",
            "(e) wrapped with state, under eqx.filter_jit",
            functools.partial(_stateful, jit=eqx.filter_jit, key="e_eqx"),
            functools.partial(_steady_stateful, jit=eqx.filter_jit),
        ),
    ]


# --------------------------------------------------------------------------
# Section 1: compilations and wall time for N configurations.


def section_compilations(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
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


# --------------------------------------------------------------------------
# Section 2: steady state, and XLA's cost analysis.


def _cost(lowered: Any) -> dict[str, float]:
    analysis = lowered.compile().cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older jax: one dict per computation
        analysis = analysis[0]
    return {k: float(analysis[k]) for k in ("flops", "bytes accessed", "transcendentals") if k in analysis}


def section_steady(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    w = Workload.make(2)
    todo = approaches()
    ref = next(a for a in todo if a.key == "b").steady(w)
    jax.block_until_ready(ref())
    out: dict[str, Any] = {"approaches": {}, "cost": {}}
    for a in todo:
        if a.key == "b":
            continue
        fn = a.steady(w)
        jax.block_until_ready(fn())
        t_ref, t_fn, c_ref, c_fn = [], [], [], []
        for i in range(s.steady_pairs):
            pair = ((ref, t_ref, c_ref), (fn, t_fn, c_fn))
            for f, wall, cpu in pair if i % 2 == 0 else pair[::-1]:
                t0, c0 = WALL_CLOCK(), CPU_CLOCK()
                jax.block_until_ready(f())
                wall.append(WALL_CLOCK() - t0)
                cpu.append(CPU_CLOCK() - c0)
        out["approaches"][a.key] = {
            "label": a.label,
            "per_call_s": summary(t_fn),
            "reference_per_call_s": summary(t_ref),
            "ratio_to_b": summary(ratios(t_fn, t_ref)),
            "cpu_ratio_to_b": summary(ratios(c_fn, c_ref)),
        }
        log(f"  {a.label}: ratio to (b) {fmt(out['approaches'][a.key]['ratio_to_b'])}")
    base = _cost(_lowered_closure(w))
    out["cost"]["b"] = {"label": "(b)", **base}
    extra = Approach(
        "d_static_eps_root",
        "(d) wrapped, static_argnames=('eps_root',)",
        _wrapped,
        _steady_wrapped,
        _lowered_wrapped_static_eps_root,
    )
    for a in [*todo, extra]:
        if a.lowered is None:
            continue
        cost = _cost(a.lowered(w))
        rel = {f"rel_diff_{k}": (cost[k] - base[k]) / base[k] for k in cost if base.get(k)}
        out["cost"][a.key] = {"label": a.label, **cost, **rel}
        log(f"  XLA cost {a.label}: " + ", ".join(f"{k} {v:+.4%}" for k, v in rel.items()))
    return out


# --------------------------------------------------------------------------
# Section 3: dispatch overhead, flatten and unflatten.


def tiny_step(tx: Any, params: Any, grads: Any) -> Any:
    state = tx.init(params)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def plain_hyperparams(tx: Any) -> tuple[Any, ...]:
    """The plain baseline: the dynamic hyperparameters of ``tx`` as a tuple of the same arrays.

    One entry per argument (whatever its number of leaves), in the order of
    ``tx.dynamic_argnames``.
    """
    return tuple(tx.hyperparams[n] for n in tx.dynamic_argnames)


def plain_adam(hp: tuple[Any, ...]) -> Any:
    """``optax.adam`` from ``plain_hyperparams(opx.wrap(optax.adam, ...))``.

    The dynamic arguments of ``optax.adam`` are its leading positional ones.
    """
    return optax.adam(*hp)


def plain_tiny_step(hp: tuple[Any, ...], params: Any, grads: Any) -> Any:
    """``tiny_step`` with adam built from plain hyperparameter arrays: the baseline of (d)."""
    return tiny_step(plain_adam(hp), params, grads)


def plain_carried_step(carry: Any, params: Any, grads: Any) -> Any:
    """One adam step carrying ``(hyperparameter arrays, optax state)``: the baseline of (e)."""
    hp, state = carry
    updates, state = plain_adam(hp).update(grads, state, params)
    return optax.apply_updates(params, updates), (hp, state)


def tree_fns(tree: Any, plain: Any, ref: str = "plain") -> dict[str, Callable[[], Any]]:
    """``tree_flatten`` and ``tree_unflatten`` of ``tree`` and of ``plain`` (keys suffixed ``_{ref}``).

    Pure Python work: pass the result as ``pure`` to ``interleaved``.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    plain_leaves, plain_def = jax.tree_util.tree_flatten(plain)
    return {
        "flatten": lambda: jax.tree_util.tree_flatten(tree),
        f"flatten_{ref}": lambda: jax.tree_util.tree_flatten(plain),
        "unflatten": lambda: jax.tree_util.tree_unflatten(treedef, leaves),
        f"unflatten_{ref}": lambda: jax.tree_util.tree_unflatten(plain_def, plain_leaves),
    }


def compared(t: dict[str, list[float]], key: str, ref: str = "plain") -> dict[str, Any]:
    """The samples ``t[key]`` against ``t[f"{key}_{ref}"]``: both, their ratio and difference."""
    x, y = t[key], t[f"{key}_{ref}"]
    return {
        f"{key}_s": summary(x),
        f"{key}_{ref}_s": summary(y),
        f"{key}_ratio": summary(ratios(x, y)),
        f"{key}_overhead_s": summary([a - b for a, b in zip(x, y)]),
    }


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


def section_dispatch(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    hp = plain_hyperparams(tx)
    params = {"w": jnp.linspace(-1.0, 1.0, 3)}
    grads = {"w": jnp.full(3, 0.1)}
    out: dict[str, Any] = {"n_hyperparameter_leaves": len(jax.tree_util.tree_leaves(tx))}
    for jit_name, jit in (("jax.jit", jax.jit), ("eqx.filter_jit", eqx.filter_jit)):
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
    out["stateful"] = _stateful_carried(params, grads, s)
    log(f"  (e) carried through jax.jit: ratio {fmt(out['stateful']['step_ratio'])}")
    out["flatten"] = [_flatten_rows("wrapped adam", tx, s), _flatten_rows("wrapped chain of 3", chain3(), s)]
    for row in out["flatten"]:
        log(
            f"  {row['what']}: flatten {fmt(row['flatten_s'], 2, 1e6)} us, "
            f"unflatten {fmt(row['unflatten_s'], 2, 1e6)} us"
        )
    return out


# --------------------------------------------------------------------------
# Section 4: construction.


def section_construction(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    lrs = [float(v) for v in np.geomspace(1e-4, 1e-2, 97)]
    it = itertools.cycle(lrs)
    first = []
    for _ in range(s.first_wrap_samples):
        _wrap.clear_caches()
        lr = next(it)
        t0 = CPU_CLOCK()
        opx.wrap(optax.adam, learning_rate=lr)
        first.append(CPU_CLOCK() - t0)
    params = {"w": jnp.ones(3)}
    fns = {
        "wrap (cached)": lambda: opx.wrap(optax.adam, learning_rate=next(it)),
        "optax.adam": lambda: optax.adam(next(it)),
        "inject_hyperparams": lambda: optax.inject_hyperparams(optax.adam)(learning_rate=next(it)),
        "wrap + init": lambda: opx.wrap(optax.adam, learning_rate=next(it)).init(params),
        "optax.adam + init": lambda: optax.adam(next(it)).init(params),
        "inject_hyperparams + init": lambda: optax.inject_hyperparams(optax.adam)(
            learning_rate=next(it)
        ).init(params),
    }
    t = interleaved(fns, s.micro_repeats, s.micro_seconds)
    out: dict[str, Any] = {"wrap (first call for the factory)": {"s": summary(first)}}
    for k, v in t.items():
        init = " + init" if k.endswith("init") else ""
        out[k] = {
            "s": summary(v),
            "ratio_to_inject": summary(ratios(v, t["inject_hyperparams" + init])),
            "ratio_to_optax_adam": summary(ratios(v, t["optax.adam" + init])),
        }
    for k, v in out.items():
        log(f"  {k}: {fmt(v['s'], 1, 1e6)} us")
    return out


# --------------------------------------------------------------------------
# Section 5: sweeps.


def section_sweeps(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    w = Workload.make(s.sweep_configs)

    def vmapped(w: Workload = w) -> Any:
        stacked = opx.stack([opx.wrap(optax.adam, learning_rate=lr) for lr in w.lrs])
        f = jax.jit(jax.vmap(fresh(train), in_axes=(0, None, None)))
        return jax.block_until_ready(f(stacked, w.params, w.batch))[1]

    def loop(w: Workload = w) -> Any:
        run = _wrapped(w, key=None)
        return jnp.stack([jax.block_until_ready(run(lr))[1] for lr in w.lrs])

    def raw(w: Workload = w) -> Any:
        run = _closure(w)
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


# --------------------------------------------------------------------------
# Section 6: scaling.


def _leafy_params(n: int) -> dict[str, jax.Array]:
    return {f"p{i:04d}": jnp.linspace(-1.0, 1.0, 8) * (1 + i % 7) for i in range(n)}


def stateful_step(opt: Any, params: Any, grads: Any) -> Any:
    return opt.apply_gradients(grads, params)


def _stateful_carried(params: Any, grads: Any, s: Settings) -> dict[str, Any]:
    """(e) in a loop that carries the optimizer through jit, against the same with plain arrays.

    The wrapped object with state comes out of every call, so this pays
    ``tree_unflatten`` on the way out and the treedef comparison (its aux data
    holds the parameter structure) on the way in, as a training loop does.
    """
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=1e-3).init(params)
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    plain = (plain_hyperparams(tx), tx.init(params))
    f, g = jax.jit(stateful_step), jax.jit(plain_carried_step)
    carry = {
        "wrapped": jax.block_until_ready(f(opt, params, grads))[1],
        "plain": jax.block_until_ready(g(plain, params, grads))[1],
    }

    def call_wrapped() -> Any:
        carry["wrapped"] = f(carry["wrapped"], params, grads)[1]
        return carry["wrapped"]

    def call_plain() -> Any:
        carry["plain"] = g(carry["plain"], params, grads)[1]
        return carry["plain"]

    flat = tree_fns(opt, plain)
    t = interleaved(
        {"step": call_wrapped, "step_plain": call_plain, **flat},
        s.micro_repeats,
        s.micro_seconds * 2,
        pure=flat,
    )
    out: dict[str, Any] = {}
    for k in ("step", "flatten", "unflatten"):
        out.update(compared(t, k))
    return out


def section_scaling(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
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
            "stateful": _stateful_carried(params, grads, s),
        }
        rows.append(row)
        log(f"  {n} parameter leaves, (e) carried: {fmt(row['stateful']['step_ratio'])}")
        log(
            f"  {n} parameter leaves: wrapped / plain {fmt(row['steady_ratio_to_plain'])}, "
            f"wrapped / raw {fmt(row['steady_ratio_to_raw'])}, "
            f"flatten overhead {fmt(row['flatten_overhead_s'], 2, 1e6)} us"
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
        t = interleaved(
            {"wrap": wrapped_chain, "optax.chain": raw_chain, **flat},
            s.micro_repeats,
            s.micro_seconds,
            pure=flat,
        )
        row = {
            "n_transforms": k,
            "n_leaves": len(leaves),
            "wrap_s": summary(t["wrap"]),
            "wrap_per_transform_s": summary([x / k for x in t["wrap"]]),
            "optax_chain_s": summary(t["optax.chain"]),
            "wrap_ratio_to_optax": summary(ratios(t["wrap"], t["optax.chain"])),
            "flatten_s": summary(t["flatten"]),
            "flatten_per_leaf_s": summary([x / len(leaves) for x in t["flatten"]]),
            "flatten_ratio_to_tuple": summary(ratios(t["flatten"], t["flatten_plain"])),
            "unflatten_s": summary(t["unflatten"]),
        }
        chains.append(row)
        log(f"  chain of {k}: wrap {_us(row['wrap_s'])} us, flatten {_us(row['flatten_s'], 2)} us")
    return {"param_tree": rows, "chain": chains}


# --------------------------------------------------------------------------
# Targets.


@dataclasses.dataclass
class Target:
    section: int
    what: str
    measured: str
    target: str
    status: str  # PASS, MISS or n/a
    note: str = ""


def _check(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _on_median(
    section: int,
    what: str,
    stat: dict[str, Any],
    target: str,
    limit: float,
    op: Callable[[float, float], bool] = operator.le,
    *,
    digits: int = 3,
    na: str = "",
) -> Target:
    """PASS when ``op(median of stat, limit)``; n/a, with ``na`` as the note, when ``na`` is given."""
    status = "n/a" if na else _check(op(stat["median"], limit))
    return Target(section, what, fmt(stat, digits), target, status, na)


def targets(res: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    if "1" in res:
        r1 = res["1"]["approaches"]
        for key in ("d", "d_eqx", "e", "e_eqx"):
            a = r1[key]
            traces, compiles = max(a["traces"]), max(a["compiles"])
            out.append(
                Target(
                    1,
                    f"compilations, {a['label']}",
                    f"{traces} trace(s), {compiles} XLA",
                    "exactly 1",
                    _check(traces == 1 and compiles == 1),
                )
            )
        for key in ("d", "e"):
            a = r1[key]
            out.append(
                _on_median(
                    1,
                    f"wall time, {s.n_configs} configurations, {a['label'][:3]} / (b)",
                    a["ratio_to_b"],
                    f"≤ 0.12 (N = {FULL.n_configs})",
                    0.12,
                    na=f"quick mode: N = {s.n_configs}" if s.quick else "",
                )
            )
    if "2" in res:
        r2 = res["2"]
        for key in ("d", "e"):
            a = r2["approaches"][key]
            out.append(
                _on_median(2, f"steady state, {a['label'][:3]} / (b)", a["ratio_to_b"], "median ≤ 1.02", 1.02)
            )
            c = r2["cost"][key]
            df, db = c.get("rel_diff_flops", float("nan")), c.get("rel_diff_bytes accessed", float("nan"))
            out.append(
                Target(2, f"XLA flops, {key} vs (b)", f"{df:+.4%}", "within 0.2%", _check(abs(df) <= 0.002))
            )
            out.append(
                Target(
                    2,
                    f"XLA bytes accessed, {key} vs (b)",
                    f"{db:+.4%}",
                    "within 0.1%",
                    _check(abs(db) <= 0.001),
                )
            )
    if "3" in res:
        r3 = res["3"]
        out.append(
            _on_median(
                3,
                "dispatch, wrapped / plain hyperparameter arrays (jax.jit)",
                r3["jax.jit"]["ratio"],
                "≤ 1.0",
                1.0,
            )
        )
        out.append(
            _on_median(
                3,
                "dispatch, (e) carried through jax.jit / plain (arrays, state)",
                r3["stateful"]["step_ratio"],
                "≤ 1.0",
                1.0,
            )
        )
    if "4" in res:
        c = res["4"]["wrap (cached)"]["ratio_to_inject"]
        out.append(
            _on_median(4, "construction, cached wrap / inject_hyperparams", c, "< 1", 1.0, operator.lt)
        )
    if "5" in res:
        for k in ("wrapped, vmap", "wrapped, Python loop"):
            out.append(
                _on_median(
                    5,
                    f"sweep of {s.sweep_configs} end to end, raw loop / {k}",
                    res["5"][k]["speedup_vs_raw"],
                    f"≥ 5x ({FULL.sweep_configs} configurations)",
                    5.0,
                    operator.ge,
                    digits=2,
                    na=f"quick mode: {s.sweep_configs} configurations" if s.quick else "",
                )
            )
    if "6" in res:
        rows = res["6"]["param_tree"]
        for row in rows:
            out.append(
                _on_median(
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
                    _check(grow <= allowed),
                )
            )
        chains = res["6"]["chain"]
        mid, big = chains[-2], chains[-1]
        for key, unit in (("wrap_per_transform_s", "transform"), ("flatten_per_leaf_s", "leaf")):
            g = big[key]["median"] / mid[key]["median"]
            out.append(
                Target(
                    6,
                    f"{key.split('_')[0]} cost per {unit}, chain of {big['n_transforms']} / of "
                    f"{mid['n_transforms']}",
                    f"{g:.2f}",
                    "≤ 1.25 (linear growth)",
                    _check(g <= 1.25),
                )
            )
    return out


# --------------------------------------------------------------------------
# Report.


def _us(stat: dict[str, Any], digits: int = 1) -> str:
    return fmt(stat, digits, 1e6)


def _table(header: str, rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table: ``header`` (cells joined by `` | ``), its ``|---|`` separator, the rows."""
    lines = [f"| {header} |", "|" + "---|" * len(header.split(" | "))]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _stateful_lines(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [
        "",
        "(e) with its state carried through `jax.jit` (`params, opt = step(opt, params, grads)`), "
        "against the same loop carrying `(tuple of hyperparameter arrays, optax state)`:",
        "",
        *_table(
            "parameters | step (us) | plain (us) | step ratio | flatten (us) | flatten ratio | "
            "unflatten (us) | unflatten ratio",
            [
                [
                    name,
                    _us(st["step_s"]),
                    _us(st["step_plain_s"]),
                    fmt(st["step_ratio"]),
                    _us(st["flatten_s"], 2),
                    fmt(st["flatten_ratio"], 2),
                    _us(st["unflatten_s"], 2),
                    fmt(st["unflatten_ratio"], 2),
                ]
                for name, st in rows
            ],
        ),
    ]


def markdown(res: dict[str, Any], meta: dict[str, Any], tgts: list[Target]) -> str:
    lines = [
        "# optax_pytree benchmarks",
        "",
        f"`{meta['command']}` — {meta['mode']} mode, {meta['runtime_s']:.0f} s, {meta['date']}; "
        f"jax {meta['jax']}, optax {meta['optax']}, equinox {meta['equinox']}, Python {meta['python']}, "
        f"{meta['backend']} ({meta['device']}), {meta['cpu_count']} CPUs.",
        "",
        "Ratios: median [min-max] over repeats, each repeat paired with its reference in the same "
        "process. (b) is raw optax with a new jitted closure per configuration.",
        "",
        "## Targets",
        "",
        *_table(
            "§ | measurement | measured | target | result",
            [
                [t.section, t.what, t.measured, t.target, f"{t.status} ({t.note})" if t.note else t.status]
                for t in tgts
            ],
        ),
    ]
    if "1" in res:
        r = res["1"]
        lines += [
            "",
            f"## 1. Compilations and wall time: {r['n_configs']} learning rates, MLP of {r['n_params']:,} "
            f"parameters, batch {BATCH}, {STEPS} steps in lax.scan ({r['rounds']} round(s))",
            "",
            *_table(
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
        ]
    if "2" in res:
        r = res["2"]
        lines += [
            "",
            "## 2. Steady state (compiled; paired with (b), ABBA)",
            "",
            *_table(
                "approach | per call (ms) | (b) per call (ms) | ratio to (b), wall | ratio to (b), CPU time",
                [
                    [
                        a["label"],
                        fmt(a["per_call_s"], 2, 1e3),
                        fmt(a["reference_per_call_s"], 2, 1e3),
                        fmt(a["ratio_to_b"]),
                        fmt(a["cpu_ratio_to_b"]),
                    ]
                    for a in r["approaches"].values()
                ],
            ),
            "",
            "XLA cost analysis of the compiled program (noise-free):",
            "",
            *_table(
                "program | flops | bytes accessed | transcendentals | flops vs (b) | bytes vs (b)",
                [
                    [
                        "(b) optax, closure" if key == "b" else c["label"],
                        f"{c.get('flops', 0):,.0f}",
                        f"{c.get('bytes accessed', 0):,.0f}",
                        f"{c.get('transcendentals', 0):,.0f}",
                        f"{c['rel_diff_flops']:+.4%}" if "rel_diff_flops" in c else "",
                        f"{c['rel_diff_bytes accessed']:+.4%}" if "rel_diff_bytes accessed" in c else "",
                    ]
                    for key, c in r["cost"].items()
                ],
            ),
        ]
    if "3" in res:
        r = res["3"]
        lines += [
            "",
            f"## 3. Dispatch: adam init + one update on 3 parameters "
            f"({r['n_hyperparameter_leaves']} hyperparameter leaves)",
            "",
            *_table(
                "jit | wrapped (us) | plain tuple of arrays (us) | ratio",
                [
                    [j, _us(r[j]["wrapped_s"]), _us(r[j]["plain_s"]), fmt(r[j]["ratio"])]
                    for j in ("jax.jit", "eqx.filter_jit")
                ],
            ),
            "",
            *_table(
                "pytree | leaves | flatten (us) | vs tuple | unflatten (us) | vs tuple",
                [
                    [
                        row["what"],
                        row["n_leaves"],
                        _us(row["flatten_s"], 2),
                        fmt(row["flatten_ratio"], 2),
                        _us(row["unflatten_s"], 2),
                        fmt(row["unflatten_ratio"], 2),
                    ]
                    for row in r["flatten"]
                ],
            ),
            *_stateful_lines([("3 floats, 1 leaf", r["stateful"])]),
        ]
    if "4" in res:
        r = res["4"]
        lines += [
            "",
            "## 4. Construction",
            "",
            *_table(
                "call | time (us) | ratio to inject_hyperparams | ratio to optax.adam",
                [
                    [
                        k,
                        _us(v["s"]),
                        fmt(v["ratio_to_inject"], 2) if "ratio_to_inject" in v else "",
                        fmt(v["ratio_to_optax_adam"], 2) if "ratio_to_optax_adam" in v else "",
                    ]
                    for k, v in r.items()
                ],
            ),
        ]
    if "5" in res:
        r = res["5"]
        lines += [
            "",
            f"## 5. Sweep of {r['n_configs']} learning rates, end to end ({r['rounds']} round(s))",
            "",
            *_table(
                "approach | time (s) | XLA compilations | speedup vs raw loop | max abs loss diff",
                [
                    [
                        k,
                        fmt(r[k]["s"], 2),
                        max(r[k]["compiles"]),
                        fmt(r[k]["speedup_vs_raw"], 2),
                        f"{r[k]['max_abs_loss_diff_vs_raw']:.1e}",
                    ]
                    for k in ("raw optax loop", "wrapped, Python loop", "wrapped, vmap")
                ],
            ),
        ]
    if "6" in res:
        r = res["6"]
        lines += [
            "",
            "## 6. Scaling",
            "",
            "Parameter tree of n leaves of 8 floats, adam init + one update, jitted: wrapped (d), "
            "the same function with the hyperparameters as a plain tuple of arrays, and raw optax "
            "with constant hyperparameters; then `tree_flatten` of the jit arguments "
            "`(tx, params, state)` against `(tuple of hyperparameter arrays, params, state)`:",
            "",
            *_table(
                "leaves | (d) per call (us) | (d) / plain arrays | (d) / raw optax | "
                "plain arrays / raw optax | flatten (us) | same, plain tuple (us) | overhead (us)",
                [
                    [
                        row["n_leaves"],
                        _us(row["steady_wrapped_s"]),
                        fmt(row["steady_ratio_to_plain"]),
                        fmt(row["steady_ratio_to_raw"]),
                        fmt(row["plain_ratio_to_raw"]),
                        _us(row["flatten_s"]),
                        _us(row["flatten_plain_s"]),
                        _us(row["flatten_overhead_s"], 2),
                    ]
                    for row in r["param_tree"]
                ],
            ),
            *_stateful_lines([(f"{row['n_leaves']} leaves", row["stateful"]) for row in r["param_tree"]]),
            "",
            "Wrapped `optax.chain` of k transforms (cached wrap of the children and the chain):",
            "",
            *_table(
                "k | leaves | wrap (us) | per transform (us) | optax.chain (us) | flatten (us) | "
                "per leaf (us) | flatten vs tuple | unflatten (us)",
                [
                    [
                        row["n_transforms"],
                        row["n_leaves"],
                        _us(row["wrap_s"]),
                        _us(row["wrap_per_transform_s"]),
                        _us(row["optax_chain_s"]),
                        _us(row["flatten_s"], 2),
                        _us(row["flatten_per_leaf_s"], 2),
                        fmt(row["flatten_ratio_to_tuple"], 2),
                        _us(row["unflatten_s"], 2),
                    ]
                    for row in r["chain"]
                ],
            ),
        ]
    return "\n".join(lines) + "\n"


def environment(args: argparse.Namespace, runtime: float, settings: Settings) -> dict[str, Any]:
    device = jax.devices()[0]
    return {
        "command": "python benchmarks/run.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "mode": "quick" if settings.quick else "full",
        "runtime_s": runtime,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "jax": jax.__version__,
        "optax": optax.__version__,
        "equinox": eqx.__version__ if hasattr(eqx, "__version__") else "?",
        "optax_pytree": opx.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": jax.default_backend(),
        "device": getattr(device, "device_kind", str(device)),
        "cpu_count": os.cpu_count(),
        "settings": dataclasses.asdict(settings),
        "only": args.only,
    }


SECTIONS: dict[str, tuple[str, Callable[[Settings, Callable[[str], None]], dict[str, Any]]]] = {
    "1": ("compilations and wall time for N configurations", section_compilations),
    "2": ("steady state", section_steady),
    "3": ("dispatch overhead", section_dispatch),
    "4": ("construction", section_construction),
    "5": ("sweeps", section_sweeps),
    "6": ("scaling", section_scaling),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer configurations and repeats (~1 min)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections, e.g. 1,3")
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick)
    chosen = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")

    def log(message: str) -> None:
        print(message, flush=True)

    start = time.perf_counter()
    counting = check_compile_counting()
    log(
        f"compile counting: {counting['method']}; cross-check with jax_log_compiles "
        f"{'agrees' if counting['agree'] else 'DISAGREES'} {counting['calls']}"
    )
    results: dict[str, Any] = {}
    for key in chosen:
        title, fn = SECTIONS[key]
        log(f"[{key}] {title}")
        t0 = time.perf_counter()
        results[key] = fn(settings, log)
        log(f"[{key}] done in {time.perf_counter() - t0:.1f} s")
    runtime = time.perf_counter() - start
    meta = environment(args, runtime, settings)
    meta["compile_counting"] = counting
    tgts = targets(results, settings)
    text = markdown(results, meta, tgts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    payload = {"meta": meta, "targets": [dataclasses.asdict(t) for t in tgts], "results": results}
    (args.out / "results.json").write_text(json.dumps(payload, indent=1, default=str))
    log("")
    log("targets:")
    for t in tgts:
        log(
            f"  {t.status:4}  §{t.section} {t.what}: {t.measured} (target {t.target})"
            + (f"  [{t.note}]" if t.note else "")
        )
    log(f"\nwrote {args.out / 'results.md'} and {args.out / 'results.json'} in {runtime:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
