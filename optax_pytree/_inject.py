"""Feature: the drop-in ``inject_hyperparams``: optax's, returning a factory of pytrees.

``optax.inject_hyperparams(optax.adam)`` returns a *factory* (of the inner
factory's signature) whose transformations keep their numeric
hyperparameters in the state, ``state.hyperparams['learning_rate']``, where
programs read them to log the rate and write them to change it. That factory
is a new closure on every call, and its transformations are closures too: not
pytrees, so ``jax.jit(step)(tx, ...)`` refuses them.

Through the drop-in, ``inject_hyperparams(inner_factory, ...)`` returns the
same factory decorated by :func:`~optax_pytree.pytree_transformation`: its
transformations are wrapped objects whose arguments are leaves (a sweep over
them compiles once), built by optax's own ``inject_hyperparams``, so the state
layout, the reading and the writing are optax's. The factory it decorates is
an :class:`Injected`, compared by value (the optax function, the inner factory,
``static_args``, ``hyperparam_dtype``), so that two calls of
``inject_hyperparams(optax.adam)`` make the same configuration. A drop-in
inner factory is unwrapped to optax's own (it runs inside ``update`` on the
hyperparameters of the state, as in optax).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from . import _bind, _static
from ._value import ValueObject


class Injected(ValueObject):
    """``optax_fn(inner_factory, static_args, hyperparam_dtype)`` as a factory compared by value.

    Calling it calls what optax's function returned; it pickles as the call
    that made it; it has the inner factory's signature and a name that says
    what it is (``optax.inject_hyperparams(optax.adam)``).
    """

    def __init__(
        self,
        optax_fn: Callable[..., Any],
        inner_factory: Callable[..., Any],
        static_args: str | Iterable[str] = (),
        hyperparam_dtype: Any = None,
    ):
        if not isinstance(static_args, str):
            static_args = tuple(static_args)
        self.optax_fn = optax_fn
        self.inner_factory = inner_factory
        self.static_args = static_args
        self.hyperparam_dtype = hyperparam_dtype
        self.made = optax_fn(inner_factory, static_args, hyperparam_dtype)  # optax's checks, at once
        self.__signature__ = inspect.signature(self.made)
        self.__doc__ = getattr(inner_factory, "__doc__", None)
        inner = _bind.public_name(inner_factory)
        self.__module__ = "optax"
        self.__name__ = self.__qualname__ = f"{optax_fn.__name__}({inner})"
        self.key = (
            optax_fn,
            _static.freeze(inner_factory),
            _static.freeze(static_args),
            _static.freeze(hyperparam_dtype),
        )
        self.cache_hash()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.made(*args, **kwargs)

    def __repr__(self) -> str:
        return f"optax.{self.__qualname__}"

    def __reduce__(self) -> Any:
        return (Injected, (self.optax_fn, self.inner_factory, self.static_args, self.hyperparam_dtype))


def dropin_of(optax_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The drop-in version of ``optax.inject_hyperparams`` (or ``inject_stateful_hyperparams``)."""
    from ._wrap import pytree_transformation

    @functools.wraps(optax_fn)
    def inject(
        inner_factory: Callable[..., Any],
        static_args: str | Iterable[str] = (),
        hyperparam_dtype: Any = None,
    ) -> Callable[..., Any]:
        # A drop-in (or decorated) inner factory: optax's own, which builds
        # plain transformations inside update, as in optax.
        inner = getattr(inner_factory, _bind.MARK, inner_factory)
        injected = Injected(optax_fn, inner, static_args, hyperparam_dtype)
        names = (static_args,) if isinstance(static_args, str) else tuple(static_args)
        return pytree_transformation(static_argnames=names)(injected)

    return inject
