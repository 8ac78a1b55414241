"""``optax.contrib``, with every factory returning a pytree (see ``optax_pytree.optax``).

Examples:
    >>> import optax_pytree as opx
    >>> import optax_pytree.optax as optax
    >>> isinstance(optax.contrib.muon(learning_rate=0.02), opx.PyTreeTransformation)
    True
"""

import typing as _typing

import optax.contrib as _contrib

from optax_pytree import _dropin

_dropin.fill(globals(), _contrib)


def __getattr__(name: str) -> _typing.Any:
    return _dropin.forward(_contrib, __name__, name)


def __dir__() -> list[str]:
    return dir(_contrib)
