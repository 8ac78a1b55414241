"""One Optuna study on a real PostgreSQL server: 4 worker processes, one killed mid-study, nothing lost.

The server is the one ``OPTAX_PYTREE_TEST_POSTGRES`` names (a SQLAlchemy URL,
``postgresql+psycopg://user:password@host:port/db``); ``.ci/run`` starts a
throwaway cluster and sets it, so CI never skips this test. Without it the
test is skipped, saying so.

``examples/optuna_multiprocess.py`` gets the URL as a user would give it,
through ``OPTUNA_STORAGE``; worker 1, the one that compiles, is killed
(SIGKILL) holding its second batch. Checked in the database itself: every
trial number once, none RUNNING, the requested number COMPLETE, the dead
worker's trials failed as stale and run again, one compilation of the training
step in the whole study; and the password in no output and on no worker's
command line.
"""

from __future__ import annotations

import os
import pathlib
import uuid

import pytest
from test_optuna_multiprocess import BATCH, BATCHES, check_study, run_example, training_compilations

# A job of several processes on a server: in the exhaustive set (pytest --exhaustive; CI runs it).
pytestmark = pytest.mark.exhaustive

optuna = pytest.importorskip("optuna", reason="the Optuna example needs optuna (a test extra)")

SERVER_ENV = "OPTAX_PYTREE_TEST_POSTGRES"
URL = os.environ.get(SERVER_ENV, "")
WORKERS = 4


@pytest.mark.skipif(
    not URL, reason=f"no PostgreSQL server: {SERVER_ENV} is not set (.ci/run starts one and sets it)"
)
def test_four_workers_on_postgresql_one_killed_mid_study(tmp_path: pathlib.Path) -> None:
    import sqlalchemy

    password = sqlalchemy.engine.make_url(URL).password
    name = f"test-{uuid.uuid4().hex[:8]}"  # a server may be shared: a study of its own
    output, runs = run_example(
        tmp_path,
        "--workers",
        str(WORKERS),
        "--modes",
        "wrapped",
        "--study-name",
        name,
        "--dir",
        str(tmp_path / "out"),
        "--kill",
        "1:2",
        OPTUNA_STORAGE=URL,
    )
    run = runs["wrapped"]
    requested = WORKERS * BATCHES * BATCH
    assert run["complete"] and run["requested"] == requested
    assert run["storage"].startswith("postgresql")
    assert [d["worker"] for d in run["deaths"]] == [1] and run["deaths"][0]["how"] == "killed by SIGKILL"

    # In the database: nothing lost, nothing twice.
    trials = check_study(URL, f"{name}-wrapped", requested)
    assert len(run["retried"]) == BATCH  # the batch worker 1 held when it was killed
    # One compilation of the training step in the whole study: worker 1's, before it
    # was killed (its first batch is COMPLETE); every other worker, the replacement
    # (worker 5) too, loaded the program from the cache and compiled nothing.
    assert training_compilations(trials) == 1
    assert {t.user_attrs["compiled"] for t in trials if t.user_attrs.get("worker") == 1} == {1}
    survivors = [w for w in run["workers"] if w["number"] != 1]
    assert [w["number"] for w in survivors] == [2, 3, 4, 5] and survivors[-1]["replaces"] == 1
    assert all(w["result"]["misses"] == 0 for w in survivors), [w["result"] for w in survivors]

    # The password: not on a worker's command line, not in any output, not in the summary.
    assert password and all(password not in " ".join(w["argv"]) for w in run["workers"])
    assert password not in output
    assert password not in str(runs)
    optuna.delete_study(study_name=f"{name}-wrapped", storage=URL)
