"""Feature: populations past one process: sweeps on a mesh that spans ``jax.distributed`` processes.

In JAX's multi-controller model every process runs the same program and owns
the devices of its host; a global ``jax.Array`` is laid out over all of them
and each process holds only its *addressable* shards. A batched optimizer is a
pytree of such arrays like any other, so a population sharded along a mesh
axis that spans processes trains in one jitted, vmapped step, each member on
its own device, with no change to the step. What a multi-host sweep needs
around that step:

- :func:`process_local_indices`: which members of the population this
  process holds, so it builds only those (their hyperparameters, their
  parameters, their random keys);
- :func:`shard_process_local`: the global population from each process's own
  members (``jax.make_array_from_process_local_data`` for a pytree, with weak
  types kept and the sizes checked across processes);
- :func:`process_allgather`: a batched result (losses, the population itself)
  whole on every process, to pick the winner with :func:`optax_pytree.index`.

When every process can build the whole population (hyperparameters are
small), :func:`optax_pytree.shard` is enough: each process keeps its own
members. In a single process all of this reduces to the single-process
functions: ``shard_process_local`` is ``shard`` and ``process_allgather``
moves the arrays to one device.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from . import _leaves, _sweep

__all__ = ["process_allgather", "process_local_indices", "shard_process_local"]


def _local_slices(sharding: NamedSharding, size: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` ranges of a batch of ``size`` that this process's devices hold, in order."""
    ranges = set()
    for index in sharding.addressable_devices_indices_map((size,)).values():
        assert index is not None
        s = index[0]
        ranges.add((s.start or 0, size if s.stop is None else s.stop))
    return sorted(ranges)


def process_local_indices(size: int, mesh: jax.sharding.Mesh, axis_name: str | tuple[str, ...]) -> np.ndarray:
    """The members of a population of ``size`` that this process holds once sharded.

    :func:`optax_pytree.shard` and :func:`shard_process_local` place member
    ``i`` of a population on the device at position ``i // (size // n)`` of
    the ``n`` devices of ``axis_name``; this process holds the members of its
    own devices, in order. Build exactly those (``opx.stack([make(i) for i in
    indices])``) and pass them to :func:`shard_process_local`, and the global
    population is the one a single process would build.

    Args:
        size: the number of members of the whole population.
        mesh: the ``jax.sharding.Mesh`` (its devices may span processes).
        axis_name: the mesh axis (or axes) the population is split over.

    Returns:
        This process's member indices, ascending (a NumPy integer array; all
        of ``range(size)`` in a single process).

    Raises:
        ValueError: an axis name not in the mesh, or a ``size`` that the axis
            does not divide.

    Examples:
        >>> import jax, numpy as np, optax_pytree as opx
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
        >>> opx.process_local_indices(4 * len(jax.devices()), mesh, "pop")[:4]
        array([0, 1, 2, 3])
    """
    sharding, devices = _sweep.population_sharding(mesh, axis_name, "process_local_indices")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
        raise ValueError(f"process_local_indices: size must be a positive integer, got {size!r}")
    size = int(size)
    if size % devices:
        raise ValueError(
            f"process_local_indices: a population of size={size} does not split evenly over the "
            f"{devices} devices of mesh axis axis_name={axis_name!r}; use a multiple of {devices}"
        )
    ranges = _local_slices(sharding, size)
    return np.concatenate([np.arange(a, b) for a, b in ranges]) if ranges else np.zeros(0, int)


@functools.lru_cache(maxsize=64)
def _replicate(shardings: tuple[NamedSharding, ...]) -> Any:
    # One jitted identity per set of output shardings: the all-gather of a
    # whole pytree is one compiled program, compiled once per structure.
    return jax.jit(lambda *xs: xs, out_shardings=shardings)


def _whole(leaves: list[jax.Array]) -> list[jax.Array]:
    """Global arrays (on one mesh) replicated, each process's first addressable copy."""
    shardings = []
    for x in leaves:
        assert isinstance(x.sharding, NamedSharding)
        shardings.append(NamedSharding(x.sharding.mesh, PartitionSpec(), memory_kind=x.sharding.memory_kind))
    return [x.addressable_data(0) for x in _replicate(tuple(shardings))(*leaves)]


def _fingerprint(batched: Any) -> int:
    """The members' structure and per-member leaf shapes, as a number equal in every process."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(batched)
    text = repr([(jax.tree_util.keystr(path), np.shape(x)[1:], jnp.result_type(x).name) for path, x in flat])
    # Not the treedef's repr: static callables print with their addresses,
    # which differ between processes even for the same configuration.
    return zlib.crc32(f"{treedef.num_leaves}:{text}".encode()) & 0x7FFFFFFF


def _check_shares(batched: Any, positions: int, mesh: jax.sharding.Mesh, devices: int, axis_name: Any) -> int:
    """Every process's share checked on every process; the population's size.

    A check that fails on one process only would leave the others waiting
    forever in the next collective; so each process's count of members (or
    that it has none), its number of positions along the axis and the
    fingerprint of its members are gathered first, one row per device of the
    mesh (any layout of processes over the mesh), and every process raises the
    same error.
    """
    try:
        local_n, error = _sweep.batch_size(batched, "shard_process_local"), None
    except ValueError as e:
        local_n, error = -1, e
    row = [local_n, jax.process_index(), positions, _fingerprint(batched) if error is None else -1]
    every_device = NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))
    rows = np.tile(np.array([row], np.int32), (len(every_device.addressable_devices), 1))
    table = jax.make_array_from_process_local_data(every_device, rows, (mesh.size, len(row)))
    gathered = np.asarray(_whole([table])[0]).tolist()
    counts = {p: n for n, p, _, _ in gathered}  # process -> its members
    held = {p: k for _, p, k, _ in gathered}  # process -> its positions along the axis
    prints = {p: f for _, p, _, f in gathered}
    if error is not None:
        raise error
    if bad := sorted(p for p, n in counts.items() if n < 0):
        raise ValueError(f"shard_process_local: batched is not a batch on process {bad}; see the error there")
    where = f"the {devices} devices of mesh axis axis_name={axis_name!r}"
    for p, n in sorted(counts.items()):
        if n % held[p]:
            raise ValueError(
                f"shard_process_local: batched has {n} members on process {p}, which holds {held[p]} of "
                f"{where}; its share must be a multiple of {held[p]} "
                "(process_local_indices(size, mesh, axis_name) lists the members it holds)"
            )
    per_device = {p: counts[p] // held[p] for p in counts}
    if len(set(per_device.values())) > 1:
        given = ", ".join(f"process {p}: {counts[p]} members for {held[p]} devices" for p in sorted(counts))
        raise ValueError(
            f"shard_process_local: the processes give batched shares of different sizes ({given}); "
            "each must give the members of its own devices, as many per device as the others "
            "(process_local_indices(size, mesh, axis_name) lists them)"
        )
    if len(set(prints.values())) > 1:
        raise ValueError(
            "shard_process_local: the processes' members differ in structure, leaf shapes or dtypes "
            "(each process must stack members of the same configuration)"
        )
    return per_device[jax.process_index()] * devices


def shard_process_local(batched: Any, mesh: jax.sharding.Mesh, axis_name: str | tuple[str, ...]) -> Any:
    """The global population from each process's own members, sharded over ``axis_name``.

    Every process calls it with *its* members only: a batched pytree
    (:func:`optax_pytree.stack`, :func:`optax_pytree.grid`, stacked
    parameters) whose batch axis holds the members of this process's devices,
    in the order of :func:`process_local_indices`. The result is the population
    that :func:`optax_pytree.shard` gives from the whole batch: global arrays
    sharded along ``axis_name`` (replicated over the other mesh axes), the
    population's size the sum of the processes' shares, leaves weakly typed
    where the members' are (so the step compiles as for ``shard``). It is
    ``jax.make_array_from_process_local_data`` for every leaf, with the shares
    checked first: a share that the process's devices do not divide, or shares
    of different sizes, is an error on every process rather than a collective
    that never completes. In a single process it is :func:`optax_pytree.shard`.

    Args:
        batched: this process's members, a pytree whose leaves share a leading
            batch axis.
        mesh: the ``jax.sharding.Mesh``, the same in every process.
        axis_name: the mesh axis (or axes) to split the population over.

    Returns:
        The global batched pytree, ``batched``'s structure.

    Raises:
        ValueError: an axis name not in the mesh, a share that this
            process's devices of the axis do not divide, shares of different
            sizes in different processes, or leaves without a batch axis
            (each message names the argument).

    Examples:
        >>> import jax, numpy as np, optax, optax_pytree as opx
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
        >>> lrs = np.geomspace(1e-3, 1e-1, 2 * jax.device_count()).tolist()
        >>> mine = opx.process_local_indices(len(lrs), mesh, "pop")
        >>> local = opx.stack([opx.wrap(optax.adam, lrs[i]) for i in mine])
        >>> population = opx.shard_process_local(local, mesh, "pop")
        >>> population.learning_rate.shape == (len(lrs),), population.learning_rate.weak_type
        (True, True)
    """
    sharding, devices = _sweep.population_sharding(mesh, axis_name, "shard_process_local")
    if jax.process_count() == 1:
        return _sweep.shard(batched, mesh, axis_name)
    positions = len(_local_slices(sharding, devices))  # this process's positions along the axis
    if positions == 0:
        raise ValueError(
            f"shard_process_local: process {jax.process_index()} has no device in the mesh; call it "
            "from the processes whose devices the mesh holds"
        )
    size = _check_shares(batched, positions, mesh, devices, axis_name)

    def lay_out(leaf: Any) -> Any:
        out = jax.make_array_from_process_local_data(sharding, leaf, (size, *np.shape(leaf)[1:]))
        if getattr(leaf, "weak_type", False):
            # make_array_from_process_local_data drops weak types; a strong
            # float32 learning rate would compile another program than shard's.
            out = _leaves.weak(out)
        return out

    return jax.tree_util.tree_map(lay_out, batched)


def process_allgather(tree: Any) -> Any:
    """A batched result, whole, on every process: to read it and pick the winner.

    The outputs of a jitted step over a sharded population are global arrays,
    each process holding its members' shards only. This gathers every such
    leaf to every process in one compiled call (the whole pytree at once) and
    returns it as an ordinary array on this process's first local device
    (``jax.local_devices()[0]``), dtype and weak type kept: index it with
    :func:`optax_pytree.index`, read it with ``float`` or NumPy, in one process
    only if you like. A winner indexed out of a gathered batched optimizer
    shares the compilation of ``opx.wrap`` with its values.

    Every process must call it (the gather is a collective). Leaves already
    whole in this process (arrays on its own devices, NumPy arrays, Python
    numbers) are taken to be the same in every process and are not gathered:
    JAX arrays among them are moved to the same device, others returned as
    they are, so the result is the same with one process or many. To gather
    values that differ between processes, lay them out first with
    :func:`shard_process_local`. For global arrays it is
    ``jax.experimental.multihost_utils.process_allgather(tree, tiled=True)``
    without the host round trip and with weak types kept.

    Args:
        tree: a pytree of global arrays (a sharded population, its losses,
            its parameters) and other leaves.

    Returns:
        ``tree``'s structure, every array leaf whole on this process.

    Raises:
        TypeError: called inside a traced function (the gather is not a
            traced operation: call it on the step's results).

    Examples:
        >>> import jax, numpy as np, optax, optax_pytree as opx
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
        >>> batch, labels = opx.grid(opx.wrap(optax.sgd, 0.1), learning_rate=[0.3, 0.1] * jax.device_count())
        >>> batch = opx.shard(batch, mesh, "pop")
        >>> losses = jax.jit(jax.vmap(lambda tx: (tx.learning_rate - 0.1) ** 2))(batch)
        >>> batch, losses = opx.process_allgather((batch, losses))
        >>> winner = opx.index(batch, int(np.argmin(losses)))
        >>> float(winner.learning_rate), winner.learning_rate.weak_type
        (0.10000000149011612, True)
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out = list(leaves)
    by_mesh: dict[Any, list[int]] = {}
    for i, x in enumerate(leaves):
        if _leaves.is_tracer(x):
            raise TypeError(
                "process_allgather: called on a traced value (inside jax.jit, vmap, grad...); call it "
                "on the results of the jitted step, outside it"
            )
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if isinstance(x.sharding, NamedSharding):
                by_mesh.setdefault(x.sharding.mesh, []).append(i)
            else:  # a sharding without a mesh: JAX's own gather, one leaf at a time
                from jax.experimental import multihost_utils

                out[i] = jnp.asarray(multihost_utils.process_allgather(x, tiled=True))
                if x.weak_type:
                    out[i] = _leaves.weak(out[i])
    for positions in by_mesh.values():
        for i, whole in zip(positions, _whole([leaves[i] for i in positions])):
            out[i] = whole
    device = jax.local_devices()[0]
    out = [jax.device_put(x, device) if isinstance(x, jax.Array) else x for x in out]
    return jax.tree_util.tree_unflatten(treedef, out)
