"""Analyse: checking leaves against the guards of their branch, on the host and in traced code.

A wrapped object's guards hold for the values it was made with. Where its
leaves may have changed behind its back (``jax.tree.map``, a traced
``replace``, a batch whose members take different branches), ``_build``
checks them again: on concrete values with :func:`mismatches` (NumPy, Python's
integers: an error naming the argument), in traced code with
:func:`traced_ok` (where nothing can raise: :func:`poison` makes the outputs
NaN for every member whose values left their branch).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._bind import mark_static
from ._caches import cache
from ._expr import (
    ARG,
    BINARY,
    COMPARE,
    CONST,
    REFLECTED,
    UNARY,
    Expr,
    Fits,
    Guards,
    Key,
    Truth,
    compile_expr,
    key_exprs,
    key_names,
    key_text,
)
from ._leaves import is_integer_scalar


def _compile_key(key: Key) -> Callable[[Mapping[str, Any]], Any]:
    if isinstance(key, Truth):
        inner = compile_expr(key.expr)
        return lambda env: inner(env) != 0
    if isinstance(key, Fits):
        inner, info = compile_expr(key.expr), np.iinfo(key.dtype)

        def fits(env: Mapping[str, Any]) -> Any:
            value = inner(env)
            if isinstance(value, np.ndarray):
                return np.vectorize(
                    lambda v: is_integer_scalar(v) and info.min <= v <= info.max, otypes=[bool]
                )(value)
            return is_integer_scalar(value) and info.min <= value <= info.max

        return fits
    compare, a, b = COMPARE[key.op], compile_expr(key.lhs), compile_expr(key.rhs)
    return lambda env: compare(a(env), b(env))


def _exact(value: Any) -> Any:
    """An integer host value with Python's unbounded integers (object arrays for batches)."""
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.integer):
        return value.astype(object)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _ops(expr: object) -> set[str]:  # an Expr, or one of its operands (a name, a number)
    if not isinstance(expr, tuple) or not expr or expr[0] in (ARG, CONST):
        return set()
    return {expr[0]}.union(*(_ops(e) for e in expr[1:]))


class Checker:
    """The guards of one branch, compiled: which of them a set of values breaks."""

    def __init__(self, guards: Iterable[tuple[Key, bool]]):
        self.items = [(_compile_key(key), recorded, key) for key, recorded in guards]
        ops = set().union(*(_ops(e) for _, _, key in self.items for e in key_exprs(key)))
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


_CHECKERS = cache("a branch's guards -> their Checker", 4096)


def checker(guards: Guards) -> Checker:
    """The compiled guards of one branch (cached)."""
    found = _CHECKERS.get(guards)
    if found is None:
        found = Checker(guards)
        _CHECKERS.set(guards, found)
    return found


def mismatches(guards: Iterable[tuple[Key, bool]], env: Mapping[str, Any]) -> list[tuple[Key, bool, Any]]:
    """The guards whose outcome for ``env`` is not the recorded one: (key, recorded, got)."""
    return checker(tuple(guards)).mismatches(env)


def check(
    factory: str,
    guards: Iterable[tuple[Key, bool]],
    host: Mapping[str, Any],
    show: Callable[[str], str],
    against: str,
    fix: str,
) -> None:
    """Raises the off-branch error if the values in ``host`` break a guard: one wording.

    ``show(name)``: how a value is shown; ``against``: what the branch was
    taken for (``"the value given"``, ``"this object was made for"``);
    ``fix``: what to do.
    """
    bad = mismatches(guards, host)
    if not bad:
        return
    key, recorded, got = bad[0]
    names = sorted(key_names(key))
    raise ValueError(
        f"{factory}: {', '.join(f'{n}={show(n)}' for n in names)} takes another branch of the "
        f"factory than {against} ({key_text(key)} is {value_text(got)} for it, {recorded} there); {fix}; "
        f"or {mark_static(factory, names)}"
    )


def value_text(x: Any) -> str:
    """A concrete value as a message shows it (a scalar's Python repr, a short array)."""
    try:
        a = np.asarray(x)
        return repr(a[()].item()) if a.ndim == 0 else f"array{a.tolist()!r}"[:80]
    except Exception:  # noqa: BLE001 - only for a message
        return repr(x)


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
    if isinstance(key, Truth):
        return compile_expr(key.expr)(env) != 0
    if isinstance(key, Fits):
        info = np.iinfo(key.dtype)
        estimate = _estimate(key.expr, env)
        margin = 1.0 - 2.0**-20
        return jnp.logical_and(estimate >= info.min * margin, estimate <= info.max * margin)
    return _traced_compare(key.op, compile_expr(key.lhs)(env), compile_expr(key.rhs)(env))


def _estimate(expr: Expr, env: Mapping[str, Any]) -> Any:
    """An integer expression of traced leaves in float32: no wrap-around, so out of range shows.

    Its bitwise parts that cannot leave the range of their operands (``&``,
    ``|``, ``^``, ``>>``, ``~``; each operand has a range guard of its own)
    are computed exactly, in the leaves' dtype; ``a << b`` is ``a * 2 ** b``.
    """
    kind = expr[0]
    if kind == ARG:
        return jnp.asarray(env[expr[1]], jnp.float32)
    if kind == CONST:
        return expr[1]
    if kind in _BITWISE:
        return jnp.asarray(compile_expr(expr)(env), jnp.float32)
    if kind == "lshift":
        return _estimate(expr[1], env) * 2.0 ** _estimate(expr[2], env)
    if kind in UNARY:
        return UNARY[kind](_estimate(expr[1], env))
    return BINARY[kind](_estimate(expr[1], env), _estimate(expr[2], env))


_BITWISE = frozenset(("and", "or", "xor", "rshift", "invert"))


def _traced_compare(op: str, a: Any, b: Any) -> Any:
    """``a <op> b`` on traced values, with the outcome Python gives for the host values.

    JAX converts a Python constant to the dtype of the traced side: an int32
    leaf compared with ``16777216.5`` is compared in float32 (where 2**24 + 1
    is 2**24), and ``2**31`` does not convert at all. An integer side compared
    with a constant is compared with the integer that gives the same outcome.
    """
    if isinstance(a, (int, float)) and not isinstance(b, (int, float)):
        return _traced_compare(REFLECTED[op], b, a)
    if (
        not isinstance(b, (int, float))
        or isinstance(b, bool)
        or not jnp.issubdtype(jnp.result_type(a), jnp.integer)
    ):
        return COMPARE[op](a, b)
    info = jnp.iinfo(jnp.result_type(a))
    if isinstance(b, float):
        if b != b:  # NaN: every comparison False, != True
            return jnp.full(jnp.shape(a), op == "ne")
        if b in (float("inf"), float("-inf")):
            b = info.max + 1 if b > 0 else info.min - 1
        elif not b.is_integer():  # x > 2.5 is x >= 3; x == 2.5 never holds
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
    return COMPARE[op](a, b)


def poison(tree: Any, ok: Any) -> Any:
    """``tree`` with its inexact leaves NaN where ``ok`` is False."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (jax.Array, np.ndarray, float, complex)) and jnp.issubdtype(
            jnp.result_type(x), jnp.inexact
        ):
            return jnp.where(ok, x, jnp.nan)
        return x

    return jax.tree_util.tree_map(leaf, tree)
