"""Analyse: numeric arguments that a factory only *compares* in Python: guards, and their stand-ins.

optax decides some things in Python from a hyperparameter's value:
``warmup_cosine_decay_schedule`` computes ``0.0 if peak_value == 0.0 else
end_value / peak_value``, ``polynomial_schedule`` returns a constant schedule
``if transition_steps <= 0``, ``reduce_on_plateau`` raises ``if factor >= 1.0``.
A traced value cannot answer those ``if``\\ s, so such an argument used to be
static (one compilation per peak learning rate). Yet the value only picks a
*branch*: every nonzero peak value runs the same code. Here it stays a leaf,
and the *outcomes* of its comparisons become part of the static
configuration, as torch.compile (dynamo) guards the Python values it
specialized on.

How: the factory is called with a :class:`Guarded` value in place of the
argument. A ``Guarded`` carries the leaf (a JAX array or tracer) for
arithmetic, and answers Python comparisons:

- when the wrapped object is made (``wrap``, ``replace``), the probe runs the
  factory (and its ``init``/``update``, or the schedule) with the concrete
  Python values: each comparison is answered as raw optax would answer it and
  *recorded* as a guard, ``("eq", <peak_value>, <0.0>) -> False``. Arithmetic
  on a ``Guarded`` with Python numbers gives a ``Guarded`` of the expression
  (``decay_steps - warmup_steps``), so comparisons of derived values are
  guards too. The recorded guards go into the treedef: values on the same
  branches share it, and one compilation;
- when the object is rebuilt inside traced code, comparisons are *replayed*
  from the recorded outcomes, while every arithmetic result is traced. A
  comparison that was not recorded cannot be answered and is an error naming
  the argument.

A ``Guarded`` is not a JAX type: it must not reach a ``jnp`` function. Those
used only while the factory runs are *detached* from what it returns: closures
(the cells of ``init``, ``update``, the schedule), partials, containers and
plain objects are copied with each ``Guarded`` replaced by its leaf. Those
compared at call time (inside ``update``, e.g. ``scale_by_sm3``'s ``b2 !=
1.0``) are kept in the closures when the probe found them used only through
operators there; their guards must not depend on the parameters (checked with
two sets of stand-in parameters). Anything a ``Guarded`` cannot do as a
stand-in (``int()``, ``float()``, ``range``, a shape, a dict key,
``np.asarray``) marks the argument static instead.

Never silently wrong: the guards hold for the leaf values an object was made
with. A leaf changed without re-making the object (``jax.tree.map``,
``tree_unflatten``, a traced ``replace`` inside ``jit``, a batch whose members
take different branches) is re-checked where the object is used: outside of
traced code the guards are evaluated on the concrete values and a mismatch is
an error naming the argument; inside traced code (where nothing can raise) the
outputs of that object (updates, schedule values, states) are NaN for every
member whose values left their branch. They are never the results of a branch
that is not the values' own.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import math
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from ._bind import mark_static, which
from ._expr import (
    BINARY,
    COMPARE,
    CONST,
    UNARY,
    Compare,
    Expr,
    Fits,
    Key,
    Truth,
    exact_at_leaf_precision,
    key_names,
    key_text,
    names_in,
    text,
)
from ._leaves import is_integer_scalar, is_scalar_number, is_tracer
from ._vocabulary import Phase

# --------------------------------------------------------------------------
# The stand-in value.


class GuardError(TypeError):
    """A guarded argument was used in a way its recorded guards cannot answer."""


class Context:
    """What the ``Guarded`` values of one factory call share.

    In ``record`` mode (the probe) comparisons are answered from the Python
    values and recorded; in replay mode (a rebuild) from ``recorded``, checked
    against Python values where those are known (eager use).
    """

    __slots__ = (
        "carried",
        "escapes",
        "exprs",
        "factory",
        "needs",
        "phase",
        "record",
        "recorded",
        "resolved",
        "seen_call",
    )

    def __init__(
        self,
        factory: str,
        record: bool,
        recorded: dict[Key, bool] | None = None,
        carried: dict[Expr, tuple[Any, Any]] | None = None,
    ):
        self.factory = factory
        self.record = record
        # Replay only reads the recorded outcomes: the spec's own dict, not a copy.
        self.recorded: dict[Key, bool] = dict(recorded or {}) if record or recorded is None else recorded
        self.phase = Phase.CONSTRUCTION
        self.seen_call: set[Key] = set()  # guards first met at call time (record mode)
        self.needs: list[tuple[frozenset[str], Phase]] = []  # (arguments, phase) used as Python values
        self.escapes: list[tuple[frozenset[str], Phase]] = []  # (arguments, phase) that reached JAX
        # Exactness (see ``Guarded.exact``): in record mode, the expressions
        # that reached JAX, in order; in replay mode, each one's host value
        # and the snapshot of its arguments' leaves it was computed from.
        self.exprs: dict[Expr, str] = {}  # expression -> the dtype of its traced value
        self.carried: dict[Expr, tuple[Any, Any]] = carried or {}
        # (expression, id of the trace) -> (trace, its exact value): optax
        # computes ``1 - b1`` anew for every parameter leaf; one per trace.
        self.resolved: dict[tuple[Expr, int], tuple[Any, Any]] = {}

    def answer(self, key: Key, pyval: Any) -> bool:
        if self.record:
            if pyval is None:
                names = sorted(key_names(key))
                raise GuardError(
                    f"{self.factory} compares {which(names)} in Python ({key_text(key)}) and "
                    "it is a traced value here, so the branch cannot be decided; wrap it outside "
                    "of jit and pass the wrapped object in, replace() it on an object wrapped "
                    f"outside of jit, or {mark_static(self.factory, names)}"
                )
            result = bool(pyval)
            if self.phase is Phase.CALL and key not in self.recorded:
                self.seen_call.add(key)
            self.recorded.setdefault(key, result)
            return result
        found = self.recorded.get(key)
        if found is None:
            if pyval is not None:  # eager use: the concrete value answers
                return bool(pyval)
            names = sorted(key_names(key))
            raise GuardError(
                f"{self.factory} compared {which(names)} in Python ({key_text(key)}) in a way "
                "not seen when it was wrapped, and the value is traced here; "
                + mark_static(self.factory, names)
            )
        return found

    def need(self, names: frozenset[str], what: str, pyval: Any) -> Any:
        """An argument used as a concrete value: static in the probe, an error otherwise."""
        if self.record and pyval is not None:
            self.needs.append((names, self.phase))
            return pyval
        raise GuardError(
            f"{self.factory} needs {which(names)} as a concrete Python value ({what}); "
            f"{mark_static(self.factory, names)}"
        )


class Guarded:
    """A numeric argument, or an expression of them, standing in for a factory's argument.

    ``value`` is what arithmetic uses (the leaf: a JAX array or tracer);
    ``pyval`` the Python value comparisons are answered from, where known.
    """

    __slots__ = ("_make", "_value", "ctx", "expr", "names", "pyval")
    __array_ufunc__ = None  # NumPy operators defer to ours
    __array_priority__ = 2000

    def __init__(
        self, ctx: Context, expr: Expr, value: Any, pyval: Any, make: Callable[[], Any] | None = None
    ):
        self.ctx = ctx
        self.expr = expr
        self._value = value
        self._make = make
        self.pyval = pyval
        self.names = names_in(expr)

    @property
    def value(self) -> Any:
        """The leaf's value of this expression (traced or concrete).

        Computed when first needed where it is concrete: in a rebuild from
        concrete leaves, an expression whose host value the object carries
        never needs it (each would be an eager XLA operation).
        """
        make = self._make
        if make is None:
            return self._value
        value = make()
        if not is_tracer(value):  # a value computed inside a trace stays there
            self._value, self._make = value, None
        return value

    def _concrete(self) -> bool:
        return self._make is not None or not is_tracer(self._value)

    # -- comparisons: guards ----------------------------------------------

    def _compare(self, op: str, other: Any) -> Any:
        if isinstance(other, Guarded):
            rhs, rpy = other.expr, other.pyval
        elif is_scalar_number(other):
            rhs, rpy = (CONST, other), other
        elif isinstance(other, (jax.Array, np.ndarray)):
            return COMPARE[op](self.exact(), other)  # data, not a guard: traced as usual
        else:
            return NotImplemented
        pyval = None
        if self.pyval is not None and rpy is not None:
            pyval = COMPARE[op](self.pyval, rpy)
        key = Compare(op, self.expr, rhs)
        ctx = self.ctx
        if pyval is None and not ctx.record and ctx.phase is Phase.CALL and key not in ctx.recorded:
            # A comparison with data of the call (a Python step count given
            # to a schedule): traced, as it would be for a plain leaf.
            them = other.exact() if isinstance(other, Guarded) else other
            return COMPARE[op](self.exact(), them)
        return ctx.answer(key, pyval)

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self._compare("eq", other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self._compare("ne", other)

    def __lt__(self, other: Any) -> Any:
        return self._compare("lt", other)

    def __le__(self, other: Any) -> Any:
        return self._compare("le", other)

    def __gt__(self, other: Any) -> Any:
        return self._compare("gt", other)

    def __ge__(self, other: Any) -> Any:
        return self._compare("ge", other)

    def __bool__(self) -> bool:
        return self.ctx.answer(Truth(self.expr), None if self.pyval is None else self.pyval != 0)

    # -- arithmetic: traced, and tracked when the other side is a number ----

    def _binary(self, op: str, other: Any, reflected: bool) -> Any:
        fn = BINARY[op]
        if isinstance(other, Guarded):
            them = (other.expr, other, other.pyval)
        elif is_scalar_number(other):
            them = ((CONST, other), other, other)
        elif isinstance(other, (jax.Array, np.ndarray)):
            return fn(other, self.exact()) if reflected else fn(self.exact(), other)
        else:
            return NotImplemented
        me = (self.expr, self, self.pyval)
        left, right = (them, me) if reflected else (me, them)
        pyval = None
        if left[2] is not None and right[2] is not None:
            try:
                pyval = fn(left[2], right[2])
            except ZeroDivisionError:
                raise  # as raw optax would, with Python numbers
            except ArithmeticError:  # an overflow: the traced value decides
                pyval = None
        a, b = left[1], right[1]

        def make() -> Any:
            return fn(a.value if isinstance(a, Guarded) else a, b.value if isinstance(b, Guarded) else b)

        expr = (op, left[0], right[0])
        if not self.ctx.record and all(not isinstance(x, Guarded) or x._concrete() for x in (a, b)):
            out = Guarded(self.ctx, expr, None, pyval, make)  # a rebuild from concrete leaves: lazily
        else:
            out = Guarded(self.ctx, expr, make(), pyval)
        out.check_integer_range(left[2], right[2])
        return out

    def check_integer_range(self, *operands: Any) -> None:
        """Integer arithmetic done in Python must fit the leaf's integer dtype (a guard)."""
        if not all(is_integer_scalar(x) for x in operands):
            return
        dtype = jnp.result_type(self.value)
        if not jnp.issubdtype(dtype, jnp.integer):
            # A Python int, a traced float: other numbers.
            if self.pyval is not None and is_integer_scalar(self.pyval):
                self.ctx.need(self.names, f"{text(self.expr)} is an integer in Python", self.pyval)
            return
        info = jnp.iinfo(dtype)
        fits = None
        if self.pyval is not None:
            fits = is_integer_scalar(self.pyval) and info.min <= int(self.pyval) <= info.max
        if self.ctx.record and fits is False:
            self.ctx.need(self.names, f"{text(self.expr)} = {self.pyval} overflows {dtype}", self.pyval)
            return
        self.ctx.answer(Fits(self.expr, np.dtype(dtype).name), fits)

    def __add__(self, o: Any) -> Any:
        return self._binary("add", o, False)

    def __radd__(self, o: Any) -> Any:
        return self._binary("add", o, True)

    def __sub__(self, o: Any) -> Any:
        return self._binary("sub", o, False)

    def __rsub__(self, o: Any) -> Any:
        return self._binary("sub", o, True)

    def __mul__(self, o: Any) -> Any:
        return self._binary("mul", o, False)

    def __rmul__(self, o: Any) -> Any:
        return self._binary("mul", o, True)

    def __truediv__(self, o: Any) -> Any:
        return self._binary("truediv", o, False)

    def __rtruediv__(self, o: Any) -> Any:
        return self._binary("truediv", o, True)

    def __floordiv__(self, o: Any) -> Any:
        return self._binary("floordiv", o, False)

    def __rfloordiv__(self, o: Any) -> Any:
        return self._binary("floordiv", o, True)

    def __mod__(self, o: Any) -> Any:
        return self._binary("mod", o, False)

    def __rmod__(self, o: Any) -> Any:
        return self._binary("mod", o, True)

    def __pow__(self, o: Any) -> Any:
        return self._binary("pow", o, False)

    def __rpow__(self, o: Any) -> Any:
        return self._binary("pow", o, True)

    def __divmod__(self, o: Any) -> Any:
        quotient = self._binary("floordiv", o, False)
        return quotient if quotient is NotImplemented else (quotient, self._binary("mod", o, False))

    def __rdivmod__(self, o: Any) -> Any:
        quotient = self._binary("floordiv", o, True)
        return quotient if quotient is NotImplemented else (quotient, self._binary("mod", o, True))

    def __and__(self, o: Any) -> Any:
        return self._binary("and", o, False)

    def __rand__(self, o: Any) -> Any:
        return self._binary("and", o, True)

    def __or__(self, o: Any) -> Any:
        return self._binary("or", o, False)

    def __ror__(self, o: Any) -> Any:
        return self._binary("or", o, True)

    def __xor__(self, o: Any) -> Any:
        return self._binary("xor", o, False)

    def __rxor__(self, o: Any) -> Any:
        return self._binary("xor", o, True)

    def __lshift__(self, o: Any) -> Any:
        return self._binary("lshift", o, False)

    def __rlshift__(self, o: Any) -> Any:
        return self._binary("lshift", o, True)

    def __rshift__(self, o: Any) -> Any:
        return self._binary("rshift", o, False)

    def __rrshift__(self, o: Any) -> Any:
        return self._binary("rshift", o, True)

    def __round__(self, ndigits: Any = None) -> Any:
        # A leaf rounds too (``jnp.round``, in its precision, and a float
        # where Python gives an int): tracked like the operators above, so
        # the value JAX gets is Python's (carried), at every value, not only
        # at the one the verification compared.
        if ndigits is None:
            return self._unary("round")
        return self._binary("round_ndigits", operator.index(ndigits), False)  # ndigits: an int, as in Python

    def _unary(self, op: str) -> Guarded:
        fn = UNARY[op]
        pyval = None if self.pyval is None else fn(self.pyval)
        if not self.ctx.record and self._concrete():
            out = Guarded(self.ctx, (op, self.expr), None, pyval, lambda: fn(self.value))
        else:
            out = Guarded(self.ctx, (op, self.expr), fn(self.value), pyval)
        out.check_integer_range(self.pyval)
        return out

    def __neg__(self) -> Guarded:
        return self._unary("neg")

    def __pos__(self) -> Guarded:
        return self._unary("pos")

    def __abs__(self) -> Guarded:
        return self._unary("abs")

    def __invert__(self) -> Guarded:
        return self._unary("invert")

    # -- what needs a concrete value: static ---------------------------------

    def __hash__(self) -> int:
        return hash(self.ctx.need(self.names, "a dict key or hash()", self.pyval))

    def __index__(self) -> int:
        return operator.index(self.ctx.need(self.names, "an index, a shape or range()", self.pyval))

    def __int__(self) -> int:
        return int(self.ctx.need(self.names, "int()", self.pyval))

    def __float__(self) -> float:
        return float(self.ctx.need(self.names, "float()", self.pyval))

    def __complex__(self) -> complex:
        return complex(self.ctx.need(self.names, "complex()", self.pyval))

    def __trunc__(self) -> Any:
        return math.trunc(self.ctx.need(self.names, "math.trunc()", self.pyval))

    def __floor__(self) -> Any:
        return math.floor(self.ctx.need(self.names, "math.floor()", self.pyval))

    def __ceil__(self) -> Any:
        return math.ceil(self.ctx.need(self.names, "math.ceil()", self.pyval))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.ctx.need(self.names, "a NumPy array", self.pyval), dtype=dtype)

    def item(self) -> Any:
        return self.ctx.need(self.names, ".item()", self.pyval)

    def tolist(self) -> Any:
        return self.ctx.need(self.names, ".tolist()", self.pyval)

    # -- JAX: an explicit jnp.asarray works; anything else is an escape ------

    @property
    def __jax_array__(self) -> Callable[[], Any]:
        # JAX looks this up before refusing the object in an implicit
        # conversion (a jnp function given it): record who got that far.
        self.ctx.escapes.append((self.names, self.ctx.phase))
        return lambda: _array(self.exact())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_array(self.exact()), name)  # dtype, shape, astype, ...: the leaf's

    def exact(self) -> Any:
        """The value JAX gets: the host's (Python's precision) where the object carries it.

        optax does arithmetic on hyperparameters in Python (``1 - b2``) before
        the result meets an array, in double precision, rounded once. A traced
        leaf would do it in float32 on a rounded value. Each expression that
        reaches JAX is recorded by the probe, evaluated on the host when the
        object is made, and carried as a leaf: here the traced value takes
        the carried one, ``value + stop_gradient(host - value)`` (exactly the
        host value: the two are within a few float32 ulps, so the difference
        is exact; gradients flow through the traced value). If the leaves the
        host value was computed from have changed since (``jax.tree.map``, a
        traced ``replace``, a meta-gradient step), the traced float32 value
        is used instead: the documented fallback.
        """
        ctx = self.ctx
        if not ctx.record:  # a rebuild: the carried value, if this expression has one
            found = ctx.carried.get(self.expr)
            if found is None:
                return self.value
            host, fresh = found
            if fresh is True and self._concrete():
                return host  # concrete (eager): no gradient to carry, no arithmetic to dispatch
            value = self.value
            # The trace the arithmetic below is staged into: the current one,
            # not the leaf's (a cond branch or a nested jit inside the trace
            # of the leaves makes its own; a value made there must not leak
            # into the next one).
            trace = _current_trace()
            key = (self.expr, id(trace))
            found = ctx.resolved.get(key)
            if found is not None and found[0] is trace:
                return found[1]  # the same value in the same trace: once (gradients alike)
            exact = value + jax.lax.stop_gradient(host - value)  # weak types kept (bf16 parameters)
            exact = exact if fresh is True else jnp.where(fresh, exact, value)
            ctx.resolved[key] = (trace, exact)
            return exact
        if not exact_at_leaf_precision(self.expr) and not jnp.issubdtype(
            jnp.result_type(self.value), jnp.integer
        ):
            ctx.exprs.setdefault(self.expr, np.dtype(jnp.result_type(self.value)).name)
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value if self.pyval is None else self.pyval, spec)

    def __repr__(self) -> str:
        shown = "<traced>" if self.pyval is None else repr(self.pyval)
        return f"Guarded({text(self.expr)}={shown})"

    def __reduce__(self) -> Any:
        raise TypeError(f"a guarded stand-in for {text(self.expr)} cannot be pickled")


def _current_trace() -> Any:
    """The trace JAX operations are staged into now (jax >= 0.4.36 tracks one at a time)."""
    return jax_core.trace_ctx.trace


def _array(x: Any) -> Any:
    """A value as an array: a carried host value is a Python number (weakly typed, as in optax)."""
    return jnp.asarray(x) if type(x) in (int, float, complex) else x


# flattened as a pytree instead of being abstractified through
# ``__jax_array__`` (which JAX refuses): the helper sees the leaf itself.
jax.tree_util.register_pytree_node(Guarded, lambda g: ((g.exact(),), None), lambda _, children: children[0])


def unwrap(tree: Any) -> Any:
    """``tree`` with every ``Guarded`` leaf replaced by its value (states, schedule values)."""
    return jax.tree_util.tree_map(lambda x: x.exact() if isinstance(x, Guarded) else x, tree)
