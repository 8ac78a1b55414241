"""pytest at the repository root: the default run and the exhaustive sets, and doctests.

**The default run** (``pytest``, the README's test command) checks every
module, the code of every guide page and every example's smoke run, and a
representative slice of the large sets: each factory family of optax's
catalogue, each combinator and inner of the composition matrix, each source
of the corpus. It keeps to a budget (``tests/test_budget.py``): a number of
tests, and on CI's machine a time. The heaviest tests (``HEAVY``: the
longest guide pages and examples, the end-to-end jobs, each over 4 s) are in
the exhaustive sets, which CI runs: the default run stays under its time on
a 2-core machine.

**The exhaustive sets** are the tests marked ``exhaustive``: the rest of the
catalogue (bit for bit, and through the drop-in), of the corpus and of the
composition pairs, the proofs that each listed exception is only XLA's
rewrites around constants, and the multi-process jobs. They are deselected
by default; one switch turns them on:

- ``pytest --exhaustive`` (or ``OPTAX_PYTREE_EXHAUSTIVE=1``): everything;
- ``pytest --exhaustive -m exhaustive``: only what the default run leaves
  out (CI runs the default run, then this: nothing twice, nothing dropped).

**One compilation cache per run.** Many tests compile the same programs
(plain optax's reference steps, the eager operations every new Python
process compiles again: the examples, the guide pages). The run shares one
JAX persistent compilation cache, a new temporary folder removed at the end,
among its workers and the processes they start: a run never reads what
another run compiled. A ``JAX_COMPILATION_CACHE_DIR`` already set is used
instead (and kept); ``OPTAX_PYTREE_RUN_CACHE=0`` turns the cache off.

**No analyses from disk.** A test sees the analysis of each configuration
it wraps made in its own process (``clear_caches`` forgets them; a planted
fault is found by the verification, not read back): the analyses kept on
disk (``optax_pytree._disk``) are off unless ``OPTAX_PYTREE_ANALYSIS_CACHE``
is set; ``tests/test_disk_cache.py`` turns them on in its own folders.

``OPTAX_PYTREE_TIME_BUDGET=SECONDS`` (CI sets it for the README's command)
fails a run that takes longer, saying which tests took the time.

``--part K/N`` runs the K-th of N consecutive parts of what the run selects
(the suite on an accelerator, one process at a time, in calls of limited
time): the N parts together are the run.

``optax_pytree.nnx`` and ``optax_pytree.linen`` need flax, an optional
dependency; without it their doctest modules cannot be imported (by design:
an ImportError that says so, tested in tests/test_flax.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import pytest

# Set before anything is imported or started (the workers, the fork server and
# every process they start inherit it).
os.environ.setdefault("OPTAX_PYTREE_ANALYSIS_CACHE", "0")

collect_ignore = []
if importlib.util.find_spec("flax") is None:
    collect_ignore += ["optax_pytree/nnx.py", "optax_pytree/linen.py"]

EXHAUSTIVE_ENV = "OPTAX_PYTREE_EXHAUSTIVE"
TIME_BUDGET_ENV = "OPTAX_PYTREE_TIME_BUDGET"
RUN_CACHE_ENV = "OPTAX_PYTREE_RUN_CACHE"

# What the session collected and selected, for tests/test_budget.py.
SELECTED = pytest.StashKey[list[str]]()
DESELECTED = pytest.StashKey[int]()
STARTED = pytest.StashKey[float]()
RUN_CACHE = pytest.StashKey[str]()  # the run's compilation cache, made (and removed) by this process


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--exhaustive",
        action="store_true",
        default=False,
        help="also run the exhaustive sets (tests marked 'exhaustive': the whole catalogue, corpus and "
        f"composition pairs, the multi-process jobs); also {EXHAUSTIVE_ENV}=1. CI runs them.",
    )

    parser.addoption(
        "--part",
        default=None,
        metavar="K/N",
        help="run only the K-th of N parts (1 to N) of the tests this run selects: in their order, "
        "each about 1/N of them; the N runs together run each test once (the suite on an accelerator "
        "in calls of limited time: docs/guide/testing.md)",
    )


def part(config: pytest.Config) -> tuple[int, int] | None:
    """``(k, n)`` of ``--part k/n``, or None."""
    text = config.getoption("--part")
    if text is None:
        return None
    try:
        k, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise pytest.UsageError(f"--part takes K/N, two integers (1 <= K <= N), not {text!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--part {text}: K must be from 1 to N")
    return k, n


def exhaustive(config: pytest.Config) -> bool:
    """Whether this run includes the exhaustive sets."""
    return bool(config.getoption("--exhaustive")) or os.environ.get(EXHAUSTIVE_ENV, "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "exhaustive: part of the exhaustive sets, deselected unless --exhaustive (CI runs them)",
    )
    config.stash[STARTED] = time.perf_counter()
    if not hasattr(config, "workerinput"):  # xdist's workers inherit the controller's environment
        _share_one_compilation_cache(config)


def _share_one_compilation_cache(config: pytest.Config) -> None:
    """Points JAX's persistent compilation cache of this run (and of what it starts) at a new folder."""
    if os.environ.get(RUN_CACHE_ENV, "") == "0" or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    folder = tempfile.mkdtemp(prefix="optax_pytree-run-cache-")
    config.stash[RUN_CACHE] = folder
    settings = {
        "JAX_COMPILATION_CACHE_DIR": folder,
        # Every program, however small or quick to compile: the eager operations are most of them.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    os.environ.update(settings)
    if "jax" in sys.modules:  # imported already (a plugin): jax read its environment at import
        import jax

        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(RUN_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# The default run's heaviest tests, in the exhaustive sets (CI runs them): the seconds each took
# in the default run on 2026-12-08 on the 2-core machine, where that run took 345 to 359 s with
# them (CI's budget: 300 s).
_HEAVY: dict[str, dict[str, float]] = {
    "tests/test_docs.py": {
        "test_page_code_runs[guide/sweeps.md]": 23.1,
        "test_page_code_runs[guide/meta-learning.md]": 13.1,
        "test_page_code_runs[guide/flax.md]": 7.2,
        "test_page_code_runs[guide/equinox.md]": 5.5,
        "test_page_code_runs[guide/checkpoints.md]": 5.4,
        "test_page_code_runs[guide/how-wrapping-is-checked.md]": 5.3,
        "test_page_code_runs[guide/population-based-training.md]": 4.7,
    },
    "tests/test_examples.py": {
        "test_example_runs[digits_nnx.py]": 12.7,
        "test_example_runs[sweep.py]": 9.4,
        "test_example_runs[optuna_batched.py]": 5.3,
    },
    "tests/test_population.py": {
        "test_a_donated_population_gives_its_buffers_to_the_outputs": 10.5,
        "test_auto_takes_the_fastest_by_the_probe_and_remembers_it": 6.2,
    },
    "tests/test_dropin.py": {
        "test_script_optimizer_is_an_ordinary_jit_argument": 10.2,
        "test_script_runs_unchanged_with_the_same_losses": 5.7,
    },
    "tests/test_multiprocess.py": {
        "test_in_one_process_they_are_shard_and_a_move_to_one_device_and_checkpoints_restore": 7.9,
    },
    "tests/test_corpus.py": {
        "test_as_quiet_as_plain_optax[flax-imagenet-sgd-nesterov-warmup-cosine]": 7.8,
    },
    "tests/test_exactness_fixes.py": {
        "test_only_the_closure_cell_the_verification_needs_is_static_and_a_sweep_compiles_once": 7.4,
    },
    "tests/test_sweep.py": {
        "test_sharded_sweep_equals_the_unsharded_one": 6.2,
    },
    "tests/test_real_programs.py": {
        "test_probing_shows_nothing_the_program_sees_what_optax_shows": 5.9,
        "test_a_failure_of_the_mechanism_degrades_to_static_with_one_warning[difference]": 5.0,
    },
    "tests/test_flax.py": {
        "test_linen_train_state_subclass_with_batch_stats[plain-tx]": 4.7,
    },
}
HEAVY = {f"{path}::{name}": seconds for path, tests in _HEAVY.items() for name, seconds in tests.items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in HEAVY:
            item.add_marker(pytest.mark.exhaustive)
    dropped: list[pytest.Item] = []
    if not exhaustive(config):
        kept = [item for item in items if item.get_closest_marker("exhaustive") is None]
        dropped = [item for item in items if item.get_closest_marker("exhaustive") is not None]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    config.stash[SELECTED] = [item.nodeid for item in items]
    config.stash[DESELECTED] = len(dropped)
    which = part(config)
    if which is not None:
        k, n = which
        first, end = (len(items) * (k - 1)) // n, (len(items) * k) // n
        config.hook.pytest_deselected(items=items[:first] + items[end:])
        items[:] = items[first:end]


# Test files skipped as a whole when collected (an optional dependency
# missing: flax, scikit-learn): still visited by the run (tests/test_budget.py).
SKIPPED_FILES: set[str] = set()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and report.nodeid.endswith(".py"):
        SKIPPED_FILES.add(report.nodeid)


def pytest_report_header(config: pytest.Config) -> str:
    if exhaustive(config):
        return "optax_pytree: the exhaustive sets are on"
    return "optax_pytree: the default run (the exhaustive sets are off; pytest --exhaustive runs them)"


BUDGET_LINES = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    dropped = config.stash.get(DESELECTED, 0)
    if dropped:
        terminalreporter.write_line(
            f"optax_pytree: {dropped} tests of the exhaustive sets not run (pytest --exhaustive runs them)"
        )
    elif not exhaustive(config) and DESELECTED not in config.stash:
        # pytest-xdist's controller collects nothing itself: its workers deselected them.
        terminalreporter.write_line("optax_pytree: the exhaustive sets not run (pytest --exhaustive)")
    for line in config.stash.get(BUDGET_LINES, []):
        terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    budget = os.environ.get(TIME_BUDGET_ENV, "")
    if not budget or hasattr(session.config, "workerinput"):  # the controller's run, not a worker's
        return
    took = time.perf_counter() - session.config.stash[STARTED]
    limit = float(budget)
    lines = [f"optax_pytree: the run took {took:.0f} s; its budget ({TIME_BUDGET_ENV}): {limit:.0f} s"]
    if took > limit:
        lines.append("optax_pytree: over budget: see the slowest tests (--durations) above")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    session.config.stash[BUDGET_LINES] = lines  # printed in the summary, after this hook
