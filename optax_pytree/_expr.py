"""Analyse: expressions over a factory's arguments, and guard keys: what ``_guard`` records.

An expression is a tuple: ``("arg", name)``, ``("const", value)`` or
``(op, *operands)`` with ``op`` one of the operators below. The stand-ins of
``_guard`` build them as the factory computes (``decay_steps -
warmup_steps``); a guard key says which Python decision was made on one
(:class:`Compare`, :class:`Truth`, :class:`Fits`). Both are plain hashable
tuples of strings and numbers: they are part of a wrapped object's static
configuration (its treedef), compared across processes and pickled, so they
must be deterministic and hold no object identity.

Here: their vocabulary, how they are printed (``peak_value == 0.0 is
False``), evaluated for Python values (the host values an object carries),
and which of them a leaf computes exactly as Python does.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

# Expressions over arguments: ("arg", name), ("const", value), (op, *operands).

ARG = "arg"
CONST = "const"

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    # What a leaf (a JAX array) also does as Python's operators do, in its
    # own precision: tracked, so that the host value is Python's.
    "round_ndigits": lambda x, ndigits: round(x, ndigits),
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
}
UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": operator.neg,
    "pos": operator.pos,
    "abs": operator.abs,
    "invert": operator.invert,
    "round": round,  # Python's: an int; a leaf's: jnp.round (the verification sees where the type matters)
}
COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
_SYMBOL = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
    "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>", "neg": "-", "pos": "+", "invert": "~",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}  # fmt: skip
REFLECTED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}

Expr = tuple[Any, ...]


class Compare(NamedTuple):
    """``lhs <op> rhs`` decided in Python (``peak_value == 0.0``); ``op`` a key of COMPARE."""

    op: str
    lhs: Expr
    rhs: Expr


class Truth(NamedTuple):
    """``bool(expr)`` decided in Python (``if weight_decay:``)."""

    expr: Expr


class Fits(NamedTuple):
    """An integer expression computed in Python fits the leaf's integer dtype.

    Python's integers are exact; the same arithmetic on a leaf is done in the
    leaf's dtype and wraps around past its range. Where the factory does
    integer arithmetic on an argument, the result fitting is a guard: values
    whose arithmetic overflows are another branch, on which the argument is
    static.
    """

    expr: Expr
    dtype: str  # a NumPy dtype name: part of the treedef, so a string


Key = Compare | Truth | Fits  # a guard key: one Python decision
Guards = tuple[tuple[Key, bool], ...]  # a branch: each decision the factory made, and its outcome


def names_in(expr: Expr) -> frozenset[str]:
    """The arguments an expression depends on."""
    kind = expr[0]
    if kind == ARG:
        return frozenset((expr[1],))
    if kind == CONST:
        return frozenset()
    return frozenset().union(*(names_in(e) for e in expr[1:]))


def key_exprs(key: Key) -> tuple[Expr, ...]:
    """The expressions a guard key decides on."""
    return (key.lhs, key.rhs) if isinstance(key, Compare) else (key.expr,)


def key_names(key: Key) -> frozenset[str]:
    """The arguments a guard key depends on."""
    return frozenset().union(*(names_in(e) for e in key_exprs(key)))


def text(expr: Expr) -> str:
    """``decay_steps - warmup_steps``: an expression as the factory wrote it."""
    kind = expr[0]
    if kind == ARG:
        return expr[1]
    if kind == CONST:
        return repr(expr[1])
    if kind in UNARY:
        inner = text(expr[1])
        return f"{kind}({inner})" if kind in ("abs", "round") else f"{_SYMBOL[kind]}{inner}"
    if kind == "round_ndigits":
        return f"round({text(expr[1])}, {text(expr[2])})"
    a, b = (text(e) if e[0] in (ARG, CONST) else f"({text(e)})" for e in expr[1:])
    return f"{a} {_SYMBOL[kind]} {b}"


def key_text(key: Key) -> str:
    """``peak_value == 0.0``: a guard key as the factory wrote it."""
    if isinstance(key, Truth):
        return f"bool({text(key.expr)})"
    if isinstance(key, Fits):
        return f"{text(key.expr)} fits in {key.dtype}"
    return f"{text(key.lhs)} {_SYMBOL[key.op]} {text(key.rhs)}"


def describe(guards: Iterable[tuple[Key, bool]]) -> tuple[str, ...]:
    """``("peak_value == 0.0 is False", ...)``: guards in words."""
    return tuple(f"{key_text(k)} is {v}" for k, v in guards)


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
    if kind in ("neg", "pos", "abs", "invert"):  # not round: round(2.5000001) is 3, of its float32 leaf 2
        return exact_at_leaf_precision(expr[1])
    if kind in ("mul", "truediv"):
        a, b = expr[1], expr[2]
        if b[0] == CONST and _power_of_two(b[1]):
            return exact_at_leaf_precision(a)
        if kind == "mul" and a[0] == CONST and _power_of_two(a[1]):
            return exact_at_leaf_precision(b)
    return False


# A stand-in handed to a jitted helper (optax's ``tree_bias_correction``) is


def compile_expr(expr: Expr) -> Callable[[Mapping[str, Any]], Any]:
    """``expr`` as a function of the arguments (evaluated at every wrap: kept cheap)."""
    kind = expr[0]
    if kind == ARG:
        name = expr[1]
        return lambda env: env[name]
    if kind == CONST:
        value = expr[1]
        return lambda env: value
    if kind in UNARY:
        unary, inner = UNARY[kind], compile_expr(expr[1])
        return lambda env: unary(inner(env))
    binary, a, b = BINARY[kind], compile_expr(expr[1]), compile_expr(expr[2])
    return lambda env: binary(a(env), b(env))


@functools.lru_cache(maxsize=4096)
def _compiled(expr: Expr) -> Callable[[Mapping[str, Any]], Any]:
    return compile_expr(expr)


def evaluate(expr: Expr, env: Mapping[str, Any]) -> Any:
    """``expr`` for the Python values in ``env``: the host value a carried expression takes."""
    return _compiled(expr)(env)
