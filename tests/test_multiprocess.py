"""Populations over a mesh that spans processes: 2 local ``jax.distributed`` processes x 4 CPU devices.

Each test starts two Python processes that join one JAX job through a
coordinator on a free localhost port, with gloo collectives between them, and
compares what they compute with a single-process run of the same population
in the test's own process. The launcher never waits on a process that cannot
finish: when one dies (or the time runs out) the others are killed and the test
fails with every process's output.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any

import jax
import numpy as np
import optax
import pytest
from helpers import (
    PARAMS,
    assert_tree_allclose,
    loss,
    one_distributed_job_at_a_time,
    run_with_8_host_devices,
    sockets_available,
)

import optax_pytree as opx

PROCESSES = 2
DEVICES_PER_PROCESS = 4
LEARNING_RATES = np.geomspace(1e-3, 1.0, PROCESSES * DEVICES_PER_PROCESS).tolist()
_TESTS = os.path.dirname(os.path.abspath(__file__))

# What every process runs first: join the job, then the test's own script.
PRELUDE = """
import os, sys, traceback
import jax

def fail_fast(kind, value, tb):
    # An error exits at once: at exit, jax.distributed waits for every peer to
    # shut down, and the peers wait in a collective for this process.
    traceback.print_exception(kind, value, tb)
    sys.stdout.flush()
    os._exit(1)

sys.excepthook = fail_fast

PROCESS, OUT = int(sys.argv[1]), sys.argv[4]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[3], num_processes=int(sys.argv[2]), process_id=PROCESS,
                           initialization_timeout=60)
assert jax.process_count() == int(sys.argv[2]) and jax.local_device_count() == {devices}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# A local jax.distributed job: its coordinator listens on a loopback socket.
NEEDS_SOCKETS = pytest.mark.skipif(
    not sockets_available(),
    reason="this machine refuses sockets, even on the loopback (a sandboxed accelerator machine): "
    "jax.distributed's coordinator needs one",
)


def run_processes(script: str, out: pathlib.Path, *args: str, timeout: float = 240.0) -> list[str]:
    """Runs ``script`` as every process of a local 2-process JAX job; returns their outputs.

    ``out`` is the script's ``OUT``, a folder for results; ``args`` its
    ``sys.argv[5:]``. A process that exits with an error (or a job past
    ``timeout`` seconds) fails the test at once, after the other processes
    are killed: a process left waiting in a collective for a dead peer would
    otherwise hang the suite.
    """
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES_PER_PROCESS}",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([_TESTS, os.environ.get("PYTHONPATH", "")]),
    }
    code = PRELUDE.format(devices=DEVICES_PER_PROCESS) + textwrap.dedent(script)
    logs = [out / f"process{i}.log" for i in range(PROCESSES)]
    procs = []
    with one_distributed_job_at_a_time():
        coordinator = f"localhost:{_free_port()}"
        for i, log in enumerate(logs):
            with open(log, "w") as f:  # the child keeps its own handle
                argv = [sys.executable, "-c", code, str(i), str(PROCESSES), coordinator, str(out), *args]
                procs.append(subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + timeout
        try:
            while True:
                codes = [p.poll() for p in procs]  # every one, each time
                if None not in codes or any(codes) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
    outputs = [log.read_text() for log in logs]
    if any(p.returncode != 0 for p in procs):
        why = "timed out" if time.monotonic() > deadline else "failed"
        report = "\n".join(
            f"--- process {i} (exit {p.returncode}) ---\n{text[-6000:]}"
            for i, (p, text) in enumerate(zip(procs, outputs))
        )
        pytest.fail(f"the {PROCESSES}-process job {why}:\n{report}", pytrace=False)
    return outputs


# --------------------------------------------------------------------------
# The population: 8 Adam learning rates, one per device, a few steps.

STEPS = 4

COMMON = f"""
import numpy as np, optax
import optax_pytree as opx
from helpers import PARAMS, counting_jit, loss

LEARNING_RATES = {LEARNING_RATES!r}
N = len(LEARNING_RATES)
STEPS = {STEPS}
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))

def step(tx, params, state):
    value, grads = jax.value_and_grad(loss)(params)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state, value

def train(tx, params, state, steps):
    for _ in range(steps):
        params, state, _ = step(tx, params, state)
    return params, state, loss(params)
"""


def train(tx: Any, params: Any, state: Any, steps: int) -> Any:
    """``steps`` steps of ``tx`` from ``(params, state)``: the workers' ``train`` (see COMMON)."""
    for _ in range(steps):
        grads = jax.grad(loss)(params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params, state, loss(params)


def single_process() -> Any:
    """The whole population in this process (one device): the reference."""
    population = opx.stack([opx.wrap(optax.adam, lr) for lr in LEARNING_RATES])
    params = opx.stack([PARAMS] * len(LEARNING_RATES))
    state = jax.vmap(lambda tx, p: tx.init(p))(population, params)
    run = jax.jit(jax.vmap(lambda tx, p, s: train(tx, p, s, STEPS)))
    return population, run(population, params, state)


SWEEP = """
sweep, traces = counting_jit(jax.vmap(lambda tx, p, s: train(tx, p, s, STEPS)))
init = jax.jit(jax.vmap(lambda tx, p: tx.init(p)))

# Each process builds only its own members...
mine = opx.process_local_indices(N, mesh, "pop")
assert mine.tolist() == list(range(4 * PROCESS, 4 * PROCESS + 4)), mine
population = opx.shard_process_local(opx.stack([opx.wrap(optax.adam, LEARNING_RATES[i]) for i in mine]),
                                      mesh, "pop")
params = opx.shard_process_local(opx.stack([PARAMS] * len(mine)), mesh, "pop")
# ... and holds only them: one per device, the population's size global.
lr = population.learning_rate
assert lr.shape == (N,) and lr.weak_type and lr.sharding.spec == jax.sharding.PartitionSpec("pop"), lr
assert sorted(s.index[0].start for s in lr.addressable_shards) == mine.tolist()
assert not lr.is_fully_addressable
out = sweep(population, params, init(population, params))
print("share", PROCESS, [float(s.data[0]) for s in out[2].addressable_shards])

# opx.shard of the whole population, given to every process: the same arrays, the same program.
whole = opx.shard(opx.stack([opx.wrap(optax.adam, lr) for lr in LEARNING_RATES]), mesh, "pop")
whole_params = opx.shard(opx.stack([PARAMS] * N), mesh, "pop")
again = sweep(whole, whole_params, init(whole, whole_params))
assert traces == [1], traces  # one compilation in this process, for both

# Every process gets every member's result and hyperparameters; the winner is opx.index.
(params_out, state_out, losses), again, everyone = opx.process_allgather((out, again, population))
assert losses.shape == (N,) and losses.is_fully_addressable
best = int(np.argmin(losses))
winner = opx.index(everyone, best)
expected = opx.wrap(optax.adam, LEARNING_RATES[best])
assert jax.tree_util.tree_structure(winner) == jax.tree_util.tree_structure(expected)
assert all(a.weak_type == b.weak_type for a, b in zip(jax.tree.leaves(winner), jax.tree.leaves(expected)))
assert float(winner.learning_rate) == float(expected.learning_rate)
global_winner = opx.index(population, best)  # also on the global batch: replicated over the mesh
assert float(global_winner.learning_rate) == float(expected.learning_rate)
# Other layouts of the same devices: the population axis within each process
# (replicated over "rep"), or across the processes with each one a replica of
# the other (both hold every member). The same losses from the same members.
devices = np.array(jax.devices())
for grid in (devices.reshape(4, 2), devices.reshape(2, 4).T):
    other = jax.sharding.Mesh(grid, ("pop", "rep"))
    held = opx.process_local_indices(N, other, "pop")
    tx = opx.stack([opx.wrap(optax.adam, LEARNING_RATES[i]) for i in held])
    tx = opx.shard_process_local(tx, other, "pop")
    p = opx.shard_process_local(opx.stack([PARAMS] * len(held)), other, "pop")
    assert tx.learning_rate.sharding.spec == jax.sharding.PartitionSpec("pop")
    # (Two members per device, not one: XLA's loops differ, by float32 round-off.)
    np.testing.assert_allclose(opx.process_allgather(sweep(tx, p, init(tx, p)))[2], losses, rtol=1e-6)
    print("layout", grid.tolist(), "holds", held.tolist())
np.savez(f"{OUT}/{PROCESS}.npz", best=best, learning_rate=np.asarray(everyone.learning_rate),
         again=np.asarray(again[2]), **{f"params_{k}": np.asarray(v) for k, v in params_out.items()},
         losses=np.asarray(losses), mu_w=np.asarray(state_out[0].mu["w"]))
"""


@pytest.mark.exhaustive  # a multi-process job: CI runs it (pytest --exhaustive)
@NEEDS_SOCKETS
def test_two_process_population_equals_the_single_process_run(tmp_path: pathlib.Path) -> None:
    start = time.perf_counter()
    outputs = run_processes(COMMON + SWEEP, tmp_path)
    wall = time.perf_counter() - start
    population, (params, state, losses) = single_process()
    results = [np.load(tmp_path / f"{i}.npz") for i in range(PROCESSES)]
    for i, got in enumerate(results):
        # Both processes see the whole population, identically.
        for key in got.files:
            np.testing.assert_array_equal(got[key], results[0][key], err_msg=key)
        assert f"share {i}" in outputs[i]
        assert "holds [0, 1, 2, 3, 4, 5, 6, 7]" in outputs[i]  # the replicated layout
    got = results[0]
    np.testing.assert_array_equal(got["learning_rate"], population.learning_rate)
    assert_tree_allclose({k: got[f"params_{k}"] for k in PARAMS}, params)
    assert_tree_allclose(got["mu_w"], state[0].mu["w"])
    assert_tree_allclose(got["losses"], losses)
    np.testing.assert_array_equal(got["again"], got["losses"])  # opx.shard: the same result
    assert int(got["best"]) == int(np.argmin(losses))
    difference = max(
        float(np.max(np.abs(got["losses"] - np.asarray(losses)))),
        *(float(np.max(np.abs(got[f"params_{k}"] - np.asarray(params[k])))) for k in PARAMS),
    )
    print(f"2 x {DEVICES_PER_PROCESS} devices: {wall:.1f} s, max |2-process - 1-process| = {difference:.2e}")


# --------------------------------------------------------------------------
# Checkpoints: each process writes its shards; restored into the same mesh.

CHECKPOINT = """
import os
train_jit = jax.jit(jax.vmap(lambda tx, p, s: train(tx, p, s, STEPS // 2)))  # twice: STEPS
init = jax.jit(jax.vmap(lambda tx, p: tx.init(p)))
mine = opx.process_local_indices(N, mesh, "pop")
path = os.path.join(OUT, "checkpoint")

def gathered(tree):
    return {k: np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(opx.process_allgather(tree))[0]
            for k in [jax.tree_util.keystr(k)]}

MODE = sys.argv[5]
if MODE == "save":
    population = opx.shard_process_local(
        opx.stack([opx.wrap(optax.adam, LEARNING_RATES[i]) for i in mine]), mesh, "pop")
    params = opx.shard_process_local(opx.stack([PARAMS] * len(mine)), mesh, "pop")
    params, state, _ = train_jit(population, params, init(population, params))
    opx.save_checkpoint(path, {"tx": population, "params": params, "state": state})
    np.savez(f"{OUT}/{PROCESS}-saved.npz", **gathered({"params": params, "state": state}))
    tx = population
else:
    # A template built as the population was, values aside: placement and structure.
    template = opx.shard_process_local(opx.stack([opx.wrap(optax.adam, 0.5)] * len(mine)), mesh, "pop")
    zeros = jax.tree.map(jnp.zeros_like, PARAMS)
    zeros = opx.shard_process_local(opx.stack([zeros] * len(mine)), mesh, "pop")
    template = {"tx": template, "params": zeros, "state": init(template, zeros)}
    restored = opx.restore_checkpoint(path, template)
    leaves = zip(jax.tree_util.tree_flatten_with_path(restored)[0], jax.tree.leaves(template))
    for (where, got), want in leaves:
        assert got.sharding == want.sharding, (where, got.sharding, want.sharding)
        assert got.weak_type == want.weak_type, where
        # Each process reads its own shards only. (A jitted init's constant
        # outputs, the step counts, come back whole on every process, as they
        # went in: JAX returns them so.)
        assert len(got.addressable_shards) == (1 if want.is_fully_addressable else 4), where
    np.savez(f"{OUT}/{PROCESS}-restored.npz",
             **gathered({"params": restored["params"], "state": restored["state"]}))
    restored_lr = np.asarray(opx.process_allgather(restored["tx"].learning_rate))
    np.testing.assert_array_equal(restored_lr, np.asarray(LEARNING_RATES, np.float32))
    params = restored["params"]
    state = restored["state"]
    tx = restored["tx"]
params, state, losses = train_jit(tx, params, state)
np.savez(f"{OUT}/{PROCESS}-{MODE}-final.npz", **gathered({"params": params, "losses": losses}))
"""


@pytest.mark.exhaustive  # a multi-process job: CI runs it (pytest --exhaustive)
@NEEDS_SOCKETS
def test_a_checkpoint_of_the_two_process_job_restores_and_trains_on_identically(
    tmp_path: pathlib.Path,
) -> None:
    script = COMMON + "import jax.numpy as jnp\n" + CHECKPOINT
    run_processes(script, tmp_path, "save")
    run_processes(script, tmp_path, "restore")  # a new job: nothing in memory
    for i in range(PROCESSES):
        saved, restored = np.load(tmp_path / f"{i}-saved.npz"), np.load(tmp_path / f"{i}-restored.npz")
        assert saved.files == restored.files
        for key in saved.files:
            np.testing.assert_array_equal(restored[key], saved[key], err_msg=key)
        # Training on from the restored checkpoint is training on without it, to the bit.
        on, again = np.load(tmp_path / f"{i}-save-final.npz"), np.load(tmp_path / f"{i}-restore-final.npz")
        assert on.files == again.files
        for key in on.files:
            np.testing.assert_array_equal(again[key], on[key], err_msg=key)
    # And the same numbers as STEPS steps of the single-process population.
    _, (params, _, losses) = single_process()
    final = np.load(tmp_path / "0-restore-final.npz")
    assert_tree_allclose(final["['losses']"], losses)
    assert_tree_allclose({k: final[f"['params']['{k}']"] for k in PARAMS}, params)

    # The checkpoint of the 2-process job also restores in one process, into one device.
    population = opx.stack([opx.wrap(optax.adam, lr) for lr in LEARNING_RATES])
    params1 = opx.stack([PARAMS] * len(LEARNING_RATES))
    template = {
        "tx": population,
        "params": params1,
        "state": jax.vmap(lambda tx, p: tx.init(p))(population, params1),
    }
    restored = opx.restore_checkpoint(tmp_path / "checkpoint", template)
    saved = np.load(tmp_path / "0-saved.npz")
    np.testing.assert_array_equal(restored["state"][0].mu["w"], saved["['state'][0].mu['w']"])
    assert restored["tx"].learning_rate.weak_type


# --------------------------------------------------------------------------
# Bad input: clear errors naming the argument, raised by every process together.

BAD_INPUT = """
import re
def raises(pattern, fn):
    try:
        fn()
    except ValueError as e:
        assert re.search(pattern, str(e)), (pattern, str(e))
        print("raised:", e)
    else:
        raise AssertionError(f"no error matching {pattern!r}")

six = opx.stack([opx.wrap(optax.adam, lr) for lr in LEARNING_RATES[:6]])
# A population that the mesh axis does not divide.
raises(r"shard: batched, a batch of 6 members, does not split evenly over the 8 devices .*axis_name='pop'",
       lambda: opx.shard(six, mesh, "pop"))
raises(r"size=6 does not split evenly over the 8 devices .* axis_name='pop'",
       lambda: opx.process_local_indices(6, mesh, "pop"))
raises(r"batched has 3 members on process 0, which holds 4 of the 8 devices .*axis_name='pop'",
       lambda: opx.shard_process_local(opx.index(six, slice(0, 3)), mesh, "pop"))
# A mesh axis that does not exist.
for fn in (lambda: opx.shard(six, mesh, "batch"), lambda: opx.process_local_indices(8, mesh, "batch"),
           lambda: opx.shard_process_local(six, mesh, "batch")):
    raises(r"axis_name 'batch' is not an axis of the mesh; its axes are \\['pop'\\]", fn)
# A process-local share of the wrong size on one process only: every process raises.
raises(r"batched has 5 members on process 1, which holds 4",
       lambda: opx.shard_process_local(opx.index(six, slice(0, 4 if PROCESS == 0 else 5)), mesh, "pop"))
raises(r"batched shares of different sizes \\(process 0: 4 members for 4 devices, process 1: 8 members",
       lambda: opx.shard_process_local(opx.index(six, np.arange(4 * (PROCESS + 1)) % 6), mesh, "pop"))
raises(r"members differ in structure",
       lambda: opx.shard_process_local(opx.stack([opx.wrap(optax.adam, 0.1, b1=jnp.ones(PROCESS + 1))] * 4),
                                       mesh, "pop"))
raises(r"is a scalar" if PROCESS else r"batched is not a batch on process \\[1\\]; see the error there",
       lambda: opx.shard_process_local(opx.wrap(optax.adam, 0.1) if PROCESS else opx.index(six, slice(0, 4)),
                                       mesh, "pop"))
# The processes are still in step: a good call completes.
ok = opx.shard_process_local(opx.index(six, slice(0, 4)), mesh, "pop")
assert ok.learning_rate.shape == (8,)
print("OK")
"""


@pytest.mark.exhaustive  # a multi-process job: CI runs it (pytest --exhaustive)
@NEEDS_SOCKETS
def test_bad_input_is_a_clear_error_on_every_process(tmp_path: pathlib.Path) -> None:
    outputs = run_processes(COMMON + "import jax.numpy as jnp\n" + BAD_INPUT, tmp_path)
    for i, text in enumerate(outputs):
        assert text.rstrip().endswith("OK"), f"process {i}:\n{text}"
        # Process 0 raises for process 1's share too: the error is the same everywhere.
        assert "batched has 5 members on process 1" in text


@pytest.mark.exhaustive  # a multi-process job: CI runs it (pytest --exhaustive)
@NEEDS_SOCKETS
def test_the_launcher_fails_fast_when_a_process_dies(tmp_path: pathlib.Path) -> None:
    # Process 1 dies; process 0 waits in a collective that cannot complete.
    script = (
        COMMON
        + """
if PROCESS == 1:
    raise RuntimeError("process 1 gives up")
opx.process_allgather(opx.shard(opx.stack([PARAMS] * N), mesh, "pop"))
"""
    )
    start = time.perf_counter()
    with pytest.raises(pytest.fail.Exception, match=r"(?s)job failed.*process 1 gives up"):
        run_processes(script, tmp_path)
    assert time.perf_counter() - start < 20


# --------------------------------------------------------------------------
# In one process: the multi-process functions are the single-process ones.

ONE_PROCESS_8_DEVICES = """
import jax, numpy as np, optax
import optax_pytree as opx

mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
batch = opx.stack([opx.wrap(optax.adam, lr) for lr in np.geomspace(1e-3, 1.0, 16).tolist()])
assert opx.process_local_indices(16, mesh, "pop").tolist() == list(range(16))
sharded, local = opx.shard(batch, mesh, "pop"), opx.shard_process_local(batch, mesh, "pop")
for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(local)):
    assert a.sharding == b.sharding and a.weak_type == b.weak_type and bool((a == b).all())
whole = opx.process_allgather(local)
one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
assert all(x.sharding == one for x in jax.tree.leaves(whole)), whole
assert jax.tree_util.tree_structure(whole) == jax.tree_util.tree_structure(batch)
for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(batch)):
    assert a.weak_type == b.weak_type and bool((a == b).all())
# A checkpoint of the sharded population restores into a tree that the same
# jitted step takes: the step counts of a jitted init (constant outputs, which
# JAX returns uncommitted on one device) stay uncommitted.
import os, tempfile
params = opx.shard(opx.stack([jax.numpy.ones(3)] * 16), mesh, "pop")
state = jax.jit(jax.vmap(lambda tx, p: tx.init(p)))(local, params)
assert not state[0].count.committed
step = jax.jit(jax.vmap(lambda tx, p, s: tx.update(p, s, p)))
with tempfile.TemporaryDirectory() as tmp:
    tree = {"tx": local, "params": params, "state": state}
    opx.save_checkpoint(os.path.join(tmp, "population"), tree)
    restored = opx.restore_checkpoint(os.path.join(tmp, "population"), tree)
got, expected = step(restored["tx"], restored["params"], restored["state"]), step(local, params, state)
assert all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)))
for call, pattern in [
    (lambda: opx.shard_process_local(opx.index(batch, slice(0, 12)), mesh, "pop"), "a batch of 12 members"),
    (lambda: opx.process_local_indices(12, mesh, "pop"), "size=12 does not split evenly over the 8"),
    (lambda: opx.shard_process_local(batch, mesh, "y"), "axis_name 'y' is not an axis of the mesh"),
    (lambda: opx.process_local_indices(16, mesh, ("pop", "y")), "axis_name 'y' is not an axis"),
    (lambda: opx.process_local_indices(0, mesh, "pop"), "size must be a positive integer"),
]:
    try:
        call()
    except ValueError as e:
        assert pattern in str(e), (pattern, str(e))
    else:
        raise AssertionError(pattern)
print("OK")
"""


def test_in_one_process_they_are_shard_and_a_move_to_one_device_and_checkpoints_restore() -> None:
    assert run_with_8_host_devices(ONE_PROCESS_8_DEVICES).strip().endswith("OK")


def test_process_allgather_keeps_what_is_already_whole() -> None:
    tree = {"lr": opx.wrap(optax.sgd, 0.1), "n": 3, "host": np.arange(2.0), "w": jax.numpy.ones(2)}
    got = opx.process_allgather(tree)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(tree)
    assert got["n"] == 3 and isinstance(got["host"], np.ndarray)  # not arrays: as they are
    assert got["lr"].learning_rate.weak_type
    assert_tree_allclose(got, tree, rtol=0, atol=0)
    with pytest.raises(TypeError, match="process_allgather: called on a traced value"):
        jax.jit(opx.process_allgather)(tree["w"])
