"""One Optuna study on a shared database, N worker processes, one compilation; a killed worker loses nothing.

Optuna runs a study over many worker processes, on one machine or many, that
share a relational database as storage (its RDB storage): SQLite, embedded,
on one machine; PostgreSQL across machines. This launcher creates the study,
or loads it where it exists, and starts ``--workers N`` worker processes (this
script with ``--worker``). Each worker, in a loop, asks the study for a batch
of trials, turns their suggested hyperparameters into one batched optimizer
(``opx.stack`` of wrapped AdamWs), trains the whole batch in one
``jax.jit(jax.vmap(train))`` call, and tells the study every result.

The storage is ``--storage URL``, else ``OPTUNA_STORAGE`` (as Optuna's own
command line reads it), else SQLite in the output folder. The workers get the
URL through their environment, never on a command line; wherever it is
printed (the summary too), its password is masked. A PostgreSQL URL without a
password (``postgresql://user@host/db``) takes it where libpq looks:
``~/.pgpass``, ``PGPASSWORD``, a service file. Each mode has its own study,
``NAME-wrapped`` and ``NAME-plain`` (``--study-name NAME``), created or loaded:
a rerun adds its trials to the same database.

The workers share one persistent JAX compilation cache. Every batch has the
same static configuration (a short last batch is padded), so the study has
one training program: worker 1 compiles it (and the small programs around it)
and writes it to the cache; the others, told to start once worker 1 has
evaluated its first batch, load every program from the cache and compile
nothing.

A killed worker loses nothing. Each trial keeps a heartbeat in the database
while its batch trains; a trial whose heartbeat stops (its worker died) is
failed as stale by the next worker that asks, and asked again, with the same
hyperparameters, by whichever worker asks next. Workers ask, one at a time,
until the study has the requested number of COMPLETE trials, so the surviving
workers take over the dead one's share, and the launcher starts a
replacement, which compiles nothing (the cache). ``--kill WORKER:BATCH`` is a
fault drill: that worker kills itself (SIGKILL) holding its BATCH-th batch.

For comparison, the same study with plain optax: ``optax.adamw(lr, ...)``
bakes the hyperparameters into the program as constants, so every trial is a
new program, compiled by whichever worker runs it, and never found in the cache.

Writes ``examples/output/optuna_multiprocess/`` (``study.db``, the cache) and
``examples/output/optuna_multiprocess.png``: every trial's loss against its
learning rate, by worker.

Run:  python examples/optuna_multiprocess.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a tiny study)
      python examples/optuna_multiprocess.py --storage postgresql+psycopg://user@host/db --workers 4
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import inspect
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import optuna
import sqlalchemy
import sqlalchemy.exc
from _shared import OUTPUT, SMOKE, init_mlp, log, noisy_data, phase, pyplot, save, train_and_validate

import optax_pytree as opx

WORKERS = 2
BATCH = 4 if SMOKE else 16  # trials per vmapped call
BATCHES = 2 if SMOKE else 4  # batches per worker: the study's trials are workers x batches x batch
PLAIN_TRIALS = 1 if SMOKE else BATCH * BATCHES  # trials per plain-optax worker, one compilation each
STEPS = 20 if SMOKE else 300
STUDY = "optax_pytree_multiprocess"
STORAGE_ENV = "OPTUNA_STORAGE"  # the storage URL, as Optuna's command line reads it
HEARTBEAT_S = 2  # a running trial's heartbeat, in the database
GRACE_S = 10  # a running trial without a heartbeat for this long is stale: its worker is gone
STUDY_TIMEOUT_S = 1800
GOAL = "goal"  # the study's user attribute: the number of COMPLETE trials its workers ask for
COMPLETE, RUNNING = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING

# jax's monitoring events (jax/_src/compiler.py): every lookup in the persistent cache, every hit.
LOOKUP_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
HIT_EVENT = "/jax/compilation_cache/cache_hits"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # compiling, or loading from the cache
# worker -> launcher: its first batch is done (its programs are in the cache); its figures (JSON).
# launcher -> a later worker, on its stdin: go (until then it has imported, and compiled nothing).
READY, RESULT, GO = "READY", "RESULT ", "GO"

# The driver each SQLAlchemy URL form needs, for the error a missing one gives.
DRIVERS = (
    "postgresql+psycopg:// (and postgresql:// with SQLAlchemy 2.1 or later) needs psycopg 3: "
    'pip install "optax_pytree[postgres]"; postgresql+psycopg2:// (and postgresql:// with '
    "SQLAlchemy 2.0) needs psycopg2: pip install psycopg2-binary"
)


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
# The storage: any SQLAlchemy URL (sqlite:///path, postgresql+psycopg://..., mysql://...).


def masked(url: str) -> str:
    """``url`` with its password (also one given as ``?password=``) shown as ``***``."""
    parsed = sqlalchemy.engine.make_url(url)
    if "password" in parsed.query:
        parsed = parsed.update_query_dict({"password": "***"})
    return parsed.render_as_string(hide_password=True)


def check_driver(url: str) -> None:
    """Fails, saying what to install, where the URL's database driver is missing."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise SystemExit(f"{masked(url)}: an in-memory SQLite database is not shared between processes")
    try:
        parsed.get_dialect().import_dbapi()  # imports the driver
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as error:
        raise SystemExit(
            f"{masked(url)}: no database driver for {parsed.drivername!r} ({error}). {DRIVERS}."
        ) from None


def open_storage(url: str, heartbeat: int | None = None, grace: int | None = None) -> Any:
    """The study's storage; with ``heartbeat``, its stale trials are failed and queued again."""
    # SQLite serializes writers with a file lock; wait for it, under load, longer than 5 s.
    sqlite = sqlalchemy.engine.make_url(url).get_backend_name() == "sqlite"
    options: dict[str, Any] = {"engine_kwargs": {"connect_args": {"timeout": 60} if sqlite else {}}}
    if heartbeat is not None:
        # Optuna 4.9 renamed the callback and its argument; older ones have the first names.
        retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
        retry = retry or optuna.storages.RetryFailedTrialCallback
        names = inspect.signature(optuna.storages.RDBStorage).parameters
        callback = (
            "heartbeat_stale_trial_callback"
            if "heartbeat_stale_trial_callback" in names
            else "failed_trial_callback"
        )
        options |= {"heartbeat_interval": heartbeat, "grace_period": grace, callback: retry(max_retry=3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat_interval
        return optuna.storages.RDBStorage(url, **options)


@contextlib.contextmanager
def one_asker(storage: Any, url: str, study: str) -> Iterator[None]:
    """While held, no other worker of ``study`` asks for trials: none asks more than the goal.

    A server-side lock, released by the server when the holder's connection
    drops (a killed worker holds nothing): PostgreSQL's advisory lock, MySQL's
    named lock; for SQLite, one machine, a file lock, which the system releases.
    """
    parsed = sqlalchemy.engine.make_url(url)
    backend = parsed.get_backend_name()
    name = f"optax_pytree ask {study}"
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    statements = {
        "postgresql": ("SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)", {"key": key}),
        "mysql": ("SELECT GET_LOCK(:name, -1)", "SELECT RELEASE_LOCK(:name)", {"name": name[:64]}),
    }
    if backend in statements:
        lock, unlock, values = statements[backend]
        with storage.engine.connect() as connection:
            connection.execute(sqlalchemy.text(lock), values)
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text(unlock), values)
    elif backend == "sqlite" and sys.platform != "win32":
        import fcntl

        with open(f"{parsed.database}.ask.lock", "a") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)
    else:  # no lock: concurrent workers may ask a few trials more than the goal
        yield


def trial_id(storage: Any, study_id: int, trial: optuna.Trial) -> int:
    return storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)


def claim(study: optuna.Study, storage: Any, study_id: int, url: str, size: int) -> list[optuna.Trial] | None:
    """Up to ``size`` trials of what the study still needs; None when it has its COMPLETE trials.

    First the stale trials (no heartbeat for the grace period: their worker is
    gone) are failed, and queued again (Optuna's retry callback: a WAITING
    trial with the same hyperparameters, asked first). An empty list: what the
    study needs is running in other workers; ask again later, when they have
    finished it or died. The stale trials are failed under the same lock as
    the asking: a retry queued by one worker while another asks would
    otherwise be missed by that ask (a new trial instead), and stay WAITING
    once the goal is met.
    """
    with one_asker(storage, url, study.study_name):
        optuna.storages.fail_stale_trials(study)
        goal = storage.get_study_user_attrs(study_id)[GOAL]
        states = [
            t.state for t in storage.get_all_trials(study_id, deepcopy=False, states=(COMPLETE, RUNNING))
        ]
        complete, running = states.count(COMPLETE), states.count(RUNNING)
        if complete >= goal:
            return None
        trials = []
        for _ in range(min(size, goal - complete - running)):
            trials.append(study.ask())
            # At once: a trial without a heartbeat is never found stale.
            storage.record_heartbeat(trial_id(storage, study_id, trials[-1]))
        return trials


def beat_in_ask_and_tell() -> None:
    """Silences Optuna's warnings about heartbeats in ask-and-tell, which :class:`Heartbeat` keeps.

    Optuna expects ``study.optimize`` to keep them, warns that ask-and-tell
    does not, and calls the heartbeat API experimental.
    """
    warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used with Study.optimize")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


class Heartbeat:
    """Records every ``interval`` seconds a heartbeat of each of ``trials`` while the block runs.

    Optuna beats for the trials of ``study.optimize``; ask-and-tell has none.
    """

    def __init__(self, storage: Any, trial_ids: list[int], interval: int) -> None:
        self.storage, self.trial_ids, self.interval = storage, trial_ids, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(self.interval):
            for trial in self.trial_ids:
                try:
                    self.storage.record_heartbeat(trial)
                except (optuna.exceptions.OptunaError, sqlalchemy.exc.SQLAlchemyError) as error:
                    log(f"heartbeat of trial id {trial}: {error}")  # the next one may get through

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


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

    def misses(self) -> int:
        """Programs this process compiled (and wrote to the cache)."""
        return self.events[LOOKUP_EVENT] - self.events[HIT_EVENT]

    def summary(self) -> dict[str, Any]:
        lookups, hits = self.events[LOOKUP_EVENT], self.events[HIT_EVENT]
        return {"lookups": lookups, "hits": hits, "misses": lookups - hits, "compile_s": self.compile_s}


def tell(study: optuna.Study, trial: optuna.Trial, loss: float, attrs: dict[str, Any]) -> bool:
    """Tells the result; False where the trial was failed as stale meanwhile (its retry runs it)."""
    try:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    if not math.isfinite(loss):  # a diverged configuration: failed, and the study asks for another
        study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        return True
    return study.tell(trial, loss, skip_if_finished=True).state == COMPLETE


def storage_url(args: argparse.Namespace, folder: Path | None = None) -> str:
    """``--storage``, else ``OPTUNA_STORAGE``, else SQLite in ``folder``."""
    url = args.storage or os.environ.get(STORAGE_ENV)
    if url:
        return url
    if folder is None:
        raise SystemExit(f"a worker needs the storage: --storage or {STORAGE_ENV}")
    return f"sqlite:///{folder / 'study.db'}"


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
    beat_in_ask_and_tell()
    url = storage_url(args)
    storage = open_storage(url, args.heartbeat, args.grace)
    # constant_liar: trials asked together (or by the other workers) are spread out, not identical.
    sampler = optuna.samplers.TPESampler(seed=args.worker, constant_liar=True, n_startup_trials=args.batch)
    name = f"{args.study_name}-{args.mode}"
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    study_id = storage.get_study_id_from_name(name)
    if args.wait:  # started early, so that its imports overlap the first worker's compilation
        sys.stdin.readline()
        start = time.perf_counter()
    params, train_data, val_data = jax.jit(make_data)()  # one program, not one per operation
    traces = 0
    base = opx.wrap(optax.adamw, learning_rate=1e-3)

    @jax.jit
    def evaluate(batch: Any, params: Any, train_data: Any, val_data: Any) -> jax.Array:
        nonlocal traces
        traces += 1
        return jax.vmap(train, in_axes=(0, None, None, None))(batch, params, train_data, val_data)

    def evaluate_plain(values: dict[str, float]) -> jax.Array:
        # Plain optax: the hyperparameters are constants of each trial's program.
        tx = optax.adamw(values["learning_rate"], b1=values["b1"], weight_decay=values["weight_decay"])

        def evaluate_one(params: Any, train_data: Any, val_data: Any) -> jax.Array:
            nonlocal traces
            traces += 1
            return train(tx, params, train_data, val_data)

        return jax.jit(evaluate_one)(params, train_data, val_data)

    size = args.batch if args.mode == "wrapped" else 1
    numbers, compilations, batches = [], 0, 0
    while (trials := claim(study, storage, study_id, url, size)) is not None:
        if not trials:  # the rest is running elsewhere: wait until it is done, or stale
            time.sleep(min(args.heartbeat, 0.5))
            continue
        batches += 1
        ids = [trial_id(storage, study_id, trial) for trial in trials]
        if batches == args.die_at:  # the fault drill: killed holding this batch, as by the OOM killer
            log(f"drill: killed (SIGKILL) holding trials {[t.number for t in trials]}")
            os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
        with Heartbeat(storage, ids, args.heartbeat):
            values = [suggest(trial) for trial in trials]
            missed = counts.misses()
            if args.mode == "wrapped":
                members = [base.replace(**v) for v in values]
                members += members[-1:] * (size - len(members))  # a short batch, padded: the same program
                batch = opx.stack(members)
                missed = counts.misses()  # the training step's compilation only, not the stacking's
                losses = np.asarray(evaluate(batch, params, train_data, val_data))[: len(trials)]
            else:
                losses = np.atleast_1d(np.asarray(evaluate_plain(values[0])))
            compiled = counts.misses() - missed
        compilations += compiled
        attrs = {"worker": args.worker, "run": args.run, "batch": f"{args.run}/{args.worker}/{batches}"}
        for trial, loss in zip(trials, losses):
            if tell(study, trial, float(loss), {**attrs, "compiled": compiled}):
                numbers.append(trial.number)
        log(
            f"batch {batches}: trials #{trials[0].number} to #{trials[-1].number}, "
            f"best loss {min(losses):.4f}"
        )
        if batches == 1:
            print(READY, flush=True)
    return {
        "worker": args.worker,
        "mode": args.mode,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "trials": numbers,
        "traces": traces,
        "training_compilations": compilations,  # of the training step, by this worker
        "study_s": time.perf_counter() - start,  # from loading the study (or GO) to the last trial
        **counts.summary(),
    }


# --------------------------------------------------------------------------
# The launcher.


@dataclasses.dataclass
class Worker:
    """A worker process the launcher started, and what it heard from it."""

    number: int
    proc: subprocess.Popen[str]
    argv: list[str]  # its command line: no storage URL, no password
    waiting: bool  # started with --wait, not yet told to go
    replaces: int | None = None  # the number of the dead worker it replaces
    ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: dict[str, Any] | None = None
    relay: threading.Thread | None = None


def _relay(w: Worker, name: str) -> None:
    assert w.proc.stdout is not None
    for line in w.proc.stdout:
        if line.startswith(RESULT):
            w.result = json.loads(line[len(RESULT) :])
        elif line.strip() == READY:
            w.ready.set()
        else:
            print(f"[{name}] {line}", end="", flush=True)


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def run_study(mode: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Creates or loads the mode's study, raises its goal, runs the workers until it is met, sums up."""
    name = f"{args.study_name}-{mode}"
    storage = open_storage(url)
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize", load_if_exists=True)
    per_worker = args.batches * args.batch if mode == "wrapped" else args.plain_trials
    requested = args.trials or args.workers * per_worker
    with one_asker(storage, url, name):  # another launcher on the same study adds its trials too
        complete = len(study.get_trials(deepcopy=False, states=(COMPLETE,)))
        goal = max(study.user_attrs.get(GOAL, 0), complete) + requested
        study.set_user_attr(GOAL, goal)
    log(f"study {name} in {masked(url)}: {complete} COMPLETE trials, {requested} more requested")
    run = uuid.uuid4().hex[:8]
    env = {**os.environ, STORAGE_ENV: url}  # the URL goes through the environment, never on a command line
    workers: list[Worker] = []
    deaths: list[dict[str, Any]] = []
    kill = dict([args.kill_at]) if args.kill_at else {}  # worker -> the batch it is killed holding

    def start(wait: bool, replaces: int | None = None) -> None:
        number = len(workers) + 1
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(number), "--mode", mode]
        argv += ["--study-name", args.study_name, "--run", run, "--cache-dir", str(args.cache_dir / mode)]
        argv += ["--batch", str(args.batch), "--heartbeat", str(args.heartbeat), "--grace", str(args.grace)]
        argv += ["--wait"] if wait else []
        argv += ["--die-at", str(kill[number])] if number in kill else []
        argv += ["--smoke"] if SMOKE else []
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        w = Worker(number, proc, argv, wait, replaces)
        w.relay = threading.Thread(target=_relay, args=(w, f"{mode} worker {number}"))
        w.relay.start()
        workers.append(w)
        log(
            f"started {mode} worker {number} (pid {proc.pid})"
            + (f", in place of {replaces}" if replaces else "")
        )

    def go(w: Worker, why: str) -> None:
        assert w.proc.stdin is not None
        w.proc.stdin.write(GO + "\n")
        w.proc.stdin.flush()
        w.waiting = False
        log(f"{mode} worker {w.number}, go ({why})")

    start_time = time.perf_counter()
    ended: set[int] = set()
    try:
        # All start at once (Python and jax take seconds to import); the later
        # ones are told to go when the first has compiled, and so cached, its programs.
        for k in range(args.workers):
            start(wait=k > 0)
        while len(ended) < len(workers):
            time.sleep(0.1)
            warm = any(w.ready.is_set() for w in workers)
            for w in workers:
                if w.number in ended or w.proc.poll() is None:
                    continue
                ended.add(w.number)
                if w.relay is not None:
                    w.relay.join()
                if w.proc.returncode == 0:
                    continue
                what = describe_exit(w.proc.returncode)
                deaths.append(
                    {
                        "worker": w.number,
                        "pid": w.proc.pid,
                        "how": what,
                        "at_s": time.perf_counter() - start_time,
                    }
                )
                log(f"{mode} worker {w.number} (pid {w.proc.pid}) died: {what}")
                met = len(study.get_trials(deepcopy=False, states=(COMPLETE,))) >= goal
                if not met and len(deaths) <= args.workers:
                    start(wait=not warm, replaces=w.number)
            alive = [w for w in workers if w.number not in ended]
            if warm:
                for w in alive:
                    if w.waiting:
                        go(w, "the cache has the study's programs")
            elif alive and all(w.waiting for w in alive):  # the worker compiling died: the next one compiles
                go(alive[0], "the one compiling died before it finished")
            if time.perf_counter() - start_time > STUDY_TIMEOUT_S:
                raise RuntimeError(f"{mode}: the study took more than {STUDY_TIMEOUT_S} s")
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
            if w.relay is not None:
                w.relay.join()
    wall = time.perf_counter() - start_time
    trials = study.get_trials(deepcopy=False)
    states = collections.Counter(t.state.name for t in trials)
    mine = [t for t in trials if t.user_attrs.get("run") == run]
    # A stale trial's retry names it (Optuna's retry callback): what the dead workers held, and where it ran.
    retried = {
        t.system_attrs["retry_history"][-1]: t.number for t in trials if "retry_history" in t.system_attrs
    }
    batches = {t.user_attrs["batch"]: t.user_attrs["compiled"] for t in mine if "compiled" in t.user_attrs}
    return {
        "mode": mode,
        "study": name,
        "storage": masked(url),
        "run": run,
        "requested": requested,
        "goal": goal,
        "wall_s": wall,
        "workers": [
            {
                "number": w.number,
                "pid": w.proc.pid,
                "argv": w.argv,
                "replaces": w.replaces,
                "exit": w.proc.returncode,
                "result": w.result,
            }
            for w in workers
        ],
        "deaths": deaths,
        "trials": len(trials),
        "states": dict(states),
        "run_trials": len(mine),
        "retried": retried,
        "training_compilations": sum(batches.values()),  # in this run, from the study's trials
        "complete": states["COMPLETE"] >= goal and states["RUNNING"] == 0,
        "best": {"value": study.best_value, "params": study.best_params} if states["COMPLETE"] else None,
    }


def report(run: dict[str, Any], args: argparse.Namespace) -> None:
    what = {
        "wrapped": f"opx.stack of {args.batch} wrapped AdamWs, one vmapped call per batch",
        "plain": "optax.adamw per trial, its hyperparameters constants of a new jax.jit",
    }[run["mode"]]
    print(f"{run['mode']} ({what}):")
    for w in run["workers"]:
        r = w["result"]
        if r is None:
            print(f"    worker {w['number']} (pid {w['pid']}): {describe_exit(w['exit'])}, no figures")
            continue
        print(
            f"    worker {w['number']}: {len(r['trials'])} trials, {r['traces']} trace(s) of the training, "
            f"{r['training_compilations']} compilation(s) of it; persistent cache: {r['lookups']} lookups, "
            f"{r['hits']} hits, {r['misses']} misses (= programs compiled), {r['compile_s']:.2f} s compiling "
            f"or loading; {r['study_s']:.1f} s in the study"
            + (f" (in place of worker {w['replaces']})" if w["replaces"] else "")
        )
    for d in run["deaths"]:
        print(f"    worker {d['worker']} (pid {d['pid']}) died at {d['at_s']:.1f} s: {d['how']}")
    if run["retried"]:
        again = ", ".join(f"#{a} as #{b}" for a, b in sorted(run["retried"].items()))
        print(f"    stale trials (no heartbeat for the grace period) asked again: {again}")
    print(
        f"    study {run['study']} in {run['storage']}: {run['trials']} trials ({run['states']}), goal "
        f"{run['goal']} COMPLETE; this run: {run['run_trials']} trials, {run['training_compilations']} "
        f"compilation(s) of the training step, {run['wall_s']:.1f} s from the first launch to the last exit "
        f"({run['wall_s'] / max(run['requested'], 1):.3f} s a requested trial)"
    )
    if run["best"]:
        best = ", ".join(f"{k}={v:.3g}" for k, v in run["best"]["params"].items())
        print(f"    best: {best} -> validation loss {run['best']['value']:.4f}")


def plot(run: dict[str, Any], url: str) -> None:
    study = optuna.load_study(study_name=run["study"], storage=open_storage(url))
    done = [t for t in study.trials if t.value is not None]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k in sorted({t.user_attrs.get("worker", 0) for t in done}):
        mine = [t for t in done if t.user_attrs.get("worker", 0) == k]
        ax.scatter(
            [t.params["learning_rate"] for t in mine], [t.value for t in mine], s=14, label=f"worker {k}"
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="learning rate",
        ylabel="validation loss",
        title=f"One study, {len(run['workers'])} processes, {run['goal']} trials",
    )
    ax.legend()
    save(fig, "optuna_multiprocess.png")


def main(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.dir) if args.dir else OUTPUT / "optuna_multiprocess"
    folder.mkdir(parents=True, exist_ok=True)
    url = storage_url(args, folder)
    check_driver(url)
    args.cache_dir = Path(args.cache_dir) if args.cache_dir else folder / "jax_cache"
    runs = {}
    for mode in args.modes.split(","):
        with phase(f"{mode}: a study of {args.workers} worker processes"):
            runs[mode] = run_study(mode, url, args)
        report(runs[mode], args)
    if "wrapped" in runs and "plain" in runs:
        per_trial = {m: r["wall_s"] / max(r["requested"], 1) for m, r in runs.items()}
        print(
            f"time a trial, launch to exit: wrapped {per_trial['wrapped']:.3f} s, plain optax "
            f"{per_trial['plain']:.3f} s ({per_trial['plain'] / per_trial['wrapped']:.1f}x)"
        )
    if args.summary:
        Path(args.summary).write_text(json.dumps(runs, indent=1))
    incomplete = [m for m, r in runs.items() if not r["complete"]]
    if incomplete:
        raise SystemExit(f"the {', '.join(incomplete)} study did not get its COMPLETE trials")
    if "wrapped" in runs:
        with phase("plot"):
            plot(runs["wrapped"], url)
        run = runs["wrapped"]
        # One training program for the whole study (none where a rerun found it in the cache);
        # every worker started once it was in the cache loaded it.
        assert run["training_compilations"] <= 1, run["training_compilations"]
        assert all(w["result"]["traces"] <= 1 for w in run["workers"] if w["result"])
    return runs


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a tiny study (also OPTAX_PYTREE_SMOKE=1)")
    parser.add_argument(
        "--storage",
        help=f"the study's SQLAlchemy URL (default: ${STORAGE_ENV}, else SQLite in --dir); "
        "its password is better in ~/.pgpass or PGPASSWORD than on a command line",
    )
    parser.add_argument("--workers", type=int, default=WORKERS, help=f"worker processes ({WORKERS})")
    parser.add_argument(
        "--study-name", default=STUDY, help=f"created or loaded, NAME-wrapped and NAME-plain ({STUDY})"
    )
    parser.add_argument("--modes", default="wrapped,plain", help="wrapped, plain or both (default)")
    parser.add_argument("--dir", help="the output folder (default examples/output/optuna_multiprocess)")
    parser.add_argument("--cache-dir", help="the shared JAX compilation cache (default DIR/jax_cache)")
    parser.add_argument("--summary", help="also write the figures to this JSON file (the URL masked)")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"trials per vmapped call ({BATCH})")
    parser.add_argument("--batches", type=int, default=BATCHES, help=f"batches per worker ({BATCHES})")
    parser.add_argument(
        "--plain-trials",
        type=int,
        default=PLAIN_TRIALS,
        help=f"trials per plain-optax worker ({PLAIN_TRIALS})",
    )
    parser.add_argument("--trials", type=int, help="trials requested in all (default: per worker x workers)")
    parser.add_argument(
        "--heartbeat", type=int, default=HEARTBEAT_S, help=f"seconds between heartbeats ({HEARTBEAT_S})"
    )
    parser.add_argument(
        "--grace",
        type=int,
        default=GRACE_S,
        help=f"seconds without a heartbeat that make a trial stale ({GRACE_S})",
    )
    parser.add_argument("--kill", help="fault drill WORKER:BATCH: that worker is killed holding that batch")
    # Set by the launcher for its workers; given to the launcher, an error.
    worker_only = ("--worker", "--mode", "--run", "--die-at")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--die-at", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None:
        given = [
            f for f in (*worker_only, "--wait") if getattr(args, f[2:].replace("-", "_")) not in (None, False)
        ]
        if given:
            parser.error(f"{', '.join(given)}: set by the launcher for its workers only (see --help)")
    elif args.mode not in ("wrapped", "plain") or args.run is None or args.cache_dir is None:
        parser.error("a worker needs --mode, --run and --cache-dir (the launcher sets them)")
    args.kill_at = None
    if args.kill:
        try:
            number, batch = (int(x) for x in args.kill.split(":"))
        except ValueError:
            parser.error(f"--kill {args.kill}: WORKER:BATCH, two numbers")
        if not (1 <= number <= args.workers and batch >= 1):
            parser.error(f"--kill {args.kill}: no such worker (1 to {args.workers}) or batch")
        args.kill_at = (number, batch)
    unknown = set(args.modes.split(",")) - {"wrapped", "plain"}
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}")
    return args


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    if arguments.worker:
        print(RESULT + json.dumps(worker(arguments)), flush=True)
    else:
        main(arguments)
