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
import math
import os
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp

from _report import ratio

try:  # a test extra: without it the rows under eqx.filter_jit are left out (a bare accelerator machine)
    import equinox as eqx
except ImportError:  # pragma: no cover - depends on the environment
    eqx = None

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
HIT_EVENT = "/jax/compilation_cache/cache_hits"

Log = Callable[[str], None]


# --------------------------------------------------------------------------
# Settings.


PROFILES = ("full", "quick", "accelerator")
SCALES = ("tiny", "cpu", "accelerator")  # section 11's model sizes


@dataclasses.dataclass(frozen=True)
class Settings:
    profile: str  # one of PROFILES
    quick: bool  # fewer configurations (--quick, and the other sections of the accelerator profile)
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
    cache_only: tuple[str, ...]  # section 7: only these approaches (empty: all the profile runs)
    import_pairs: int  # section 8: pairs of fresh processes
    accel_scale: str  # section 11: model sizes, one of SCALES

    @classmethod
    def make(
        cls, quick: bool = False, *, accelerator: bool = False, tiny: bool = False, on_cpu: bool = True
    ) -> Settings:
        """The settings of a profile: full, ``quick``, or ``accelerator`` (section 11 at full sizes,
        the others as in quick mode, fewer processes). ``tiny``: section 11 at the sizes of quick
        mode whatever the profile (a CPU smoke run); ``on_cpu``: the default backend is the CPU
        (the full profile's section 11 then uses sizes a CPU runs in about a minute)."""
        if quick or accelerator:
            return cls(
                profile="accelerator" if accelerator else "quick",
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
                cache_only=("raw", "wrapped") if accelerator else (),
                import_pairs=2 if accelerator else 4,
                accel_scale="accelerator" if accelerator and not tiny else "tiny",
            )
        return cls(
            profile="full",
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
            cache_only=(),
            import_pairs=16,
            accel_scale="tiny" if tiny else "cpu" if on_cpu else "accelerator",
        )


FULL = Settings.make()  # for the configuration counts the targets name


# --------------------------------------------------------------------------
# Statistics and timing.


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min and max of the finite samples (NaN ones, a ratio to zero, are left out and counted).

    With no finite sample the figures are NaN and ``n`` is 0: ``_report.fmt`` writes n/a.
    """
    xs = [float(x) for x in samples]
    ok = [x for x in xs if math.isfinite(x)]
    if not ok:
        nan = float("nan")
        return {"median": nan, "min": nan, "max": nan, "n": 0, "samples": xs, "invalid": len(xs)}
    out = {"median": statistics.median(ok), "min": min(ok), "max": max(ok), "n": len(ok), "samples": xs}
    if len(ok) < len(xs):
        out["invalid"] = len(xs) - len(ok)
    return out


def rotated(seq: Sequence[Any], r: int) -> list[Any]:
    """``seq`` rotated left by ``r`` places (modulo its length)."""
    r %= len(seq)
    return [*seq[r:], *seq[:r]]


# Micro-benchmarks (sections 3, 4, 6, 9) are single-threaded Python work timed
# in process CPU time, which a busy neighbour on a shared machine does not
# inflate (preemption is not counted); sections 1, 2, 5, 7 and 11 are wall time.
# Process CPU time means nothing on an accelerator backend (the device's work
# is not in it; on a TPU host it read 0 for a short call), nor where the
# clock is coarse: there, and for any measurement with a zero CPU sample, the
# micro-benchmarks are timed in wall time (``micro_clock``).
CPU_CLOCK = time.process_time
WALL_CLOCK = time.perf_counter
PROBE_S = 0.005  # busy work that the CPU clock must see advance in fine steps
MAX_TICK_S = 1e-4  # coarser steps than this: the CPU clock cannot time a 2 ms sample


@dataclasses.dataclass
class MicroClock:
    """The clock of the micro-benchmarks, chosen once per process."""

    cpu: bool  # process CPU time; else wall time
    reason: str
    fallbacks: list[str] = dataclasses.field(default_factory=list)  # measurements retimed in wall time

    @property
    def name(self) -> str:
        return "process CPU time" if self.cpu else "wall time"

    def describe(self) -> str:
        again = f"; {len(self.fallbacks)} measurement(s) retimed in wall time (a zero CPU sample)"
        return f"{self.name} ({self.reason}){again if self.fallbacks else ''}"


_MICRO: list[MicroClock] = []  # the one chosen, once the backend is up


def _probe_cpu_clock() -> tuple[bool, str]:
    """Whether process CPU time can time this process's micro-benchmarks, and why."""
    backend = jax.default_backend()
    if backend != "cpu":
        return False, f"{backend} backend: the device's work is not process CPU time"
    c0 = last = CPU_CLOCK()
    ticks = 0
    end = WALL_CLOCK() + PROBE_S
    while WALL_CLOCK() < end:
        c = CPU_CLOCK()
        if c != last:
            ticks, last = ticks + 1, c
    if ticks == 0 or last <= c0:
        return False, f"process CPU time did not advance over {PROBE_S * 1e3:.0f} ms of busy work"
    step = (last - c0) / ticks
    if step > MAX_TICK_S:
        return False, f"process CPU time advances in steps of {step * 1e3:.2f} ms"
    return True, "CPU backend, fine-grained"


def micro_clock_info() -> MicroClock:
    if not _MICRO:
        _MICRO.append(MicroClock(*_probe_cpu_clock()))
    return _MICRO[0]


def cpu_time_usable() -> bool:
    """Process CPU time means something here (the CPU backend, a fine-grained clock)."""
    return micro_clock_info().cpu


def micro_clock() -> Callable[[], float]:
    return CPU_CLOCK if cpu_time_usable() else WALL_CLOCK


class ClockStopped(Exception):
    """The clock did not advance while the wall clock did: time the measurement in wall time."""


def time_calls(
    fn: Callable[[], Any], number: int, clock: Callable[[], float] | None = None, wait: bool = True
) -> float:
    """Seconds per call over ``number`` calls of ``fn``, waiting for the last result.

    ``clock``: ``micro_clock()`` by default. ``wait=False`` for pure Python
    work (flatten, unflatten): nothing to wait for, and ``block_until_ready``
    would flatten the result again.
    """
    clock = clock or micro_clock()
    res: Any = None
    t0 = clock()
    for _ in range(number):
        res = fn()
    if wait:
        jax.block_until_ready(res)
    return (clock() - t0) / number


def calibrate(
    fn: Callable[[], Any], seconds: float, clock: Callable[[], float] | None = None, wait: bool = True
) -> int:
    """Calls per sample so that one sample lasts about ``seconds``.

    Raises ``ClockStopped`` when ``clock`` shows nothing after ``seconds`` of wall time.
    """
    clock = clock or micro_clock()
    if wait:
        jax.block_until_ready(fn())
    number = 1
    while True:
        w0 = WALL_CLOCK()
        elapsed = time_calls(fn, number, clock, wait) * number
        if elapsed >= seconds / 4 or number >= 1 << 20:
            return max(1, int(number * seconds / max(elapsed, 1e-9)))
        if elapsed <= 0 and clock is not WALL_CLOCK and WALL_CLOCK() - w0 >= seconds:
            raise ClockStopped
        number *= 4


def interleaved(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    seconds: float,
    clock: Callable[[], float] | None = None,
    pure: Collection[str] = (),
) -> dict[str, list[float]]:
    """Seconds per call of each function, sampled in turn (order rotated each repeat).

    Sample ``i`` of every function is taken within the same short window, so
    ratios of samples with the same index are paired against load changes.
    The functions named in ``pure`` return nothing asynchronous (no waiting).
    ``clock``: ``micro_clock()`` by default; a measurement in which another
    clock than the wall clock gives a zero sample (or stops) is taken again
    in wall time, and named in ``micro_clock_info().fallbacks``.
    """
    clock = clock or micro_clock()
    if clock is not WALL_CLOCK:
        try:
            out = _interleaved(fns, repeats, seconds, clock, pure)
            if all(x > 0 for xs in out.values() for x in xs):
                return out
        except ClockStopped:
            pass
        micro_clock_info().fallbacks.append(", ".join(fns))
    return _interleaved(fns, repeats, seconds, WALL_CLOCK, pure)


def _interleaved(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    seconds: float,
    clock: Callable[[], float],
    pure: Collection[str],
) -> dict[str, list[float]]:
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
    """Per-sample ratios; NaN (left out by ``summary``) where a denominator is zero."""
    return [ratio(a, b) for a, b in zip(num, den)]


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
    one pair. The CPU samples mean something only where ``cpu_time_usable()``.
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


def cpu_ratios(c_fn: Sequence[float], c_ref: Sequence[float]) -> tuple[dict[str, Any] | None, str]:
    """The CPU-time ratio of ``paired_abba``'s samples, or None and why it is not reported."""
    if not cpu_time_usable():
        return None, f"wall time only: {micro_clock_info().reason}"
    if min([*c_fn, *c_ref]) <= 0:
        return None, "wall time only: a CPU sample was zero"
    return summary(ratios(c_fn, c_ref)), ""


# --------------------------------------------------------------------------
# Child processes and the run's time budget.

CHILDREN_ON_CPU = (
    "child processes run JAX on the CPU (JAX_PLATFORMS=cpu): only one process may hold an accelerator"
)


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child process's environment: ``env`` (default this process's, PYTHONPATH and all) with
    ``JAX_PLATFORMS=cpu``, so the child never opens the accelerator this process holds."""
    return {**(os.environ if env is None else env), "JAX_PLATFORMS": "cpu"}


class Budget:
    """The wall time a run may still spend (``run.py --budget``); unlimited unless started."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def start(self, seconds: float, since: float) -> None:
        self.deadline = since + seconds if seconds > 0 else None

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - WALL_CLOCK()

    def allows(self, seconds: float) -> bool:
        return self.left() >= seconds


BUDGET = Budget()


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


class _CacheHits:
    """Persistent-cache hits in this process (one ``jax.monitoring`` listener, registered once)."""

    def __init__(self) -> None:
        self.count = 0
        self.listening = False

    def listen(self) -> None:
        if not self.listening:
            jax.monitoring.register_event_listener(self._event)
            self.listening = True

    def _event(self, event: str, **kwargs: Any) -> None:
        if event == HIT_EVENT:
            self.count += 1


HITS = _CacheHits()


@contextlib.contextmanager
def no_persistent_cache() -> Iterator[None]:
    saved = cast(Any, jax.config).jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", saved)


def compile_sample(jitted: Any, args: Sequence[Any], compile: bool = True) -> dict[str, float]:
    """Trace, lower and compile ``jitted`` (``jax.jit`` of a new function object, :func:`fresh`:
    nothing of it in JAX's in-memory caches; call it inside :func:`no_persistent_cache`) at
    ``args``; ``compile=False``: no compile. The times of each, their total, the XLA
    compilations seen and the persistent-cache hits."""
    HITS.listen()
    hits = HITS.count
    with COMPILES.window() as found:
        t0 = WALL_CLOCK()
        traced = jitted.trace(*args)
        t1 = WALL_CLOCK()
        lowered = traced.lower()
        t2 = WALL_CLOCK()
        if compile:
            lowered.compile()
        t3 = WALL_CLOCK()
    return {
        "trace_s": t1 - t0,
        "lower_s": t2 - t1,
        "compile_s": t3 - t2,
        "total_s": t3 - t0,
        "compiles": len(found),
        "cache_hits": HITS.count - hits,
    }


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
