"""flax.nnx: ``nnx.Optimizer`` whose hyperparameters stay dynamic under ``nnx.jit``.

``nnx.Optimizer`` keeps ``tx`` as a *static* attribute: a plain optax
optimizer is baked into the compiled step (a new learning rate is a new
compilation), and a wrapped one is refused (``Found data ... assigned to
static attribute 'tx'``). :class:`Optimizer` is a one-line replacement whose
``tx`` is nnx *data*: its hyperparameters are :class:`Hyperparameter`
variables of the optimizer's state, so ``nnx.jit`` passes them in as
arguments, and :meth:`Optimizer.set_hyperparams` changes them in place
without a recompilation::

    from flax import nnx
    import optax, optax_pytree as opx
    from optax_pytree.nnx import Optimizer

    optimizer = Optimizer(model, opx.wrap(optax.adamw, 1e-3), wrt=nnx.Param)  # was nnx.Optimizer

    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    train_step = nnx.jit(step)
    train_step(model, optimizer, x, y)
    optimizer.set_hyperparams(learning_rate=1e-4)  # no recompilation

Assign no new transformation to ``optimizer.tx`` (``optimizer.tx =
optimizer.tx.replace(...)``): that swaps the variables for plain arrays, and
the next step compiles again.

**A sweep that compiles once.** ``nnx.jit`` compiles per graph structure of
its arguments, and a new model object may not have the same one as the last:
a module holding a ``functools.partial`` (flax's tutorial CNN holds
``partial(nnx.avg_pool, ...)``) has a new one per object, so a new model and
optimizer per learning rate is a new compilation per learning rate, whatever
the optimizer. Keep one model and one optimizer, reset their state between
values, and change the hyperparameters in place::

    model = Model(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adam, 1e-3), wrt=nnx.Param)
    initial = nnx.clone(nnx.state((model, optimizer)))  # a copy: nnx.state gives the live variables
    for lr in (1e-2, 3e-3, 1e-3, 3e-4):
        nnx.update((model, optimizer), initial)        # fresh parameters and optimizer state
        optimizer.set_hyperparams(learning_rate=lr)    # a new value, the same program
        for x, y in batches:
            train_step(model, optimizer, x, y)         # compiled once for all four

**A population in one program.** :func:`optax_pytree.grid` makes a batch of
wrapped transformations (from ``optimizer.transformation``, the wrapped
transformation with its current values, or a fresh ``opx.wrap``);
``nnx.vmap`` makes one model and optimizer per member and trains them all
in one compiled step::

    batch, labels = opx.grid(opx.wrap(optax.adam, 1e-3), learning_rate=[1e-2, 3e-3, 1e-3, 3e-4])

    @nnx.vmap(in_axes=0)
    def create(tx):                                    # one member: its own model and optimizer
        model = Model(nnx.Rngs(0))
        return model, Optimizer(model, tx, wrt=nnx.Param)

    models, optimizers = create(batch)

    population_step = nnx.jit(nnx.vmap(step, in_axes=(0, 0, None, None)))
    losses = population_step(models, optimizers, x, y)  # one loss per member

With the functional API (``nnx.split``/``nnx.merge``), the same population is
``jax.vmap`` over the members' states; pass the states in as arguments, since
flax refuses to mutate, inside a transformation, variables made outside it::

    def create_state(tx):
        model = Model(nnx.Rngs(0))
        return nnx.state((model, Optimizer(model, tx, wrt=nnx.Param)))

    graphdef = nnx.graphdef((model, optimizer))        # any member's structure
    states = jax.vmap(create_state)(batch)

    @jax.jit
    @functools.partial(jax.vmap, in_axes=(0, None, None))
    def population_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)
        loss = step(model, optimizer, x, y)
        return nnx.state((model, optimizer)), loss

**Checkpoints.** ``nnx.state(optimizer)`` holds the hyperparameters
(``tx.learning_rate``) with the optimizer state, so flax's and orbax's ways
of saving nnx state save them: ``flax.serialization.to_bytes`` of
``nnx.to_pure_dict(state)`` and ``nnx.replace_by_pure_dict``, orbax's
``StandardCheckpointer``, or :func:`optax_pytree.save_checkpoint` and
:func:`optax_pytree.restore_checkpoint`, which also keep the
hyperparameters' weak types (with the others, the first step after a restore
compiles once more; the numbers are the same).

Requires flax (an optional dependency of optax_pytree).
"""

from __future__ import annotations

from typing import Any

import jax

try:
    from flax import nnx
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("optax_pytree.nnx needs flax, an optional dependency: pip install flax") from e

if not hasattr(nnx, "as_pure"):  # pragma: no cover - depends on the environment
    # flax 0.12.7's (docs/guide/versions.md): Variable.get_value/set_value and nnx.data are older.
    raise ImportError("optax_pytree.nnx needs flax 0.12.7 or newer; pip install -U flax")

from . import _bind, _tree
from ._bind import is_wrapped

_tree.register_with_flax()

__all__ = ["Hyperparameter", "ModelAndOptimizer", "Optimizer"]


class Hyperparameter(nnx.Variable):  # pyright: ignore[reportMissingTypeArgument]
    """An nnx Variable holding one hyperparameter of an :class:`Optimizer`'s transformation."""


def _as_variables(tx: Any) -> Any:
    return jax.tree_util.tree_map(Hyperparameter, tx)


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def _values(tx: Any) -> Any:
    return jax.tree_util.tree_map(lambda v: v.get_value() if _is_variable(v) else v, tx, is_leaf=_is_variable)


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
            UnknownArgumentError: a name that is not an argument of the
                factory (a ``TypeError`` and a ``ValueError``, as from
                ``wrap``, ``replace`` and ``grid``).
        """
        if not is_wrapped(self.tx):
            raise TypeError(
                "Optimizer.set_hyperparams: tx is a plain optax transformation, whose hyperparameters "
                f"are hidden in its closures; build the Optimizer from a wrapped one to change them: "
                f"{_bind.HOW_TO_WRAP}"
            )
        old = self.transformation
        names = old.hyperparams
        for name in changes:
            if name not in names:
                raise _bind.UnknownArgumentError(
                    f"Optimizer.set_hyperparams: {_tree.name_of(old)} has no argument {name!r}; its "
                    f"arguments are {list(names)}{_bind.did_you_mean(name, names)}"
                )
        new = old.replace(**changes)
        leaves, treedef = jax.tree_util.tree_flatten(new)
        if treedef == jax.tree_util.tree_structure(old):
            for variable, value in zip(jax.tree_util.tree_leaves(self.tx, is_leaf=_is_variable), leaves):
                variable.set_value(value)
            return
        self.tx = nnx.data(_as_variables(new))


class ModelAndOptimizer(Optimizer):
    """The replacement for flax's (deprecated) ``nnx.ModelAndOptimizer``: an :class:`Optimizer`
    that holds its model, so ``update`` takes the gradients only.

    flax's class keeps ``tx`` static, as ``nnx.Optimizer`` does, and refuses a
    wrapped transformation (as through the drop-in ``optax_pytree.optax``);
    this one takes both, as :class:`Optimizer` does.

    Examples:
        >>> import jax.numpy as jnp, optax
        >>> from flax import nnx
        >>> import optax_pytree as opx
        >>> from optax_pytree.nnx import ModelAndOptimizer
        >>> state = ModelAndOptimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), opx.wrap(optax.sgd, 0.1))
        >>> grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))))(state.model)
        >>> _ = state.update(grads)
        >>> int(state.step[...])
        1
    """

    def __init__(self, model: Any, tx: Any, *, wrt: Any = nnx.Param):
        super().__init__(model, tx, wrt=wrt)
        self.model = model

    def update(self, grads: Any, /, **kwargs: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Applies ``grads`` to the model this optimizer holds (flax's signature)."""
        return super().update(self.model, grads, **kwargs)
