"""map_population: each way's numbers against the loop, one compilation per way, the measured choice."""

from __future__ import annotations

import logging
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import run_with_8_host_devices

import optax_pytree as opx
from optax_pytree import _population

MEMBERS = 5  # chunks of 2 start at 0, 2 and 3: the last one overlaps
STEPS = 3
X = jnp.linspace(-1.0, 1.0, 16 * 8).reshape(16, 8)
PARAMS = {
    "w1": jnp.linspace(-0.5, 0.5, 8 * 32).reshape(8, 32),
    "b1": jnp.zeros(32),
    "w2": jnp.ones((32, 1)) / 8,
}


def loss(params: Any, shift: Any = 0.0) -> Any:
    """A tiny MLP's squared error against sin(x), its targets shifted by ``shift``."""
    hidden = jnp.tanh(X @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - jnp.sin(X[:, :1]) - shift) ** 2)


def train(member: Any, shift: Any) -> Any:
    """A member's final parameters and loss after a few Adam steps (its own optimizer and parameters)."""
    tx, params = member
    state = tx.init(params)

    def step(carry: Any, _: Any) -> Any:
        params, state = carry
        grads = jax.grad(loss)(params, shift)
        updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, state), None, length=STEPS)
    return params, loss(params, shift)


def counted() -> tuple[Any, list[int]]:
    """A new function object (nothing remembered for it) that counts its traces."""
    traces = [0]

    def fn(member: Any, shift: Any) -> Any:
        traces[0] += 1
        return train(member, shift)

    return fn, traces


@pytest.fixture(scope="module")
def population() -> Any:
    batch, _ = opx.grid(opx.wrap(optax.adam, 1e-2), learning_rate=np.geomspace(1e-3, 1e-1, MEMBERS).tolist())
    # Each member its own parameters, not equal to the others'.
    params = opx.stack([jax.tree.map(lambda x, i=i: x * (1.0 + 0.1 * i), PARAMS) for i in range(MEMBERS)])
    return batch, params


@pytest.fixture(scope="module")
def expected(population: Any) -> Any:
    """The loop over one compiled program of one member: the reference of every way."""
    one = jax.jit(train)
    outs = [one(opx.index(population, i), jnp.float32(0.5)) for i in range(MEMBERS)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def assert_batched_close(got: Any, expected: Any) -> None:
    """Equal to float32 round-off: a batched program's numbers against the loop's, on the CPU."""
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-7), got, expected)


COMPILES = [0]  # XLA compilations in this process, counted from here on


def _count(event: str, duration_secs: float, **_: str | int) -> None:
    COMPILES[0] += event == "/jax/core/compile/backend_compile_duration"


jax.monitoring.register_event_duration_secs_listener(_count)


class FakeTimings:
    """Injected probe timings: seconds per call of each way, and how many calls were timed."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self.calls = 0

    def __call__(self, way: str, run: Any) -> tuple[Any, float]:
        self.calls += 1
        return jax.block_until_ready(run()), self.seconds.get(way, 0.0)


def test_every_way_gives_the_loops_numbers_with_one_compilation_each(
    population: Any, expected: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shift = jnp.float32(0.5)
    for how, chunk_size, size in [
        ("loop", None, 1),
        ("vmap", None, MEMBERS),
        ("chunks", 2, 2),
        ("chunks", 4, 4),
    ]:
        fn, traces = counted()
        got, choice = opx.map_population(
            fn, population, shift, how=how, chunk_size=chunk_size, with_choice=True, progress=True
        )
        if how == "loop":
            chex.assert_trees_all_equal(got, expected)
        else:
            # A batched program sums in another order than one member's on the CPU (the batched
            # matmul, the reductions): plain SGD differs too. Measured: 1.2e-7 at most here.
            assert_batched_close(got, expected)
        assert (choice.how, choice.chunk_size, choice.members) == (how, size, MEMBERS)
        assert traces == [1]
        again = opx.map_population(fn, population, jnp.float32(-0.5), how=how, chunk_size=chunk_size)
        assert traces == [1]  # another value, the same program
        assert again[1].shape == (MEMBERS,) and not np.array_equal(again[1], got[1])
    # Weak types as vmap's: a Python number's result stays weakly typed, whatever the way.
    for how in ("loop", "vmap", "chunks"):
        shifted = opx.map_population(lambda member, shift: shift * 2.0, population, 0.5, how=how)
        assert shifted.weak_type and shifted.dtype == jnp.float32, (how, shifted)
    # A loop and chunks show a bar where tqdm is installed (a call each: 5 of the loop, 3 chunks of 2).
    bars = capsys.readouterr().err
    assert "5/5" in bars and "3/3" in bars and "2/2" in bars
    assert opx.map_population(counted()[0], population, shift, how="loop") is not None
    assert "map_population" not in capsys.readouterr().err  # quiet by default

    with pytest.raises(ValueError, match="how='fast'"):
        opx.map_population(train, population, shift, how="fast")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match=r"chunk_size=0; expected an integer in 1..5"):
        opx.map_population(train, population, shift, how="chunks", chunk_size=0)
    with pytest.raises(ValueError, match="is a scalar, so the object is not batched"):
        opx.map_population(train, opx.index(population, 0), shift)


def test_auto_takes_the_fastest_by_the_probe_and_remembers_it(
    population: Any, expected: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shift = jnp.float32(0.5)
    # Per call: the loop runs 5 calls, chunks of 2 run 3 (at 0, 2, 3), vmap 1.
    fake = FakeTimings({"loop": 1.0, "chunks": 1.2, "vmap": 3.9})
    monkeypatch.setattr(_population, "timed", fake)
    fn, traces = counted()
    with caplog.at_level(logging.INFO, logger="optax_pytree"):
        got, choice = opx.map_population(fn, population, shift, with_choice=True)
    assert_batched_close(got, expected)
    assert choice.how == "chunks" and choice.chunk_size == 2
    assert choice.seconds == pytest.approx({"loop": 5.0, "chunks": 3.6, "vmap": 3.9})
    # The device's memory where its backend reports it (an accelerator's; the CPU reports none).
    assert choice.limit == _population.device_memory(jax.devices()[0])
    assert set(choice.memory) == {"loop", "chunks", "vmap"}
    assert "chunks of 2 member(s) per call: the fastest by the probe" in choice.reason
    assert [r.getMessage() for r in caplog.records] == [
        f"optax_pytree.map_population(counted.<locals>.fn): {choice.reason}"
    ]
    assert traces == [3]  # one compilation per way
    # After an untimed call each: the loop timed 3 members, chunks the 2 chunks left; vmap its one
    # call, and once more (it lost: its first call may have lost by the warm-up).
    assert fake.calls == 7

    # Remembered: the same function and shapes neither compile nor probe again.
    fake.seconds = {"loop": 0.1, "chunks": 9.0, "vmap": 9.0}
    again, same = opx.map_population(fn, population, jnp.float32(0.5), with_choice=True)
    assert_batched_close(again, expected)
    assert same is choice and traces == [3] and fake.calls == 7
    # A way forced after the probe runs the program the probe compiled.
    forced = opx.map_population(fn, population, shift, how="loop")
    chex.assert_trees_all_equal(forced, expected)
    assert traces == [3] and fake.calls == 7
    # A repeat run compiles nothing, the writing of its calls' outputs into the batch included
    # (an allocation jitted anew at each run compiled at each run: 40 to 100 ms on a TPU).
    opx.map_population(fn, population, shift, how="chunks")
    compiled = COMPILES[0]
    for how in ("loop", "chunks", "loop"):
        opx.map_population(fn, population, shift, how=how)
    assert COMPILES[0] == compiled

    # Another population size is another key: probed anew, vmap the fastest now.
    fake.seconds = {"loop": 1.0, "chunks": 1.0, "vmap": 0.5}
    smaller = opx.index(population, slice(0, 4))
    got, choice = opx.map_population(fn, smaller, shift, with_choice=True)
    assert choice.how == "vmap" and choice.seconds == pytest.approx({"loop": 4.0, "chunks": 2.0, "vmap": 0.5})
    assert fake.calls == 7 + 3 + 1 + 1  # vmap won at once: not timed again
    assert_batched_close(got, jax.tree.map(lambda x: x[:4], expected))  # the probe's run, returned
    assert traces == [6]

    # A loop's program writes each call's outputs into the batch in place: the run holds the batch
    # whatever the population's size (keeping every call's outputs to stack them at the end held
    # them twice, and on a TPU the stacking cost a dispatch per leaf operation).
    live: list[int] = []
    write = _population._Batch.write

    def counting(self: Any, *args: Any) -> Any:
        out = write(self, *args)
        live.append(len(jax.live_arrays()))
        return out

    monkeypatch.setattr(_population._Batch, "write", counting)
    chex.assert_trees_all_equal(opx.map_population(fn, population, shift, how="loop"), expected)
    assert len(live) == MEMBERS and len(set(live)) == 1, live
    assert traces == [6]


def test_auto_never_chooses_a_way_that_does_not_fit(
    population: Any, expected: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shift = jnp.float32(0.5)
    fake = FakeTimings({"loop": 10.0, "chunks": 10.0, "vmap": 0.1})  # vmap by far the fastest
    monkeypatch.setattr(_population, "timed", fake)
    _, free = opx.map_population(counted()[0], population, shift, with_choice=True)
    assert free.how == "vmap"
    loop, chunks, vmap = free.memory["loop"], free.memory["chunks"], free.memory["vmap"]
    if not 0 < loop < chunks < vmap:  # the next test takes the other order
        pytest.skip(
            f"the programs need {loop}, {chunks} and {vmap} bytes (the loop, chunks of 2, vmap) on "
            "this backend: the limits below assume the CPU's order (a TPU v5e's one-member program "
            "of this model needs the most, its temporaries)"
        )

    # Room for each way's program, not for one beside another's batch of outputs: the probe lets
    # the batch go before vmap's call and does not keep vmap's outputs; vmap, the fastest, runs again.
    monkeypatch.setattr(_population, "device_memory", lambda device: int(vmap))
    got, choice = opx.map_population(counted()[0], population, shift, with_choice=True)
    assert choice.how == "vmap" and set(choice.seconds) == {"loop", "chunks", "vmap"}
    assert_batched_close(got, expected)

    # A device with room for chunks of 2 and not for the whole batch: vmap is not even probed.
    monkeypatch.setattr(_population, "device_memory", lambda device: (chunks + vmap) // 2)
    fn, traces = counted()
    got, choice = opx.map_population(fn, population, shift, with_choice=True)
    assert_batched_close(got, expected)
    assert choice.how in ("chunks", "loop") and set(choice.seconds) == {"loop", "chunks"}
    assert choice.limit == (chunks + vmap) // 2
    assert f"vmap would not fit in {choice.limit} bytes" in choice.reason
    assert traces == [3]

    # Room for one member only: the loop, without a probe.
    monkeypatch.setattr(_population, "device_memory", lambda device: loop)
    calls = fake.calls
    got, choice = opx.map_population(counted()[0], population, shift, with_choice=True)
    chex.assert_trees_all_equal(got, expected)
    assert choice.how == "loop" and choice.seconds == {} and fake.calls == calls
    assert set(choice.memory) == {"loop", "vmap"}  # chunks of 2 would not fit by the estimate: not compiled
    assert "loop: the only way; vmap, chunks would not fit" in choice.reason

    # A compiler that refuses the whole batch for the device's memory (a TPU's does, where the
    # backend reports no limit): vmap does not fit; forced, the compiler's error is the user's.
    compile_ = _population._compile

    def refusing(fn: Any, population: Any, args: Any, n: int, shards: int, size: int, *rest: Any) -> Any:
        if size == n:
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm")
        return compile_(fn, population, args, n, shards, size, *rest)

    monkeypatch.setattr(_population, "_compile", refusing)
    monkeypatch.setattr(_population, "device_memory", lambda device: None)
    fn = counted()[0]
    got, choice = opx.map_population(fn, population, shift, with_choice=True)
    assert choice.how in ("chunks", "loop") and choice.memory["vmap"] == float("inf")
    assert "vmap would not fit in the device's memory" in choice.reason
    with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
        opx.map_population(fn, population, shift, how="vmap")  # the way auto found refused
    monkeypatch.setattr(_population, "_compile", compile_)

    # Not even one member's program fits: the loop still (it needs the least), with a warning.
    monkeypatch.setattr(_population, "device_memory", lambda device: loop - 1)
    with caplog.at_level(logging.WARNING, logger="optax_pytree"):
        _, choice = opx.map_population(counted()[0], population, shift, with_choice=True)
    assert choice.how == "loop"
    assert any(
        "even one member's program" in r.getMessage() and "donate=True lets" in r.getMessage()
        for r in caplog.records
    )


def test_where_one_member_needs_more_than_the_batch_the_loop_is_dropped_like_any_way(
    population: Any, expected: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Compiled for a TPU v5e (without the chip, benchmarks/tpu_programs.py's way), this model's
    # programs need 1,317,376 bytes for one member (1,064,448 of them temporaries), 249,344 for
    # chunks of 2 and 209,920 for all 5: the loop is not the smallest there. Its memory injected
    # so here, the loop is dropped where it does not fit, and where nothing fits the smallest runs.
    compile_ = _population._compile
    grown: dict[str, float] = {}

    def loop_needs_most(
        fn: Any, population: Any, args: Any, n: int, shards: int, size: int, *rest: Any
    ) -> Any:
        program = compile_(fn, population, args, n, shards, size, *rest)
        if size == 1:
            program.need += 10 * (program.need + 1)
            grown["loop"] = program.need
        return program

    monkeypatch.setattr(_population, "_compile", loop_needs_most)
    monkeypatch.setattr(_population, "timed", FakeTimings({"loop": 0.1, "chunks": 9.0, "vmap": 9.0}))
    _, free = opx.map_population(counted()[0], population, jnp.float32(0.5), with_choice=True)
    loop, vmap = free.memory["loop"], free.memory["vmap"]
    assert loop == grown["loop"] > vmap and free.how == "loop"  # the fastest, where all fit

    # Room for the batch, not for one member's program: the loop is not even probed.
    monkeypatch.setattr(_population, "device_memory", lambda device: (loop + vmap) // 2)
    got, choice = opx.map_population(counted()[0], population, jnp.float32(0.5), with_choice=True)
    assert_batched_close(got, expected)
    assert choice.how in ("vmap", "chunks") and "loop" not in choice.seconds
    assert "loop" in choice.reason.split("; ")[1] and "would not fit" in choice.reason

    # Room for nothing: the way that needs the least runs, with a warning naming it.
    monkeypatch.setattr(_population, "device_memory", lambda device: 1)
    with caplog.at_level(logging.WARNING, logger="optax_pytree"):
        got, choice = opx.map_population(counted()[0], population, jnp.float32(0.5), with_choice=True)
    least = min(choice.memory, key=lambda way: choice.memory[way])
    assert choice.how == least != "loop" and choice.seconds == {}
    assert any(f"even the smallest program ({least})" in r.getMessage() for r in caplog.records)
    assert_batched_close(got, expected)


def step(member: Any, shift: Any) -> Any:
    """One Adam step of a member: its outputs shaped as the member (a training step's)."""
    tx, params = member
    grads = jax.grad(loss)(params, shift)
    updates, _ = tx.update(grads, tx.init(params), params)
    return tx, optax.apply_updates(params, updates)


def test_a_donated_population_gives_its_buffers_to_the_outputs(
    population: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shift = jnp.float32(0.5)
    outs = [jax.jit(step)(opx.index(population, i), shift) for i in range(MEMBERS)]
    expected = jax.tree.map(lambda *xs: jnp.stack(xs), *outs)
    fresh = lambda: jax.tree.map(jnp.copy, population)  # noqa: E731 - each run consumes its own
    for how, chunk_size, programs in [("loop", None, 1), ("vmap", None, 1), ("chunks", 2, 2)]:
        fn, traces = counted()
        fn = step_of(fn)
        kept = fresh()
        _, plain = opx.map_population(fn, kept, shift, how=how, chunk_size=chunk_size, with_choice=True)
        given = fresh()
        traces[0] = 0
        got, choice = opx.map_population(
            fn, given, shift, how=how, chunk_size=chunk_size, with_choice=True, donate=True
        )
        # Chunks of 2 over 5 members: 2 chunks, then the last member through the loop's program
        # (a member already overwritten cannot run again, as an overlapping chunk would).
        assert traces == [programs]
        if how == "loop":
            chex.assert_trees_all_equal(got, expected)
        else:
            assert_batched_close(got, expected)
        # The outputs took the population's buffers: its arrays are gone, the run needs less.
        assert all(x.is_deleted() for x in jax.tree.leaves(given))
        assert not any(x.is_deleted() for x in jax.tree.leaves(kept))
        assert choice.memory[how] < plain.memory[how], (how, choice.memory, plain.memory)
        # The outputs are a population again: the next step donates them in turn, two steps a member.
        # (Whether their arrays read as deleted after it is jax's: jax 0.5's dispatch of a compiled
        # program's later calls does not mark its donated arguments so.)
        twice = jax.tree.map(
            lambda *xs: jnp.stack(xs), *[jax.jit(step)(opx.index(expected, i), shift) for i in range(MEMBERS)]
        )
        again = opx.map_population(fn, got, shift, how=how, chunk_size=chunk_size, donate=True)
        assert_batched_close(again, twice)

    # A leaf that is also an argument, or twice in the population, is read, never given.
    tx, params = fresh()
    got = opx.map_population(
        lambda member, shift, w1: step(member, shift),
        (tx, params),
        shift,
        params["w1"],
        how="loop",
        donate=True,
    )
    chex.assert_trees_all_equal(got, expected)
    assert not params["w1"].is_deleted() and params["b1"].is_deleted()

    # auto: the loop's and chunks' probe calls run successive members in place (each member once),
    # and vmap is timed last by a program that keeps what they wrote. Whichever wins, every
    # member's numbers are right, and a repeat run is remembered.
    for seconds, way in [
        ({"loop": 1.0, "chunks": 1.2, "vmap": 3.9}, "chunks"),
        ({"loop": 1.0, "chunks": 1.0, "vmap": 0.5}, "vmap"),
        ({"loop": 0.1, "chunks": 1.0, "vmap": 5.0}, "loop"),
    ]:
        fake = FakeTimings(seconds)
        monkeypatch.setattr(_population, "timed", fake)
        fn, traces = counted()
        given = fresh()
        got, choice = opx.map_population(step_of(fn), given, shift, with_choice=True, donate=True)
        assert choice.how == way and "donated" in choice.reason, choice.reason
        assert_batched_close(got, expected)
        assert all(x.is_deleted() for x in jax.tree.leaves(given))
        again, same = opx.map_population(step_of(fn), fresh(), shift, with_choice=True, donate=True)
        assert same is choice
        assert_batched_close(again, expected)

    # Room for the donated loop, not for the loop beside its batch of outputs: donated, it runs.
    _, plain = opx.map_population(step_of(counted()[0]), fresh(), shift, how="loop", with_choice=True)
    _, donated = opx.map_population(
        step_of(counted()[0]), fresh(), shift, how="loop", with_choice=True, donate=True
    )
    room = int(donated.memory["loop"] + plain.memory["loop"]) // 2
    monkeypatch.setattr(_population, "device_memory", lambda device: room)
    got, choice = opx.map_population(step_of(counted()[0]), fresh(), shift, with_choice=True, donate=True)
    assert choice.how == "loop", choice.reason
    # The ways that need more than that room are named as not fitting: on the CPU vmap's (a batch
    # needs more than one member); a TPU v5e's one-member program of this model needs the most of
    # the three (test_where_one_member_needs_more_than_the_batch_the_loop_is_dropped_like_any_way),
    # so there the others fit too, and the timings (the last fake's) take the loop among them.
    over = [way for way in ("vmap", "chunks") if choice.memory.get(way, 0) > room]
    if plain.memory["loop"] <= choice.memory["vmap"]:  # the CPU's order: room for the loop alone
        assert "vmap" in over, choice.memory
    for way in over:
        assert way in choice.reason.split("; ")[1], choice.reason
    if "vmap" in over:  # every member run by the loop's program: its numbers
        chex.assert_trees_all_equal(got, expected)
    else:  # vmap probed last, on the members the loop had not run: a batched program's numbers
        assert_batched_close(got, expected)
    # Room for the donated vmap, not for its probe (the whole population beside its outputs):
    # vmap is not probed, however fast it would be.
    _, whole = opx.map_population(
        step_of(counted()[0]), fresh(), shift, how="vmap", with_choice=True, donate=True
    )
    monkeypatch.setattr(_population, "device_memory", lambda device: int(whole.memory["vmap"]))
    monkeypatch.setattr(_population, "timed", FakeTimings({"loop": 1.0, "chunks": 1.0, "vmap": 0.1}))
    got, choice = opx.map_population(step_of(counted()[0]), fresh(), shift, with_choice=True, donate=True)
    if donated.memory["loop"] <= whole.memory["vmap"]:  # the CPU's order: the loop fits too
        assert choice.how in ("loop", "chunks") and "vmap" not in choice.seconds
        assert "vmap's probe beside the population would not fit" in choice.reason, choice.reason
    else:  # a TPU's: one member's program needs more than the batch, and vmap, the only way, runs
        assert choice.how == "vmap" and choice.seconds == {}, choice.reason
        assert "loop" in choice.reason.split("; ")[1], choice.reason
    assert_batched_close(got, expected)


_STEPS: dict[Any, Any] = {}


def step_of(counting: Any) -> Any:
    """A training step (its outputs shaped as the member) that counts its traces through
    ``counting`` (``counted()``'s): one function object per ``counting``."""

    def fn(member: Any, shift: Any) -> Any:
        counting(member, shift)  # its trace counted; its outputs unused
        return step(member, shift)

    return _STEPS.setdefault(counting, fn)


_SHARDED = """
import jax, jax.numpy as jnp, numpy as np, optax
import optax_pytree as opx
from test_population import PARAMS, train

assert len(jax.devices()) == 8
members = 32  # 4 a device on a mesh axis of 8
batch, _ = opx.grid(opx.wrap(optax.adam, 1e-2), learning_rate=np.geomspace(1e-3, 1e-1, members).tolist())
params = opx.stack([jax.tree.map(lambda x, i=i: x * (1.0 + 0.05 * i), PARAMS) for i in range(members)])
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
population = opx.shard((batch, params), mesh, "pop")
shift = jnp.float32(0.5)
one = jax.jit(train)
outs = [one(opx.index((batch, params), i), shift) for i in range(members)]
expected = jax.tree.map(lambda *xs: jnp.stack(xs), *outs)
traces = [0]
def fn(member, shift):
    traces[0] += 1
    return train(member, shift)
seen = {}
for how in ("loop", "chunks", "vmap"):
    got, choice = opx.map_population(fn, population, shift, how=how, with_choice=True)
    # Each member's numbers, in the population's order, laid over the devices as it is.
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-7), got, expected)
    assert got[1].sharding.is_equivalent_to(population[0].learning_rate.sharding, 1), got[1].sharding
    seen[how] = choice.chunk_size
    assert choice.device == tuple(sorted(jax.devices(), key=lambda d: d.id))
assert seen == {"loop": 1, "chunks": 2, "vmap": 4}, seen  # members a device: 4; chunks of 2
assert traces[0] == 3, traces  # one program per way
_, choice = opx.map_population(fn, population, shift, with_choice=True)  # auto: compiled already
assert traces[0] == 3 and "on each of 8 devices" in choice.reason, (traces, choice.reason)
# Spread over the devices otherwise than by the batch axis: vmap only, and the error says so.
replicated = jax.device_put((batch, params), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
try:
    opx.map_population(fn, replicated, shift, how="loop")
except ValueError as e:
    assert "not by its batch axis alone" in str(e), e
else:
    raise AssertionError("a replicated population ran by a loop")
try:
    opx.map_population(fn, population, shift, how="chunks", chunk_size=5)
except ValueError as e:
    assert "1..4" in str(e) and "spread over 8" in str(e), e
# The same devices, the batch axis over 4 of a (4, 2) mesh: other programs (8 members a device).
mesh2 = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("pop", "other"))
population2 = opx.shard((batch, params), mesh2, "pop")
got, choice = opx.map_population(fn, population2, shift, how="loop", with_choice=True)
jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-7), got, expected)
assert choice.chunk_size == 1 and traces[0] == 4, (choice, traces)
# A mesh whose axis is explicit (jax.make_mesh's default on recent jax): every way runs on it.
AxisType = getattr(jax.sharding, "AxisType", None)
if AxisType is not None:
    explicit = jax.make_mesh((8,), ("pop",), axis_types=(AxisType.Explicit,))
    population3 = opx.shard((batch, params), explicit, "pop")
    for how in ("loop", "chunks", "vmap"):
        got = opx.map_population(fn, population3, shift, how=how)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-7), got, expected)
        assert len(got[1].sharding.device_set) == 8, (how, got[1].sharding)
# Donated: the outputs in the population's buffers, on every device, every way.
from test_population import step
outs = [jax.jit(step)(opx.index((batch, params), i), shift) for i in range(members)]
stepped = jax.tree.map(lambda *xs: jnp.stack(xs), *outs)
for how in ("loop", "chunks", "vmap"):
    given = opx.shard(jax.tree.map(jnp.copy, (batch, params)), mesh, "pop")
    size = 3 if how == "chunks" else None  # 4 a device: a chunk of 3, then the loop's program
    got = opx.map_population(step, given, shift, how=how, chunk_size=size, donate=True)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-7), got, stepped)
    assert all(x.is_deleted() for x in jax.tree.leaves(given)), how
    assert got[1]["w1"].sharding.is_equivalent_to(population[1]["w1"].sharding, 3), got[1]["w1"].sharding
print("OK")
"""


@pytest.mark.exhaustive  # a process of its own (8 CPU devices): CI runs it
def test_a_population_sharded_over_its_batch_axis_runs_each_way_on_every_device() -> None:
    # opx.shard lays the batch axis over a mesh axis of 8 CPU devices: the loop runs one member
    # of each device's together, chunks k of each device's, vmap all; numbers and layout kept,
    # one compilation per way, the choice per device.
    assert run_with_8_host_devices(_SHARDED).strip().endswith("OK")
