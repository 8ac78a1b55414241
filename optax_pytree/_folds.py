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
    for ref in spec.fold_refs:  # ("leaf", name, j)
        env[ref] = jax.tree_util.tree_leaves(arguments[ref[1]])[ref[2]]
    if not spec.fold_reads_exact and all(type(x) in (float, int) for x in env.values()):
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
        env[("exact", g)] = vector
    fingerprint = _leaves.fingerprint([env[ref] for ref in spec.fold_refs])
    if traced:
        out = [_traced(fold, env) for fold in spec.folds]
    else:
        out = _on_host(spec.folds, env)
    return [*out, fingerprint]


@functools.lru_cache(maxsize=4096)
def _of_numbers(spec: Any, numbers: tuple[Any, ...]) -> tuple[Any, ...]:
    """The folds of leaves made from Python numbers (``spec.fold_refs``'s): remembered, as a
    builder called once per trial makes the same values again."""
    leaves = [_leaves.value_as_leaf(x) for x in numbers]
    env = dict(zip(spec.fold_refs, leaves))
    with np.errstate(all="ignore"):
        out = [_one(fold, env) for fold in spec.folds]
    return (*out, np.float32(fingerprint_of_scalars(leaves)))


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
    leaf_shapes = [np.shape(x) for ref, x in env.items() if ref[0] == "leaf"]
    vector_shapes = [np.shape(x)[:-1] for ref, x in env.items() if ref[0] == "exact"]
    batch = np.broadcast_shapes(*leaf_shapes, *vector_shapes)
    if batch == ():
        return [_one(fold, env) for fold in folds]
    members = {
        ref: np.broadcast_to(x, batch if ref[0] == "leaf" else (*batch, np.shape(x)[-1]))
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
