"""Feature: populations of any size, one member's function run over a batch by vmap, by chunks or by a loop.

:func:`map_population` runs a function of one member (a training step or a
whole training loop) over every member of a population (``opx.grid`` /
``opx.stack`` output, with the members' parameters and states), in the style
of ``jax.lax.map``, one of three ways: the whole batch in one ``jax.vmap``,
chunks of ``k`` members through one vmapped program, or a loop over one
compiled program of one member. ``how="auto"`` chooses by measurement: the
compiled programs' memory analysis against the device's memory, then a short
timed probe; the choice is remembered per function, shapes and device.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dataclasses
import importlib.util
import logging
import math
import time
import weakref
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from . import _leaves
from ._sweep import batch_size

LOGGER = logging.getLogger("optax_pytree")
WAYS = ("vmap", "chunks", "loop")
How = Literal["auto", "vmap", "chunks", "loop"]
# The probe times up to this many calls of the loop and of the chunks (after
# one untimed call each, which warms the program up), in turns.
PROBE_CALLS = 3
# How XLA says that a program cannot fit in the device's memory when it compiles it (a TPU's
# compiler refuses a program past its memory: "RESOURCE_EXHAUSTED: ... Ran out of memory").
OUT_OF_MEMORY = "RESOURCE_EXHAUSTED"


@dataclasses.dataclass(frozen=True)
class Choice:
    """How :func:`map_population` ran (or will run) a population, and why.

    Attributes:
        how: ``"vmap"``, ``"chunks"`` or ``"loop"``.
        chunk_size: the members per call (of each device's, where the
            population is sharded over its batch axis): the population's size
            (each device's share) for ``"vmap"``, ``k`` for ``"chunks"``, 1
            for ``"loop"``.
        members: the population's size.
        device: the device the programs run on (the devices, in order, for a
            population spread over several).
        memory: way -> the bytes its compiled program needs (arguments,
            outputs and temporaries, less donated buffers: a loop's or chunks'
            batch of outputs, written in place, and the population's leaves
            given to the outputs with ``donate=True``, counted once), for each way compiled;
            infinite where the compiler refused it for the device's memory.
        limit: the device's memory in bytes (``device.memory_stats()``), or
            None where the backend does not report it (the CPU).
        seconds: way -> the probe's estimate of a whole run, for each way
            timed; empty where the way was forced or only one fitted.
        reason: the choice in words (also logged at INFO on the
            ``optax_pytree`` logger).
    """

    how: str
    chunk_size: int
    members: int
    device: Any
    memory: dict[str, float]
    limit: int | None
    seconds: dict[str, float]
    reason: str


@dataclasses.dataclass
class _Program:
    """A way, compiled once for a population's shapes: the executable and its memory."""

    run: Any  # the jax Compiled; None where the compiler refused it for the device's memory
    size: int  # members per call
    need: float  # bytes (infinite where refused)
    fixed: int  # of which the arguments' (the whole population's, whatever the way), not donated
    out: int = 0  # of which the outputs' (a loop's or chunks': the batch, written in place)
    tree: Any = None  # a loop's or chunks': the structure of fn's outputs
    zeros: Any = None  # a loop's or chunks': the allocation of the batch it writes into, jitted once
    # Where each of fn's outputs (flat) is written: the index of the donated population leaf
    # whose buffer it reuses (``donate=True``), or None: the batch of outputs.
    pairs: tuple[int | None, ...] = ()
    finish: Any = None  # vmap's: compiles its probe of a donated population (``_completion``)


@dataclasses.dataclass
class _Entry:
    """What is remembered for a function and a key: the ways compiled, and the choice made."""

    programs: dict[int, _Program]  # members per call -> the program (n: vmap, 1: the loop, k: chunks)
    choices: dict[tuple[str, int | None], Choice]  # (how, chunk_size) asked -> the choice made


# fn -> key (shapes, dtypes, device) -> its entry. Weak: a function gone, its programs go.
_REMEMBERED: weakref.WeakKeyDictionary[Any, dict[Any, _Entry]] = weakref.WeakKeyDictionary()


def device_memory(device: Any) -> int | None:
    """The device's memory in bytes where its backend reports it (accelerators), else None."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"])


def timed(way: str, run: Callable[[], Any]) -> tuple[Any, float]:
    """``run()``'s result, ready, and the seconds it took (the probe's clock; tests inject timings)."""
    start = time.perf_counter()
    out = jax.block_until_ready(run())
    return out, time.perf_counter() - start


def map_population(
    fn: Callable[..., Any],
    population: Any,
    *args: Any,
    how: How = "auto",
    chunk_size: int | None = None,
    progress: bool = False,
    with_choice: bool = False,
    donate: bool = False,
) -> Any:
    """Runs ``fn`` on every member of a population: by vmap, by chunks or by a loop.

    ``jax.jit(jax.vmap(fn))`` runs a population in one program, and on an
    accelerator that is often the slow way: a batched step of a model of a few
    million parameters can take longer than a loop over the members, and a
    large population may not fit in the device's memory at all. This runs
    ``fn(member, *args)`` for every member, as ``jax.lax.map`` would, one of
    three ways:

    - ``"vmap"``: the whole population in one vmapped program;
    - ``"chunks"``: a loop over one vmapped program of ``chunk_size`` members
      (the last chunk overlaps the one before where the size does not divide);
    - ``"loop"``: a loop over one compiled program of one member.

    The program of a loop or of chunks writes each call's outputs into the
    batch in place (a donated argument): a run holds the population, the
    batch of outputs and one call's temporaries, one dispatch a call.

    ``how="auto"`` compiles the candidates (one compilation each) and drops
    a way whose memory (``.compile().memory_analysis()``) exceeds the
    device's (``device.memory_stats()``, where the backend reports it) or
    that the compiler refuses for the device's memory: never a way that does
    not fit where another fits (where none does, the one that needs the
    least runs, with a warning). It times the rest on a short probe (the loop
    on a few members and chunks on a few chunks, each after an untimed call,
    the least time per call counted, each call with the writing of its
    outputs into the batch; vmap on the whole population, and once more
    where it lost) and keeps the fastest by the probe's estimate of a whole
    run. vmap's probe is its whole run, and the chosen way's probed calls
    are part of its run where the other did not write into the batch too,
    so the probe costs at most two vmapped runs of the population (three
    where the device's memory would not hold a program beside the other
    way's outputs: the probe then keeps neither at vmap's call) and a few
    calls of the other ways, once. The choice is
    remembered for the same ``fn`` object, shapes, dtypes and device: a
    repeat call neither compiles nor probes again. It is logged at INFO on
    the ``optax_pytree`` logger and returned with ``with_choice=True``.

    A population sharded over its batch axis (``opx.shard``) runs on every
    device of its mesh axis, each device its own members, by the same rule:
    a call of the loop runs one member of each device's together (one
    vmapped program whose batch stays on the devices), a call of chunks
    ``chunk_size`` of each device's, vmap all of them; the memory compared
    is each device's, and the outputs are laid over the devices as the
    population is.

    ``donate=True`` lets the outputs reuse the population's buffers, as
    ``jax.jit``'s ``donate_argnums`` does: each of ``fn``'s outputs with the
    shape, dtype and layout of a leaf of the population (a training step's new
    parameters and state) is written into that leaf's buffer, so a run holds
    the population once, not twice (64 members of 16.8M parameters with adam's
    state take 12.9 GB: twice that does not fit on a 16 GB device, once
    does). Those leaves are consumed: the population's arrays are deleted, and
    the outputs take their place. A loop or chunks then read each member before
    its outputs overwrite it, and never run a member twice (the members past
    the last whole chunk go through the loop's program). The probe of
    ``how="auto"`` runs the loop and chunks on successive members, in place,
    their outputs part of the run (on its first call each member is computed
    by the way that probed it, or by the way chosen), and times vmap on the
    whole population with the members already done kept as they are, where
    that program fits beside the population (else vmap is not probed).

    The loop gives each member the numbers of ``jax.jit(fn)`` on
    ``opx.index(population, i)``, bit for bit. vmap and chunks run a batched
    program, which XLA may compute in another order than one member's (the
    batched matmul, the reductions): on the CPU they agree with the loop to
    float32 round-off, not bit for bit (at most 1.2e-7 apart on the tests'
    MLP after three Adam steps; plain SGD differs too).

    Args:
        fn: a function of one member and ``*args``; it must be traceable by
            ``jax.jit`` (static settings in its closure). Keep the same
            function object across calls: the choice and the compiled
            programs are remembered per object (a bound method
            ``trainer.step`` is a new object at each access: keep one).
        population: a pytree whose leaves all share a leading batch axis: a
            batched optimizer, or a tuple ``(optimizer, params, state)`` of
            batched members.
        *args: the arguments every member shares (data, shared parameters),
            passed to ``fn`` as they are.
        how: ``"auto"`` (by measurement), or ``"vmap"``, ``"chunks"`` or
            ``"loop"`` to force a way.
        chunk_size: the members per call of ``"chunks"``; by default (and
            for ``"auto"``) the largest power of two at most half the
            population that fits in memory.
        progress: a progress bar (tqdm, where installed) over the calls of a
            loop or chunks; quiet by default.
        with_choice: return ``(outputs, choice)``, the :class:`Choice`.
        donate: write the outputs into the population's buffers where they
            match (the population's matching arrays are deleted); a run
            then needs memory for the population once.

    Returns:
        ``fn``'s outputs stacked on a leading axis, as ``jax.vmap(fn)`` stacks
        them (and the :class:`Choice` with ``with_choice=True``).

    Raises:
        ValueError: an unknown ``how``, a ``chunk_size`` outside
            ``1..members`` (of each device's, where sharded), a population
            without a batch axis, or a population spread over several
            devices other than by its batch axis with a way other than
            ``"vmap"``.

    Examples:
        >>> import jax, jax.numpy as jnp, optax, optax_pytree as opx
        >>> batch, labels = opx.grid(opx.wrap(optax.sgd, 0.1), learning_rate=[0.1, 0.2, 0.3])
        >>> def final(tx, params):
        ...     state = tx.init(params)
        ...     for _ in range(3):
        ...         updates, state = tx.update(params, state)  # the gradient of |p|^2 / 2
        ...         params = params + updates
        ...     return params
        >>> out, choice = opx.map_population(final, batch, jnp.ones(2), how="loop", with_choice=True)
        >>> out.shape, choice.how
        ((3, 2), 'loop')
        >>> bool(jnp.allclose(opx.map_population(final, batch, jnp.ones(2), how="vmap"), out))
        True

        A training step whose outputs are the member again gives them the population's
        buffers with ``donate=True``:

        >>> def step(member):
        ...     tx, params = member
        ...     updates, _ = tx.update(params, tx.init(params))
        ...     return tx, params + updates
        >>> members = (batch, jnp.ones((3, 2)))
        >>> stepped = opx.map_population(step, members, how="loop", donate=True)
        >>> members[1].is_deleted(), stepped[1][:, 0].tolist()
        (True, [0.8999999761581421, 0.800000011920929, 0.699999988079071])
    """
    if how not in ("auto", *WAYS):
        raise ValueError(f"map_population: how={how!r}; expected 'auto', 'vmap', 'chunks' or 'loop'")
    n = batch_size(population, "map_population")
    device, shards = _placement(population, args, how, n)
    local = n // shards  # members on each device
    if chunk_size is not None and not (
        isinstance(chunk_size, (int, np.integer)) and 1 <= chunk_size <= local  # pyright: ignore[reportUnnecessaryIsInstance] - user data
    ):
        per = "" if shards == 1 else f" (members per device: the population is spread over {shards})"
        raise ValueError(f"map_population: chunk_size={chunk_size!r}; expected an integer in 1..{local}{per}")
    flat, structure = jax.tree_util.tree_flatten((population, args))
    usable = _donatable(jax.tree_util.tree_leaves(population), flat) if donate else None
    key = (
        structure,
        tuple((*_aval(x), getattr(x, "sharding", None)) for x in flat),  # a layout is another program
        device,
        usable,
    )
    try:
        entries = _REMEMBERED.setdefault(fn, {})
    except TypeError:  # not weakly referenceable: nothing is remembered
        entries = {}
    entry = entries.get(key)
    if entry is None:
        entry = entries[key] = _Entry({}, {})
    done: Any = None
    choice = entry.choices.get((how, chunk_size))
    if choice is None:
        choice, done = _choose(
            fn, population, args, n, shards, device, how, chunk_size, entry.programs, usable
        )
        entry.choices[how, chunk_size] = choice
        LOGGER.info("optax_pytree.map_population(%s): %s", getattr(fn, "__qualname__", fn), choice.reason)

    def loop() -> _Program:  # a donated run's members past its last whole chunk
        if 1 not in entry.programs:
            entry.programs[1] = _compile(fn, population, args, n, shards, 1, usable)
        return entry.programs[1]

    outputs = _run(entry.programs[choice.chunk_size], population, args, n, shards, progress, done, loop)
    return (outputs, choice) if with_choice else outputs


# --------------------------------------------------------------------------
# The ways, compiled.


def _aval(x: Any) -> Any:
    return (jnp.shape(x), jnp.result_type(x), getattr(x, "weak_type", isinstance(x, (int, float, complex))))


def _donatable(leaves: list[Any], flat: list[Any]) -> tuple[bool, ...]:
    """Which of the population's leaves may be donated: arrays that appear once among the
    population's and the arguments' leaves (one buffer cannot be given twice, nor read as an
    argument once given)."""
    counts: dict[int, int] = {}
    for x in flat:
        counts[id(x)] = counts.get(id(x), 0) + 1
    return tuple(isinstance(x, jax.Array) and counts[id(x)] == 1 for x in leaves)


def _pair(leaves: list[Any], usable: tuple[bool, ...] | None, specs: list[Any]) -> tuple[int | None, ...]:
    """For each of fn's outputs (batched), the donatable population leaf whose buffer it is
    written into (the first one left of the same shape, dtype, weak type and layout), or None."""
    free = [i for i, ok in enumerate(usable or ()) if ok]
    pairs: list[int | None] = []
    for spec in specs:
        match = next(
            (
                i
                for i in free
                if jnp.shape(leaves[i]) == spec.shape
                and leaves[i].dtype == spec.dtype
                and bool(getattr(leaves[i], "weak_type", False)) == bool(spec.weak_type)
                and (
                    spec.sharding is None
                    or leaves[i].sharding.is_equivalent_to(spec.sharding, len(spec.shape))
                )
            ),
            None,
        )
        if match is not None:
            free.remove(match)
        pairs.append(match)
    return tuple(pairs)


def _split(leaves: list[Any], pairs: tuple[int | None, ...]) -> tuple[list[Any], list[Any]]:
    """The population's leaves as (kept, given): those read only, and those donated (paired
    with an output), in the order of their leaves."""
    given = {i for i in pairs if i is not None}
    kept = [x for i, x in enumerate(leaves) if i not in given]
    return kept, [x for i, x in enumerate(leaves) if i in given]


def _merge(kept: list[Any], given: list[Any], pairs: tuple[int | None, ...]) -> list[Any]:
    """The population's leaves in order, from ``_split``'s two lists."""
    donated = {i for i in pairs if i is not None}
    k, g = iter(kept), iter(given)
    return [next(g) if i in donated else next(k) for i in range(len(kept) + len(given))]


def _placement(population: Any, args: Any, how: str, n: int) -> tuple[Any, int]:
    """(the device, or the devices in order, the programs run on; how many shards the batch axis
    is in). A population sharded over its batch axis (``opx.shard``) is run with each device's
    members on that device, every way; spread otherwise, only by vmap (``jax.jit`` places it)."""
    devices: set[Any] = set()
    for leaf in jax.tree_util.tree_leaves((population, args)):
        if isinstance(leaf, jax.Array):
            devices |= set(leaf.devices())
    if len(devices) <= 1:
        return (devices.pop() if devices else jax.devices()[0]), 1
    ordered = tuple(sorted(devices, key=lambda d: d.id))
    shards = _batch_shards(population, n)
    if shards is None and how != "vmap":
        raise ValueError(
            f"map_population: the population is spread over {len(devices)} devices, not by its batch "
            f"axis alone; with how={how!r} each device must hold whole members (opx.shard lays the "
            "batch axis over a mesh axis), or run it with how='vmap' (jax.jit runs each device's "
            "members on that device)"
        )
    return ordered, shards or 1


def _batch_shards(population: Any, n: int) -> int | None:
    """In how many blocks of members every leaf is laid over the devices (its batch axis split
    over a mesh axis, the rest whole: ``opx.shard``), or None."""
    shards = None
    for leaf in jax.tree_util.tree_leaves(population):
        sharding = getattr(leaf, "sharding", None)
        if not isinstance(sharding, jax.sharding.NamedSharding):
            return None
        shape = tuple(jnp.shape(leaf))
        block = tuple(sharding.shard_shape(shape))
        if block[1:] != shape[1:] or block[0] == 0 or n % block[0]:
            return None
        if shards not in (None, n // block[0]):
            return None
        shards = n // block[0]
    return shards if shards and shards > 1 else None


def _compile(
    fn: Callable[..., Any],
    population: Any,
    args: Any,
    n: int,
    shards: int,
    size: int,
    usable: tuple[bool, ...] | None = None,
) -> _Program:
    """One way's program, compiled once: ``size`` members of each device's from ``start`` (all of
    them for vmap); ``usable``: the population's leaves that may be donated (``donate=True``)."""
    local = n // shards
    lowered, tree, specs, pairs, finish = _lower(fn, population, args, local, shards, size, usable)
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    need = fixed = out = 0
    if stats is not None:
        out = stats.output_size_in_bytes
        # Arguments, temporaries and outputs, less the donated buffers (a loop's or chunks' batch
        # of outputs, written in place, and the population's leaves given to the outputs:
        # counted once).
        fixed = stats.argument_size_in_bytes - stats.alias_size_in_bytes
        need = (
            stats.argument_size_in_bytes
            + stats.temp_size_in_bytes
            + stats.generated_code_size_in_bytes
            - stats.alias_size_in_bytes
            + stats.output_size_in_bytes
        )
    if size == local:
        return _Program(compiled, size, need, fixed, out, tree, None, pairs, finish)
    side = [spec for spec, pair in zip(specs, pairs) if pair is None]
    shardings = [b.sharding for b in side]
    zeros = jax.jit(
        lambda: [
            _leaves.weak(jnp.zeros(b.shape, b.dtype)) if b.weak_type else jnp.zeros(b.shape, b.dtype)
            for b in side
        ],
        out_shardings=None if None in shardings else shardings,
    )
    return _Program(compiled, size, need, fixed, out, tree, zeros, pairs)


def _laid(x: Any, layout: Any) -> Any:
    """``x`` laid over the devices as ``layout`` says, inside a traced program: a constraint on a
    mesh whose axes are automatic, ``reshard`` on one whose axes are explicit (``jax.make_mesh``'s
    default on recent jax; a constraint there is an error)."""
    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)
    if explicit is not None and explicit in getattr(layout.mesh, "axis_types", ()):
        return jax.sharding.reshard(x, layout)  # pyright: ignore[reportAttributeAccessIssue]
    return jax.lax.with_sharding_constraint(x, layout)


def _lower(
    fn: Callable[..., Any],
    population: Any,
    args: Any,
    local: int,
    shards: int,
    size: int,
    usable: tuple[bool, ...] | None,
) -> Any:
    """A way's program, lowered; with the structure of ``fn``'s outputs, their batched shapes,
    the population leaf each is written into (``_pair``), and, for vmap, a function that
    compiles its probe of a donated population (``_completion``).

    vmap's program takes the whole population. A loop's or chunks' takes ``size`` members of
    each device's block from ``start`` (the batch axis viewed as (devices, members); one
    device: one block), together (one vmapped program, whose batch stays on the devices where
    the population is sharded; the loop of one device: one member's own program), and writes
    their outputs into the batch, a donated argument, in place, or into the population's own
    leaves where they are given (``donate=True``).

    ``fn`` is traced once (``jax.make_jaxpr``: the outputs' shapes make the batch's), and, in a
    loop or chunks, its computation is kept apart from the write by an optimization barrier: a
    member's numbers are its own program's, as ``jax.jit(fn)``'s on it. One dispatch a call,
    and the run holds the batch and one call's temporaries (keeping every call's outputs to
    stack them at the end held them twice; on a TPU the stacking, eager, was a dispatch per
    leaf operation: 2 chunks of 8 members of 1M parameters took 19.9 ms where the vmap of all
    took 6.7).
    """
    leaves, tree = jax.tree_util.tree_flatten(population)
    layouts = [x.sharding if shards > 1 else None for x in leaves]
    whole = size == local
    one = size == 1 and shards == 1 and not whole

    def members(population: Any, args: Any, start: Any) -> Any:
        if whole:
            return jax.vmap(lambda member: fn(member, *args))(population)
        if one:  # one member's own program: its numbers are jax.jit(fn)'s on that member
            member = jax.tree_util.tree_map(
                lambda x: jax.lax.dynamic_index_in_dim(x, start, keepdims=False), population
            )
            return fn(member, *args)

        def take(x: Any, layout: Any) -> Any:
            blocks = jnp.reshape(x, (shards, local, *jnp.shape(x)[1:]))
            taken = jax.lax.dynamic_slice_in_dim(blocks, start, size, axis=1)
            members = jnp.reshape(taken, (shards * size, *jnp.shape(x)[1:]))
            return members if layout is None else _laid(members, layout)

        xs = jax.tree_util.tree_leaves(population)
        batch = jax.tree_util.tree_unflatten(tree, [take(x, lo) for x, lo in zip(xs, layouts)])
        return jax.vmap(lambda member: fn(member, *args))(batch)

    closed, shapes = jax.make_jaxpr(members, return_shape=True)(population, args, np.int32(0))
    out_tree = jax.tree_util.tree_structure(shapes)
    # The batch: each output with the population's batch axis, laid over the devices as it is.
    first = getattr(leaves[0], "sharding", None) if leaves else None
    placed = [x for x in jax.tree_util.tree_leaves((population, args)) if isinstance(x, jax.Array)]
    if shards > 1 and isinstance(first, jax.sharding.NamedSharding):
        where: Any = jax.sharding.NamedSharding(first.mesh, jax.sharding.PartitionSpec(first.spec[0]))
    elif placed and len(placed[0].devices()) == 1:  # the device the program runs on
        where = jax.sharding.SingleDeviceSharding(next(iter(placed[0].devices())))
    else:
        where = None
    specs = [
        jax.ShapeDtypeStruct(
            a.shape if whole else (shards * local, *(a.shape if one else a.shape[1:])),
            a.dtype,
            sharding=where,
            weak_type=a.weak_type,
        )
        for a in closed.out_avals
    ]
    pairs = _pair(leaves, usable, specs)
    kept, given = _split(leaves, pairs)
    side = [spec for spec, pair in zip(specs, pairs) if pair is None]
    from jax.extend.core import jaxpr_as_fun  # here: jax.extend is not imported with jax

    computed = jaxpr_as_fun(closed)

    def run(kept: list[Any], given: list[Any], args: Any, start: Any) -> list[Any]:
        xs = _merge(kept, given, pairs)
        return list(computed(*xs, *jax.tree_util.tree_leaves(args), start))

    if whole:

        def vmapped(kept: list[Any], given: list[Any], args: Any) -> Any:
            return jax.tree_util.tree_unflatten(out_tree, run(kept, given, args, np.int32(0)))

        lowered = jax.jit(vmapped, donate_argnums=(1,) if given else ()).lower(kept, given, args)

        def finish() -> _Program:
            return _completion(run, kept, given, args, side, pairs, specs, out_tree, local)

        return lowered, out_tree, specs, pairs, finish

    def into(kept: list[Any], given: list[Any], args: Any, start: Any, batch: list[Any]) -> Any:
        outs = jax.lax.optimization_barrier(run(kept, given, args, start))
        xs = _merge(kept, given, pairs)
        batch = list(batch)
        free = iter(range(len(batch)))

        def put(b: Any, o: Any, spec: Any) -> Any:
            rest = jnp.shape(b)[1:]
            blocks = jnp.reshape(b, (shards, local, *rest))
            part = jnp.reshape(o, (shards, size, *rest))
            whole = jnp.reshape(
                jax.lax.dynamic_update_slice_in_dim(blocks, part, start, axis=1), jnp.shape(b)
            )
            whole = whole if shards == 1 else _laid(whole, where)
            # As vmap's outputs: weakly typed where fn's are (an update's result is not).
            return _leaves.weak(whole) if spec.weak_type else whole

        for o, spec, pair in zip(outs, specs, pairs):
            if pair is None:
                k = next(free)
                batch[k] = put(batch[k], o, spec)
            else:
                xs[pair] = put(xs[pair], o, spec)
        return _split(xs, pairs)[1], batch

    lowered = jax.jit(into, donate_argnums=(1, 4)).lower(kept, given, args, np.int32(0), side)
    return lowered, out_tree, specs, pairs, None


def _completion(
    run: Callable[..., list[Any]],
    kept: list[Any],
    given: list[Any],
    args: Any,
    side: list[Any],
    pairs: tuple[int | None, ...],
    specs: list[Any],
    out_tree: Any,
    local: int,
) -> _Program:
    """vmap's probe of a donated population, compiled: the whole population in one vmapped
    program, not donated, whose outputs keep, for the members that the loop's or chunks'
    probe already ran (the first ``done`` of each device's), what those wrote (into the
    population's given leaves, or the batch)."""

    def completed(kept: list[Any], given: list[Any], args: Any, batch: list[Any], done: Any) -> Any:
        xs = _merge(kept, given, pairs)
        outs = run(kept, given, args, np.int32(0))
        written = iter(batch)
        results = []
        for o, spec, pair in zip(outs, specs, pairs):
            old = xs[pair] if pair is not None else next(written)
            ran = jnp.arange(spec.shape[0]) % local < done  # each device's members in order
            r = jnp.where(jnp.reshape(ran, (-1,) + (1,) * (len(spec.shape) - 1)), old, o)
            results.append(_leaves.weak(r) if spec.weak_type else r)
        return jax.tree_util.tree_unflatten(out_tree, results)

    compiled = jax.jit(completed).lower(kept, given, args, side, np.int32(0)).compile()
    stats = compiled.memory_analysis()
    need = (
        0
        if stats is None
        else stats.argument_size_in_bytes
        + stats.temp_size_in_bytes
        + stats.generated_code_size_in_bytes
        + stats.output_size_in_bytes
    )
    return _Program(compiled, local, need, 0, 0, out_tree, None, pairs)


def _starts(local: int, size: int, first: int = 0, overlap: bool = True) -> tuple[list[int], list[int]]:
    """Where each call begins, from member ``first``: every ``size`` members; then, where the
    size does not divide, one more call ending at ``local`` (``overlap``: it runs members of
    the call before again), or the members left, each a call of the loop (a donated population:
    its members already overwritten cannot run again)."""
    starts = list(range(first, local - size + 1, size))
    end = starts[-1] + size if starts else first
    if end >= local:
        return starts, []
    if overlap:
        return [*starts, local - size], []
    return starts, list(range(end, local))


def _run(
    program: _Program,
    population: Any,
    args: Any,
    n: int,
    shards: int,
    progress: bool,
    done: Any = None,
    loop: Callable[[], _Program] | None = None,
) -> Any:
    """The whole population through one program. ``done``: vmap's output from the probe, or the
    ``_Batch`` the probe's calls of this way wrote into and the members they ran (of each
    device's, from the first). ``loop``: the loop's program, for a donated population's
    members past its last whole chunk."""
    local = n // shards
    if done is None:
        done = _Batch(*_split(jax.tree_util.tree_leaves(population), program.pairs)), 0
        if program.size == local:
            return program.run(done[0].kept, done[0].given, args)
    if program.size == local:
        return done
    batch, first = done
    donated = any(pair is not None for pair in program.pairs)
    starts, rest = _starts(local, program.size, first, overlap=not donated)
    calls = [(program, start) for start in starts] + [(loop() if loop else program, start) for start in rest]
    bar = _bar(progress, len(calls), 0)
    for p, start in calls:
        batch.write(p, args, start)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return batch.outputs(program)


class _Batch:
    """The outputs of a loop or chunks as one batch, which each call of their program writes
    its members' outputs into, in place (a donated argument); the population's leaves as
    ``kept`` (read) and ``given`` (donated: each call's outputs written into them, in place).
    A chunk that overlaps the one before computes and writes its members again, with the same
    program."""

    def __init__(self, kept: list[Any], given: list[Any]) -> None:
        self.kept, self.given = kept, given
        self.side: Any = None

    def write(self, program: _Program, args: Any, start: int) -> Any:
        if self.side is None:
            self.side = program.zeros()
        self.given, self.side = program.run(self.kept, self.given, args, np.int32(start), self.side)
        return self.given, self.side

    def outputs(self, program: _Program) -> Any:
        """``fn``'s outputs, from the batch and the given leaves."""
        given = dict(zip(sorted(pair for pair in program.pairs if pair is not None), self.given))
        side = iter(self.side)  # allocated by the first write: a run writes at least once
        flat = [next(side) if pair is None else given[pair] for pair in program.pairs]
        return jax.tree_util.tree_unflatten(program.tree, flat)


def _bar(progress: bool, total: int, initial: int) -> Any:
    if not progress or importlib.util.find_spec("tqdm") is None:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="map_population", unit="call")


# --------------------------------------------------------------------------
# The choice.


def _default_chunk(n: int, fits: Callable[[int], bool]) -> int | None:
    """The largest power of two at most ``n // 2`` whose program fits (at least 2), or None."""
    k = 1 << max(0, (n // 2).bit_length() - 1)
    while k >= 2:
        if fits(k):
            return k
        k //= 2
    return None


def _choose(
    fn: Callable[..., Any],
    population: Any,
    args: Any,
    n: int,
    shards: int,
    device: Any,
    how: str,
    chunk_size: int | None,
    programs: dict[int, _Program],
    usable: tuple[bool, ...] | None = None,
) -> tuple[Choice, Any]:
    """The way to run this population (compiling what it needs), and what the probe ran of that
    way: vmap's outputs (None where not kept), or the batch the loop or chunks wrote into and how
    many members of each device's it ran, from the first. Sizes are members of each device's
    (all of them where the population is on one)."""
    local = n // shards
    # Spread over the batch axis: each device holds its members, and the compiled programs'
    # memory is each device's (SPMD); spread otherwise (vmap alone): not known.
    if shards > 1:
        limit = device_memory(device[0])
    else:
        limit = None if isinstance(device, tuple) else device_memory(device)

    chosen: dict[str, _Program] = {}  # way -> its program

    def program(way: str, size: int) -> _Program:
        if size not in programs or (how != "auto" and programs[size].run is None):
            # (forced where auto found it refused: compiled again, the compiler's error the user's)
            try:
                programs[size] = _compile(fn, population, args, n, shards, size, usable)
            except jax.errors.JaxRuntimeError as e:
                if how != "auto" or size == 1 or OUT_OF_MEMORY not in str(e):
                    raise
                # The compiler refused it for the device's memory: it does not fit.
                programs[size] = _Program(None, size, math.inf, 0)
        chosen[way] = programs[size]
        return chosen[way]

    def fits(p: _Program) -> bool:
        return p.run is not None and (limit is None or p.need <= limit)

    if how != "auto":
        size = {"vmap": local, "loop": 1}.get(how) or chunk_size or _default_chunk(local, lambda _: True) or 1
        p = program(how, size)
        reason = f"{how} of {p.size} member(s) per call, as asked (how={how!r})"
        return Choice(how, p.size, n, device, {how: p.need}, limit, {}, reason), None

    memory: dict[str, float] = {}
    loop = program("loop", 1)
    memory["loop"] = loop.need
    candidates: list[str] = []
    dropped: list[str] = []
    (candidates if fits(loop) else dropped).append("loop")
    if local > 1:
        whole = program("vmap", local)
        memory["vmap"] = whole.need
        (candidates if fits(whole) else dropped).append("vmap")
    if local > 2:
        if chunk_size is not None and chunk_size not in (1, local):
            k: int | None = chunk_size
        else:
            # The size is chosen by memory before compiling the chunks' program: a chunk of k
            # members needs about k / n of what the batched program needs past one member's
            # (where the compiler refused it: k times one member's own, past the arguments and
            # the batch of outputs).
            whole = memory.get("vmap", loop.need)
            per_member = (
                (whole - loop.need) / (local - 1) if whole < math.inf else loop.need - loop.fixed - loop.out
            )
            # A donated population's probe runs each member once: chunks of at most (local - 2) / 2
            # leave room for a timed call of each way after its first.
            top = local if usable is None or not any(usable) else max(4, local - 2)
            k = _default_chunk(top, lambda k: limit is None or loop.need + per_member * (k - 1) <= limit)
        if k is None:
            dropped.append("chunks")  # not even 2 members by the estimate: not compiled
        else:
            chunks = program("chunks", k)
            memory["chunks"] = chunks.need
            (candidates if fits(chunks) else dropped).append("chunks")
    if not candidates:
        # Nothing fits by the memory analysis: the way that needs the least runs (on the CPU the
        # loop, one member's temporaries; a TPU's one-member program can need more than a
        # batched one of a small model, its temporaries), with a warning.
        least = min(chosen, key=lambda way: chosen[way].need)
        dropped.remove(least)
        candidates.append(least)
        what, running = (
            ("even one member's program", "the loop")
            if least == "loop"
            else (f"even the smallest program ({least})", least)
        )
        hint = (
            ""
            if usable is not None
            else " (donate=True lets fn's outputs reuse the population's buffers: a run then holds it once)"
        )
        LOGGER.warning(
            "optax_pytree.map_population: %s (%d bytes) exceeds the device's memory (%d bytes); running %s%s",
            what,
            chosen[least].need,
            limit,
            running,
            hint,
        )
    room = "the device's memory" if limit is None else f"{limit} bytes"
    words = f"; {', '.join(dropped)} would not fit in {room}" if dropped else ""
    if len(candidates) == 1:
        p = chosen[candidates[0]]
        reason = f"{candidates[0]}: the only way{words or ' for a population of one'}"
        return Choice(candidates[0], p.size, n, device, memory, limit, {}, reason), None

    # The probe: vmap's one call is the whole run; the loop and chunks are warmed up by their
    # first call, then timed in turns (the order reversed every round, so a neighbour's load
    # falls on both), each call with the writing of its outputs into the batch (``_Batch``,
    # one for both), and the least of their times per call (a busy machine only ever adds)
    # times their number of calls. Where the device's memory would not hold a way's program
    # beside the other's batch of outputs (the loop's or chunks' batch, vmap's outputs), the
    # batch is let go before each vmap call and vmap's outputs are not kept (it runs again if
    # it wins). A donated population: the loop's and chunks' calls run successive members in
    # place (each member once: their outputs are the run's; a way with no members left for a
    # timed call counts its warm-up's time), and vmap is timed last, by its program that keeps
    # what they wrote (``_completion``), where that program fits.
    pairs = loop.pairs
    donated = any(pair is not None for pair in pairs)
    completion: _Program | None = None
    if donated and "vmap" in candidates:
        completion = chosen["vmap"].finish()
        if limit is not None and completion is not None and completion.need > limit:
            candidates.remove("vmap")
            dropped.append("vmap's probe beside the population")
            words = f"; {', '.join(dropped)} would not fit in {room}"
            if len(candidates) == 1:
                p = chosen[candidates[0]]
                reason = f"{candidates[0]}: the only way{words}"
                return Choice(candidates[0], p.size, n, device, memory, limit, {}, reason), None
    leaves = jax.tree_util.tree_leaves(population)
    batch = _Batch(*_split(leaves, pairs))
    ran = {way: 0 for way in candidates}  # members of each device's a way ran into the batch, from the first
    vmapped: Any = None
    outputs = max((chosen[way].out for way in candidates), default=0)
    tight = (
        not donated and limit is not None and any(chosen[way].need + outputs > limit for way in candidates)
    )

    def start(way: str) -> int | None:
        """Where the way's next call begins (None: no call left for it in the probe)."""
        size = chosen[way].size
        if donated:  # the members run so far, by either way
            first = max(ran.values())
            return first if first + size <= local else None
        return min(ran[way], local - size) if ran[way] < local else None

    def write(way: str, at: int) -> Any:
        out = batch.write(chosen[way], args, at)  # timed: waited for
        ran[way] = at + chosen[way].size
        return out

    def run_all(p: _Program) -> Any:
        nonlocal batch
        if completion is not None:
            if batch.side is None:  # no call of the loop or chunks ran
                batch.side = next(chosen[way] for way in candidates if way != "vmap").zeros()
            return completion.run(batch.kept, batch.given, args, batch.side, np.int32(max(ran.values())))
        if tight:
            batch = _Batch(*_split(leaves, pairs))
            ran.update(dict.fromkeys(ran, 0))
        out = jax.block_until_ready(p.run(batch.kept, batch.given, args))
        return None if tight else out

    warm: dict[str, float] = {}
    for way in candidates:
        at = start(way)
        if chosen[way].size < local and at is not None:
            if donated:
                warm[way] = timed(way, lambda way=way, at=at: write(way, at))[1]
            else:
                jax.block_until_ready(write(way, at))
    samples: dict[str, list[float]] = {way: [] for way in candidates}
    for round in range(PROBE_CALLS):
        for way in candidates if round % 2 == 0 else candidates[::-1]:
            p = chosen[way]
            if p.size == local and round == 0 and not donated:
                vmapped, took = timed(way, lambda p=p: run_all(p))
            elif p.size < local and (at := start(way)) is not None:
                took = timed(way, lambda way=way, at=at: write(way, at))[1]
            else:
                continue
            samples[way].append(took)
    if "vmap" in candidates and donated:
        vmapped, took = timed("vmap", lambda: run_all(chosen["vmap"]))
        samples["vmap"].append(took)
    seconds = {
        way: min(samples[way] or [warm.get(way, 0.0)]) * _calls(local, chosen[way].size, donated)
        for way in candidates
    }
    # vmap's one call was also its first (not warmed up): where it lost, it may have lost by the
    # warm-up (a small program's first call on the CPU takes twice as long, or more), so it runs
    # once more, timed.
    others = min((seconds[way] for way in candidates if way != "vmap"), default=0.0)
    if "vmap" in candidates and seconds["vmap"] > others:
        p = chosen["vmap"]
        vmapped, took = timed("vmap", lambda p=p: run_all(p))
        seconds["vmap"] = min(seconds["vmap"], took)
    best = min(candidates, key=lambda way: seconds[way])
    p = chosen[best]
    estimate = ", ".join(f"{way} {seconds[way]:.3g} s" for way in candidates)
    per_call = f"{p.size} member(s) per call" + ("" if shards == 1 else f" on each of {shards} devices")
    given = " (the outputs in the population's donated buffers)" if donated else ""
    reason = f"{best} of {per_call}{given}: the fastest by the probe ({estimate}){words}"
    choice = Choice(best, p.size, n, device, memory, limit, seconds, reason)
    if best == "vmap":
        if donated:  # its outputs are the run's: the population's given buffers go
            for x in [*batch.given, *(batch.side or [])]:
                x.delete()
        return choice, vmapped
    # The chosen loop's or chunks' calls in the batch are part of the run, unless the other
    # wrote into it too (its members then are written again; a donated population's members
    # cannot run again, and each ran once, by one way or the other).
    if donated:
        return choice, (batch, max(ran.values()))
    others_wrote = any(ran[way] for way in candidates if way not in (best, "vmap"))
    return choice, (batch, 0 if others_wrote else ran[best])


def _calls(local: int, size: int, donated: bool) -> int:
    """The calls of a whole run of ``size`` members per call (a donated run's members past its
    last whole chunk: one call of the loop each)."""
    starts, rest = _starts(local, size, overlap=not donated)
    return len(starts) + len(rest)
