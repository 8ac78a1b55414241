"""``optax.schedules``, with every schedule a pytree (see ``optax_pytree.optax``).

Examples:
    >>> import optax_pytree.optax as optax
    >>> schedule = optax.schedules.linear_schedule(1.0, 0.0, transition_steps=10)
    >>> float(schedule(5))
    0.5
"""

import typing as _typing

import optax.schedules as _schedules

from optax_pytree import _dropin

_dropin.fill(globals(), _schedules)


def __getattr__(name: str) -> _typing.Any:
    return _dropin.forward(_schedules, __name__, name)


def __dir__() -> list[str]:
    return dir(_schedules)
