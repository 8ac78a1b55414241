"""optax, with every optimizer a pytree: change one import line.

An optax program turns into one whose optimizers are pytrees by changing its
import alone::

    import optax                         # before
    import optax_pytree.optax as optax   # after

Every factory of ``optax``, ``optax.contrib`` and ``optax.schedules`` (found
in optax itself at import time, so a new optax release is covered) returns
what :func:`optax_pytree.wrap` would: a transformation or schedule whose
numeric hyperparameters are leaves. A combinator given such values
(``chain``, ``named_chain``, ``multi_transform``, ``masked``, ``MultiSteps``,
``lookahead``, ``apply_if_finite``, ``contrib.schedule_free``, ...) returns
one pytree holding them all. Names, docstrings and signatures are optax's.
Everything else (``apply_updates``, ``tree_utils``, losses, state classes,
``GradientTransformation``, ...) is the very object optax has, and ``dir()``
lists optax's names.

Differences from optax:

- ``MultiSteps`` is a function here, not a class: ``MultiSteps(opt, k)``
  returns a wrapped transformation (its ``gradient_transformation()`` is
  itself; ``has_updated(state)`` and ``inner_opt`` are forwarded to the
  ``optax.MultiSteps`` it builds), and ``isinstance(x, optax.MultiSteps)``
  raises ``TypeError``. Test ``x.factory is MultiSteps`` with plain optax's
  class instead (``x.build()`` is the plain transformation).
- The signatures are optax's: they take no ``static_argnames``,
  ``dynamic_argnames`` or ``dynamic_only``. Force an argument static or
  dynamic by marking its value at the call site:
  ``optax.adam(1e-3, b2=optax_pytree.static(0.999))`` (or
  ``optax_pytree.dynamic(...)``). The options themselves are taken by
  ``optax_pytree.wrap(optax.adam, ..., static_argnames=...)`` and by
  ``optax_pytree.pytree_transformation(static_argnames=...)(optax.adam)``.
- Submodules other than ``contrib`` and ``schedules`` (``optax.transforms``,
  ``optax.tree_utils``, ...) are optax's own: their factories return plain
  transformations. Use the top-level names (``optax.freeze``, ...).

Examples:
    >>> import jax, jax.numpy as jnp
    >>> import optax_pytree.optax as optax
    >>> traces = 0
    >>> @jax.jit
    ... def step(tx, params, grads):  # the optimizer is an ordinary argument
    ...     global traces
    ...     traces += 1
    ...     updates, _ = tx.update(grads, tx.init(params), params)
    ...     return optax.apply_updates(params, updates)
    >>> params = grads = jnp.ones(3)
    >>> for lr in (0.1, 0.01, 0.001):
    ...     tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))
    ...     params = step(tx, params, grads)
    >>> traces
    1
"""

import typing as _typing

import optax as _optax

from optax_pytree import _dropin

from . import contrib as contrib
from . import schedules as schedules

_dropin.fill(globals(), _optax)


def __getattr__(name: str) -> _typing.Any:
    return _dropin.forward(_optax, __name__, name)


def __dir__() -> list[str]:
    return dir(_optax)
