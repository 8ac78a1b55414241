"""flax.linen: a ``TrainState`` whose optimizer hyperparameters stay dynamic under ``jit``.

``flax.training.train_state.TrainState`` declares ``tx`` a static field
(``pytree_node=False``): a jitted step taking the train state compiles once
per optimizer object, so three learning rates are three compilations, even
with a wrapped optimizer. :class:`TrainState` is a one-line replacement: a
wrapped optimizer's hyperparameters are leaves of the train state, and a new
learning rate reuses the compiled step; a plain optax ``tx`` stays static,
exactly as in flax, so changing the import never breaks a working program::

    from optax_pytree.linen import TrainState   # was flax.training.train_state

    state = TrainState.create(apply_fn=model.apply, params=params, tx=opx.wrap(optax.adam, 1e-3))
    state = train_step(state, batch)                                   # jitted
    state = state.replace(tx=state.tx.replace(learning_rate=1e-4))     # no recompilation

flax's own serialization (``flax.serialization.to_bytes``/``from_bytes``,
``to_state_dict``/``from_state_dict``, ``flax.training.checkpoints``) and orbax
round-trip it, hyperparameters included.

Requires flax (an optional dependency of optax_pytree).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

try:
    from flax import serialization
    from flax.training import train_state
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("optax_pytree.linen needs flax, an optional dependency: pip install flax") from e

from . import _tree
from ._bind import is_wrapped

__all__ = ["TrainState"]

_tree.register_with_flax()


class _Child:
    """In the aux data of a train state: this static field holds a wrapped object, a child."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<wrapped: a pytree child>"


_CHILD = _Child()


class TrainState(train_state.TrainState):
    """``flax.training.train_state.TrainState`` whose wrapped ``tx`` is a pytree node.

    ``create``, ``apply_gradients`` and ``replace`` are flax's. A wrapped
    ``tx`` (``opx.wrap(...)`` or the drop-in ``optax_pytree.optax``) is a
    child of the state: its hyperparameters are leaves (``state.tx.learning_rate``),
    traced by ``jax.jit``, batched by ``jax.vmap``, saved by checkpoints. A
    plain optax ``tx`` is static aux data, as flax declares it: the same
    treedef, leaves, serialization and errors as flax's ``TrainState``.

    The same holds for every field a subclass declares static
    (``struct.field(pytree_node=False)``): a wrapped value there is a child.
    Subclasses add fields as with flax (``class State(TrainState):
    batch_stats: Any``).

    Examples:
        >>> import jax, jax.numpy as jnp, optax
        >>> import flax.linen as nn
        >>> import optax_pytree as opx
        >>> from optax_pytree.linen import TrainState
        >>> model = nn.Dense(1)
        >>> params = model.init(jax.random.key(0), jnp.ones((1, 2)))["params"]
        >>> traces = 0
        >>> @jax.jit
        ... def step(state, x):
        ...     global traces
        ...     traces += 1
        ...     grads = jax.grad(lambda p: jnp.mean(state.apply_fn({"params": p}, x) ** 2))(state.params)
        ...     return state.apply_gradients(grads=grads)
        >>> state = TrainState.create(apply_fn=model.apply, params=params, tx=opx.wrap(optax.sgd, 0.1))
        >>> for lr in (0.1, 0.05, 0.01):
        ...     state = step(state.replace(tx=state.tx.replace(learning_rate=lr)), jnp.ones((4, 2)))
        >>> traces, int(state.step)
        (1, 3)
    """

    # flax's ``struct.dataclass`` would register this class with ``tx`` static
    # (its ``__init_subclass__`` does so for every subclass); this flag tells it
    # the class is done, and :func:`_register` registers it instead.
    _flax_dataclass = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Not PyTreeNode's (flax's registration): ours, for every subclass.
        _register(cls, **kwargs)


def _register(cls: Any, **kwargs: Any) -> None:
    """Makes ``cls`` a frozen dataclass, a pytree and a flax-serializable type.

    As ``flax.struct.dataclass`` does, except that a static field holding a
    wrapped object is a child: whether a field is a child is decided per
    object, when it is flattened, so the treedef says which (a plain ``tx``
    in the aux data, as in flax; a wrapped one among the children).
    """
    kwargs.setdefault("frozen", True)
    dataclasses.dataclass(**kwargs)(cls)
    fields = [f for f in dataclasses.fields(cls)]
    # (name, key, static?) in declaration order, as flax flattens data fields.
    layout = tuple(
        (f.name, jax.tree_util.GetAttrKey(f.name), not f.metadata.get("pytree_node", True)) for f in fields
    )
    new = object.__new__

    def flatten_with_keys(state: Any) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
        d = state.__dict__
        children = []
        aux = []
        for name, key, static in layout:
            value = d[name]
            if not static:
                children.append((key, value))
            elif is_wrapped(value):
                children.append((key, value))
                aux.append(_CHILD)
            else:
                aux.append(value)
        return children, tuple(aux)

    # The same walk without keys: flattening is on the dispatch path of every
    # jitted call that takes the state, so it builds no (key, child) pairs.
    def flatten(state: Any) -> tuple[list[Any], tuple[Any, ...]]:
        d = state.__dict__
        children = []
        aux = []
        for name, _, static in layout:
            value = d[name]
            if not static:
                children.append(value)
            elif is_wrapped(value):
                children.append(value)
                aux.append(_CHILD)
            else:
                aux.append(value)
        return children, tuple(aux)

    def unflatten(aux: tuple[Any, ...], children: Any) -> Any:
        # No __init__: JAX unflattens with placeholders (tracers, None, object()).
        obj = new(cls)
        d = obj.__dict__
        children = iter(children)
        statics = iter(aux)
        for name, _, static in layout:
            if static:
                value = next(statics)
                d[name] = next(children) if value is _CHILD else value
            else:
                d[name] = next(children)
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)

    def data_fields(state: Any) -> list[str]:
        d = state.__dict__
        return [name for name, _, static in layout if not static or is_wrapped(d[name])]

    def to_state_dict(state: Any) -> dict[str, Any]:
        return {name: serialization.to_state_dict(getattr(state, name)) for name in data_fields(state)}

    def from_state_dict(state: Any, state_dict: dict[str, Any]) -> Any:
        # flax's, with the fields of this object (a wrapped tx is one).
        state_dict = dict(state_dict)
        updates = {}
        for name in data_fields(state):
            if name not in state_dict:
                raise ValueError(
                    f"Missing field {name} in state dict while restoring an instance of {cls.__name__},"
                    f" at path {serialization.current_path()}"
                )
            updates[name] = serialization.from_state_dict(
                getattr(state, name), state_dict.pop(name), name=name
            )
        if state_dict:
            names = ",".join(state_dict.keys())
            raise ValueError(
                f'Unknown field(s) "{names}" in state dict while restoring an instance of {cls.__name__}'
                f" at path {serialization.current_path()}"
            )
        return state.replace(**updates)

    serialization.register_serialization_state(cls, to_state_dict, from_state_dict)
    cls._flax_dataclass = True  # an explicit @struct.dataclass on a subclass: already done


_register(TrainState)
