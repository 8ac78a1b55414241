"""Shared: what JAX's primitives compute, as NumPy computes them on the host and as JAX does.

``NUMPY``: a primitive's rule in NumPy, one call per equation, for the
host's evaluation of a jaxpr (``_jaxprs.evaluate``, the verification) and
of a fold's key (``_jaxprs.evaluate_key``: the host values an object
carries). ``JAX``: the primitives a fold's key may hold, computed with JAX's
operations (a key evaluated on traced values), a quotient and a square root
as the backend's compiler folds them (``_backends.exact_fold``).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from collections.abc import Callable
from typing import Any

import numpy as np
from jax import lax

from . import _backends


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda x, y, **_: fn(x, y)


def _unary(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda x, **_: fn(x)


def _int_div(x: Any, y: Any) -> Any:
    if np.issubdtype(np.result_type(x), np.integer):
        q = np.abs(x) // np.where(y == 0, 1, np.abs(y))  # XLA rounds toward zero
        return (np.sign(x) * np.sign(y) * q).astype(np.result_type(x))
    return np.divide(x, y)


def _broadcast_in_dim(x: Any, shape: Any, broadcast_dimensions: Any, **_: Any) -> Any:
    kept = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        kept[d] = np.shape(x)[i]
    return np.broadcast_to(np.reshape(x, kept), shape).copy()


def _dot_general(x: Any, y: Any, dimension_numbers: Any, preferred_element_type: Any = None, **_: Any) -> Any:
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    left = [next(letters) for _ in range(np.ndim(x))]
    right = [next(letters) for _ in range(np.ndim(y))]
    for i, j in zip((*lc, *lb), (*rc, *rb)):
        right[j] = left[i]
    batch = [left[i] for i in lb]
    free_left = [c for i, c in enumerate(left) if i not in lc and i not in lb]
    free_right = [c for j, c in enumerate(right) if j not in rc and j not in rb]
    out = np.einsum(f"{''.join(left)},{''.join(right)}->{''.join(batch + free_left + free_right)}", x, y)
    return out.astype(preferred_element_type or np.result_type(x, y))


def _select_n(which: Any, *cases: Any) -> Any:
    if np.result_type(which) == np.bool_:
        return np.where(which, cases[1], cases[0])
    return np.choose(np.asarray(which, np.int32), cases)


def _reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, axes, **_: np.asarray(fn(x, axis=tuple(axes)), np.result_type(x))


def _slice(x: Any, start_indices: Any, limit_indices: Any, strides: Any = None, **_: Any) -> Any:
    steps = strides or (1,) * len(start_indices)
    return x[tuple(slice(a, b, c) for a, b, c in zip(start_indices, limit_indices, steps))]


NUMPY: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(_int_div),
    "rem": _binary(np.fmod),
    "pow": _binary(np.power),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "atan2": _binary(np.arctan2),
    "nextafter": _binary(np.nextafter),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "not": _unary(np.invert),
    "shift_left": _binary(np.left_shift),
    "shift_right_arithmetic": _binary(np.right_shift),  # arithmetic on signed integers, as XLA's
    "bitcast_convert_type": lambda x, new_dtype, **_: np.asarray(x).view(new_dtype),
    "neg": _unary(np.negative),
    "sign": _unary(np.sign),
    "abs": _unary(np.abs),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _unary(lambda x: np.asarray(1, np.result_type(x)) / np.sqrt(x)),
    "square": _unary(np.square),
    "exp": _unary(np.exp),
    "exp2": _unary(np.exp2),
    "log": _unary(np.log),
    "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1),
    "tanh": _unary(np.tanh),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "is_finite": _unary(np.isfinite),
    "logistic": _unary(lambda x: np.asarray(1, np.result_type(x)) / (1 + np.exp(-x))),
    "copy": _unary(np.copy),
    "copy_p": _unary(np.copy),
    "stop_gradient": _unary(lambda x: x),
    "integer_pow": lambda x, y, **_: (
        np.power(x, np.asarray(y, np.result_type(x))) if y >= 0 else 1 / x ** (-y)
    ),
    "convert_element_type": lambda x, new_dtype, **_: np.asarray(x).astype(new_dtype),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda x, new_sizes, **_: np.reshape(x, new_sizes),
    "squeeze": lambda x, dimensions, **_: np.squeeze(x, tuple(dimensions)),
    "expand_dims": lambda x, dimensions, **_: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, permutation, **_: np.transpose(x, permutation),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "dot_general": _dot_general,
    "select_n": lambda which, *cases, **_: _select_n(which, *cases),
    "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
    "slice": _slice,
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
}


# The primitives of a fold's key as JAX computes them (a key evaluated on traced values).
JAX: dict[str, Callable[..., Any]] = {
    "add": _binary(lax.add),
    "sub": _binary(lax.sub),
    "mul": _binary(lax.mul),
    # A quotient or root of values of the hyperparameters alone: as the backend folds it.
    "div": lambda x, y, **_: _backends.lowered(_backends.exact_fold("div"), x, y),
    "max": _binary(lax.max),
    "min": _binary(lax.min),
    "eq": _binary(lax.eq),
    "ne": _binary(lax.ne),
    "lt": _binary(lax.lt),
    "le": _binary(lax.le),
    "gt": _binary(lax.gt),
    "ge": _binary(lax.ge),
    "and": _binary(lax.bitwise_and),
    "or": _binary(lax.bitwise_or),
    "xor": _binary(lax.bitwise_xor),
    "not": _unary(lax.bitwise_not),
    "shift_left": _binary(lax.shift_left),
    "shift_right_arithmetic": _binary(lax.shift_right_arithmetic),
    "neg": _unary(lax.neg),
    "abs": _unary(lax.abs),
    "sqrt": lambda x, **_: _backends.lowered(_backends.exact_fold("sqrt"), x),
    "sign": _unary(lax.sign),
    "floor": _unary(lax.floor),
    "ceil": _unary(lax.ceil),
    "stop_gradient": _unary(lax.stop_gradient),
    "copy": _unary(lambda x: x),
    "copy_p": _unary(lambda x: x),
    "select_n": lambda which, *cases, **_: lax.select_n(which, *cases),
    "clamp": lambda lo, x, hi, **_: lax.clamp(lo, x, hi),
    "bitcast_convert_type": lambda x, new_dtype, **_: lax.bitcast_convert_type(x, new_dtype),
    "convert_element_type": lambda x, new_dtype, **_: lax.convert_element_type(x, new_dtype),
    "broadcast_in_dim": lambda x, shape, broadcast_dimensions, **_: lax.broadcast_in_dim(
        x, shape, broadcast_dimensions
    ),
    "reshape": lambda x, new_sizes, **_: lax.reshape(x, new_sizes),
    "squeeze": lambda x, dimensions, **_: lax.squeeze(x, dimensions),
    "expand_dims": lambda x, dimensions, **_: lax.expand_dims(x, dimensions),
    "slice": lambda x, start_indices, limit_indices, strides=None, **_: lax.slice(
        x, start_indices, limit_indices, strides
    ),
}
