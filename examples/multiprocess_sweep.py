"""A sweep past one process: 16 Adam configurations over every device of a multi-process JAX job.

A population of optimizers is one batched pytree, so it spreads over the
devices of several processes with JAX's own multi-controller runtime
(``jax.distributed``): every process runs this same program, holds only its
own members (hyperparameters, parameters, optimizer state), and trains them
in one jitted, vmapped call. ``opx.process_local_indices`` says which members
a process holds, so it builds only those; ``opx.shard_process_local`` makes
the global population from them; ``opx.process_allgather`` brings the results
to every process, where ``opx.index`` picks the winner. A checkpoint of the
population is written by every process (its own shards) and restored into the
same mesh.

Run as is, the script is its own launcher: it starts ``--processes`` local
processes (2) of ``--devices-per-process`` CPU devices each (4), joined by a
coordinator on a free localhost port and gloo collectives, and relays their
output, each line after its process's number. On a real multi-host job the
same script runs unchanged on every host with ``--worker``: ``jax.distributed``
finds the coordinator, the process count and this process's index itself on
Cloud TPU, Slurm and Open MPI (elsewhere pass ``--coordinator``,
``--num-processes`` and ``--process-id``), and the devices are the hosts'
GPUs or TPUs. A checkpoint there needs a directory every host can write
(``--checkpoint-dir gs://bucket/sweep``, a shared file system).

Run:  python examples/multiprocess_sweep.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a few steps)
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _shared import SMOKE, init_mlp, log, mse, phase, progress, target
from jax.sharding import NamedSharding, PartitionSpec

import optax_pytree as opx

STEPS = 20 if SMOKE else 2000
ROUNDS = 2 if SMOKE else 20  # training calls, each STEPS // ROUNDS steps (the progress bar's ticks)


# --------------------------------------------------------------------------
# The launcher: N local processes, one JAX job.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _relay(stream: TextIO, prefix: str, out: TextIO) -> None:
    for line in stream:
        if line.startswith("[Gloo] Rank ") and "connected to" in line:
            continue  # gloo's notice of each new connection, a dozen per process
        out.write(f"{prefix}{line}")
        out.flush()


def launch(args: argparse.Namespace) -> int:
    """Starts ``args.processes`` workers on this machine and waits for all of them.

    If one fails, the others are killed at once (they would wait for it in a
    collective until JAX's timeouts); so they are after ``args.timeout`` s.
    """
    n = args.processes
    coordinator = f"localhost:{_free_port()}"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} "
        f"--xla_force_host_platform_device_count={args.devices_per_process}".strip(),
        "OPTAX_PYTREE_SMOKE": "1" if SMOKE else os.environ.get("OPTAX_PYTREE_SMOKE", ""),
    }
    checkpoints = tempfile.TemporaryDirectory() if args.checkpoint_dir is None else None
    checkpoint_dir = args.checkpoint_dir or (checkpoints.name if checkpoints else "")
    print(f"launching {n} processes x {args.devices_per_process} CPU devices, coordinator {coordinator}")
    procs, relays = [], []
    for i in range(n):
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--coordinator", coordinator]
        command += ["--num-processes", str(n), "--process-id", str(i), "--population", str(args.population)]
        command += ["--checkpoint-dir", checkpoint_dir]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            assert stream is not None
            relay = threading.Thread(target=_relay, args=(stream, f"[process {i}] ", out), daemon=True)
            relay.start()
            relays.append(relay)
    deadline = time.monotonic() + args.timeout
    try:
        while True:
            codes = [p.poll() for p in procs]
            if None not in codes or any(codes) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for relay in relays:
            relay.join(timeout=5)
        if checkpoints is not None:
            checkpoints.cleanup()
    failed = {i: p.returncode for i, p in enumerate(procs) if p.returncode}
    if failed:
        why = "timed out" if time.monotonic() > deadline else "failed"
        print(f"the job {why}: exit codes {failed} (a killed process shows -9)", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------
# A worker: one process of the job, the same program on every host.


def _fail_fast(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    # An error ends this process at once: at exit, jax.distributed waits for
    # every peer to shut down, while the peers wait for this one in a collective.
    traceback.print_exception(kind, value, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def worker(args: argparse.Namespace) -> None:
    sys.excepthook = _fail_fast
    # Collectives between CPU processes (this machine's local run); GPUs and
    # TPUs have their own, and ignore the setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.coordinator:
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    else:  # Cloud TPU, Slurm, Open MPI: everything from the environment
        jax.distributed.initialize()
    train_population(args.population, args.checkpoint_dir)


def train_population(size: int, checkpoint_dir: str | None) -> None:
    me, processes = jax.process_index(), jax.process_count()
    # One mesh axis over every device of every process: the population's.
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
    learning_rates = np.geomspace(1e-3, 1.0, size // 2).tolist()
    base = opx.wrap(optax.adam, learning_rate=1e-3)
    labels = [{"learning_rate": lr, "b1": b1} for lr in learning_rates for b1 in (0.9, 0.0)]

    with phase(f"process {me}: build its share of {len(labels)} configurations"):
        # This process builds only the members of its own devices...
        mine = opx.process_local_indices(len(labels), mesh, "pop")
        local = opx.stack([base.replace(**labels[i]) for i in mine])
        params = init_mlp(jax.random.key(1))  # one initialization, so members differ by hyperparameters
        # ... and the global population is made of every process's share.
        population = opx.shard_process_local(local, mesh, "pop")
        params = opx.shard_process_local(opx.stack([params] * len(mine)), mesh, "pop")
        x = jnp.linspace(-2.0, 2.0, 256)[:, None]
        y = target(x) + 0.05 * jax.random.normal(jax.random.key(0), x.shape)
        # The data, the same on every process, replicated over the mesh once.
        x, y = jax.device_put((x, y), NamedSharding(mesh, PartitionSpec()))
    devices = sorted(d.id for d in population.learning_rate.sharding.addressable_devices)
    share = ", ".join(f"#{i} lr={labels[i]['learning_rate']:.2g} b1={labels[i]['b1']}" for i in mine)
    log(f"process {me} of {processes}: members {share}; on devices {devices}")

    traces = 0

    # The state laid out like the population: without out_shardings, JAX
    # returns a jitted function's constant outputs (Adam's step count) whole on
    # every process, and the second call, given them sharded, would compile again.
    @functools.partial(jax.jit, out_shardings=NamedSharding(mesh, PartitionSpec("pop")))
    @jax.vmap
    def init(tx: Any, params: Any) -> Any:
        return tx.init(params)

    @jax.jit
    def train(tx: Any, params: Any, state: Any, x: jax.Array, y: jax.Array) -> Any:
        nonlocal traces
        traces += 1

        def one(tx: Any, params: Any, state: Any) -> Any:
            def step(carry: Any, _: None) -> tuple[Any, jax.Array]:
                params, state = carry
                loss, grads = jax.value_and_grad(mse)(params, x, y)
                updates, state = tx.update(grads, state, params)
                return (optax.apply_updates(params, updates), state), loss

            (params, state), losses = jax.lax.scan(step, (params, state), None, length=STEPS // ROUNDS)
            return params, state, losses

        return jax.vmap(one)(tx, params, state)

    state = init(population, params)
    curves = []
    with phase(f"process {me}: train {len(labels)} x {STEPS} steps in {ROUNDS} calls"):
        rounds = range(ROUNDS) if me else progress(range(ROUNDS), "training", unit="call")
        for _ in rounds:
            params, state, losses = train(population, params, state, x, y)
            curves.append(losses)
        jax.block_until_ready(curves)
    assert traces == 1, traces  # one compilation in each process
    final = jnp.concatenate(curves, axis=1)[:, -1]
    own = ", ".join(
        f"#{(s.index[0].start or 0) + j}: {v:.3g}"
        for s in final.addressable_shards  # this process's devices: its members, no communication
        for j, v in enumerate(np.asarray(s.data).tolist())
    )
    log(f"process {me}: final losses of its own members {own}")

    # Every process gets every member's hyperparameters and final loss...
    everyone, final = opx.process_allgather((population, final))
    best = int(np.nanargmin(np.asarray(final)))
    winner = opx.index(everyone, best)  # ... and picks the winner, a wrapped adam
    if me == 0:
        print()
        print(f"{len(labels)} Adam configurations x {STEPS} steps over {jax.device_count()} devices")
        print(f"of {processes} processes (one compilation per process); final loss per configuration:")
        for i, label in enumerate(labels):
            print(f"  #{i:<2} lr={label['learning_rate']:<8.2g} b1={label['b1']:<4} {float(final[i]):.4g}")
        print(
            f"winner: #{best}, learning_rate={float(winner.learning_rate):.3g}, b1={float(winner.b1):.3g}, "
            f"final loss {float(final[best]):.4g}"
        )

    if checkpoint_dir:
        path = os.path.join(checkpoint_dir, "population")
        with phase(f"process {me}: checkpoint the population, then restore it into the same mesh"):
            saved = {"tx": population, "params": params, "state": state}
            opx.save_checkpoint(path, saved, force=True)  # every process writes its own shards
            restored = opx.restore_checkpoint(path, saved)  # a template built as the population is
            again = opx.process_allgather(train(restored["tx"], restored["params"], restored["state"], x, y))
            on = opx.process_allgather(train(population, params, state, x, y))
            same = all(
                bool(jnp.array_equal(a, b)) for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(on))
            )
            assert same and traces == 1, (same, traces)
        log(f"process {me}: restored checkpoint trains on identically (no recompilation)")


def main() -> None:
    parser = argparse.ArgumentParser(description="A sweep of Adam configurations over a multi-process job.")
    parser.add_argument("--processes", type=int, default=2, help="local launch: how many processes")
    parser.add_argument("--devices-per-process", type=int, default=4, help="local launch: CPU devices each")
    parser.add_argument(
        "--population", type=int, default=16, help="configurations (a multiple of the devices)"
    )
    parser.add_argument("--timeout", type=float, default=300 if SMOKE else 1800, help="local launch: seconds")
    parser.add_argument("--checkpoint-dir", default=None, help="a directory every process can write")
    parser.add_argument("--worker", action="store_true", help="run as one process of a job (every host)")
    parser.add_argument("--coordinator", default=None, help="worker: host:port of process 0")
    parser.add_argument("--num-processes", type=int, default=None, help="worker: processes in the job")
    parser.add_argument("--process-id", type=int, default=None, help="worker: this process's index")
    parser.add_argument("--smoke", action="store_true", help="a few steps (also OPTAX_PYTREE_SMOKE=1)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
