"""A schedule written as a closure: its captured numbers are leaves too.

Programs write schedules of their own, closed over the rate they sweep::

    def create_learning_rate_schedule(base_learning_rate, warmup_steps):
        def step_fn(step):
            return base_learning_rate * jnp.minimum(1.0, step / warmup_steps)
        return step_fn

    tx = optax.adamw(create_learning_rate_schedule(lr, 1000))

(flax's examples, MaxText, AlgoPerf's ``scale_by_schedule(lambda count:
-schedule(count))``). Compared by value (``_static``), ``step_fn`` is a new
static value for every rate: one compilation per rate. Here a function given
as an argument whose closure cells hold numbers or wrapped objects is a child
of the object instead, made by :class:`ClosureFactory` (the code, its module,
its defaults) from its cells, whose names are its parameters: the numbers are
leaves (probed, guarded and verified like any factory's arguments; a number
the function needs as a Python value is static), the wrapped objects children.
This is equinox's ``closure_to_pytree``, done by the one mechanism.

Only where it is safe and useful:

- a plain function (not a builtin, a method or a partial) whose cells are all
  assigned and never written (no ``nonlocal`` assignment in it or in a
  function it defines: a rebuilt closure has fresh cells);
- with at least one cell holding a Python number or a wrapped object;
- that runs as a schedule (a callable of the step count) with its numbers:
  the probe runs it so; a mask, a label function or a skip function that
  closes over a number stays static, compared by value. A closure over
  wrapped objects alone is always a child: its rebuild calls the same
  schedules.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dis
import functools
import inspect
import types
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _bind, _static
from ._bind import is_wrapped
from ._caches import cache
from ._classify import NO_OPTIONS, set_closure_hook
from ._tree import make
from ._vocabulary import Kind, Level

_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})


@functools.lru_cache(maxsize=1024)
def _writes_a_cell(code: types.CodeType, names: frozenset[str] | None = None) -> bool:
    """Whether ``code``, or a function it defines, assigns one of its free variables (``nonlocal``).

    ``names``: the free variables of the outermost function (its cells); a
    variable of its own that a nested function captures is no such cell.
    """
    names = frozenset(code.co_freevars) if names is None else names
    free = names & frozenset(code.co_freevars)
    if free and any(i.opname in _WRITES and i.argval in free for i in dis.get_instructions(code)):
        return True
    return any(isinstance(c, types.CodeType) and _writes_a_cell(c, names) for c in code.co_consts)


def _is_number(value: Any) -> bool:
    return (type(value) is float or type(value) is int) and -(2**31) <= value < 2**31


def _convertible(value: Any, seen: frozenset[int]) -> bool:
    """A number, a wrapped object, or a function that may itself become a child."""
    if is_wrapped(value) or _is_number(value):
        return True
    return type(value) is types.FunctionType and _cells(value, seen) is not None


def cells(fn: Any) -> dict[str, Any] | None:
    """The captured values of ``fn`` by name, if it may become a child (see the module), else None."""
    return _cells(fn, frozenset())


def _cells(fn: Any, seen: frozenset[int]) -> dict[str, Any] | None:
    if type(fn) is not types.FunctionType or not fn.__closure__ or id(fn) in seen or len(seen) > 8:
        return None
    seen = seen | {id(fn)}
    out: dict[str, Any] = {}
    useful = False
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
            value = cell.cell_contents
        except ValueError:  # not assigned yet
            return None
        if value is fn:  # it calls itself: rebuilt, it would call the old one
            return None
        out[name] = value
        useful = useful or _convertible(value, seen)
    if not useful or _writes_a_cell(fn.__code__):
        return None
    return out


def only_wrapped(values: dict[str, Any]) -> bool:
    """No number among the cells (wrapped objects and functions): a child whatever it is."""
    return not any(_is_number(v) for v in values.values())


def gives_a_number(fn: Any) -> bool:
    """Whether ``fn`` at step 0 is a real number (a schedule), not a mask, a label or an error."""
    from . import _quiet

    try:
        with _quiet.quietly(), jax.ensure_compile_time_eval():
            out = fn(jnp.zeros((), jnp.int32))
    except Exception:  # noqa: BLE001 - not a callable of the step count
        return False
    if isinstance(out, (bool, np.bool_)):
        return False
    if isinstance(out, (int, float)):
        return True
    if isinstance(out, (np.ndarray, np.generic, jax.Array)):
        return out.ndim == 0 and bool(jnp.issubdtype(out.dtype, jnp.number))
    return False


class ClosureFactory:
    """Makes a function of one code object from its captured values: a closure as a factory.

    Its parameters are the closure's free variables; calling it gives a new
    function with that code, module, name, defaults and attributes, closed
    over the values given. Compared by value (code, module, defaults,
    attributes), so that every closure a builder makes is one factory.
    """

    def __init__(self, fn: types.FunctionType):
        self.code = fn.__code__
        self.globals = fn.__globals__
        self.defaults = fn.__defaults__
        self.kwdefaults = fn.__kwdefaults__
        self.attributes = dict(fn.__dict__)
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self.code.co_freevars]
        )
        self.key = (
            self.code,
            _static.ByIdentity(self.globals),
            _static.freeze(self.defaults),
            _static.freeze(self.kwdefaults),
            _static.freeze(self.attributes),
        )
        self.hash = hash(self.key)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.__signature__.bind(*args, **kwargs)
        closure = tuple(types.CellType(bound.arguments[n]) for n in self.code.co_freevars)
        fn = types.FunctionType(self.code, self.globals, self.__name__, self.defaults, closure)
        fn.__kwdefaults__ = self.kwdefaults
        fn.__qualname__ = self.__qualname__
        fn.__dict__.update(self.attributes)
        return fn

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClosureFactory) and self.hash == other.hash and self.key == other.key

    def __hash__(self) -> int:
        return self.hash

    def __repr__(self) -> str:
        return f"<closure {self.__module__}.{self.__qualname__}>"


def closure_child(fn: Any) -> Any:
    """The wrapped child a function given as an argument becomes, or None (see the module)."""
    values = cells(fn)
    if values is None:
        return None
    factory = ClosureFactory(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        child = make(_bind.factory_info(factory), values, NO_OPTIONS)
    if only_wrapped(values):
        return child
    spec = child._core.spec
    if caught or spec.kind is not Kind.SCHEDULE or spec.analysis.level is not Level.CALL:
        return None  # not one the mechanism honours
    schedule = _SCHEDULE_LIKE.get(spec)
    if schedule is None:
        schedule = gives_a_number(fn)
        _SCHEDULE_LIKE.set(spec, schedule)
    return child if schedule else None  # a mask, a label or skip function: static, by value


_SCHEDULE_LIKE = cache("spec of a closure's child -> whether the closure is a schedule", 1024)


set_closure_hook(closure_child)
