"""Section 10: one Optuna study on PostgreSQL and on SQLite, wrapped against plain optax (see ``run.py``).

The study of ``examples/optuna_multiprocess.py``, run end to end by its
launcher (2 worker processes, one fresh compilation cache per study): with
the wrapped optimizer (``opx.stack``, one vmapped call per batch) and with
plain optax (a new ``jax.jit`` per trial), on a PostgreSQL server (the one
``OPTAX_PYTREE_TEST_POSTGRES`` names, a SQLAlchemy URL; ``.ci/run`` starts a
throwaway one) and on SQLite (a new file), all four in this run. From each
launcher's summary, read from the study's database: the COMPLETE trials, the
compilations of the training step (each batch's count, written into its
trials), the programs the workers compiled in all (persistent-cache misses),
and the wall time from the first launch to the last exit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from _common import CHILDREN_ON_CPU, Log, Settings, child_env
from _report import Target, check, ratio, section, table

TITLE = "Optuna: one study on PostgreSQL and on SQLite, wrapped and plain optax"

SERVER_ENV = "OPTAX_PYTREE_TEST_POSTGRES"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "optuna_multiprocess.py"
MODES = {
    "wrapped": "opx.stack of wrapped AdamWs, one vmapped call per batch",
    "plain": "optax.adamw, a jax.jit per trial",
}
TIMEOUT_S = 1200


def _study(url: str, name: str, mode: str, folder: Path, quick: bool) -> dict[str, Any]:
    """One launch of the example: ``mode``'s study in ``url``, its cache in ``folder`` (new); its figures."""
    summary = folder / f"{mode}.json"
    command = [sys.executable, str(EXAMPLE), "--modes", mode, "--study-name", name]
    command += ["--dir", str(folder), "--cache-dir", str(folder / "jax_cache"), "--summary", str(summary)]
    # The URL never on a command line; the launcher and its workers run JAX on the CPU.
    env = child_env({**os.environ, "MPLBACKEND": "Agg", "OPTUNA_STORAGE": url})
    env.pop("OPTAX_PYTREE_SMOKE", None)
    if quick:
        env["OPTAX_PYTREE_SMOKE"] = "1"
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"{mode} study failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    run = json.loads(summary.read_text())[mode]
    results = [w["result"] for w in run["workers"] if w["result"] is not None]
    return {
        "storage": run["storage"],  # its password masked
        "requested": run["requested"],
        "complete": run["states"].get("COMPLETE", 0),
        "training_compilations": run["training_compilations"],
        "programs_compiled": sum(r["misses"] for r in results),
        "workers": len(run["workers"]),
        "wall_s": run["wall_s"],
        "per_trial_s": ratio(run["wall_s"], run["requested"]),
    }


def _no_sockets() -> str:
    """Why this machine cannot open a socket ("" when it can): no database server then."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM):
            pass
    except OSError as e:
        return f"no sockets on this machine ({e})"
    return ""


def run(s: Settings, log: Log) -> dict[str, Any]:
    server = os.environ.get(SERVER_ENV, "")
    name = f"benchmark-{uuid.uuid4().hex[:8]}"  # a server may be shared: studies of its own
    out: dict[str, Any] = {"quick": s.quick, "postgresql": None, "sqlite": None, "children": CHILDREN_ON_CPU}
    if importlib.util.find_spec("optuna") is None:  # a test extra, not on a bare accelerator machine
        out["postgresql_missing"] = out["sqlite_missing"] = "optuna is not installed"
        log("  optuna is not installed: nothing to run")
        return out
    with tempfile.TemporaryDirectory(prefix="optax_pytree-optuna-") as tmp:
        folder = Path(tmp)
        storages = {"sqlite": f"sqlite:///{folder / 'study.db'}"}
        why = _no_sockets() if server else f"no server: {SERVER_ENV} is not set (.ci/run starts one)"
        if why:
            server = ""
            out["postgresql_missing"] = why
            log(f"  PostgreSQL: {why}")
        else:
            storages["postgresql"] = server
        for storage, url in storages.items():
            out[storage] = {}
            for mode in MODES:
                out[storage][mode] = figures = _study(url, name, mode, folder / storage / mode, s.quick)
                log(
                    f"  {storage}, {mode}: {figures['complete']} trials COMPLETE, "
                    f"{figures['training_compilations']} compilation(s) of the training step, "
                    f"{figures['programs_compiled']} programs compiled, {figures['wall_s']:.1f} s"
                )
        if server:
            import optuna

            for mode in MODES:
                optuna.delete_study(study_name=f"{name}-{mode}", storage=server)
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    found = []
    for storage in ("postgresql", "sqlite"):
        figures = r[storage]
        label = f"Optuna study on {storage}, wrapped: compilations of the training step"
        if figures is None:
            found.append(Target(10, label, "n/a", "1", "n/a", r.get(f"{storage}_missing", "")))
            continue
        n = figures["wrapped"]["training_compilations"]
        found.append(Target(10, label, str(n), "1", check(n == 1)))
    return found


def markdown(r: dict[str, Any]) -> list[str]:
    rows = []
    for storage in ("postgresql", "sqlite"):
        if r[storage] is None:
            rows.append([storage, "n/a", "", "", "", "", r.get(f"{storage}_missing", "")])
            continue
        for mode, label in MODES.items():
            f = r[storage][mode]
            rows.append(
                [
                    storage,
                    label,
                    f"{f['complete']} / {f['requested']}",
                    f["training_compilations"],
                    f["programs_compiled"],
                    f"{f['wall_s']:.1f}",
                    f"{f['per_trial_s']:.3f}",
                ]
            )
    size = "smoke sizes (--quick)" if r["quick"] else "the example's sizes"
    return section(
        f"## 10. One Optuna study over 2 worker processes on PostgreSQL and on SQLite ({size})",
        f"The launcher and its workers: {r.get('children', CHILDREN_ON_CPU)}.",
        table(
            "storage | approach | trials COMPLETE / requested | compilations of the training step | "
            "programs compiled (all workers) | wall time, launch to last exit (s) | s a trial",
            rows,
        ),
    )
