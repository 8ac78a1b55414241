"""Tree: what a wrapped object carries besides its leaves: the host values of its expressions.

Computed by the pipeline (``_pipeline``) once the spec is known, for
``_tree.new``: the host values of the expressions optax computes in Python
(``1 - b2``; Python's precision and integers, see ``_guard.Guarded.exact``),
kept from the replaced object where its arguments did not change, then the
object's leaves and ``exact`` child, or (from Python numbers, the common
case) the pending ones made at first use (``_leaves.Pending``).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from typing import Any, TypeAlias

import jax
import numpy as np

from . import _build, _expr, _folds, _leaves, _spec
from ._classify import Classified
from ._core import Kept
from ._vocabulary import Role

# Each carried expression (``1 - b2``) -> its host value for the values given: a Python number
# (Python's precision and integers), a NumPy array for a batch, traced in a ``replace`` inside jit.
HostValues: TypeAlias = dict[_expr.Expr, Any]


def host_values(spec: _spec.Spec, base: dict[str, Any], kept: Kept = None) -> HostValues:
    """Expression -> its host value for the values given (Python's precision and integers).

    With traced values (a ``replace`` inside ``jit``), traced: the float32
    fallback. ``kept`` (see :func:`make`): an expression of unchanged
    arguments keeps the host value the replaced object carried, if that
    object is not stale.
    """
    previous = _kept_values(kept, spec)
    if all(type(base[n]) in PYTHON_NUMBERS for n in spec.carried_names):  # Python's arithmetic: no warnings
        return {e: previous[e] if e in previous else _expr.evaluate(e, base) for e in spec.carried}
    env = {n: _host(base[n]) for n in spec.tracked}
    with np.errstate(all="ignore"):
        return {e: previous[e] if e in previous else _expr.evaluate(e, env) for e in spec.carried}


def _carried_values(
    spec: _spec.Spec, hosts: HostValues, leaves: _leaves.Leaves, classified: Classified
) -> _leaves.Exact:
    """The object's ``exact`` child (a value per expression, then the fingerprint, then the
    folds), in general."""
    of = [leaves[spec.leaf_index[n]] for n in spec.carried_names]
    carried = [hosts[e] for e in spec.carried]
    before: list[Any] = []
    if spec.fold_reads_exact:  # a fold reads the carried values (the exact child before the folds)
        traced = any(_leaves.is_tracer(x) for x in (*carried, *of))
        xp: Any = jax.numpy if traced else np
        before = _leaves.carried_values(
            carried, [x if traced else _host(x) for x in of], spec.carried_dtypes, xp
        )
    folds = fold_values(spec, classified.values, before)
    return _leaves.exact_child(carried, of, spec.carried_dtypes, folds)


def fold_values(spec: _spec.Spec, values: dict[str, Any], before: list[Any]) -> list[Any]:
    """The folds' values and fingerprint (``_folds``); NaN where they cannot be computed (a
    leaf of no numeric value): never fresh, so the device computes them."""
    if not spec.folds:
        return []
    try:
        return _folds.values(spec, values, before)
    except Exception:  # noqa: BLE001 - the mechanism's own failure: the device computes the folds
        return [np.float32(np.nan)] * (len(spec.folds) + 1)


def _host(x: Any) -> Any:
    """A concrete array as NumPy (a batch of values): evaluated on the host, not by XLA."""
    return np.asarray(x) if isinstance(x, jax.Array) and not _leaves.is_tracer(x) else x


def _kept_values(kept: Kept, spec: _spec.Spec) -> HostValues:
    """Expression -> the carried host value of the replaced object, for unchanged arguments.

    Only from an object that is not stale (its fingerprint matches its leaves).
    """
    if kept is None:
        return {}
    core, changed = kept
    if core.exact is None or _build.fresh(core.spec, core.leaves, core.exact) is not True:
        return {}
    out: HostValues = {}
    old_values = _leaves.exact_values(core.exact, core.spec.carried_dtypes)
    for expr in core.spec.carried:
        if expr in spec.carried_index and not _expr.names_in(expr) & changed:
            value = np.asarray(old_values[core.spec.carried_index[expr]])
            out[expr] = value.item() if value.ndim == 0 else value
    return out


def _leaf_values(spec: _spec.Spec, classified: Classified) -> _leaves.Leaves:
    values = classified.values
    dynamic = [n for n, r in spec.roles.items() if r == Role.DYNAMIC]
    converted = _leaves.to_leaves({n: values[n] for n in dynamic}) if dynamic else {}
    return tuple(converted[n] if n in converted else values[n] for n in spec.leaf_names)


def pending(spec: _spec.Spec, classified: Classified, hosts: HostValues) -> _leaves.Pending | None:
    """The pending leaves of the common case (Python numbers), else None (made now)."""
    dynamic = spec.dynamic_names
    if not dynamic:
        return None
    values = classified.values
    numbers = [values[n] for n in dynamic]
    for x in numbers:
        if type(x) not in PYTHON_NUMBERS:
            return None
    carried = [hosts[e] for e in spec.carried] if hosts else []
    for h in carried:
        if type(h) not in PYTHON_NUMBERS:
            return None
    folds = _pending_folds(spec, values, numbers, carried)
    return _leaves.Pending(spec, numbers, carried, {n: values[n] for n in spec.child_names}, folds)


def _pending_folds(
    spec: _spec.Spec, values: dict[str, Any], numbers: list[Any], carried: list[Any]
) -> list[Any]:
    """The folds of an object made from Python numbers, on the host (NumPy, before any dispatch)."""
    if not spec.folds:
        return []
    if not spec.fold_reads_exact:
        return fold_values(spec, values, [])
    of = [_leaves.value_as_leaf(numbers[i]) for i in spec.fingerprint_of]
    return fold_values(spec, values, _leaves.carried_values(carried, of, spec.carried_dtypes))


def leaves_and_exact(
    spec: _spec.Spec, classified: Classified, hosts: HostValues
) -> tuple[_leaves.Leaves, _leaves.Exact]:
    """The object's leaves and its ``exact`` child (None where nothing is carried)."""
    if not spec.carried_dtypes:
        return _leaf_values(spec, classified), None
    values = classified.values
    dynamic = spec.dynamic_names
    if all(type(values[n]) in PYTHON_NUMBERS for n in dynamic) and all(
        type(h) in PYTHON_NUMBERS for h in hosts.values()
    ):
        # The common case (wrap, replace with Python numbers; children kept as
        # they are): one dispatch.
        numbers = [values[n] for n in dynamic]
        carried = [hosts[e] for e in spec.carried]
        converted, exact = _leaves.make_exact(
            numbers,
            carried,
            spec.carried_dtypes,
            spec.fingerprint_of,
            _pending_folds(spec, values, numbers, carried),
        )
        by_name = dict(zip(dynamic, converted))
        return tuple(by_name[n] if n in by_name else values[n] for n in spec.leaf_names), exact
    leaves = _leaf_values(spec, classified)
    return leaves, _carried_values(spec, hosts, leaves, classified)


PYTHON_NUMBERS = (int, float, complex)
