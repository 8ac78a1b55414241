"""Optuna, a batch of trials at a time: 16 trials per vmapped, compiled-once call.

Optuna's ask-and-tell interface hands out trials one by one; here each batch
of ``BATCH`` trials becomes one wrapped AdamW per trial, ``opx.stack`` turns
them into one batched optimizer, and a single ``jax.jit(jax.vmap(train))``
call evaluates them all. Every batch has the same static configuration, so the
evaluation is traced and compiled once for the whole study.

The study is in memory, or in a database: ``--storage URL`` (else
``OPTUNA_STORAGE``, as Optuna's command line reads it), ``--study-name NAME``
created or loaded, so that a rerun adds its trials. There the trials keep a
heartbeat while their batch trains: the trials of a run that was killed are
failed as stale by the next run and asked again (``optuna_multiprocess.py``
runs several workers on one such study).

Writes ``examples/output/optuna_batched.png``: every trial's loss against its
learning rate and weight decay. Set ``OPTAX_PYTREE_SMOKE=1`` for a quick run.

Run: ``python examples/optuna_batched.py [--storage sqlite:///study.db]``
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from typing import Any

import jax
import numpy as np
import optax
import optuna
from _shared import SMOKE, init_mlp, log, noisy_data, phase, progress, pyplot, save, train_and_validate
from optuna_multiprocess import (
    GRACE_S,
    HEARTBEAT_S,
    STORAGE_ENV,
    Heartbeat,
    beat_in_ask_and_tell,
    check_driver,
    masked,
    open_storage,
)

import optax_pytree as opx

BATCH = 16
BATCHES = 2 if SMOKE else 8
STEPS = 20 if SMOKE else 300
STUDY = "optax_pytree_batched"


def train(tx: Any, params: Any, train_data: Any, val_data: Any) -> jax.Array:
    """``STEPS`` full-batch steps of ``tx``; returns the final validation loss."""
    return train_and_validate(tx, params, train_data, val_data, STEPS)


def main(args: argparse.Namespace) -> optuna.Study:
    train_data, val_data = noisy_data(jax.random.key(0))
    params = init_mlp(jax.random.key(1), (1, 64, 64, 1))
    base = opx.wrap(optax.adamw, learning_rate=1e-3)
    traces = 0

    @jax.jit
    def evaluate(batch: Any) -> jax.Array:
        nonlocal traces
        traces += 1
        return jax.vmap(train, in_axes=(0, None, None, None))(batch, params, train_data, val_data)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constant_liar: trials asked together are spread out rather than identical.
    sampler = optuna.samplers.TPESampler(seed=0, constant_liar=True, n_startup_trials=BATCH)
    url = args.storage or os.environ.get(STORAGE_ENV)
    storage = None
    if url:  # a database: the study created or loaded, its trials' heartbeats kept
        check_driver(url)
        beat_in_ask_and_tell()
        storage = open_storage(url, HEARTBEAT_S, GRACE_S)
        log(f"study {args.study_name} in {masked(url)}")
    study = optuna.create_study(
        study_name=args.study_name if url else None,
        storage=storage,
        direction="minimize",
        sampler=sampler,
        load_if_exists=True,
    )
    if storage is not None:  # a killed run's trials: failed, and asked again first
        optuna.storages.fail_stale_trials(study)
    best_so_far = math.inf
    start = time.perf_counter()
    with phase(f"{BATCHES} batches of {BATCH} trials, {STEPS} steps each (the first batch compiles)"):
        with progress(range(BATCHES), "batches of trials", unit="batch") as bar:
            for _ in bar:
                trials = [study.ask() for _ in range(BATCH)]
                members = [
                    base.replace(
                        learning_rate=trial.suggest_float("learning_rate", 1e-4, 1.0, log=True),
                        b1=trial.suggest_float("b1", 0.0, 0.99),
                        weight_decay=trial.suggest_float("weight_decay", 1e-5, 1.0, log=True),
                    )
                    for trial in trials
                ]
                with heartbeat(storage, study, trials):
                    losses = np.asarray(evaluate(opx.stack(members)))
                for trial, loss in zip(trials, losses):
                    if math.isfinite(loss):
                        study.tell(trial, float(loss))
                    else:  # a diverged configuration
                        study.tell(trial, state=optuna.trial.TrialState.FAIL)
                best_so_far = min([best_so_far, *losses[np.isfinite(losses)].tolist()])
                bar.set_postfix(best_loss=f"{best_so_far:.4f}", traces=traces, refresh=False)
    elapsed = time.perf_counter() - start

    n = BATCH * BATCHES
    print(
        f"{n} Optuna trials in {BATCHES} vmapped calls of {BATCH}: {elapsed:.1f} s; "
        f"traces (= compilations) of evaluate: {traces}; the study has {len(study.trials)} trials"
    )
    assert traces == 1
    best = ", ".join(f"{k}={v:.3g}" for k, v in study.best_params.items())
    print(f"  best trial #{study.best_trial.number}: {best} -> validation loss {study.best_value:.4f}")
    with phase("plot"):
        plot(study)
    return study


def heartbeat(storage: Any, study: optuna.Study, trials: list[optuna.Trial]) -> Any:
    """The trials' heartbeat in the database while their batch trains (nothing in memory)."""
    if storage is None:
        return contextlib.nullcontext()
    study_id = storage.get_study_id_from_name(study.study_name)
    ids = [storage.get_trial_id_from_study_id_trial_number(study_id, t.number) for t in trials]
    return Heartbeat(storage, ids, HEARTBEAT_S)


def plot(study: optuna.Study) -> None:
    plt = pyplot()
    done = [t for t in study.trials if t.value is not None]
    lr = np.array([t.params["learning_rate"] for t in done])
    wd = np.array([t.params["weight_decay"] for t in done])
    loss = np.array([t.value for t in done])
    batch = np.array([t.number // BATCH for t in done])
    fig, (ax_space, ax_history) = plt.subplots(1, 2, figsize=(11, 4.2))
    points = ax_space.scatter(lr, wd, c=np.log10(loss), cmap="viridis_r", s=18)
    ax_space.set(xscale="log", yscale="log", xlabel="learning rate", ylabel="weight decay", title="Trials")
    fig.colorbar(points, ax=ax_space, label="log10 validation loss")
    ax_history.scatter(np.arange(len(loss)), loss, c=batch, cmap="tab10", s=12)
    ax_history.plot(np.arange(len(loss)), np.minimum.accumulate(loss), color="black", label="best so far")
    ax_history.set(yscale="log", xlabel="trial", ylabel="validation loss", title=f"{BATCH} trials per call")
    ax_history.legend()
    save(fig, "optuna_batched.png")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a tiny study (also OPTAX_PYTREE_SMOKE=1)")
    parser.add_argument(
        "--storage", help=f"the study's SQLAlchemy URL (default: ${STORAGE_ENV}, else in memory)"
    )
    parser.add_argument("--study-name", default=STUDY, help=f"created or loaded, in a database ({STUDY})")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
