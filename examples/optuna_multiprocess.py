"""One Optuna study, two worker processes, one compilation: shared storage and a shared compilation cache.

Optuna runs a study over many worker processes, on one machine or many, that
share a relational database as storage. Here the launcher creates the study in
SQLite (``sqlite:///.../study.db``, Optuna's embedded default) and starts two
worker processes (this script with ``--worker``). Each worker, in a loop, asks
the study for a batch of trials, turns their suggested hyperparameters into one
batched optimizer (``opx.stack`` of wrapped AdamWs), trains the whole batch in
one ``jax.jit(jax.vmap(train))`` call, and tells the study every result.

The workers also share one persistent JAX compilation cache
(``jax_compilation_cache_dir``). Every batch has the same static configuration,
so the study has one training program: worker 1 compiles it (and the small
programs around it: making the data, stacking a batch, building the optimizer)
and writes them to the cache; worker 2, told to start once worker 1 has
evaluated its first batch, loads every program from the cache and compiles
nothing (0 cache misses).

For comparison, the same study with plain optax: ``optax.adamw(lr, ...)``
bakes the hyperparameters into the program as constants, so every trial is a
new program, compiled by whichever worker runs it, and never found in the cache.

On a cluster, nothing changes but the storage URL and the cache path: a
PostgreSQL or MySQL URL (``postgresql://user:password@host/db``) in place of
the SQLite one is the same code, and the cache folder goes on a file system
every worker can reach.

Writes ``examples/output/optuna_multiprocess/`` (the study's ``study.db``, the
cache) and ``examples/output/optuna_multiprocess.png``: every trial's loss
against its learning rate, by worker.

Run:  python examples/optuna_multiprocess.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a tiny study)
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import optuna
from _shared import OUTPUT, SMOKE, init_mlp, log, noisy_data, phase, pyplot, save, train_and_validate

import optax_pytree as opx

WORKERS = 2
BATCH = 4 if SMOKE else 16  # trials per vmapped call
BATCHES = 2 if SMOKE else 4  # batches per worker
PLAIN_TRIALS = 1 if SMOKE else BATCH * BATCHES  # trials per plain-optax worker, one compilation each
STEPS = 20 if SMOKE else 300
STUDY = "optax_pytree_multiprocess"
WORKER_TIMEOUT_S = 600

# jax's monitoring events (jax/_src/compiler.py): every lookup in the persistent cache, every hit.
LOOKUP_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
HIT_EVENT = "/jax/compilation_cache/cache_hits"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # compiling, or loading from the cache
# worker -> launcher: its first batch is done (its programs are in the cache); its figures (JSON).
# launcher -> a later worker, on its stdin: go (until then it has imported, and compiled nothing).
READY, RESULT, GO = "READY", "RESULT ", "GO"


# --------------------------------------------------------------------------
# The training: a small MLP fitted to noisy points, the validation loss returned.


def make_data() -> tuple[Any, Any, Any]:
    """The MLP's initial parameters, few noisy training points, a clean validation set."""
    train_data, val_data = noisy_data(jax.random.key(0))
    return init_mlp(jax.random.key(1), (1, 64, 64, 1)), train_data, val_data


def train(tx: Any, params: Any, train_data: Any, val_data: Any) -> jax.Array:
    """``STEPS`` full-batch steps of ``tx``; the final validation loss."""
    return train_and_validate(tx, params, train_data, val_data, STEPS)


def suggest(trial: optuna.Trial) -> dict[str, float]:
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1.0, log=True),
        "b1": trial.suggest_float("b1", 0.0, 0.99),
        "weight_decay": trial.suggest_float("weight_decay", 1e-5, 1.0, log=True),
    }


# --------------------------------------------------------------------------
# A worker process.


class CacheCounts:
    """This process's persistent-cache lookups and hits, and its time compiling or loading programs."""

    def __init__(self) -> None:
        self.events: collections.Counter[str] = collections.Counter()
        self.compile_s = 0.0
        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._duration)

    def _event(self, event: str, **kwargs: Any) -> None:
        self.events[event] += 1

    def _duration(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        if event == COMPILE_EVENT:
            self.compile_s += duration_secs

    def summary(self) -> dict[str, Any]:
        lookups, hits = self.events[LOOKUP_EVENT], self.events[HIT_EVENT]
        # A miss is a program this process compiled (and wrote to the cache).
        return {"lookups": lookups, "hits": hits, "misses": lookups - hits, "compile_s": self.compile_s}


def tell(study: optuna.Study, trial: optuna.Trial, loss: float) -> None:
    if math.isfinite(loss):
        study.tell(trial, loss)
    else:  # a diverged configuration
        study.tell(trial, state=optuna.trial.TrialState.FAIL)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    # First, before anything is compiled: the shared cache, and every program
    # written to it, however small or quick to compile (jax's defaults skip
    # programs compiled in under a second, and small entries on some file systems).
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    counts = CacheCounts()
    start = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constant_liar: trials asked together (or by the other worker) are spread out, not identical.
    sampler = optuna.samplers.TPESampler(seed=args.worker, constant_liar=True, n_startup_trials=args.batch)
    study = optuna.load_study(study_name=STUDY, storage=storage(args.storage), sampler=sampler)
    if args.wait:  # started early, so that its imports overlap the first worker's compilation
        sys.stdin.readline()
        start = time.perf_counter()
    params, train_data, val_data = jax.jit(make_data)()  # one program, not one per operation
    traces = 0
    numbers = []

    if args.mode == "wrapped":
        base = opx.wrap(optax.adamw, learning_rate=1e-3)

        @jax.jit
        def evaluate(batch: Any, params: Any, train_data: Any, val_data: Any) -> jax.Array:
            nonlocal traces
            traces += 1
            return jax.vmap(train, in_axes=(0, None, None, None))(batch, params, train_data, val_data)

        for b in range(args.batches):
            trials = [study.ask() for _ in range(args.batch)]
            batch = opx.stack([base.replace(**suggest(trial)) for trial in trials])
            losses = np.asarray(evaluate(batch, params, train_data, val_data))
            for trial, loss in zip(trials, losses):
                trial.set_user_attr("worker", args.worker)
                tell(study, trial, float(loss))
                numbers.append(trial.number)
            first, last = trials[0].number, trials[-1].number  # the other worker's come between
            log(f"batch {b + 1}/{args.batches}: trials #{first} to #{last}, best loss {min(losses):.4f}")
            if b == 0:
                print(READY, flush=True)
    else:  # plain optax: the hyperparameters are constants of each trial's program
        for t in range(args.plain_trials):
            trial = study.ask()
            values = suggest(trial)
            tx = optax.adamw(values["learning_rate"], b1=values["b1"], weight_decay=values["weight_decay"])

            def evaluate_one(params: Any, train_data: Any, val_data: Any, tx: Any = tx) -> jax.Array:
                nonlocal traces
                traces += 1
                return train(tx, params, train_data, val_data)

            loss = float(jax.jit(evaluate_one)(params, train_data, val_data))
            trial.set_user_attr("worker", args.worker)
            tell(study, trial, loss)
            numbers.append(trial.number)
            log(f"trial {trial.number}: loss {loss:.4f}")
            if t == 0:
                print(READY, flush=True)
    return {
        "worker": args.worker,
        "mode": args.mode,
        "trials": numbers,
        "traces": traces,
        "study_s": time.perf_counter() - start,  # from loading the study (or GO) to the last trial
        **counts.summary(),
    }


def storage(url: str) -> optuna.storages.RDBStorage:
    """The study's storage. Any SQLAlchemy URL: sqlite:///path, postgresql://..., mysql://..."""
    # SQLite serializes writers with a file lock; wait for it, under load, longer than 5 s.
    connect_args = {"timeout": 60} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": connect_args})


# --------------------------------------------------------------------------
# The launcher.


def _relay(
    proc: subprocess.Popen[str], name: str, ready: threading.Event, results: list[dict[str, Any]]
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(RESULT):
            results.append(json.loads(line[len(RESULT) :]))
        elif line.strip() == READY:
            ready.set()
        else:
            print(f"[{name}] {line}", end="", flush=True)


def run_study(mode: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Creates the study in ``folder``, runs the workers (the second once the first is warm), sums up."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder / 'study.db'}"  # or postgresql://user:password@host/db: the same code
    optuna.create_study(study_name=STUDY, storage=storage(url), direction="minimize")
    procs: list[subprocess.Popen[str]] = []
    threads, results = [], []
    readies = [threading.Event() for _ in range(WORKERS)]
    start = time.perf_counter()
    try:
        # All start at once (Python and jax take seconds to import); each later
        # one is told to go when the one before has compiled, and so cached, its programs.
        for k in range(1, WORKERS + 1):
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(k), "--mode", mode]
            command += ["--storage", url, "--cache-dir", str(folder / "jax_cache")]
            command += ["--wait"] if k > 1 else []
            command += ["--batch", str(args.batch), "--batches", str(args.batches)]
            command += ["--plain-trials", str(args.plain_trials)]
            command += ["--smoke"] if SMOKE else []
            proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            procs.append(proc)
            name = f"{mode} worker {k}"
            threads.append(threading.Thread(target=_relay, args=(proc, name, readies[k - 1], results)))
            threads[-1].start()
            log(f"started {name} (pid {proc.pid})")
        for k, (before, proc) in enumerate(itertools.pairwise(procs), 2):
            while not readies[k - 2].wait(0.1):
                if before.poll() is not None or time.perf_counter() - start > WORKER_TIMEOUT_S:
                    raise RuntimeError(
                        f"{mode} worker {k - 1} ended (or hung) before finishing its first batch"
                    )
            assert proc.stdin is not None
            proc.stdin.write(GO + "\n")
            proc.stdin.flush()
            log(f"{mode} worker {k - 1} has evaluated its first trials: worker {k}, go")
        for proc in procs:
            proc.wait(timeout=WORKER_TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for thread in threads:
            thread.join()
    wall = time.perf_counter() - start
    failed = [k for k, proc in enumerate(procs, 1) if proc.returncode != 0]
    if failed or len(results) != WORKERS:
        raise RuntimeError(f"{mode} workers {failed} failed (exit codes {[p.returncode for p in procs]})")
    study = optuna.load_study(study_name=STUDY, storage=storage(url))
    states = collections.Counter(t.state.name for t in study.trials)
    return {
        "mode": mode,
        "storage": url,
        "wall_s": wall,
        "workers": sorted(results, key=lambda r: r["worker"]),
        "trials": len(study.trials),
        "states": dict(states),
        "best": {"value": study.best_value, "params": study.best_params} if states["COMPLETE"] else None,
    }


def report(run: dict[str, Any], args: argparse.Namespace) -> None:
    what = {
        "wrapped": f"opx.stack of {args.batch} wrapped AdamWs, one vmapped call per batch",
        "plain": "optax.adamw per trial, its hyperparameters constants of a new jax.jit",
    }[run["mode"]]
    print(f"{run['mode']} ({what}):")
    for w in run["workers"]:
        print(
            f"    worker {w['worker']}: {len(w['trials'])} trials, {w['traces']} trace(s) of the training; "
            f"persistent cache: {w['lookups']} lookups, {w['hits']} hits, {w['misses']} misses "
            f"(= compilations), {w['compile_s']:.2f} s compiling or loading; "
            f"{w['study_s']:.1f} s in the study"
        )
    n = sum(len(w["trials"]) for w in run["workers"])
    compilations = sum(w["misses"] for w in run["workers"])
    print(
        f"    study: {run['trials']} trials in {run['storage'].split('/')[-1]} ({run['states']}), "
        f"{compilations} compilations in all, {run['wall_s']:.1f} s from the first launch to the last exit "
        f"({run['wall_s'] / n:.3f} s a trial)"
    )
    if run["best"]:
        best = ", ".join(f"{k}={v:.3g}" for k, v in run["best"]["params"].items())
        print(f"    best: {best} -> validation loss {run['best']['value']:.4f}")


def plot(run: dict[str, Any], args: argparse.Namespace) -> None:
    study = optuna.load_study(study_name=STUDY, storage=storage(run["storage"]))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k in range(1, WORKERS + 1):
        done = [t for t in study.trials if t.value is not None and t.user_attrs.get("worker") == k]
        ax.scatter(
            [t.params["learning_rate"] for t in done], [t.value for t in done], s=14, label=f"worker {k}"
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="learning rate",
        ylabel="validation loss",
        title=f"One study, {WORKERS} processes, {args.batch} trials per call",
    )
    ax.legend()
    save(fig, "optuna_multiprocess.png")


def main(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.dir) if args.dir else OUTPUT / "optuna_multiprocess"
    runs = {}
    for mode in args.modes.split(","):
        with phase(f"{mode}: a study of {WORKERS} worker processes"):
            runs[mode] = run_study(mode, folder / mode, args)
        report(runs[mode], args)
    if "wrapped" in runs and "plain" in runs:
        per_trial = {m: r["wall_s"] / sum(len(w["trials"]) for w in r["workers"]) for m, r in runs.items()}
        print(
            f"time a trial, launch to exit: wrapped {per_trial['wrapped']:.3f} s, plain optax "
            f"{per_trial['plain']:.3f} s ({per_trial['plain'] / per_trial['wrapped']:.1f}x)"
        )
    if args.summary:
        Path(args.summary).write_text(json.dumps(runs, indent=1))
    if "wrapped" in runs:
        with phase("plot"):
            plot(runs["wrapped"], args)
        second = runs["wrapped"]["workers"][1]
        assert second["misses"] == 0, f"worker 2 compiled {second['misses']} programs"
        assert all(w["traces"] == 1 for w in runs["wrapped"]["workers"])
    return runs


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a tiny study (also OPTAX_PYTREE_SMOKE=1)")
    parser.add_argument("--modes", default="wrapped,plain", help="wrapped, plain or both (default)")
    parser.add_argument("--dir", help="the studies' folder (default examples/output/optuna_multiprocess)")
    parser.add_argument("--summary", help="also write the figures to this JSON file")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"trials per vmapped call ({BATCH})")
    parser.add_argument("--batches", type=int, default=BATCHES, help=f"batches per worker ({BATCHES})")
    parser.add_argument(
        "--plain-trials",
        type=int,
        default=PLAIN_TRIALS,
        help=f"trials per plain-optax worker ({PLAIN_TRIALS})",
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # set by the launcher
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--storage", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    parser.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    if arguments.worker:
        print(RESULT + json.dumps(worker(arguments)), flush=True)
    else:
        main(arguments)
