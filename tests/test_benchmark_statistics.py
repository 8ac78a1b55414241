"""The benchmarks' statistics never divide by zero, and a stopped CPU clock falls back to wall time.

On a TPU host, process CPU time read 0 for a short call and ``benchmarks/run.py
--quick`` stopped with a ``ZeroDivisionError`` in a ratio. ``benchmarks/`` is not
a package: its modules import each other by name, so its folder goes on
``sys.path`` for these tests.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[ModuleType, ModuleType]]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("_common"), importlib.import_module("_report")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_a_zero_denominator_is_left_out_not_divided_by(bench: tuple[ModuleType, ModuleType]) -> None:
    common, report = bench
    assert math.isnan(report.ratio(1.0, 0.0))
    assert common.ratios([1.0, 4.0, 3.0], [0.0, 2.0, 0.0])[1] == 2.0
    stat = common.summary(common.ratios([1.0, 4.0, 3.0], [0.0, 2.0, 0.0]))
    assert (stat["median"], stat["n"], stat["invalid"]) == (2.0, 1, 2)
    empty = common.summary(common.ratios([1.0, 2.0], [0.0, 0.0]))
    assert empty["n"] == 0
    assert report.fmt(empty) == "n/a"
    target = report.on_median(2, "a ratio", empty, "≤ 1.02", 1.02)
    assert target.status == "n/a"
    assert "zero denominator" in target.note
    # Section 2's CPU-time ratio: none from a zero CPU sample.
    cpu, why = common.cpu_ratios([0.0, 0.1], [0.1, 0.1])
    assert cpu is None
    assert why.startswith("wall time only")


def test_a_stopped_cpu_clock_is_retimed_in_wall_time(bench: tuple[ModuleType, ModuleType]) -> None:
    common, _ = bench
    before = len(common.micro_clock_info().fallbacks)
    t = common.interleaved(
        {"work": lambda: sum(range(2000))}, repeats=3, seconds=0.001, clock=lambda: 0.0, pure=["work"]
    )
    assert len(t["work"]) == 3
    assert all(x > 0 for x in t["work"])
    assert len(common.micro_clock_info().fallbacks) == before + 1
    # Child processes run JAX on the CPU, the rest of their environment kept.
    env = common.child_env({"PYTHONPATH": "/somewhere", "JAX_PLATFORMS": "tpu"})
    assert env == {"PYTHONPATH": "/somewhere", "JAX_PLATFORMS": "cpu"}


def test_tpu_programs_reads_an_optimized_program() -> None:
    # benchmarks/tpu_programs.py compiles for a TPU without the chip (libtpu, not installed
    # here); what it does with the compiled text is the same for any backend's: the CPU's.
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(BENCHMARKS))
    try:
        tpu_programs = importlib.import_module("tpu_programs")
    finally:
        sys.path.remove(str(BENCHMARKS))
    text = jax.jit(lambda x: jnp.cos(x * 0.25) * 3.0).lower(jnp.ones(4)).compile().as_text()
    compacted = tpu_programs.compact(text)
    assert compacted.startswith(("%", "ENTRY")) and "metadata=" not in compacted
    ops, constants = tpu_programs.summary(compacted)
    assert ops.get("cosine", 0) + ops.get("fusion", 0) >= 1
    assert "0.25" in constants and "3" in constants
