"""Step 2d, verify: the wrapped build computes what the factory computes with the Python values.

Detection (``_detect``) sees what a factory does *with* a stand-in: compare it,
convert it, use it as a shape. It cannot see a decision the factory makes
*about* the value: ``isinstance(clip, float)``, ``type(k) is int``,
``hasattr(lr, "shape")``, ``lr is DEFAULT``, ``f"{lr}"``, a ``try: float(lr)``
that catches JAX's error. A leaf answers those differently from the Python
number, so the factory takes another branch, runs, and computes something
else, silently.

So every new configuration (and every new branch of one) is checked by
differential execution: the wrapped build, with its leaves *traced* (a
concrete array answers ``float()`` and ``str()`` like a number, a tracer does
not), against the factory called with the Python values, on the probe's
stand-in parameters: ``init``, two ``update`` steps with every extra argument
the probe found the transformation takes (``value``, ``grad``, ``value_fn``,
``obj_fn``, ``grad_fn``), or a schedule at a range of step counts (those near
its integer arguments included). A difference makes the responsible argument
static (found by bisection, re-analysed with it static, checked again), so it
shows in ``detected_static_argnames``.

The comparison is at the float32 round-off of the hyperparameters: a leaf
holds a Python float rounded to float32, and optax's Python arithmetic on it
is done in float32 (``1 - b2`` of ``b2 = 0.9999`` comes out 6e-4 off). The
wrapped build passes if it agrees (relative 1e-4) with the factory called
with the values given, or with the factory called with the values its leaves
hold where those two agree to 1% (the same branch, round-off amplified).

What it cannot see: a factory that reads mutable global state when called
(wrapped factories must be pure functions of their arguments, as
``optax.inject_hyperparams`` requires), and a decision taken by string
formatting or identity at values other than the ones analysed (the check runs
once per configuration and branch, not at every value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _bind, _detect, _leaves

# Step counts a schedule is compared at, besides those near its integer arguments.
_COUNTS = (0, 1, 2, 3, 5, 8, 13, 21, 50, 100, 333, 1000, 4321, 10_000, 123_456)


def concrete_params(shapes: Any) -> Any:
    """Deterministic stand-in parameters of the probe's shapes: varied values of both signs."""

    def leaf(i: int, s: Any) -> Any:
        n = int(np.prod(s.shape)) if s.shape else 1
        values = np.sin(np.arange(1, n + 1) * (1.3 + 0.1 * i)) * (1.0 + 0.05 * i)
        return jnp.asarray(values.reshape(s.shape), s.dtype)

    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    return jax.tree_util.tree_unflatten(treedef, [leaf(i, s) for i, s in enumerate(leaves)])


def counts_for(values: dict[str, Any]) -> np.ndarray:
    """Step counts for a schedule: a fixed range and each integer argument's neighbourhood."""
    counts = set(_COUNTS)
    for v in values.values():
        if _leaves.is_integer(v) and 0 <= v < 2**31 - 2:
            counts.update(c for c in (int(v) - 1, int(v), int(v) + 1, 2 * int(v), int(v) // 2) if c >= 0)
    return np.array(sorted(c for c in counts if c < 2**31), np.int32)


def outputs(built: Any, kind: str, level: str, params: Any, counts: Any) -> Any:
    """What is compared: init and two updates, or the schedule at ``counts``."""
    if kind == "schedule":
        try:
            return jax.vmap(built)(counts)
        except Exception:  # noqa: BLE001 - a schedule with Python control flow on the count
            return [built(c) for c in counts]
    value = _detect._sum_of_squares(params)  # pyright: ignore[reportPrivateUsage]
    return _detect.exercise(built, kind, level, params, counts[0], value, steps=2)


def traced_outputs(build: Callable[[Any], Any], leaves: Any, run: Callable[[Any], Any]) -> Any:
    """``run(build(leaves))`` with ``leaves`` traced, then evaluated on their concrete values."""
    flat, treedef = jax.tree_util.tree_flatten(leaves)

    def fn(*xs: Any) -> Any:
        return run(build(jax.tree_util.tree_unflatten(treedef, list(xs))))

    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*flat)
    out = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *flat)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), out)


def close(a: Any, b: Any) -> bool:
    """Whether two outputs agree to 1%: the same branch, up to amplified round-off."""
    return difference(a, b, rtol=1e-2) is None


def difference(reference: Any, got: Any, exact: bool = False, rtol: float = 1e-4) -> str | None:
    """Where ``got`` differs from ``reference`` (structure, dtype, shape, value), or None."""
    ref_leaves, ref_tree = jax.tree_util.tree_flatten_with_path(reference)
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    if ref_tree != got_tree:
        return f"the structure differs: {got_tree} instead of {ref_tree}"
    for (path, a), b in zip(ref_leaves, got_leaves):
        where = jax.tree_util.keystr(path) or "the output"
        if not isinstance(a, (jax.Array, np.ndarray, np.generic)) or not isinstance(
            b, (jax.Array, np.ndarray, np.generic)
        ):
            if not (a is b or a == b):
                return f"{where}: {b!r} instead of {a!r}"
            continue
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape or x.dtype != y.dtype:
            want, have = _leaves.aval_text(x.shape, x.dtype), _leaves.aval_text(y.shape, y.dtype)
            return f"{where}: {have} instead of {want}"
        if exact or not np.issubdtype(x.dtype, np.inexact):
            same = np.array_equal(x, y, equal_nan=np.issubdtype(x.dtype, np.inexact))
        else:
            finite = np.abs(x[np.isfinite(x)])
            scale = float(finite.max()) if finite.size else 0.0
            same = bool(np.allclose(x, y, rtol=rtol, atol=rtol * 0.1 * scale + 1e-30, equal_nan=True))
        if not same:
            return f"{where}: {_first(y)} instead of {_first(x)}"
    return None


def _first(x: np.ndarray) -> str:
    flat = x.reshape(-1)
    shown = np.array2string(flat[:3], precision=6)
    return shown if flat.size <= 3 else shown[:-1] + " ...]"


def as_given(original: Any, leaf: Any) -> Any:
    """The value a leaf holds, as the kind of value the user gave (a Python float stays one)."""
    if _leaves.is_tracer(leaf):
        return original
    if type(original) in (int, float, complex):
        return type(original)(np.asarray(leaf).item())
    if isinstance(original, np.generic):
        return original.dtype.type(np.asarray(leaf))
    if isinstance(original, np.ndarray):
        return np.asarray(leaf).astype(original.dtype)
    return leaf


def call_reference(info: _bind.FactoryInfo, values: dict[str, Any]) -> Any:
    """The factory called with Python values, quietly (its warnings were the user's once already)."""
    return _bind.call_quietly(info, values)
