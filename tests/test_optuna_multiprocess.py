"""One Optuna study over several worker processes: shared storage, one compilation, nothing lost.

Runs ``examples/optuna_multiprocess.py`` on tiny studies in SQLite (the
embedded default) and checks, in the study's storage itself: every trial
number once, none RUNNING or WAITING, the requested number COMPLETE, the
trials of a killed worker failed as stale and run again, one compilation of
the training step in the whole study (per-batch counts the workers write
into the trials). A rerun loads the same studies (one per mode, in one
database) and adds its trials. ``tests/test_optuna_postgres.py`` runs the
same on a PostgreSQL server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from warm_python import on_the_cpu

# A job of several processes: in the exhaustive set (pytest --exhaustive; CI runs it).
pytestmark = pytest.mark.exhaustive

optuna = pytest.importorskip("optuna", reason="the Optuna example needs optuna (a test extra)")

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "optuna_multiprocess.py"
BATCH, BATCHES = 3, 2
# Short heartbeats, so that a dead worker's trials are found stale in seconds;
# the grace period is long enough that a live worker on a busy machine (CI's
# stages side by side on 2 cores) is never taken for dead: its heartbeat
# thread runs while XLA compiles (jax releases the GIL), so only a process
# starved of CPU for 10 s would miss its beats.
DRILL = ["--heartbeat", "1", "--grace", "10"]


def run_example(tmp_path: pathlib.Path, *args: str, **env: str) -> tuple[str, dict[str, Any]]:
    """Runs the launcher with ``args`` (smoke sizes); its output and its summary."""
    summary = tmp_path / f"summary-{len(list(tmp_path.glob('summary-*')))}.json"
    command = [sys.executable, str(EXAMPLE), "--batch", str(BATCH), "--batches", str(BATCHES), *DRILL]
    command += ["--summary", str(summary), *args]
    full_env = {**on_the_cpu(os.environ), "OPTAX_PYTREE_SMOKE": "1", "MPLBACKEND": "Agg", **env}
    result = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output, json.loads(summary.read_text())


def check_study(url: str, name: str, requested: int) -> list[Any]:
    """The study in the database: nothing lost, nothing twice, one compilation of the training step."""
    trials = sorted(
        optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False), key=lambda t: t.number
    )
    states = [t.state.name for t in trials]
    assert sorted(t.number for t in trials) == list(range(len(trials)))  # every number once
    assert states.count("RUNNING") == states.count("WAITING") == 0, states
    assert states.count("COMPLETE") == requested, states
    # What a dead worker held was failed as stale and asked again (Optuna's retry
    # callback names the trial it retries), and that retry has finished.
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    for t in trials:
        if t.state.name == "FAIL" and "compiled" not in t.user_attrs:  # stale (a diverged one has its counts)
            assert t.number in retried, f"stale trial #{t.number} was not asked again"
    assert all(trials[n].state.name == "FAIL" for n in retried)
    # Each batch's trials carry the number of programs its training call compiled.
    batches = {t.user_attrs["batch"]: t.user_attrs["compiled"] for t in trials if "compiled" in t.user_attrs}
    assert {t.user_attrs["batch"] for t in trials if t.state.name == "COMPLETE"} <= set(batches)
    return trials


def training_compilations(trials: list[Any], run: str | None = None) -> int:
    """Compilations of the training step in the study (or in one run of the launcher), as the trials say."""
    batches = {
        t.user_attrs["batch"]: t.user_attrs["compiled"]
        for t in trials
        if "compiled" in t.user_attrs and run in (None, t.user_attrs["run"])
    }
    return sum(batches.values())


def test_workers_share_one_study_and_one_compilation_and_a_killed_one_loses_nothing(
    tmp_path: pathlib.Path,
) -> None:
    studies = tmp_path / "studies"
    # Worker 1 is killed holding its first batch, before its first compilation has finished:
    # worker 2 compiles instead, a replacement starts, the dead one's trials are asked again.
    output, runs = run_example(tmp_path, "--dir", str(studies), "--workers", "2", "--kill", "1:1")
    url = f"sqlite:///{studies / 'study.db'}"
    wrapped, plain = runs["wrapped"], runs["plain"]
    requested = 2 * BATCHES * BATCH
    assert wrapped["complete"] and wrapped["requested"] == requested
    assert [d["worker"] for d in wrapped["deaths"]] == [1]
    assert "worker 1 (pid" in output and "killed by SIGKILL" in output
    trials = check_study(url, "optax_pytree_multiprocess-wrapped", requested)
    assert len(wrapped["retried"]) == BATCH  # the batch worker 1 held
    # One compilation of the training step in the whole study: by the worker
    # told to go when worker 1 died; every other loaded it from the cache.
    assert training_compilations(trials) == wrapped["training_compilations"] == 1
    results = [w["result"] for w in wrapped["workers"] if w["result"] is not None]
    assert [w["number"] for w in wrapped["workers"]] == [1, 2, 3]  # 3 replaces 1
    assert wrapped["workers"][2]["replaces"] == 1
    # The replacement may find the survivor has done everything (no batch, no trace).
    assert results[0]["traces"] == 1 and results[1]["traces"] <= 1
    assert [r["training_compilations"] for r in results] == [1, 0]
    # The replacement, started once the cache held the study's programs, compiled
    # nothing at all. (Its lookups are not compared with those of the worker that
    # compiled: the first wrap of a configuration in a process with no analysis on
    # disk compiles two small programs of the library's analysis, and later
    # processes read that analysis from disk, or not, depending on the user's
    # OPTAX_PYTREE_ANALYSIS_CACHE: examples/optuna_multiprocess.py, issue #36.)
    assert results[1]["misses"] == 0 and results[1]["hits"] == results[1]["lookups"] > 0
    # Every COMPLETE trial was told by a worker that reports it.
    told = {n for r in results for n in r["trials"]}
    assert {t.number for t in trials if t.state.name == "COMPLETE"} <= told

    # Plain optax in the same database, its own study: a compilation per trial.
    assert plain["complete"] and plain["storage"] == wrapped["storage"] == url
    plain_trials = check_study(url, "optax_pytree_multiprocess-plain", plain["requested"])
    assert training_compilations(plain_trials) == plain["requested"]

    # A rerun loads both studies (no DuplicatedStudyError) and adds its trials;
    # the cache kept in the folder holds the training program: no compilation.
    _, again = run_example(tmp_path, "--dir", str(studies), "--workers", "2", "--modes", "wrapped")
    trials = check_study(url, "optax_pytree_multiprocess-wrapped", 2 * requested)
    assert again["wrapped"]["goal"] == 2 * requested and not again["wrapped"]["deaths"]
    assert training_compilations(trials, again["wrapped"]["run"]) == 0


def _example() -> Any:
    """The example as a module (its argument parsing and storage helpers)."""
    if "optuna_multiprocess" in sys.modules:
        return sys.modules["optuna_multiprocess"]
    sys.path.insert(0, str(EXAMPLE.parent))  # for its `_shared`
    try:
        spec = importlib.util.spec_from_file_location("optuna_multiprocess", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclass looks its module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLE.parent))


def test_the_password_is_masked_wherever_the_url_is_shown() -> None:
    masked = _example().masked
    assert masked("postgresql+psycopg://me:s3cret@db.example:5432/hpo") == (
        "postgresql+psycopg://me:***@db.example:5432/hpo"
    )
    assert "s3cret" not in masked("postgresql://me@db/hpo?password=s3cret&sslmode=require")
    assert masked("sqlite:////tmp/study.db") == "sqlite:////tmp/study.db"


def test_a_flag_the_launcher_does_not_honour_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    example = _example()
    for flag in (["--run", "x"], ["--die-at", "1"], ["--wait"], ["--mode", "plain"]):
        with pytest.raises(SystemExit):
            example.parse(flag)
        assert "set by the launcher for its workers only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.parse(["--kill", "3:1", "--workers", "2"])
    assert "no such worker" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="in-memory SQLite"):
        example.check_driver("sqlite://")


def test_a_missing_driver_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg 3 were not installed
    with pytest.raises(SystemExit) as error:
        _example().check_driver("postgresql+psycopg://me:s3cret@db/hpo")
    message = str(error.value)
    assert 'pip install "optax_pytree[postgres]"' in message and "s3cret" not in message
