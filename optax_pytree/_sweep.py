"""Sweeps: batched wrapped optimizers for ``jax.vmap``, ``jax.grad`` and sharding.

A wrapped optimizer is a pytree whose leaves are its numeric hyperparameters,
so a *population* of optimizers that share a static configuration is the same
pytree with a leading batch axis on every leaf. ``jax.vmap(train)`` then trains
the whole population in one compiled program, and ``jax.device_put`` with a
``NamedSharding`` spreads it over devices.

- :func:`grid` builds such a batch from the cartesian product of values;
- :func:`stack` / :func:`unstack` convert between a list of wrapped objects
  and one batched object;
- :func:`index` picks one member (or a sub-population);
- :func:`shard` lays the batch axis of any batched pytree over a mesh axis
  (also one that spans processes: see ``optax_pytree._distributed``).

Weak types survive every step: a member indexed back out of a batch built
from Python floats has the same treedef *and* the same leaf types as
``wrap(...)`` with those floats, so it shares that object's compilation.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import itertools
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _bind, _expr, _spec, _static
from ._bind import is_wrapped
from ._paths import keystr, owns, parse, set_at, short, under
from ._tree import name_of, spec_of

# --------------------------------------------------------------------------
# Static differences, named.


def _difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two objects' static configurations differ, in words (None if they do not)."""
    where = path.lstrip(".") or "the object"
    if is_wrapped(a) and is_wrapped(b):
        if a.factory is not b.factory:
            return f"{where} is {name_of(a)} in one and {name_of(b)} in the other"
        ha, hb = a.hyperparams, b.hyperparams
        sa, sb = set(a.static_argnames), set(b.static_argnames)
        for name in [*ha, *(n for n in hb if n not in ha)]:
            p = f"{path}.{name}".lstrip(".")
            if name not in ha or name not in hb:
                return f"argument {p!r} of {name_of(a)} is given in one and not in the other"
            if (name in sa) != (name in sb):
                static, dynamic = (ha[name], hb[name]) if name in sa else (hb[name], ha[name])
                return (
                    f"argument {p!r} of {name_of(a)} is static in one ({static!r}) "
                    f"and dynamic in the other ({dynamic!r})"
                )
            if name in sa:
                if _static.freeze(ha[name]) != _static.freeze(hb[name]):
                    return f"static argument {p!r} of {name_of(a)}: {ha[name]!r} vs {hb[name]!r}"
            elif (found := _difference(ha[name], hb[name], f"{path}.{name}")) is not None:
                return found
        return _guard_difference(a, b, path)
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{where!r} has keys {list(a)} in one and {list(b)} in the other"
        for k in a:
            if (found := _difference(a[k], b[k], f"{path}[{k!r}]")) is not None:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        if len(a) != len(b):
            return f"{where!r} has {len(a)} items in one and {len(b)} in the other"
        for i, (x, y) in enumerate(zip(a, b)):
            if (found := _difference(x, y, f"{path}[{i}]")) is not None:
                return found
        return None
    if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
        return f"{where!r} is {short(a)} in one and {short(b)} in the other"
    return None


def _guard_difference(a: Any, b: Any, path: str) -> str | None:
    """Where two wrapped objects' guarded arguments take different branches, in words."""
    ga, gb = dict(a._core.spec.guards), dict(b._core.spec.guards)
    for key in [*ga, *(k for k in gb if k not in ga)]:
        if ga.get(key) != gb.get(key):
            names = sorted(_expr.key_names(key))
            p = ", ".join(repr(f"{path}.{n}".lstrip(".")) for n in names)
            return (
                f"argument {p} of {name_of(a)} takes another branch of the factory in one "
                f"than in the other ({_expr.key_text(key)}: {ga.get(key, 'not compared')} vs "
                f"{gb.get(key, 'not compared')})"
            )
    return None


def as_member(x: Any) -> Any:
    """``x`` as a member of a batch: a wrapped object static at a zero only (the factory skips
    operations for it: ``Analysis.at_zero``) made again with the zero a leaf, at any depth, so
    that it shares one program with members of other values (``_spec.batch_members``)."""
    if is_wrapped(x):
        hyperparams = x.hyperparams
        changes = {n: m for n, v in hyperparams.items() if (m := as_member(v)) is not v}
        changes.update({n: hyperparams[n] for n in spec_of(x).analysis.at_zero})
        if not changes:
            return x
        with _spec.batch_members():
            return x.replace(**changes)
    if isinstance(x, (list, tuple)):
        items = [as_member(v) for v in x]
        if all(a is b for a, b in zip(items, x)):
            return x
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if type(x) is dict:
        found = {k: as_member(v) for k, v in x.items()}
        return x if all(found[k] is x[k] for k in x) else found
    return x


def _check_same_static(first: Any, other: Any, what: str, reference: str = "the first") -> None:
    if jax.tree_util.tree_structure(first) == jax.tree_util.tree_structure(other):
        return
    found = _difference(first, other) or (
        f"{_clip(jax.tree_util.tree_structure(first))} vs {_clip(jax.tree_util.tree_structure(other))}"
    )
    raise ValueError(
        f"{what} does not share the static configuration of {reference}: {found}. Only dynamic "
        "(numeric) hyperparameters can vary across a batch; a static difference is a different "
        "compiled program"
    )


def _clip(x: Any, limit: int = 160) -> str:
    text = str(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _not_array(tree: Any) -> tuple[str, Any] | None:
    """The key path and value of the first leaf of ``tree`` that is no array or number, else None."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex)):
            return jax.tree_util.keystr(path), leaf
    return None


def _boxed(tx: Any) -> tuple[str, Any] | None:
    """The first dynamic argument of ``tx`` whose value holds an array (an nnx Variable), else None."""

    def is_box(x: Any) -> bool:
        return not (
            x is None
            or is_wrapped(x)
            or isinstance(x, (jax.Array, np.ndarray, np.generic, list, tuple, dict))
        )

    for path, leaf in jax.tree_util.tree_flatten_with_path(tx, is_leaf=is_box)[0]:
        if is_box(leaf):
            return jax.tree_util.keystr(path).lstrip("."), leaf
    return None


def _check_wrapped(tx: Any, what: str) -> None:
    """A clear error for what ``grid`` cannot sweep: a plain optax transformation, variables."""
    if _bind.is_plain_transformation(tx):
        raise TypeError(
            f"{what}: got a plain optax transformation, whose hyperparameters are hidden in its "
            f"closures, so there is nothing to sweep; {_bind.HOW_TO_WRAP}"
        )
    if not is_wrapped(tx):
        raise TypeError(
            f"{what}: expects a wrapped transformation or schedule (optax_pytree.wrap(...)), got {short(tx)}"
        )
    boxed = _boxed(tx)
    if boxed is not None:
        path, box = boxed
        raise TypeError(
            f"{what}: argument {path!r} of tx holds a {type(box).__name__}, not its value: tx is the "
            "optimizer.tx of an optax_pytree.nnx.Optimizer, whose hyperparameters are nnx variables; "
            "pass optimizer.transformation, the wrapped transformation with their current values"
        )


def _stack_leaves(paths: Sequence[str], columns: Sequence[Sequence[Any]], what: str) -> list[Any]:
    out = []
    for path, column in zip(paths, columns):
        shapes = [jnp.shape(x) for x in column]
        for i, shape in enumerate(shapes):
            if shape != shapes[0]:
                raise ValueError(
                    f"{what}: leaf {path.lstrip('.')!r} has shape {shapes[0]} in the first and "
                    f"{shape} in #{i}; a batch needs equal shapes"
                )
        # jnp.stack keeps weak types (all weak -> weak), so an indexed member of
        # a batch of Python floats compiles like wrap() with a Python float.
        out.append(jnp.stack(column))
    return out


# --------------------------------------------------------------------------
# The public helpers.


def stack(members: Iterable[Any]) -> Any:
    """Stacks wrapped objects that share a static configuration into one batch.

    Every leaf of the result gains a leading batch axis, so the result goes
    straight into ``jax.vmap(fn)`` with ``in_axes=0``. Leaf dtypes follow
    ``jnp.stack``: members built from Python numbers give weakly typed leaves,
    and a member :func:`index`-ed back shares the compilation of an unbatched
    object. Works for any pytrees of equal structure (parameters, states).

    Args:
        members: wrapped transformations or schedules (or other pytrees) with
            equal treedefs: same factory, same static arguments, same children.

    Returns:
        One object of the same type whose leaves have a leading axis of size
        ``len(members)``.

    Raises:
        ValueError: no members, members whose static configurations differ
            (the message names the argument and both values), or leaves of
            different shapes.
        TypeError: a plain optax transformation among the members (wrap
            its factory instead: ``opx.wrap(optax.adam, learning_rate=1e-3)``),
            or a leaf that is no array.

    Examples:
        >>> import optax, optax_pytree as opx
        >>> batch = opx.stack([opx.wrap(optax.adam, lr) for lr in (0.1, 0.01, 0.001)])
        >>> batch.learning_rate.shape, batch.b1.shape
        ((3,), (3,))
        >>> plain, nesterov = opx.wrap(optax.sgd, 0.1), opx.wrap(optax.sgd, 0.1, nesterov=True)
        >>> opx.stack([plain, nesterov])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: stack: member 1 ...: static argument 'nesterov' of optax.sgd: False vs True. ...
    """
    members = list(members)
    if not members:
        raise ValueError("stack: no members to stack")
    for i, member in enumerate(members):
        if _bind.is_plain_transformation(member):
            raise TypeError(
                f"stack: member {i} is a plain optax transformation, whose hyperparameters are hidden in "
                f"its closures, so there is nothing to stack; {_bind.HOW_TO_WRAP}. "
                "opx.grid(opx.wrap(optax.adam, learning_rate=1e-3), learning_rate=[...]) builds the "
                "batch in one call"
            )
    if len({jax.tree_util.tree_structure(m) for m in members}) > 1:
        members = [as_member(m) for m in members]  # zeros static in some: leaves in all
    for i, member in enumerate(members[1:], 1):
        _check_same_static(members[0], member, f"stack: member {i}")
    for i, member in enumerate(members):
        found = _not_array(member)
        if found is not None:
            path, leaf = found
            raise TypeError(
                f"stack: leaf {path.lstrip('.') or '(root)'!r} of member {i} is {short(leaf)}, not an array "
                "or a number; stack takes pytrees of arrays (wrapped transformations and schedules, "
                "parameters, states)"
            )
    flat, treedef = jax.tree_util.tree_flatten_with_path(members[0])
    paths = [jax.tree_util.keystr(p) for p, _ in flat]
    columns = list(zip(*(jax.tree_util.tree_leaves(m) for m in members))) if flat else []
    return jax.tree_util.tree_unflatten(treedef, _stack_leaves(paths, columns, "stack"))


def batch_size(batched: Any, what: str) -> int:
    flat = jax.tree_util.tree_flatten_with_path(batched)[0]
    if not flat:
        raise ValueError(f"{what}: the object has no leaves, so no batch axis")
    size = None
    for path, leaf in flat:
        shape = jnp.shape(leaf)
        if not shape:
            raise ValueError(
                f"{what}: leaf {jax.tree_util.keystr(path).lstrip('.')!r} is a scalar, so the object "
                "is not batched (build batches with stack or grid)"
            )
        if size is None:
            size = shape[0]
        elif shape[0] != size:
            raise ValueError(
                f"{what}: leaf {jax.tree_util.keystr(path).lstrip('.')!r} has batch size {shape[0]}, "
                f"others {size}"
            )
    assert size is not None
    return size


def unstack(batched: Any) -> list[Any]:
    """Splits a batched object into its members (the inverse of :func:`stack`).

    Args:
        batched: a pytree whose leaves all share a leading batch axis.

    Returns:
        The list of members, each with the batch axis removed.

    Raises:
        ValueError: a leaf without a batch axis, or leaves of different batch sizes.

    Examples:
        >>> import optax, optax_pytree as opx
        >>> batch = opx.stack([opx.wrap(optax.sgd, lr) for lr in (0.1, 0.2)])
        >>> [round(float(tx.learning_rate), 3) for tx in opx.unstack(batch)]
        [0.1, 0.2]
    """
    n = batch_size(batched, "unstack")
    leaves, treedef = jax.tree_util.tree_flatten(batched)
    columns = [list(leaf) for leaf in leaves]  # iterating keeps weak types
    return [jax.tree_util.tree_unflatten(treedef, [c[i] for c in columns]) for i in range(n)]


def index(batched: Any, i: Any) -> Any:
    """One member of a batch, or a sub-population.

    ``i`` indexes the batch axis of every leaf as NumPy would: an integer gives
    one member (batch axis removed); a slice or an integer array gives a
    smaller batch, members repeated as the array says (the *exploit* step of
    population-based training). Traced indices work under ``jit``.

    Args:
        batched: a pytree whose leaves all share a leading batch axis.
        i: an integer (Python or traced), a slice, or an integer array.

    Returns:
        The selected member or members, same type as ``batched``.

    Raises:
        IndexError: a Python integer outside the batch (JAX would clamp it).
        ValueError: ``batched`` is not batched.

    Examples:
        >>> import jax.numpy as jnp, optax, optax_pytree as opx
        >>> batch = opx.stack([opx.wrap(optax.sgd, lr) for lr in (0.1, 0.2, 0.3)])
        >>> float(opx.index(batch, -1).learning_rate)
        0.30000001192092896
        >>> opx.index(batch, jnp.array([2, 2, 0])).learning_rate
        Array([0.3, 0.3, 0.1], dtype=float32, weak_type=True)
    """
    n = batch_size(batched, "index")
    if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
        if not -n <= i < n:
            raise IndexError(f"index: member {i} is out of range for a batch of {n}")
        i = operator.index(i) % n
    return jax.tree_util.tree_map(lambda x: x[i], batched)


def grid(
    tx: Any, axes: Mapping[str, Iterable[Any]] | None = None, /, **values: Iterable[Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """A batched optimizer over the cartesian product of hyperparameter values.

    Each axis names a dynamic argument of ``tx`` and lists its values; members
    are all combinations, the first axis varying slowest (as
    ``itertools.product``). Every leaf of the result carries the batch axis
    (arguments not swept are broadcast), so it goes straight into
    ``jax.vmap(train)`` with ``in_axes=0``, and the whole sweep is one
    compilation.

    Arguments of a wrapped child are named by their path, written as
    ``jax.tree_util.keystr`` writes the leaf's key path (the leading dot is
    optional): ``"args[1].learning_rate"`` for the second transformation of a
    ``wrap(optax.chain, ...)``, ``"learning_rate.init_value"`` for a wrapped
    schedule given as learning rate, ``"transforms['fast'].b1"`` in a dict.
    ``[jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]``
    lists them. Such paths go in the ``axes`` mapping; plain argument names
    can also be keywords. A value may be anything ``tx.replace`` accepts for
    that argument, wrapped schedules included, as long as every member keeps
    the static configuration of ``tx``.

    Args:
        tx: the wrapped transformation (or schedule) that sets every argument
            not swept.
        axes: path -> values.
        **values: argument name -> values (same as ``axes``).

    Returns:
        ``(batched, labels)``: the batched object, and for each member a dict
        path -> value, in member order.

    Raises:
        UnknownArgumentError: a path naming no argument (a ``TypeError``
            and a ``ValueError``, as from ``wrap`` and ``replace``).
        ValueError: a static argument (a Python loop, one compilation per
            value, is the way to sweep it), an axis without values,
            overlapping axes, or a value that changes the static
            configuration (the message names the argument and both values).
        TypeError: ``tx`` is not wrapped (a plain optax transformation: wrap
            its factory, ``opx.wrap(optax.adam, learning_rate=1e-3)``), or
            holds nnx variables (``optimizer.tx`` of an
            :class:`optax_pytree.nnx.Optimizer`: pass ``optimizer.transformation``).

    Examples:
        >>> import jax, jax.numpy as jnp, optax, optax_pytree as opx
        >>> base = opx.wrap(optax.adam, learning_rate=1e-3)
        >>> batch, labels = opx.grid(base, learning_rate=[0.1, 0.01], b1=[0.9, 0.5, 0.0])
        >>> len(labels), labels[1]
        (6, {'learning_rate': 0.1, 'b1': 0.5})
        >>> batch.learning_rate.shape, batch.b2.shape  # b2 is broadcast
        ((6,), (6,))
        >>> def final_loss(tx):
        ...     params = jnp.ones(2)
        ...     state = tx.init(params)
        ...     for _ in range(3):
        ...         updates, state = tx.update(params, state)  # the gradient of |p|^2 / 2
        ...         params = params + updates
        ...     return jnp.sum(params ** 2)
        >>> jax.jit(jax.vmap(final_loss))(batch).shape
        (6,)
        >>> chain = opx.wrap(optax.chain, opx.wrap(optax.clip_by_global_norm, 1.0),
        ...                  opx.wrap(optax.sgd, 0.1))
        >>> batch, labels = opx.grid(chain, {"args[1].learning_rate": [0.1, 0.2]})
        >>> batch.args[1].learning_rate
        Array([0.1, 0.2], dtype=float32, weak_type=True)
    """
    _check_wrapped(tx, "optax_pytree.grid")
    given = dict(axes or {})
    for name in values:
        if name in given:
            raise ValueError(f"optax_pytree.grid: axis {name!r} given twice")
    given.update(values)
    parsed = {path: parse(path) for path in given}
    prefixes = {path: keystr(tokens) for path, tokens in parsed.items()}
    for (p, a), (q, b) in itertools.combinations(prefixes.items(), 2):
        if under(a, b) or under(b, a):
            raise ValueError(f"optax_pytree.grid: axes {p!r} and {q!r} overlap")

    tx = as_member(tx)  # a zero static in it: a leaf, as the batch's other values
    flat, treedef = jax.tree_util.tree_flatten_with_path(tx)
    leaf_paths = [jax.tree_util.keystr(p) for p, _ in flat]
    axis_values: list[list[Any]] = []
    axis_leaves: list[dict[int, Any]] = []  # per axis: leaf position -> stacked values
    for path, vals in given.items():
        vals = [v.item() if isinstance(v, np.generic) else v for v in vals]
        if not vals:
            raise ValueError(f"optax_pytree.grid: axis {path!r} has no values")
        with _spec.batch_members():
            members = [set_at(tx, parsed[path], v, path) for v in vals]
        for v, member in zip(vals, members):
            _check_same_static(tx, member, f"optax_pytree.grid: the member with {path}={v!r}", "tx")
        positions = [
            j for j, lp in enumerate(leaf_paths) if under(lp, prefixes[path]) or owns(lp, prefixes[path])
        ]
        columns = list(zip(*(jax.tree_util.tree_leaves(m) for m in members)))
        stacked = _stack_leaves(
            [leaf_paths[j] for j in positions], [columns[j] for j in positions], "optax_pytree.grid"
        )
        axis_values.append(vals)
        axis_leaves.append(dict(zip(positions, stacked)))

    sizes = [len(v) for v in axis_values]
    n = math.prod(sizes)
    # Member m's index along each axis (first axis slowest, as itertools.product).
    which = np.indices(sizes).reshape(len(sizes), n) if sizes else np.zeros((0, 1), int)
    labels = [dict(zip(given, combo)) for combo in itertools.product(*axis_values)]
    # A carried host value computed from arguments of two axes (the
    # fingerprint of ``learning_rate`` and ``b1``) is each member's own.
    joint = [j for j in range(len(flat)) if sum(j in stacked for stacked in axis_leaves) > 1]
    if joint:
        members = []
        for label in labels:
            member = tx
            for path, v in label.items():
                member = set_at(member, parsed[path], v, path)
            members.append(jax.tree_util.tree_leaves(member))
        columns = [[m[j] for m in members] for j in joint]
        for j, stacked in zip(
            joint, _stack_leaves([leaf_paths[j] for j in joint], columns, "optax_pytree.grid")
        ):
            for a in axis_leaves:
                a.pop(j, None)
            axis_leaves[0][j] = stacked
    leaves = []
    for j, (_, leaf) in enumerate(flat):
        if j in joint:
            leaves.append(axis_leaves[0][j])
            continue
        for a, stacked in enumerate(axis_leaves):
            if j in stacked:
                leaves.append(jnp.take(stacked[j], which[a], axis=0))
                break
        else:
            leaves.append(jnp.broadcast_to(leaf, (n, *jnp.shape(leaf))))
    return jax.tree_util.tree_unflatten(treedef, leaves), labels


def shard(batched: Any, mesh: jax.sharding.Mesh, axis_name: str | tuple[str, ...]) -> Any:
    """Lays the batch axis of a population over a mesh axis (other axes replicated).

    ``jax.device_put`` with ``NamedSharding(mesh, PartitionSpec(axis_name))``
    on every leaf, after checking that the batch divides over the devices of
    that axis. A ``jax.jit(jax.vmap(train))`` applied to sharded inputs then
    runs each device's members on that device: growing a sweep past one
    device needs a mesh and this call, no change to ``train``. Shard the
    per-member parameters (anything else with the batch axis) the same way.

    The mesh may span processes (``jax.distributed``): every process then
    calls ``shard`` with the *same* whole population and keeps only the
    members of its own devices. Where each process has only its own members,
    :func:`shard_process_local` builds the same global population from them;
    :func:`process_allgather` brings results back to every process.

    Args:
        batched: a pytree whose leaves all share a leading batch axis (a
            batched optimizer, stacked parameters, ...).
        mesh: a ``jax.sharding.Mesh``.
        axis_name: the mesh axis (or axes) to split the batch over.

    Returns:
        ``batched`` with its leaves placed on the mesh.

    Raises:
        ValueError: an axis name not in the mesh, a batch size that the axis
            does not divide, or leaves without a batch axis (each message
            names the argument).

    Examples:
        >>> import jax, numpy as np, optax, optax_pytree as opx
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
        >>> batch, _ = opx.grid(opx.wrap(optax.sgd, 0.1), learning_rate=[0.1, 0.2] * len(jax.devices()))
        >>> batch = opx.shard(batch, mesh, "pop")
        >>> batch.learning_rate.sharding.spec == jax.sharding.PartitionSpec("pop")
        True
    """
    sharding, devices = population_sharding(mesh, axis_name, "shard")
    n = batch_size(batched, "shard")
    if n % devices:
        raise ValueError(
            f"shard: batched, a batch of {n} members, does not split evenly over the {devices} devices "
            f"of mesh axis axis_name={axis_name!r}; use a multiple of {devices} members"
        )
    return jax.device_put(batched, sharding)


def population_sharding(
    mesh: jax.sharding.Mesh, axis_name: str | tuple[str, ...], what: str
) -> tuple[jax.sharding.NamedSharding, int]:
    """The sharding of a population's leaves over ``axis_name``, and how many devices that axis has."""
    if not isinstance(mesh, jax.sharding.Mesh):  # pyright: ignore[reportUnnecessaryIsInstance] - user data
        raise TypeError(f"{what}: mesh must be a jax.sharding.Mesh, got {short(mesh)}")
    names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)
    if not names:
        raise ValueError(f"{what}: axis_name is empty; name the mesh axis to split the population over")
    for name in names:
        if name not in mesh.shape:
            raise ValueError(
                f"{what}: axis_name {name!r} is not an axis of the mesh; its axes are {list(mesh.shape)}"
            )
    devices = math.prod(mesh.shape[name] for name in names)
    spec = jax.sharding.PartitionSpec(names[0] if len(names) == 1 else names)
    return jax.sharding.NamedSharding(mesh, spec), devices
