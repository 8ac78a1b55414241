"""Shared by every section: settings, statistics, timing, counting.

The sections are described in ``run.py``'s docstring; this module holds no
measurement of its own, and ``_report.py`` the formatting of the results.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

Log = Callable[[str], None]


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
    cache_rounds: int  # section 7: rounds of fresh processes (a fresh cache each)
    cache_controls: bool  # section 7: also raw optax with a new schedule, and the same-value control

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(
                quick=True,
                n_configs=4,
                rounds=1,
                steady_pairs=11,
                micro_repeats=41,
                micro_seconds=0.002,
                first_wrap_samples=5,
                sweep_configs=4,
                sweep_rounds=1,
                leaf_counts=(10, 100),
                chain_lengths=(1, 4, 16),
                cache_rounds=1,
                cache_controls=False,
            )
        return cls(
            quick=False,
            n_configs=20,
            rounds=3,
            steady_pairs=61,
            micro_repeats=101,
            micro_seconds=0.002,
            first_wrap_samples=15,
            sweep_configs=16,
            sweep_rounds=3,
            leaf_counts=(10, 100, 1000),
            chain_lengths=(1, 4, 16),
            cache_rounds=3,
            cache_controls=True,
        )


FULL = Settings.make(quick=False)  # for the configuration counts the targets name


# --------------------------------------------------------------------------
# Statistics and timing.


def summary(samples: Sequence[float]) -> dict[str, Any]:
    xs = [float(x) for x in samples]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs), "samples": xs}


def rotated(seq: Sequence[Any], r: int) -> list[Any]:
    """``seq`` rotated left by ``r`` places (modulo its length)."""
    r %= len(seq)
    return [*seq[r:], *seq[:r]]


# Micro-benchmarks (sections 3, 4, 6) are single-threaded Python work timed
# in process CPU time, which a busy neighbour on a shared machine does not
# inflate (preemption is not counted); sections 1, 2, 5 and 7 are wall time.
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


def compared(t: dict[str, list[float]], key: str, ref: str = "plain") -> dict[str, Any]:
    """The samples ``t[key]`` against ``t[f"{key}_{ref}"]``: both, their ratio and difference."""
    x, y = t[key], t[f"{key}_{ref}"]
    return {
        f"{key}_s": summary(x),
        f"{key}_{ref}_s": summary(y),
        f"{key}_ratio": summary(ratios(x, y)),
        f"{key}_overhead_s": summary([a - b for a, b in zip(x, y)]),
    }


def paired_abba(
    ref: Callable[[], Any], fn: Callable[[], Any], pairs: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Wall and CPU seconds of ``fn`` and ``ref``, called alternately (ABBA), each waited for.

    Returns ``(fn wall, ref wall, fn cpu, ref cpu)``; sample ``i`` of each is
    one pair.
    """
    t_ref: list[float] = []
    t_fn: list[float] = []
    c_ref: list[float] = []
    c_fn: list[float] = []
    for i in range(pairs):
        pair = ((ref, t_ref, c_ref), (fn, t_fn, c_fn))
        for f, wall, cpu in pair if i % 2 == 0 else pair[::-1]:
            t0, c0 = WALL_CLOCK(), CPU_CLOCK()
            jax.block_until_ready(f())
            wall.append(WALL_CLOCK() - t0)
            cpu.append(CPU_CLOCK() - c0)
    return t_fn, t_ref, c_fn, c_ref


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


class Capture(logging.Handler):
    """Keeps the messages of the records it is given."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def check_compile_counting() -> dict[str, Any]:
    """The monitoring listener and ``jax_log_compiles`` agree on a fresh function."""
    logger = logging.getLogger("jax")
    capture = Capture()
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
