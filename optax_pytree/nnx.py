"""flax.nnx: ``nnx.Optimizer`` whose hyperparameters stay dynamic under ``nnx.jit``.

``nnx.Optimizer`` keeps ``tx`` as a *static* attribute: a plain optax
optimizer is baked into the compiled step (a new learning rate is a new
compilation), and a wrapped one is refused (``Found data ... assigned to
static attribute 'tx'``). :class:`Optimizer` is a one-line replacement whose
``tx`` is nnx *data*: its hyperparameters are leaves of the optimizer's state,
so ``nnx.jit`` passes them in as arguments and a new value reuses the compiled
step::

    from flax import nnx
    import optax, optax_pytree as opx
    from optax_pytree.nnx import Optimizer

    optimizer = Optimizer(model, opx.wrap(optax.adamw, 1e-3), wrt=nnx.Param)  # was nnx.Optimizer

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    optimizer.tx = optimizer.tx.replace(learning_rate=1e-4)  # no recompilation

Requires flax (an optional dependency of optax_pytree).
"""

from __future__ import annotations

from typing import Any

import jax

try:
    from flax import nnx
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("optax_pytree.nnx needs flax, an optional dependency: pip install flax") from e

if not hasattr(nnx, "data"):  # pragma: no cover - depends on the environment
    raise ImportError("optax_pytree.nnx needs flax 0.11 or newer (nnx.data); pip install -U flax")

from ._classify import is_wrapped

__all__ = ["Hyperparameter", "Optimizer"]


class Hyperparameter(nnx.Variable):  # pyright: ignore[reportMissingTypeArgument]
    """An nnx Variable holding one hyperparameter of an :class:`Optimizer`'s transformation."""


def _as_variables(tx: Any) -> Any:
    return jax.tree_util.tree_map(Hyperparameter, tx)


def _get(v: Any) -> Any:
    return v.get_value() if hasattr(v, "get_value") else v.value  # flax < 0.12: .value


def _set(v: Any, value: Any) -> None:
    if hasattr(v, "set_value"):
        v.set_value(value)
    else:  # flax < 0.12
        v.value = value


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def _values(tx: Any) -> Any:
    return jax.tree_util.tree_map(lambda v: _get(v) if _is_variable(v) else v, tx, is_leaf=_is_variable)


class Optimizer(nnx.Optimizer):  # pyright: ignore[reportMissingTypeArgument]
    """``nnx.Optimizer`` whose wrapped transformation is nnx data: hyperparameters stay dynamic.

    Same constructor and ``update(model, grads, **kwargs)`` as
    ``nnx.Optimizer``, which it subclasses. Given a wrapped transformation
    (``opx.wrap(...)`` or the drop-in ``optax_pytree.optax``), ``tx`` is nnx
    data whose numeric hyperparameters are :class:`Hyperparameter` variables:
    ``nnx.jit`` traces them, so a new value reuses the compiled step, and
    ``nnx.state(optimizer)`` holds them (``tx.learning_rate``), so
    ``nnx.split``/``nnx.merge``/``nnx.update`` and checkpoints carry them.
    Change them with :meth:`set_hyperparams` (validated like ``replace``);
    restore checkpoints with :func:`optax_pytree.restore_checkpoint`, which
    keeps their weak types (plain orbax loses them, which costs one retrace).
    A plain optax transformation behaves exactly as with ``nnx.Optimizer``.

    Args:
        model: the nnx module to optimize.
        tx: a wrapped transformation (or a plain optax one).
        wrt: which variables to optimize (``nnx.Param``), as for ``nnx.Optimizer``.
        **kwargs: further arguments of ``nnx.Optimizer`` (``graph=``, ...).

    Examples:
        >>> import jax.numpy as jnp, optax
        >>> from flax import nnx
        >>> import optax_pytree as opx
        >>> from optax_pytree.nnx import Optimizer
        >>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
        >>> optimizer = Optimizer(model, opx.wrap(optax.sgd, 0.1), wrt=nnx.Param)
        >>> traces = 0
        >>> @nnx.jit
        ... def step(model, optimizer, x):
        ...     global traces
        ...     traces += 1
        ...     grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
        ...     optimizer.update(model, grads)
        >>> for lr in (0.1, 0.05, 0.01):
        ...     optimizer.set_hyperparams(learning_rate=lr)
        ...     step(model, optimizer, jnp.ones((4, 2)))
        >>> traces, int(optimizer.step[...]), float(optimizer.hyperparams["learning_rate"])
        (1, 3, 0.009999999776482582)
    """

    def __init__(self, model: Any, tx: Any, *, wrt: Any, **kwargs: Any):
        if not is_wrapped(tx):
            super().__init__(model, tx, wrt=wrt, **kwargs)
            return
        # nnx.Optimizer makes the state from a static tx; the wrapped one, which
        # gives the same state, then takes its place as data.
        super().__init__(model, tx.build(), wrt=wrt, **kwargs)
        self.tx = nnx.data(_as_variables(tx))

    @property
    def transformation(self) -> Any:
        """The wrapped transformation with the current values (no variables)."""
        return _values(self.tx)

    @property
    def hyperparams(self) -> dict[str, Any]:
        """Argument name -> current value, as ``tx.hyperparams`` of a wrapped transformation."""
        return self.transformation.hyperparams

    def set_hyperparams(self, **changes: Any) -> None:
        """Changes hyperparameters in place, validated and classified like ``replace``.

        Dynamic values go into the variables (a jitted step reuses its
        compilation); a change of the static configuration replaces the
        transformation (the next step compiles anew) and keeps the optimizer
        state, which must still fit it (else make a new ``Optimizer``).

        Args:
            **changes: argument name -> new value (paths into children go
                through the child: ``args=(...)``, as ``replace`` takes them).

        Raises:
            TypeError: the transformation is a plain optax one.
            ValueError: an unknown argument (as ``replace``).
        """
        if not is_wrapped(self.tx):
            raise TypeError(
                "Optimizer.set_hyperparams: tx is a plain optax transformation; build the "
                "Optimizer from optax_pytree.wrap(...) to change its hyperparameters"
            )
        old = self.transformation
        new = old.replace(**changes)
        leaves, treedef = jax.tree_util.tree_flatten(new)
        if treedef == jax.tree_util.tree_structure(old):
            for variable, value in zip(jax.tree_util.tree_leaves(self.tx, is_leaf=_is_variable), leaves):
                _set(variable, value)
            return
        self.tx = nnx.data(_as_variables(new))
