"""Classify: numeric hyperparameters: what counts as one, and how it becomes a leaf.

A hyperparameter given as a Python float, a NumPy float scalar or a 0-d
float32 array is one and the same hyperparameter, so all three are stored as
the same kind of leaf: a *weakly typed* JAX array of the default dtype. They
then share one ``jit`` compilation, and a bf16 model sees the dtypes that raw
optax gives it with a Python float (weak types do not promote bf16 to f32;
compare optax issue #1414). A dtype that the user chose on purpose (bf16, f16,
an unsigned int, any array of rank > 0) is kept as given.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import math
from collections.abc import Mapping
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

_PY_NUMBERS = (int, float, complex)
_NUMERIC_KINDS = frozenset("iufc")
# NumPy's default kinds: a NumPy scalar or 0-d array of these is normalized to
# the weakly typed default dtype, exactly like the Python number it stands for.
_DEFAULT_KINDS = frozenset(
    np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.complex64, np.complex128)
)


# --------------------------------------------------------------------------
# What counts as a number: one predicate per meaning, each saying how it
# differs from the others. (``_closures.is_schedule_like`` asks the same of
# what a callable returns.)


def is_numeric_leaf(x: Any) -> bool:
    """Whether ``x`` becomes a dynamic leaf by default: a Python int, float or complex (no bool), a
    NumPy or JAX array or scalar of a numeric or PRNG-key dtype, any shape, traced or not."""
    if isinstance(x, bool) or isinstance(x, np.bool_):
        return False
    if isinstance(x, _PY_NUMBERS):
        return True
    if isinstance(x, (np.ndarray, np.generic, jax.Array)):
        dtype = x.dtype
        if getattr(dtype, "kind", None) in _NUMERIC_KINDS:  # the common case, fast
            return True
        if jnp.issubdtype(dtype, jax.dtypes.prng_key):
            return True
        return jnp.issubdtype(dtype, np.number)  # bfloat16, float8 (kind "V")
    return False


def is_numeric_tree(x: Any) -> bool:
    """A pytree with at least one leaf, every leaf :func:`is_numeric_leaf` (a tuple of rates, a
    dict of arrays; a single numeric leaf too)."""
    leaves = jax.tree_util.tree_leaves(x)
    return bool(leaves) and all(is_numeric_leaf(v) for v in leaves)


def is_concrete_number(x: Any) -> bool:
    """A value a closure captures that its child holds as a leaf: a float, an int within int32, a
    numeric NumPy or JAX array or scalar; unlike :func:`is_numeric_leaf`, no Python complex, no
    wider int, no tracer, no PRNG key (and no bool)."""
    kind = type(x)
    if kind is float:
        return True
    if kind is int:
        return -(2**31) <= x < 2**31
    if isinstance(x, (np.ndarray, np.generic, jax.Array)) and not is_tracer(x):
        dtype = x.dtype
        return bool(np.issubdtype(dtype, np.number)) and not jnp.issubdtype(dtype, jax.dtypes.prng_key)
    return False


def is_scalar_number(x: Any) -> bool:
    """A Python or NumPy scalar number, bools included, no array (not even 0-d): what a guard takes
    as a constant operand."""
    return isinstance(x, (int, float, complex, np.number, np.bool_))


def is_integer_scalar(x: Any) -> bool:
    """A Python int or NumPy integer scalar, no bool, no array (not even 0-d): an integer Python
    arithmetic computes exactly."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def has_integer_dtype(x: Any) -> bool:
    """Anything of an integer dtype (an array of any shape, traced or not; a NumPy integer scalar);
    unlike :func:`is_integer_scalar`, no Python int."""
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.integer)


def fits_int_leaf(x: Any) -> bool:
    """Whether a Python integer fits the integer leaf it would become (int32; int64 with x64)."""
    if -(2**31) <= x < 2**31:
        return True
    return bool(jax.config.jax_enable_x64) and -(2**63) <= x < 2**63  # pyright: ignore[reportAttributeAccessIssue]


def weak(x: Any) -> Any:
    """``x`` weakly typed if its dtype is a default one (traced or not)."""
    if getattr(x, "weak_type", False) or np.dtype(x.dtype) not in _DEFAULT_KINDS:
        return x
    try:
        from jax._src.lax import lax as lax_internal

        return lax_internal._convert_element_type(x, x.dtype, weak_type=True)  # pyright: ignore[reportPrivateUsage]
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - private API moved
        return x


def exact_child(hosts: Any, of: list[Any], dtypes: tuple[str, ...], folds: Any = ()) -> tuple[Any, ...]:
    """A wrapped object's ``exact`` child: the host values, then the fingerprint of the
    leaves ``of`` they were computed from (where there are host values), then the ``folds``
    (their values and fingerprint, ``_folds``), in ``dtypes``: one weakly typed vector per
    dtype (usually one; a batch of values gives a batch of vectors), traced or not.

    Vectors, not a scalar leaf each: every leaf is an argument of every
    jitted call that takes the object (dispatch cost per leaf).
    """
    traced = any(is_tracer(x) for x in (*hosts, *of, *folds))
    xp: Any = jnp if traced else np  # concrete: NumPy, then one conversion per vector
    return tuple(
        weak(jnp.asarray(v)) for v in exact_vectors(carried_values(hosts, of, dtypes, xp), dtypes, folds, xp)
    )


def carried_values(hosts: Any, of: list[Any], dtypes: tuple[str, ...], xp: Any = np) -> list[Any]:
    """The carried host values in their dtypes, then the fingerprint of the leaves ``of``
    (none where there are no host values): the ``exact`` child before its folds."""
    values = [xp.asarray(x, d) for x, d in zip(hosts, dtypes)]
    if len(hosts):
        values.append(xp.asarray(fingerprint(of, FINGERPRINT_DTYPE)))
    return values


def exact_vectors(
    values: list[Any], dtypes: tuple[str, ...], folds: Any = (), xp: Any = np
) -> tuple[Any, ...]:
    """``values`` (then ``folds``) stacked into the ``exact`` child's vectors, one per dtype."""
    values = [*values, *(xp.asarray(x, d) for x, d in zip(folds, dtypes[len(values) :]))]
    groups, slots = exact_layout(dtypes[: len(values)])
    columns: list[list[Any]] = [[] for _ in groups]
    for x, (g, _) in zip(values, slots):
        columns[g].append(x)
    return tuple(xp.stack(xp.broadcast_arrays(*column), axis=-1) for column in columns)


def exact_values(exact: tuple[jax.Array, ...], dtypes: tuple[str, ...]) -> list[Any]:
    """The values of an ``exact`` child, in the order :func:`exact_child` took them."""
    _, slots = exact_layout(dtypes)
    # Concrete: read on the host (indexing a JAX array is an XLA program).
    vectors = [x if is_tracer(x) else np.asarray(x) for x in exact]
    return [vectors[g][..., p] for g, p in slots]


@functools.lru_cache(maxsize=256)
def exact_layout(dtypes: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """The dtypes of an ``exact`` child's vectors, and each value's (vector, position)."""
    groups = tuple(dict.fromkeys(dtypes))
    seen = dict.fromkeys(groups, 0)
    slots = []
    for d in dtypes:
        slots.append((groups.index(d), seen[d]))
        seen[d] += 1
    return groups, tuple(slots)


def make_exact(
    args: list[Any], hosts: list[Any], dtypes: tuple[str, ...], of: tuple[int, ...], folds: Any = ()
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The leaves of Python-number arguments and the ``exact`` child: computed on the host
    (NumPy, as :func:`exact_child` does with concrete values), then placed in one dispatch."""
    values = host_numbers(args)
    vectors = exact_vectors(carried_values(hosts, [values[i] for i in of], dtypes), dtypes, folds)
    out = to_device([*values, *vectors])
    return out[: len(args)], out[len(args) :]


def convert_numbers(numbers: list[Any]) -> tuple[Any, ...]:
    """Python numbers as weakly typed leaves, in one dispatch."""
    return to_device(host_numbers(numbers))


def host_numbers(numbers: list[Any]) -> list[Any]:
    """Python numbers as the NumPy values of the leaves JAX makes of them (float32 for a float,
    float64 with ``jax_enable_x64``). An integer its leaf cannot hold raises JAX's error (a
    dynamic argument forced on one: NumPy's conversion would wrap around)."""
    for x in numbers:
        if type(x) is int and not fits_int_leaf(x):
            jnp.asarray(x)  # OverflowError: too large to convert
    return [value_as_leaf(x) for x in numbers]


def to_device(values: list[Any]) -> tuple[Any, ...]:
    """NumPy values as JAX arrays, weakly typed where their dtype is a default one (as
    JAX makes Python numbers): packed in one vector per dtype, so one host-to-device
    transfer each and one jitted dispatch that slices them apart.

    A TPU's host pays about 0.5 ms for any transfer and 0.8 ms for a dispatch waited
    for: adam's eleven numbers as eleven arguments of one jitted call took 2.3 ms
    there, one vector of eleven 0.74 ms (2026-12-07).
    """
    groups: dict[np.dtype[Any], list[Any]] = {}
    layout: list[tuple[int, int, tuple[int, ...]]] = []
    for v in values:
        a = np.asarray(v)
        parts = groups.setdefault(a.dtype, [])
        layout.append((list(groups).index(a.dtype), sum(p.size for p in parts), a.shape))
        parts.append(a.reshape(-1))
    return _unpacker(tuple(layout))(*(np.concatenate(parts) for parts in groups.values()))


@functools.lru_cache(maxsize=256)
def _unpacker(layout: tuple[tuple[int, int, tuple[int, ...]], ...]):
    """The jitted slicing of :func:`to_device`: (vector, start, shape) of each value."""

    def unpack(*vectors: Any) -> tuple[Any, ...]:
        out: list[Any] = []
        for group, start, shape in layout:
            size = math.prod(shape)
            out.append(weak(vectors[group][start : start + size].reshape(shape)))
        return tuple(out)

    return jax.jit(unpack)


# What a wrapped object is made of, from the pipeline (``_pipeline.Made``) to its core (``_core.Core``):
# its leaves, one per dynamic argument or child in signature order (an array, or a wrapped
# child or a container of them);
Leaves: TypeAlias = tuple[Any, ...]
# its ``exact`` child: the carried host values, a vector per dtype, then the fingerprint of the
# leaves they were computed from (``_guard.Guarded.exact``); None where nothing is carried.
Exact: TypeAlias = tuple[jax.Array, ...] | None


class Pending:
    """An object's leaves and ``exact`` child, made from Python numbers when first needed.

    A wrap from Python numbers (the common case) converts them to JAX arrays
    in one jitted dispatch (``_leaves.make_exact``): about half the cost of a
    cached wrap. It is done when the object's leaves are first read (it is
    flattened, passed to ``jit``, used or inspected), so that a composition
    whose parts are wrapped only to be handed to a parent (``chain(clip,
    adamw(schedule))``) converts each number once, when the whole is used,
    as ``optax.inject_hyperparams`` makes its arrays at ``init``. Made outside
    any trace (``jax.ensure_compile_time_eval``): an object first used inside
    ``jit`` keeps concrete leaves, not the trace's.
    """

    __slots__ = ("children", "folds", "hosts", "numbers", "spec")

    def __init__(
        self, spec: Any, numbers: list[Any], hosts: list[Any], children: dict[str, Any], folds: Any = ()
    ):
        self.spec = spec
        self.numbers = numbers  # the dynamic arguments' Python numbers, in ``spec.dynamic_names`` order
        self.hosts = hosts  # the carried expressions' host values, in ``spec.carried`` order
        self.children = children  # the other leaves (wrapped children), by name
        self.folds = folds  # the folds' host values and their fingerprint (``_folds``), or ()

    def make(self) -> tuple[tuple[Any, ...], Any]:
        """(leaves, exact child), concrete."""
        spec = self.spec
        with jax.ensure_compile_time_eval():
            if spec.carried_dtypes:
                converted, exact = make_exact(
                    self.numbers, self.hosts, spec.carried_dtypes, spec.fingerprint_of, self.folds
                )
            else:
                converted, exact = convert_numbers(self.numbers), None
        by_name = dict(zip(spec.dynamic_names, converted))
        return tuple(by_name[n] if n in by_name else self.children[n] for n in spec.leaf_names), exact


def to_leaves(values: dict[str, Any]) -> dict[str, Any]:
    """Converts numeric hyperparameters to JAX arrays (see the module docstring).

    Python numbers (and NumPy values of a default kind standing for one) are
    converted together in one jitted call so that ``wrap`` stays cheap.
    """
    out: dict[str, Any] = {}
    pending: dict[str, Any] = {}
    for name, x in values.items():
        if type(x) in _PY_NUMBERS:  # not isinstance: np.float64 subclasses float
            pending[name] = x
        elif isinstance(x, (np.ndarray, np.generic)):
            if x.ndim == 0 and x.dtype in _DEFAULT_KINDS:
                pending[name] = x.item()
            else:
                out[name] = jnp.asarray(x)
        elif isinstance(x, jax.Array):
            if x.ndim == 0 and x.dtype in _DEFAULT_KINDS:
                out[name] = weak(x)
            else:
                out[name] = x
        else:  # a pytree of numbers forced dynamic: convert leaf by leaf
            out[name] = jax.tree_util.tree_map(lambda v: to_leaves({"v": v})["v"], x)
    if pending:
        out.update(zip(pending, convert_numbers(list(pending.values()))))
    return {name: out[name] for name in values}


def is_tracer(x: Any) -> bool:
    return isinstance(x, Tracer)


def is_key(x: Any) -> bool:
    """A typed PRNG key array (``jax.random.key``): no NumPy value of its own."""
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


# --------------------------------------------------------------------------
# The concrete value of an argument, four ways. Which one a check uses
# decides whether it is right: a comparison the factory makes in Python is
# answered on the value *as given* (raw optax's precision: 0.1, not
# float32's 0.1); a guard re-checked on a leaf on the value *as the leaf*
# holds it (float32-rounded), as the traced code will see it; a static
# value is kept *as static* (NumPy, not a JAX array staged under jit).


def leaves_on_host(leaves: Mapping[str, Any]) -> dict[str, Any] | None:
    """Concrete leaves as NumPy values, or None if any of them is traced."""
    out = {}
    for name, x in leaves.items():
        if is_tracer(x):
            return None
        out[name] = np.asarray(x)
    return out


def value_as_given(x: Any) -> Any:
    """The value Python comparisons of a scalar argument see, or None (traced, not a scalar).

    Python numbers and NumPy scalars as given (so that comparisons are raw
    optax's, in their own precision); a concrete 0-d array as a NumPy scalar.
    """
    if type(x) in _PY_NUMBERS or isinstance(x, np.generic):
        return x
    if isinstance(x, np.ndarray):
        return x[()] if x.ndim == 0 else None
    if isinstance(x, jax.Array) and not is_tracer(x) and x.ndim == 0 and not is_key(x):
        return np.asarray(x)[()]
    return None


def value_as_static(x: Any) -> Any:
    """A numeric value as a static (Python-level) value: concrete JAX arrays as NumPy.

    A concrete JAX array closed over by traced code is staged like any array,
    so a Python ``if`` on it fails under ``jit``; a NumPy value answers. A
    weakly typed scalar leaf stands for the Python number it was made from
    (:func:`as_python_number`): the factory gets that number, as it got it
    from the user (``isinstance(x, float)`` holds, as in optax).
    """
    if isinstance(x, jax.Array) and not is_tracer(x) and not is_key(x):
        if x.ndim == 0 and getattr(x, "weak_type", False):
            return x.item()
        a = np.asarray(x)
        return a[()] if a.ndim == 0 else a
    return x


def value_as_leaf(x: Any) -> Any:
    """The value the leaf made from ``x`` holds, as NumPy, without a device round trip.

    A Python float becomes a float32 leaf (float64 with ``jax_enable_x64``):
    guards are checked on the value the traced code will see.
    """
    kind = type(x)
    if not jax.config.jax_enable_x64:  # pyright: ignore[reportAttributeAccessIssue]
        if kind is float:  # the common cases, fast
            return np.float32(x)
        if kind is int and -(2**31) <= x < 2**31:
            return np.int32(x)
    a = np.asarray(x)
    if not isinstance(x, jax.Array):
        a = a.astype(_canonical(a.dtype))
    return a[()] if a.ndim == 0 else a  # a NumPy scalar: cheaper to compare


def aval_text(shape: tuple[int, ...], dtype: Any) -> str:
    """``float32[4,3]``: a leaf's dtype and shape as reprs and messages show them."""
    return f"{np.dtype(dtype).name}[{','.join(map(str, shape))}]"


@functools.lru_cache(maxsize=256)
def _canonical_of(dtype: Any, x64: bool) -> np.dtype[Any]:
    del x64  # part of the cache key: canonical dtypes follow jax_enable_x64
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _canonical(dtype: Any) -> np.dtype[Any]:
    return _canonical_of(np.dtype(dtype), bool(jax.config.jax_enable_x64))  # pyright: ignore[reportAttributeAccessIssue]


@functools.lru_cache(maxsize=16)
def _python_key(t: type, x64: bool) -> tuple[Any, ...]:
    return ((), _canonical_of(np.result_type(t), x64), True)


@functools.lru_cache(maxsize=16)
def python_kind_key(t: type, x64: bool) -> tuple[Any, ...]:
    """:func:`kind_key` of a Python number of type ``t`` (``x64``: jax_enable_x64), cached."""
    return _python_key(t, x64)[1:]


def aval_key(x: Any) -> Any:
    """Hashable description of the leaf ``x`` becomes: (shape, dtype, weak type).

    The leaf's, not the value's: a Python float, a NumPy float scalar and a
    0-d float32 array are one key, as they are one leaf (see ``to_leaves``).
    """
    if type(x) in _PY_NUMBERS:
        return _python_key(type(x), bool(jax.config.jax_enable_x64))  # pyright: ignore[reportAttributeAccessIssue]
    if isinstance(x, (np.ndarray, np.generic, jax.Array)):
        if x.ndim == 0 and x.dtype in _DEFAULT_KINDS:
            return ((), _canonical(x.dtype), True)
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):  # a typed key: no NumPy dtype
            return (tuple(x.shape), str(x.dtype), False)
        return (tuple(x.shape), _canonical(x.dtype), bool(getattr(x, "weak_type", False)))
    return jax.tree_util.tree_structure(x)


def as_python_number(x: Any) -> Any:
    """A concrete weakly typed scalar leaf as the Python number it was made from (else ``x``).

    ``replace`` hands the factory the other arguments' leaves: it gets Python
    numbers back, as it got them from the user (its checks and exceptions are
    Python's: ``1 / (1.0 - m)`` raises at ``m = 1.0``).
    """
    if isinstance(x, jax.Array) and not is_tracer(x) and x.ndim == 0 and getattr(x, "weak_type", False):
        return x.item()
    return x


# A float leaf (``jax.grad`` with respect to a wrapped object takes float
# leaves only): the hash's low 24 bits, which float32 holds exactly.
FINGERPRINT_DTYPE = "float32"


def fingerprint(leaves: list[Any], dtype: Any = FINGERPRINT_DTYPE) -> Any:
    """What a carried value remembers of the leaves it was computed from: a hash of their bits.

    Not the leaves themselves: ``jax.tree.map(lambda x: x / 2, tx)`` would
    change a copy as it changes the leaf, and the copy would still match.
    A hash of their bit patterns (32-bit integer arithmetic, the
    same wrap-around on the host with NumPy and in traced code) is itself a
    leaf that a map changes otherwise (or, for a map of floats only, not
    at all), so a carried value is seen to be stale. Elementwise over a
    batch of values.
    """
    traced = any(is_tracer(x) for x in leaves)
    xp: Any = jnp if traced else np
    h = xp.asarray(0x1E3779B9, xp.int32)
    with np.errstate(all="ignore"):
        for x in leaves:
            x = jnp.asarray(x) if traced else np.asarray(x)
            if xp.issubdtype(x.dtype, xp.complexfloating):
                parts = [xp.real(x), xp.imag(x)]
            else:
                parts = [x]
            for part in parts:
                part = part.astype(xp.float32 if xp.issubdtype(part.dtype, xp.floating) else xp.int32)
                bits = jax.lax.bitcast_convert_type(part, jnp.int32) if traced else part.view(np.int32)
                h = (h ^ bits) * xp.asarray(0x01000193, xp.int32)
                h = h ^ (h >> xp.asarray(15, xp.int32))
    return (h & xp.asarray(0xFFFFFF, xp.int32)).astype(xp.float32)


def given_type(x: Any) -> Any:
    """The kind of value the user gave, as a factory's ``isinstance``/``hasattr`` see it.

    A weakly typed leaf stands for the Python number it was made from (a
    batch of them for the numbers of its members).
    """
    if type(x) in _PY_NUMBERS or isinstance(x, np.generic):
        return type(x)
    if isinstance(x, (jax.Array, np.ndarray)) and (x.ndim > 0 or getattr(x, "weak_type", False)):
        # A weakly typed leaf, or a batch of values (grid, stack, an array of
        # learning rates): Python numbers, member by member.
        return type(np.zeros((), x.dtype).item())
    return "array"


def kind_key(x: Any) -> Any:
    """:func:`aval_key` without the shape: a batch of values is the same kind of argument."""
    key = aval_key(x)
    return key[1:] if isinstance(key, tuple) else key


# --------------------------------------------------------------------------
# Placement: a committed leaf (placed by jax.device_put) keeps its sharding.


def is_committed(x: Any) -> bool:
    return isinstance(x, jax.Array) and not is_tracer(x) and x.committed


def keep_leaf_placement(old: Any, new: Any) -> Any:
    placed = is_committed(old) and isinstance(new, jax.Array) and not is_committed(new)
    return jax.device_put(new, old.sharding) if placed and old.shape == new.shape else new


def keep_placement(old: Any, new: Any) -> Any:
    """``new`` with its leaves placed as ``old``'s, where those were placed on purpose.

    A leaf that ``jax.device_put`` placed (a committed array) and a fresh
    value for it (uncommitted) have different shardings, which ``jit`` keys
    its cache on; replacing one hyperparameter must not cost a retrace.
    """
    old_leaves, treedef = jax.tree_util.tree_flatten(old)
    if not any(map(is_committed, old_leaves)):  # the common case: nothing placed
        return new
    new_leaves, new_treedef = jax.tree_util.tree_flatten(new)
    if new_treedef != treedef:  # another static configuration: nothing to match
        return new
    return jax.tree_util.tree_unflatten(treedef, list(map(keep_leaf_placement, old_leaves, new_leaves)))


def restored_leaf(old: Any, value: Any) -> Any:
    """A saved leaf restored into ``old``'s place: a JAX array of its weak type and placement."""
    if isinstance(value, (np.ndarray, np.generic)):
        value = jnp.asarray(value)
    if (
        isinstance(old, jax.Array)
        and isinstance(value, jax.Array)
        and old.weak_type
        and not value.weak_type
        and value.dtype == old.dtype
    ):
        value = weak(value)
    return keep_leaf_placement(old, value)
