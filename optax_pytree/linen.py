"""flax.linen: a ``TrainState`` whose optimizer hyperparameters stay dynamic under ``jit``.

``flax.training.train_state.TrainState`` declares ``tx`` a static field
(``pytree_node=False``): a jitted step taking the train state compiles once
per optimizer object, so three learning rates are three compilations, even
with a wrapped optimizer. :class:`TrainState` is the same class with ``tx`` a
pytree node: a wrapped optimizer's hyperparameters are leaves of the train
state, and a new learning rate reuses the compiled step::

    from optax_pytree.linen import TrainState   # was flax.training.train_state

    state = TrainState.create(apply_fn=model.apply, params=params, tx=opx.wrap(optax.adam, 1e-3))
    state = train_step(state, batch)                                   # jitted
    state = state.replace(tx=state.tx.replace(learning_rate=1e-4))     # no recompilation

Requires flax (an optional dependency of optax_pytree).
"""

from __future__ import annotations

from typing import Any

try:
    import optax
    from flax import struct
    from flax.training import train_state
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("optax_pytree.linen needs flax, an optional dependency: pip install flax") from e

from ._classify import is_wrapped

__all__ = ["TrainState"]


class TrainState(train_state.TrainState):
    """``flax.training.train_state.TrainState`` with ``tx`` a pytree node.

    ``create``, ``apply_gradients`` and ``replace`` are flax's. ``tx`` must be
    a wrapped transformation (``opx.wrap(...)`` or the drop-in
    ``optax_pytree.optax``): its hyperparameters are leaves of the state
    (``state.tx.learning_rate``), traced by ``jax.jit``, batched by
    ``jax.vmap``, saved by checkpoints.

    Raises:
        TypeError: at ``create`` (or construction), ``tx`` is a plain optax
            transformation, whose closures are no JAX type.

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

    tx: optax.GradientTransformation = struct.field(pytree_node=True)

    def __post_init__(self) -> None:
        tx: Any = self.tx
        # JAX rebuilds the state with placeholders (tracers, None, object()):
        # only a plain optax transformation is refused.
        if isinstance(tx, optax.GradientTransformation) and not is_wrapped(tx):
            raise TypeError(
                "optax_pytree.linen.TrainState: tx is a plain optax transformation, whose "
                "hyperparameters are closures, no JAX type; wrap it: "
                "tx=optax_pytree.wrap(optax.adam, learning_rate=...), or use the drop-in "
                "`import optax_pytree.optax as optax`"
            )
