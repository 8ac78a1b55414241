"""One Optuna study over 2 worker processes: shared SQLite storage, shared compilation cache.

Runs ``examples/optuna_multiprocess.py`` on a tiny study (2 processes, each
2 batches of 3 trials as one vmapped call) and checks, in the study's storage
and in the counts each worker reports: every trial is there, finished, and
made by the worker that says so; the second worker, told to start once the
first has compiled, finds every program in the persistent cache (0 misses).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

# A job of several processes: in the exhaustive set (pytest --exhaustive; CI runs it).
pytestmark = pytest.mark.exhaustive

optuna = pytest.importorskip("optuna", reason="the Optuna example needs optuna (a test extra)")

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "optuna_multiprocess.py"
BATCH, BATCHES, WORKERS = 3, 2, 2


def test_two_workers_share_one_study_and_one_compilation(tmp_path: pathlib.Path) -> None:
    summary = tmp_path / "summary.json"
    command = [sys.executable, str(EXAMPLE), "--modes", "wrapped", "--dir", str(tmp_path / "studies")]
    command += ["--batch", str(BATCH), "--batches", str(BATCHES), "--summary", str(summary)]
    env = {**os.environ, "OPTAX_PYTREE_SMOKE": "1", "MPLBACKEND": "Agg"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(summary.read_text())["wrapped"]
    first, second = run["workers"]
    assert [first["worker"], second["worker"]] == [1, 2]

    # The storage holds every trial, finished, each made by the worker that reported it.
    study = optuna.load_study(study_name="optax_pytree_multiprocess", storage=run["storage"])
    trials = study.trials
    assert len(trials) == WORKERS * BATCHES * BATCH
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    assert all(t.state in finished for t in trials), [t.state for t in trials]
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) >= 1
    for worker in (first, second):
        assert len(worker["trials"]) == BATCHES * BATCH
        assert sorted(t.number for t in trials if t.user_attrs["worker"] == worker["worker"]) == sorted(
            worker["trials"]
        )
    assert sorted(first["trials"] + second["trials"]) == [t.number for t in trials]

    # One trace of the batched training per worker. The first compiles every
    # program (a hit there is a program it compiled twice); the second runs the
    # same programs and loads every one from the cache.
    assert first["traces"] == second["traces"] == 1
    assert first["misses"] > 0
    assert second["misses"] == 0
    assert second["hits"] == second["lookups"] == first["lookups"]
