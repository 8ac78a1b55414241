"""Tree: the folds an object carries: what the compiler folds from its hyperparameters alone.

Plain optax's hyperparameters are constants of its compiled program, and the
compiler folds what is computed from them alone on the host, once: on a TPU
a reciprocal, a quotient, a square root, a power's logarithm, each correctly
rounded. A wrapped object's hyperparameters are arguments of its program
(one compilation for every value), so its build once computed each of those
exactly on the device, in every call (``_backends``: hundreds of scalar
operations, recompiled in every program). Now the object computes them on
the host when it is made, from the values it is made of, as it does for
optax's Python arithmetic (``_carry``), and carries them in its ``exact``
child after the carried expressions, with a fingerprint of what they were
computed from. Which folds an object needs (``Spec.folds``) is learned when
its configuration is first verified: its own call is traced once through
the build's rewrites, and every fold whose inputs are its own hyperparameters
is recorded (``_jaxprs.learning``), each as a key of what it is computed
from (``_jaxprs.key_of``).

Where the values are traced (an object made inside ``jit``, ``jax.grad``
with respect to a hyperparameter), the folds are computed there, once, on
the device, as the backend's compiler would (the exact operations of
``_backends``); where the leaves change behind the object's back
(``jax.tree.map``), the fingerprint no longer matches and the device
computes them with its own operations (the documented float32 fallback).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import math
import struct
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from . import _backends, _jaxprs, _leaves


def values(spec: Any, arguments: Mapping[str, Any], carried: list[Any]) -> list[Any]:
    """The folds' values, then their fingerprint (what ``_leaves.exact_child`` appends), or ()
    where the spec has none. ``arguments``: the values the object is made of (its dynamic
    arguments by name); ``carried``: its ``exact`` child's values before the folds (the host
    values of its expressions and their fingerprint), NumPy or traced."""
    if not spec.folds:
        return []
    env: dict[Any, Any] = {}
    for ref in spec.fold_refs:  # (LEAF, name, j)
        x = arguments[ref[1]]
        env[ref] = x if type(x) in _NUMBERS else jax.tree_util.tree_leaves(x)[ref[2]]
    if not spec.fold_reads_exact and all(type(x) in _NUMBERS for x in env.values()):
        return list(_of_numbers(spec, tuple(env.values())))  # the common case: wrap from Python numbers
    traced = any(_leaves.is_tracer(x) for x in (*env.values(), *carried))
    if traced:
        env = {
            ref: x if _leaves.is_tracer(x) else np.asarray(_leaves.value_as_leaf(x)) for ref, x in env.items()
        }
    else:
        env = {ref: np.asarray(_leaves.value_as_leaf(x)) for ref, x in env.items()}
    dtypes = spec.carried_dtypes[: spec.folds_at]
    xp: Any = jax.numpy if traced else np
    vectors = _leaves.exact_vectors(list(carried), dtypes, (), xp) if carried else ()
    for g, vector in enumerate(vectors):
        env[(_jaxprs.EXACT, g)] = vector
    fingerprint = _leaves.fingerprint([env[ref] for ref in spec.fold_refs])
    if traced:
        out = [_traced(fold, env) for fold in spec.folds]
    else:
        out = _on_host(spec.folds, env)
    return [*out, fingerprint]


@functools.lru_cache(maxsize=4096)
def _of_numbers(spec: Any, numbers: tuple[Any, ...]) -> tuple[Any, ...]:
    """The folds of leaves made from Python numbers (``spec.fold_refs``'s): remembered, as a
    builder called once per trial makes the same values again; each fold by the values it
    reads (a new learning rate computes none of the others')."""
    by_ref = dict(zip(spec.fold_refs, numbers))
    out = [
        _fold_of_numbers(spec, i, tuple(by_ref[r] for r in refs)) for i, refs in enumerate(spec.fold_reads)
    ]
    return (*out, np.float32(fingerprint_of_numbers(numbers)))


@functools.lru_cache(maxsize=16384)
def _fold_of_numbers(spec: Any, index: int, numbers: tuple[Any, ...]) -> Any:
    """Fold ``index`` of ``spec`` for the Python numbers of the leaves it reads."""
    fold = spec.folds[index]
    if fold[0] in _IN_PYTHON and all(k[0] == _jaxprs.LEAF for k in fold[1:]):
        found = _in_python(fold, dict(zip(spec.fold_reads[index], numbers)))
        if found is not None:
            return found
    env = {r: _leaves.value_as_leaf(x) for r, x in zip(spec.fold_reads[index], numbers)}
    with np.errstate(all="ignore"):
        return _one(fold, env)


def _in_python(fold: Any, numbers: Mapping[Any, Any]) -> Any:
    """A fold of float32 leaves made from Python floats, in Python's double precision rounded
    once to float32: correctly rounded for a quotient and a square root (double rounding
    through binary64 is innocuous for them), as the compiler folds them. None: not here."""
    xs = []
    for key in fold[1:]:
        x = numbers[key]
        if type(x) is not float:
            return None
        try:
            xs.append(_f32(x))
        except OverflowError:
            return None
    try:
        out = _IN_PYTHON[fold[0]](*xs)
    except (ZeroDivisionError, ValueError, OverflowError):
        return None
    try:
        return np.float32(_f32(out))
    except OverflowError:
        return None


def _f32(x: float) -> float:
    """``x`` rounded to the nearest float32 (as a Python float)."""
    return _F32_PACK.unpack(_F32_PACK.pack(x))[0]


_IN_PYTHON: dict[str, Any] = {
    "reciprocal": lambda c: 1.0 / c,
    "div": lambda a, b: a / b,
    "sqrt": math.sqrt,
}


def fingerprint_of_numbers(numbers: tuple[Any, ...]) -> float:
    """:func:`fingerprint_of_scalars` of the leaves Python numbers make (float32, int32)."""
    h = 0x1E3779B9
    for x in numbers:
        if type(x) is float:
            try:
                bits = _F32.unpack(_F32_PACK.pack(x))[0]
            except OverflowError:  # beyond float32: its infinity, as the leaf holds it
                return fingerprint_of_scalars([_leaves.value_as_leaf(x) for x in numbers])
        elif -(2**31) <= x < 2**31:
            bits = x
        else:  # a wider int (jax_enable_x64): as NumPy does it
            return fingerprint_of_scalars([_leaves.value_as_leaf(x) for x in numbers])
        h = _int32((h ^ bits) * 0x01000193)
        h = h ^ (h >> 15)
    return float(h & 0xFFFFFF)


_NUMBERS = (float, int)
_F32 = struct.Struct("<i")
_F32_PACK = struct.Struct("<f")


def fingerprint_of_scalars(leaves: list[Any]) -> float:
    """``_leaves.fingerprint`` of NumPy scalars (float32 or int32), in Python's integers: the
    same bits, without NumPy's per-operation cost."""
    h = 0x1E3779B9
    for x in leaves:
        bits = struct.unpack(
            "<i", np.asarray(x, np.float32 if np.asarray(x).dtype.kind == "f" else np.int32).tobytes()
        )[0]
        h = _int32((h ^ bits) * 0x01000193)
        h = h ^ (h >> 15)
    return float(h & 0xFFFFFF)


def _int32(x: int) -> int:
    return ((x + 2**31) % 2**32) - 2**31


def _on_host(folds: tuple[Any, ...], env: dict[Any, Any]) -> list[Any]:
    """Each fold on the host, member by member for a batch of values (``grid``, ``stack``)."""
    leaf_shapes = [np.shape(x) for ref, x in env.items() if ref[0] == _jaxprs.LEAF]
    vector_shapes = [np.shape(x)[:-1] for ref, x in env.items() if ref[0] == _jaxprs.EXACT]
    batch = np.broadcast_shapes(*leaf_shapes, *vector_shapes)
    if batch == ():
        return [_one(fold, env) for fold in folds]
    members = {
        ref: np.broadcast_to(x, batch if ref[0] == _jaxprs.LEAF else (*batch, np.shape(x)[-1]))
        for ref, x in env.items()
    }
    out = np.zeros((len(folds), *batch), np.float32)
    for index in np.ndindex(*batch):
        member = {ref: x[index] for ref, x in members.items()}
        for i, fold in enumerate(folds):
            out[(i, *index)] = _one(fold, member)
    return list(out)


def _one(fold: Any, env: Mapping[Any, Any]) -> Any:
    kind, *keys = fold
    found = _jaxprs.host_fold(kind, [_jaxprs.evaluate_key(k, env) for k in keys])
    return np.float32(np.nan) if found is None else np.asarray(found, np.float32)


def _traced(fold: Any, env: Mapping[Any, Any]) -> Any:
    """A fold of traced values, computed once as the backend's compiler folds it."""
    kind, *keys = fold
    inputs = [_jaxprs.evaluate_key(k, env, traced=True) for k in keys]
    return _backends.lowered(lambda t: lambda *xs: t.fold(kind, None, None, *xs), *inputs).astype(np.float32)
