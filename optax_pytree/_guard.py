"""Step 2b, guard: numeric arguments that a factory only *compares* in Python.

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

import copy
import functools
import math
import operator
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._leaves import is_integer, is_tracer

# --------------------------------------------------------------------------
# Expressions over arguments: ("arg", name), ("const", value), (op, *operands).

ARG = "arg"
CONST = "const"

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
}
_UNARY: dict[str, Callable[[Any], Any]] = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
_SYMBOL = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}  # fmt: skip
_REFLECTED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}

Expr = tuple[Any, ...]
Key = tuple[Any, ...]  # (comparison, lhs, rhs), ("bool", expr) or ("fits", expr, dtype name)

# An integer expression computed in Python is exact; the same expression on a
# leaf is computed in the leaf's integer dtype and wraps around past its
# range. Where the factory does integer arithmetic on an argument in Python,
# the result fitting the dtype is a guard ("fits"): values whose arithmetic
# overflows are another branch, on which the argument is static.
FITS = "fits"


def names_in(expr: Expr) -> frozenset[str]:
    kind = expr[0]
    if kind == ARG:
        return frozenset((expr[1],))
    if kind == CONST:
        return frozenset()
    return frozenset().union(*(names_in(e) for e in expr[1:]))


def key_names(key: Key) -> frozenset[str]:
    return frozenset().union(*(names_in(e) for e in key[1:] if isinstance(e, tuple)))


def text(expr: Expr) -> str:
    """``decay_steps - warmup_steps``: an expression as the factory wrote it."""
    kind = expr[0]
    if kind == ARG:
        return expr[1]
    if kind == CONST:
        return repr(expr[1])
    if kind in _UNARY:
        inner = text(expr[1])
        return f"abs({inner})" if kind == "abs" else f"{'-' if kind == 'neg' else '+'}{inner}"
    a, b = (text(e) if e[0] in (ARG, CONST) else f"({text(e)})" for e in expr[1:])
    return f"{a} {_SYMBOL[kind]} {b}"


def key_text(key: Key) -> str:
    if key[0] == "bool":
        return f"bool({text(key[1])})"
    if key[0] == FITS:
        return f"{text(key[1])} fits in {key[2]}"
    return f"{text(key[1])} {_SYMBOL[key[0]]} {text(key[2])}"


def describe(guards: Iterable[tuple[Key, bool]]) -> tuple[str, ...]:
    """``("peak_value == 0.0 is False", ...)``: guards in words."""
    return tuple(f"{key_text(k)} is {v}" for k, v in guards)


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
        self.phase = "construct"
        self.seen_call: set[Key] = set()  # guards first met at call time (record mode)
        self.needs: list[tuple[frozenset[str], str]] = []  # (arguments, phase) used as Python values
        self.escapes: list[tuple[frozenset[str], str]] = []  # (arguments, phase) that reached JAX
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
                    f"{self.factory} compares {_which(names)} in Python ({key_text(key)}) and "
                    "it is a traced value here, so the branch cannot be decided; wrap it outside "
                    "of jit and pass the wrapped object in, replace() it on an object wrapped "
                    "outside of jit, or mark it static"
                )
            result = bool(pyval)
            if self.phase == "call" and key not in self.recorded:
                self.seen_call.add(key)
            self.recorded.setdefault(key, result)
            return result
        found = self.recorded.get(key)
        if found is None:
            if pyval is not None:  # eager use: the concrete value answers
                return bool(pyval)
            names = sorted(key_names(key))
            raise GuardError(
                f"{self.factory} compared {_which(names)} in Python ({key_text(key)}) in a way "
                "not seen when it was wrapped, and the value is traced here; mark "
                f"{'it' if len(names) == 1 else 'them'} static: "
                f"static_argnames=({', '.join(repr(n) for n in names)},)"
            )
        return found

    def need(self, names: frozenset[str], what: str, pyval: Any) -> Any:
        """An argument used as a concrete value: static in the probe, an error otherwise."""
        if self.record and pyval is not None:
            self.needs.append((names, self.phase))
            return pyval
        raise GuardError(
            f"{self.factory} needs {_which(sorted(names))} as a concrete Python value ({what}); "
            "mark it static"
        )


def _which(names: list[str]) -> str:
    return f"argument {names[0]!r}" if len(names) == 1 else f"arguments {names}"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, complex, np.number, np.bool_))


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
        elif _is_number(other):
            rhs, rpy = (CONST, other), other
        elif isinstance(other, (jax.Array, np.ndarray)):
            return _COMPARE[op](self.exact(), other)  # data, not a guard: traced as usual
        else:
            return NotImplemented
        pyval = None
        if self.pyval is not None and rpy is not None:
            pyval = _COMPARE[op](self.pyval, rpy)
        key = (op, self.expr, rhs)
        ctx = self.ctx
        if pyval is None and not ctx.record and ctx.phase == "call" and key not in ctx.recorded:
            # A comparison with data of the call (a Python step count given
            # to a schedule): traced, as it would be for a plain leaf.
            them = other.exact() if isinstance(other, Guarded) else other
            return _COMPARE[op](self.exact(), them)
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
        return self.ctx.answer(("bool", self.expr), None if self.pyval is None else self.pyval != 0)

    # -- arithmetic: traced, and tracked when the other side is a number ----

    def _binary(self, op: str, other: Any, reflected: bool) -> Any:
        fn = _BINARY[op]
        if isinstance(other, Guarded):
            them = (other.expr, other, other.pyval)
        elif _is_number(other):
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
        if not all(is_integer(x) for x in operands):
            return
        dtype = jnp.result_type(self.value)
        if not jnp.issubdtype(dtype, jnp.integer):
            if self.pyval is not None and is_integer(self.pyval):  # Python int, traced float: other numbers
                self.ctx.need(self.names, f"{text(self.expr)} is an integer in Python", self.pyval)
            return
        info = jnp.iinfo(dtype)
        fits = None
        if self.pyval is not None:
            fits = is_integer(self.pyval) and info.min <= int(self.pyval) <= info.max
        if self.ctx.record and fits is False:
            self.ctx.need(self.names, f"{text(self.expr)} = {self.pyval} overflows {dtype}", self.pyval)
            return
        self.ctx.answer((FITS, self.expr, np.dtype(dtype).name), fits)

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

    def _unary(self, op: str) -> Guarded:
        fn = _UNARY[op]
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

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self.ctx.need(self.names, "round()", self.pyval), ndigits)

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
            trace = getattr(value, "_trace", None)
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


def _array(x: Any) -> Any:
    """A value as an array: a carried host value is a Python number (weakly typed, as in optax)."""
    return jnp.asarray(x) if type(x) in (int, float, complex) else x


def _power_of_two(x: Any) -> bool:
    if not isinstance(x, (int, float)) or isinstance(x, bool) or x == 0 or x != x:
        return False
    mantissa, _ = math.frexp(abs(x))
    return mantissa == 0.5


def exact_at_leaf_precision(expr: Expr) -> bool:
    """Whether the leaf's arithmetic gives Python's result (rounded once) for every value.

    An argument itself; its negation or absolute value; a product or quotient
    by a power of two (``-1 * learning_rate``, ``lr / 2``). Those, and
    integer arithmetic (``decay_steps - warmup_steps``: Python's result,
    since a guard checks that it fits the leaf), need no carried value.
    """
    kind = expr[0]
    if kind == ARG:
        return True
    if kind == CONST:
        return isinstance(expr[1], int)
    if kind in _UNARY:
        return exact_at_leaf_precision(expr[1])
    if kind in ("mul", "truediv"):
        a, b = expr[1], expr[2]
        if b[0] == CONST and _power_of_two(b[1]):
            return exact_at_leaf_precision(a)
        if kind == "mul" and a[0] == CONST and _power_of_two(a[1]):
            return exact_at_leaf_precision(b)
    return False


# A stand-in handed to a jitted helper (optax's ``tree_bias_correction``) is
# flattened as a pytree instead of being abstractified through
# ``__jax_array__`` (which JAX refuses): the helper sees the leaf itself.
jax.tree_util.register_pytree_node(Guarded, lambda g: ((g.exact(),), None), lambda _, children: children[0])


def unwrap(tree: Any) -> Any:
    """``tree`` with every ``Guarded`` leaf replaced by its value (states, schedule values)."""
    return jax.tree_util.tree_map(lambda x: x.exact() if isinstance(x, Guarded) else x, tree)


# --------------------------------------------------------------------------
# Detaching the stand-ins from what the factory returned.

_ATOMS = (int, float, complex, str, bytes, bool, type(None), np.generic, np.ndarray, jax.Array, type)
_LIBRARIES = ("jax", "jaxlib", "numpy", "builtins", "logging", "typing", "functools", "abc", "threading")


class _Detacher:
    """Copies what a factory returned, with ``Guarded`` values replaced by their leaves.

    Keeps those whose arguments are all in ``keep`` (compared at call time).
    Functions are copied with new closure cells (cells shared by several
    closures stay shared, so ``nonlocal`` writes still reach all of them),
    partials, bound methods, tuples, lists, dicts and plain objects are
    copied; nothing is mutated.
    """

    def __init__(self, ctx: Context, keep: frozenset[str]):
        self.ctx = ctx
        self.keep = keep
        self.memo: dict[int, Any] = {}
        self.cells: dict[int, Any] = {}

    def __call__(self, x: Any, depth: int = 0) -> Any:
        if isinstance(x, Guarded):
            # Another context's stand-ins are a wrapped child's, kept in its
            # closures for call time: the child's, not to be touched here.
            if x.ctx is not self.ctx or x.names <= self.keep:
                return x
            return x.exact()
        if isinstance(x, _ATOMS) or depth > 12 or _is_wrapped_object(x):
            return x
        key = id(x)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = x  # cycles: a node being copied stands for itself
        new = self._copy(x, depth + 1)
        self.memo[key] = new
        return new

    def _copy(self, x: Any, depth: int) -> Any:
        if isinstance(x, types.FunctionType):
            return self._function(x, depth)
        if isinstance(x, functools.partial):
            func = self(x.func, depth)
            args = tuple(self(a, depth) for a in x.args)
            kwargs = {k: self(v, depth) for k, v in x.keywords.items()}
            if (
                func is x.func
                and all(a is b for a, b in zip(args, x.args))
                and all(kwargs[k] is v for k, v in x.keywords.items())
            ):
                return x
            return functools.partial(func, *args, **kwargs)
        if isinstance(x, types.MethodType):
            owner = self(x.__self__, depth)
            return x if owner is x.__self__ else types.MethodType(x.__func__, owner)
        if type(x) in (list, tuple) or (isinstance(x, tuple) and hasattr(x, "_fields")):
            items = [self(v, depth) for v in x]
            if all(a is b for a, b in zip(items, x)):
                return x
            if type(x) is list:
                return items
            return tuple(items) if type(x) is tuple else type(x)(*items)
        if type(x) is dict:
            items = {k: self(v, depth) for k, v in x.items()}
            return x if all(items[k] is v for k, v in x.items()) else items
        if isinstance(x, (types.ModuleType, types.BuiltinFunctionType, types.CodeType)) or callable(
            getattr(type(x), "__get__", None)
        ):
            return x
        module = getattr(type(x), "__module__", "") or ""
        attrs = getattr(x, "__dict__", None)
        if not isinstance(attrs, dict) or module.split(".")[0] in _LIBRARIES:
            return x
        changed = {k: self(v, depth) for k, v in attrs.items()}
        if all(changed[k] is v for k, v in attrs.items()):
            return x
        clone = copy.copy(x)
        clone.__dict__.update(changed)
        return clone

    def _function(self, fn: types.FunctionType, depth: int) -> Any:
        closure = fn.__closure__ or ()
        new_cells = tuple(self._cell(c, depth) for c in closure)
        defaults = fn.__defaults__
        new_defaults = None if defaults is None else tuple(self(d, depth) for d in defaults)
        kwdefaults = fn.__kwdefaults__
        new_kwdefaults = None if kwdefaults is None else {k: self(v, depth) for k, v in kwdefaults.items()}
        same = all(a is b for a, b in zip(new_cells, closure))
        same = same and (defaults is None or all(a is b for a, b in zip(new_defaults or (), defaults)))
        same = same and (
            kwdefaults is None or all((new_kwdefaults or {})[k] is v for k, v in kwdefaults.items())
        )
        if same:
            return fn
        out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, new_defaults, new_cells or None)
        out.__kwdefaults__ = new_kwdefaults
        out.__qualname__ = fn.__qualname__
        out.__module__ = fn.__module__
        out.__doc__ = fn.__doc__
        out.__dict__.update(fn.__dict__)
        return out

    def _cell(self, cell: Any, depth: int) -> Any:
        key = id(cell)
        if key in self.cells:
            return self.cells[key]
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell (a name not yet assigned)
            self.cells[key] = cell
            return cell
        self.cells[key] = cell
        new = self(contents, depth)
        result = cell if new is contents else types.CellType(new)
        self.cells[key] = result
        return result


def _is_wrapped_object(x: Any) -> bool:
    # A wrapped object (a factory may return one) holds leaves, never stand-ins.
    return "_core" in getattr(x, "__dict__", ())


def detach(built: Any, ctx: Context, keep: frozenset[str] = frozenset()) -> Any:
    """What the factory returned, with the ``Guarded`` values of ``ctx`` replaced by their leaves."""
    return _Detacher(ctx, keep)(built)


# --------------------------------------------------------------------------
# Checking leaves against their guards.


def host_values(leaves: Mapping[str, Any]) -> dict[str, Any] | None:
    """Concrete leaves as NumPy values, or None if any of them is traced."""
    out = {}
    for name, x in leaves.items():
        if is_tracer(x):
            return None
        out[name] = np.asarray(x)
    return out


def _compile(expr: Expr) -> Callable[[Mapping[str, Any]], Any]:
    """``expr`` as a function of the arguments (evaluated at every wrap: kept cheap)."""
    kind = expr[0]
    if kind == ARG:
        name = expr[1]
        return lambda env: env[name]
    if kind == CONST:
        value = expr[1]
        return lambda env: value
    if kind in _UNARY:
        unary, inner = _UNARY[kind], _compile(expr[1])
        return lambda env: unary(inner(env))
    binary, a, b = _BINARY[kind], _compile(expr[1]), _compile(expr[2])
    return lambda env: binary(a(env), b(env))


@functools.lru_cache(maxsize=4096)
def _compiled(expr: Expr) -> Callable[[Mapping[str, Any]], Any]:
    return _compile(expr)


def evaluate(expr: Expr, env: Mapping[str, Any]) -> Any:
    """``expr`` for the Python values in ``env``: the host value a carried expression takes."""
    return _compiled(expr)(env)


def _compile_key(key: Key) -> Callable[[Mapping[str, Any]], Any]:
    if key[0] == "bool":
        inner = _compile(key[1])
        return lambda env: inner(env) != 0
    if key[0] == FITS:
        inner, info = _compile(key[1]), np.iinfo(key[2])

        def fits(env: Mapping[str, Any]) -> Any:
            value = inner(env)
            if isinstance(value, np.ndarray):
                return np.vectorize(lambda v: is_integer(v) and info.min <= v <= info.max, otypes=[bool])(
                    value
                )
            return is_integer(value) and info.min <= value <= info.max

        return fits
    compare, a, b = _COMPARE[key[0]], _compile(key[1]), _compile(key[2])
    return lambda env: compare(a(env), b(env))


def _exact(value: Any) -> Any:
    """An integer host value with Python's unbounded integers (object arrays for batches)."""
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.integer):
        return value.astype(object)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _ops(expr: Any) -> set[str]:
    if not isinstance(expr, tuple) or not expr or expr[0] in (ARG, CONST):
        return set()
    return {expr[0]}.union(*(_ops(e) for e in expr[1:]))


class Checker:
    """The guards of one branch, compiled: which of them a set of values breaks."""

    def __init__(self, guards: Iterable[tuple[Key, bool]]):
        self.items = [(_compile_key(key), recorded, key) for key, recorded in guards]
        ops = set().union(*(_ops(e) for _, _, key in self.items for e in key[1:]))
        # NumPy scalars warn on a division by zero; silencing them costs more
        # than the check itself, so only where a guard divides.
        self.careful = bool(ops & {"truediv", "floordiv", "mod", "pow"})

    def mismatches(self, env: Mapping[str, Any]) -> list[tuple[Key, bool, Any]]:
        """The guards whose outcome for ``env`` is not the recorded one: (key, recorded, got)."""
        if self.careful or any(isinstance(v, np.ndarray) for v in env.values()):
            with np.errstate(all="ignore"):
                return self._run(env)
        return self._run(env)

    def _run(self, env: Mapping[str, Any]) -> list[tuple[Key, bool, Any]]:
        # Integers as Python computes them (the factory's arithmetic on them
        # was Python's): no wrap-around where the leaf's dtype would overflow.
        env = {n: _exact(v) for n, v in env.items()}
        out = []
        for fn, recorded, key in self.items:
            try:
                got = fn(env)
            except (ArithmeticError, TypeError, ValueError):
                out.append((key, recorded, None))
                continue
            if isinstance(got, (bool, np.bool_)):
                if bool(got) is not recorded:
                    out.append((key, recorded, got))
            elif not np.all(np.asarray(got) == recorded):
                out.append((key, recorded, got))
        return out


_CHECKERS: dict[Any, Checker] = {}


def checker(guards: tuple[tuple[Key, bool], ...]) -> Checker:
    """The compiled guards of one branch (cached)."""
    found = _CHECKERS.get(guards)
    if found is None:
        if len(_CHECKERS) > 4096:
            _CHECKERS.clear()
        found = _CHECKERS[guards] = Checker(guards)
    return found


def mismatches(guards: Iterable[tuple[Key, bool]], env: Mapping[str, Any]) -> list[tuple[Key, bool, Any]]:
    """The guards whose outcome for ``env`` is not the recorded one: (key, recorded, got)."""
    return checker(tuple(guards)).mismatches(env)


def traced_ok(guards: Iterable[tuple[Key, bool]], env: Mapping[str, Any]) -> Any:
    """A traced boolean: whether the leaves in ``env`` satisfy every guard.

    Each comparison is made as Python made it on the host (see
    :func:`_traced_compare`); an integer expression's range is checked
    conservatively (a value within 2**-20 of the dtype's edge counts as
    out of range: NaN outputs rather than wrapped-around arithmetic).
    """
    ok = jnp.asarray(True)
    for key, recorded in guards:
        got = _traced_key(key, env)
        ok = jnp.logical_and(ok, got if recorded else jnp.logical_not(got))
    return ok


def _traced_key(key: Key, env: Mapping[str, Any]) -> Any:
    if key[0] == "bool":
        return _compile(key[1])(env) != 0
    if key[0] == FITS:
        info = np.iinfo(key[2])
        estimate = _compile(key[1])({n: jnp.asarray(v, jnp.float32) for n, v in env.items()})
        margin = 1.0 - 2.0**-20
        return jnp.logical_and(estimate >= info.min * margin, estimate <= info.max * margin)
    return _traced_compare(key[0], _compile(key[1])(env), _compile(key[2])(env))


def _traced_compare(op: str, a: Any, b: Any) -> Any:
    """``a <op> b`` on traced values, with the outcome Python gives for the host values.

    JAX converts a Python constant to the dtype of the traced side: an int32
    leaf compared with ``16777216.5`` is compared in float32 (where 2**24 + 1
    is 2**24), and ``2**31`` does not convert at all. An integer side compared
    with a constant is compared with the integer that gives the same outcome.
    """
    if isinstance(a, (int, float)) and not isinstance(b, (int, float)):
        return _traced_compare(_REFLECTED[op], b, a)
    if (
        not isinstance(b, (int, float))
        or isinstance(b, bool)
        or not jnp.issubdtype(jnp.result_type(a), jnp.integer)
    ):
        return _COMPARE[op](a, b)
    info = jnp.iinfo(jnp.result_type(a))
    if isinstance(b, float):
        if b != b:  # NaN: every comparison False, != True
            return jnp.full(jnp.shape(a), op == "ne")
        if b in (float("inf"), float("-inf")):
            b = info.max + 1 if b > 0 else info.min - 1
        elif b != int(b):  # x > 2.5 is x >= 3; x == 2.5 never holds
            if op in ("eq", "ne"):
                return jnp.full(jnp.shape(a), op == "ne")
            op, b = {"gt": ("ge", math.ceil(b)), "ge": ("ge", math.ceil(b)),
                     "lt": ("le", math.floor(b)), "le": ("le", math.floor(b))}[op]  # fmt: skip
        else:
            b = int(b)
    if b > info.max or b < info.min:  # every value of the dtype is on one side
        above = b > info.max
        holds = {"eq": False, "ne": True, "lt": above, "le": above, "gt": not above, "ge": not above}[op]
        return jnp.full(jnp.shape(a), holds)
    return _COMPARE[op](a, b)


def poison(tree: Any, ok: Any) -> Any:
    """``tree`` with its inexact leaves NaN where ``ok`` is False."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (jax.Array, np.ndarray, float, complex)) and jnp.issubdtype(
            jnp.result_type(x), jnp.inexact
        ):
            return jnp.where(ok, x, jnp.nan)
        return x

    return jax.tree_util.tree_map(leaf, tree)
