"""Hyperparameters traced as XLA compiles constants: a division by one is a multiplication.

Plain optax inside ``jax.jit`` has its hyperparameters as constants of the
program, and XLA's algebraic simplifier rewrites a floating-point division
by a constant, ``x / c``, into a multiplication by its reciprocal,
``x * (1 / c)``, the reciprocal rounded once, and folds ``(x * c1) * c2``
into ``x * (c1 * c2)``. A wrapped object's hyperparameters are arguments of
the program (that is the point: one compilation for every value), which XLA
does not rewrite so: a scalar division by an argument stays a division
(measured on CPU: a cosine schedule's ``pi * count / decay_steps`` differs in
the last bit at 11 of 45 counts; a vectorized one may already multiply by
the reciprocal, which the rewrite then matches).

So, where a wrapped object's leaves are traced, its ``init``, ``update`` or
schedule call is traced to a jaxpr with the leaves as inputs and evaluated
again with those rewrites done where XLA would have done them: on every
floating-point division whose divisor is computed from the leaves (and
literals) alone, and whose dividend is not, and on every product of such a
product with such a value (a value of the leaves alone is
folded by XLA, correctly rounded, in the plain program). Nested ``jit``
calls are inlined (XLA inlines them too); other sub-programs (``scan``,
``cond``, custom derivatives) are bound as they are. Eagerly, or with the
object closed over (its leaves constants again), nothing is rewritten: the
plain program is not rewritten either.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ._leaves import is_tracer

# Calls of a sub-program that XLA inlines (a nested jit).
INLINED = frozenset(("pjit", "jit", "closed_call", "core_call"))


def _xla_simplifies() -> bool:
    """Whether XLA's algebraic simplifier runs (``XLA_FLAGS`` can disable it: then neither do we)."""
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = flag.partition("=")
        if name == "--xla_disable_hlo_passes" and "algsimp" in value.split(","):
            return False
    return True


_REWRITE = _xla_simplifies()


def call(fn: Callable[..., Any], hyper: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(hyper, *args, **kwargs)``, dividing by values of ``hyper`` alone as by constants."""
    hyper_flat, hyper_tree = jax.tree_util.tree_flatten(hyper)
    if not _REWRITE or not any(is_tracer(x) for x in hyper_flat):
        return fn(hyper, *args, **kwargs)
    flat, tree = jax.tree_util.tree_flatten((args, kwargs))
    # Arrays are inputs of the jaxpr; anything else (a loss function given
    # to a line search) is passed through as it is.
    where = [i for i, x in enumerate(flat) if _is_array(x)]
    n = len(hyper_flat)

    def traced(*xs: Any) -> Any:
        h = jax.tree_util.tree_unflatten(hyper_tree, list(xs[:n]))
        rest = list(flat)
        for i, x in zip(where, xs[n:]):
            rest[i] = x
        a, k = jax.tree_util.tree_unflatten(tree, rest)
        return fn(h, *a, **k)

    inputs = [*hyper_flat, *(flat[i] for i in where)]
    try:
        closed, shapes = jax.make_jaxpr(traced, return_shape=True)(*inputs)
    except TypeError:  # an output that is not an array: as it is
        return fn(hyper, *args, **kwargs)
    out_tree = jax.tree_util.tree_structure(shapes)
    derived = [True] * n + [False] * len(where)
    outs, _ = _evaluate(closed.jaxpr, closed.consts, inputs, derived)
    return jax.tree_util.tree_unflatten(out_tree, outs)


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, int, float, complex)) or hasattr(x, "__array__")


def _evaluate(
    jaxpr: Any, consts: list[Any], args: list[Any], derived_in: list[bool]
) -> tuple[list[Any], list[bool]]:
    """The outputs of ``jaxpr``, and which are values of the hyperparameters alone."""
    env: dict[Any, Any] = {}
    derived: set[Any] = set()

    def read(v: Any) -> Any:
        return v.val if is_literal(v) else env[v]

    def is_derived(v: Any) -> bool:
        return is_literal(v) or v in derived

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
        if not is_tracer(x):  # a constant of the program, in the plain one too
            derived.add(v)
    for v, x, d in zip(jaxpr.invars, args, derived_in):
        env[v] = x
        if d:
            derived.add(v)
    # A product of a value and a constant, as (value, constant): XLA
    # reassociates ``(A * C1) * C2`` into ``A * (C1 * C2)``.
    products: dict[Any, tuple[Any, Any]] = {}
    for eqn in jaxpr.eqns:
        inputs = [read(v) for v in eqn.invars]
        flags = [is_derived(v) for v in eqn.invars]
        name = eqn.primitive.name
        is_float = _is_float(eqn.outvars[0].aval.dtype) if eqn.outvars else False
        if is_float and name in ("div", "mul") and flags[1] != flags[0] and (name == "mul" or flags[1]):
            if name == "div":  # A / C => A * (1 / C)
                value, constant = inputs[0], lax.div(jnp.ones_like(inputs[1]), inputs[1])
                inner = products.get(eqn.invars[0]) if not is_literal(eqn.invars[0]) else None
            else:
                i = 0 if flags[1] else 1  # the operand that is not a constant
                value, constant = inputs[i], inputs[1 - i]
                inner = products.get(eqn.invars[i]) if not is_literal(eqn.invars[i]) else None
            if inner is not None:  # (A * C1) * C2 => A * (C1 * C2)
                value, constant = inner[0], lax.mul(inner[1], constant)
            outputs = [lax.mul(value, constant)]
            products[eqn.outvars[0]] = (value, constant)
            out_flags = [False]
        elif name in INLINED and "jaxpr" in eqn.params:
            inner = eqn.params["jaxpr"]
            outputs, out_flags = _evaluate(inner.jaxpr, list(inner.consts), inputs, flags)
        else:
            out = bind(eqn, inputs)
            outputs = list(out) if eqn.primitive.multiple_results else [out]
            out_flags = [all(flags) and not eqn.effects] * len(outputs)
        for v, x, d in zip(eqn.outvars, outputs, out_flags):
            env[v] = x
            if d:
                derived.add(v)
    return [read(v) for v in jaxpr.outvars], [is_derived(v) for v in jaxpr.outvars]


def bind(eqn: Any, inputs: list[Any]) -> Any:
    """The equation's primitive applied to ``inputs``, as ``jax.core.eval_jaxpr`` applies it."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns: Any = ()
    if isinstance(params, tuple):  # jax < 0.7: (sub-functions, parameters)
        subfuns, params = params
    manager = getattr(getattr(eqn, "ctx", None), "manager", None)
    if manager is None:
        return eqn.primitive.bind(*subfuns, *inputs, **params)
    with manager:
        return eqn.primitive.bind(*subfuns, *inputs, **params)


def is_literal(v: Any) -> bool:
    """A constant written into a jaxpr (not a variable)."""
    return type(v).__name__ == "Literal"


def _is_float(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)
