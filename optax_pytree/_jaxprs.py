"""Build: a jaxpr run again, with XLA's rewrites of constants under jit, or with NumPy (the verification).

Two interpreters of one closed jaxpr, and what they share (:func:`bind`,
:func:`is_literal`, :func:`sub_jaxprs`):

- :func:`evaluate`, **with NumPy** (the verification, ``_verify``): both
  sides of its comparison are traced to jaxprs and evaluated on the host,
  one NumPy call per equation. Evaluated eagerly by JAX instead, every
  primitive at every shape would be compiled by XLA once per process (about
  a hundred small programs at the first wrap of adam): a cost at every
  start, and entries in a persistent compilation cache. Primitives without
  a rule here (PRNG, scatter, ...) are bound eagerly, as a fallback. The
  same evaluator runs both sides, so its arithmetic cannot make them differ.

- :func:`call`, **with XLA's rewrites of constants** (a wrapped object's
  ``init``, ``update`` and schedule calls, ``_core`` and ``_tree``). Plain
  optax inside ``jax.jit`` has its hyperparameters as constants of the
  program, and XLA's algebraic simplifier rewrites a floating-point division
  by a constant, ``x / c``, into a multiplication by its reciprocal,
  ``x * (1 / c)``, the reciprocal rounded once, and folds ``(x * c1) * c2``
  into ``x * (c1 * c2)`` where ``c1`` and ``c2`` are both scalars (broadcast
  or not) or both arrays of the product's shape, and (jax 0.10's, asked of the
  compiler: ``_backends.reassociates_scalar_products``) ``(x * c) * s``, ``s`` a
  scalar read at run time (broadcast), into ``x * (s * c)``. A wrapped object's hyperparameters are arguments
  of the program (that is the point: one compilation for every value), which
  XLA does not rewrite so: a scalar division by an argument stays a division
  (measured on CPU: a cosine schedule's ``pi * count / decay_steps`` differs
  in the last bit at 11 of 45 counts; a vectorized one may already multiply
  by the reciprocal, which the rewrite then matches). So, where a wrapped
  object's leaves are traced, the call is traced to a jaxpr with the leaves
  as inputs and evaluated again with those rewrites done where XLA would
  have done them: on every floating-point division whose divisor is
  computed from the leaves (and literals) alone, and whose dividend is not,
  and on every product of such a product with such a value (a value of the
  leaves alone is folded by XLA, correctly rounded, in the plain program).
  Nested ``jit`` calls are inlined (XLA inlines them too); a ``cond``'s
  branches (``MultiSteps``, ``apply_if_finite``) are rewritten as the rest
  (XLA folds their constants alike); other sub-programs (``scan``, custom
  derivatives) are bound as they are. Eagerly, or with the object closed over (its leaves constants again),
  nothing is rewritten: the plain program is not rewritten either.

  What a backend's compiler does besides (``_backends``, one table): the
  reciprocal it folds (correctly rounded, which a TPU's division is not),
  values of constants alone it folds on the host (a division, a square
  root), a power of a constant base (a TPU's ``2 ** (t * log2 c)``). Those
  equations are redone as the backend the program is lowered for does
  (``_backends.lowered``), where a traced hyperparameter reaches them (a
  concrete one is a constant of both programs, the compiler's to treat).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import math
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import core as jax_core

from . import _backends, _leaves, _rules
from ._bind import is_wrapped
from ._leaves import is_key, is_tracer
from ._vocabulary import Role

if TYPE_CHECKING:  # JAX's own types of a program (``jax.extend.core``), for the reader and pyright
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var

# --------------------------------------------------------------------------
# Reading a jaxpr.

# Calls of a sub-program that XLA inlines (a nested jit).
INLINED = frozenset(("pjit", "jit", "closed_call", "core_call"))


def bind(eqn: JaxprEqn, inputs: list[Any]) -> Any:
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


def is_literal(v: Var | Literal) -> TypeGuard[Literal]:
    """A constant written into a jaxpr (not a variable)."""
    return type(v).__name__ == "Literal"


def aval(v: Var) -> Any:
    """A variable's abstract value: a ``ShapedArray`` (a shape and a dtype) in the programs read here."""
    return v.aval


def sub_jaxprs(eqn: JaxprEqn) -> list[tuple[Jaxpr, Any]]:
    """The jaxprs an equation calls (pjit, custom_jvp, cond's branches, scan's body), with their consts."""
    out: list[tuple[Any, Any]] = []
    for param in eqn.params.values():
        for sub in param if isinstance(param, (tuple, list)) else (param,):
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                out.append((inner, getattr(sub, "consts", ())))
    return out


# --------------------------------------------------------------------------
# With XLA's rewrites of constants (build under jit).


def _xla_simplifies() -> bool:
    """Whether XLA's algebraic simplifier runs (``XLA_FLAGS`` can disable it: then neither do we)."""
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = flag.partition("=")
        if name == "--xla_disable_hlo_passes" and "algsimp" in value.split(","):
            return False
    return True


REWRITE = _xla_simplifies()


def rewritten_call(
    fn: Callable[..., Any],
    owner: Any,
    hyper_tree: Any,
    flat: list[Any],
    tree: Any,
    where: list[int],
    inputs: list[Any],
    plain: Callable[[], Any] | None,
) -> Any:
    """The call traced to a jaxpr and evaluated again with the rewrites, into the current trace;
    where that fails, ``plain()`` (the call as it is), or :class:`NotStaged` where it is None."""
    n = len(inputs) - len(where)

    def traced(*xs: Any) -> Any:
        h = jax.tree_util.tree_unflatten(hyper_tree, list(xs[:n]))
        rest = list(flat)
        for i, x in zip(where, xs[n:]):
            rest[i] = x
        a, k = jax.tree_util.tree_unflatten(tree, rest)
        return fn(h, *a, **k)

    try:
        closed, shapes = jax.make_jaxpr(traced, return_shape=True)(*inputs)
    except TypeError:  # an output that is not an array: as it is
        if plain is None:
            raise NotStaged from None
        return plain()
    out_tree = jax.tree_util.tree_structure(shapes)
    hyper_flat = inputs[:n]
    derived = [True] * n + [False] * len(where)
    # A concrete leaf (the object closed over) is a constant of the program, as in plain optax.
    live = [is_tracer(x) for x in hyper_flat] + [False] * len(where)
    keys: list[Any] = [(INPUT, i) for i in range(n)] + [None] * len(where)
    folds = Folds(owner, hyper_flat)
    # What the step's work reads of the hyperparameters, computed in the step where that is
    # cheaper than reading it from a loop's state (``_backends.step_zero``): the zero is made
    # from the first integer scalar among the arguments (an optimizer state's step count).
    counts = [x for x in inputs[n:] if is_tracer(x) and jnp.ndim(x) == 0 and _is_int(x)]
    before = _ZERO.value
    _ZERO.value = _backends.step_zero(counts[0]) if counts else None
    try:
        outs = _rewritten(closed.jaxpr, closed.consts, inputs, derived, live, None, keys, folds)[0]
    except Exception as error:  # the mechanism's own failure: never the factory's
        if plain is None:
            raise NotStaged from error
        # The program was traced from ``fn`` already: what failed is the rewrite, not the
        # factory. Plain tracing still computes it (as a value read at run time would be).
        warnings.warn(
            f"optax_pytree: redoing XLA's rewrites of constants failed ({type(error).__name__}: "
            f"{error}); computed without them, so under jit the numbers "
            "may differ from plain optax's in the last bits. This is optax_pytree's failure, "
            "not the factory's: please report it",
            stacklevel=3,
        )
        return plain()
    finally:
        _ZERO.value = before
    return jax.tree_util.tree_unflatten(out_tree, outs)


class NotStaged(Exception):
    """The call could not be rewritten without a fallback (``rewritten_call`` with no ``plain``)."""


class _Zero(threading.local):
    """The zero of the call being rewritten in this thread (``_backends.step_zero``), or None."""

    value: Any = None


_ZERO = _Zero()


def _is_int(x: Any) -> bool:
    dtype = jnp.result_type(x)
    return bool(jnp.issubdtype(dtype, jnp.integer))


def is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, int, float, complex)) or hasattr(x, "__array__")


def _rewritten(
    jaxpr: Jaxpr,
    consts: list[Any],
    args: list[Any],
    derived_in: list[bool],
    live_in: list[bool],
    splat_in: list[bool] | None = None,
    keys_in: list[Any] | None = None,
    folds: Folds | None = None,
) -> tuple[list[Any], list[bool], list[bool], list[bool], list[Any]]:
    """The outputs of ``jaxpr``; which are values of the hyperparameters (and constants) alone;
    which of those depend on a traced hyperparameter (*live*: an argument of the program,
    where plain optax has a constant; the others are constants of both programs); which
    of those are *splats*, one scalar in every element (a scalar, or a broadcast of one: what
    XLA sees as ``broadcast(constant)``, where it sees other values of constants alone as a
    folded array constant); and the *key* of each value of the hyperparameters alone, what it
    is computed from (:func:`key_of`), or None."""
    env: dict[Any, Any] = {}
    derived: set[Any] = set()
    live: set[Any] = set()
    splat: set[Any] = set()
    keys: dict[Any, Any] = {}
    defined: dict[Any, JaxprEqn] = {}

    def read(v: Any) -> Any:
        return v.val if is_literal(v) else env[v]

    def is_derived(v: Any) -> bool:
        return is_literal(v) or v in derived

    def is_splat(v: Any) -> bool:
        return is_literal(v) or v in splat

    def key(v: Any) -> Any:
        return literal_key(v.val, getattr(v.aval, "dtype", None)) if is_literal(v) else keys.get(v)

    def shape(v: Any) -> Any:
        return getattr(aval(v), "shape", None)  # None: a type of its own (a hijax variable)

    def scalar_of(v: Any) -> Any:
        """The scalar a splat is a broadcast of (``v`` itself where it is one)."""
        while not is_literal(v) and shape(v) != () and v in defined:
            eqn = defined[v]
            if eqn.primitive.name not in _SHAPE_ONLY or shape(eqn.invars[0]) not in ((), None):
                break
            v = eqn.invars[0]
            if shape(v) == ():
                break
        return v

    def reassociates(c1: Constant, c2: Constant, out: Any) -> bool:
        # XLA's algebraic simplifier: Mul(Mul(A, C1), C2) => Mul(A, C1 * C2) where C1 and C2
        # are both constants of the product's shape, or both broadcasts of scalar constants
        # (measured on the CPU and the TPU: (x * [0.1, 0.2]) * 0.3 is left as it is).
        if c1.splat and c2.splat:
            return True
        return not c1.splat and not c2.splat and c1.shape == c2.shape == shape(out) is not None

    def scaled_product(eqn: JaxprEqn) -> tuple[tuple[Any, Constant], Any] | None:
        """For ``x * y``, one a product by a constant splat (``A * C``, A not a scalar) and the
        other a scalar read at run time or a broadcast of one: ((A, C), that scalar)."""
        if shape(eqn.outvars[0]) in ((), None):
            return None
        for i in (0, 1):
            inner = None if is_literal(eqn.invars[i]) else products.get(eqn.invars[i])
            other = eqn.invars[1 - i]
            if inner is None or not inner[1].splat or is_literal(other) or other in products:
                continue
            if shape(inner[0]) != shape(eqn.outvars[0]):
                continue
            scalar = scalar_of(other)
            if not is_literal(scalar) and shape(scalar) == () and scalar not in derived:
                # Where the compiler does (asked once: jax 0.12's does not).
                return (inner, scalar) if _backends.reassociates_scalar_products() else None
        return None

    def record(v: Any, x: Any, of_constants: bool, of_traced: bool, one_scalar: bool, k: Any = None) -> None:
        env[v] = x
        if of_constants:  # live and splat say more of a value of constants alone
            derived.add(v)
            if of_traced:
                live.add(v)
            if one_scalar or shape(v) == ():
                splat.add(v)
            if k is not None:
                keys[v] = k

    zero = _ZERO.value
    done: dict[int, Any] = {}  # id -> a value laundered here (kept alive: ids stay unique)

    def laundered(x: Any) -> Any:
        """A scalar of the hyperparameters alone, as the step's work reads it (once)."""
        if zero is None or id(x) in done:
            return x
        out = _backends.launder(x, zero)
        done[id(out)] = out
        return out

    def folded(kind: str, vs: list[Any], site: Any, read_in_step: bool = False) -> Any:
        """What the backend's compiler folds from ``vs`` (scalars of the hyperparameters alone),
        broadcast to ``site``'s shape: the carried value where an object carries it."""
        scalars = [scalar_of(v) for v in vs]
        values = [read(v) for v in scalars]
        fold_keys = [key(v) for v in scalars]
        out = None
        if not any(is_tracer(x) for x in values):  # constants: folded here, as XLA folds them
            out = host_fold(kind, values)
        elif all(k is not None and not reads_inputs(k) for k in fold_keys):  # of literals alone
            out = host_fold(kind, [evaluate_key(k, {}) for k in fold_keys])
        if out is None and folds is not None and all(k is not None for k in fold_keys):
            f32 = all(aval(v).dtype == np.float32 and shape(v) == () for v in scalars)
            found = folds.use((kind, *fold_keys), f32)
            if found is not None:
                out = _backends.lowered(
                    lambda t: functools.partial(t.fold, kind), found[1], found[0], *values
                )
        if out is None:
            out = _backends.lowered(_backends.exact_fold(kind), *values)
        if read_in_step:
            out = laundered(out)
        target = shape(site)
        return out if target in ((), None) or jnp.shape(out) == target else jnp.broadcast_to(out, target)

    for v, x in zip(jaxpr.constvars, consts):
        # A concrete one: a constant of both programs.
        record(v, x, not is_tracer(x), False, False, literal_key(x, getattr(x, "dtype", None)))
    n_in = len(args)
    for v, x, d, a, b, k in zip(
        jaxpr.invars, args, derived_in, live_in, splat_in or [False] * n_in, keys_in or [None] * n_in
    ):
        record(v, x, d, a, b, k)
    # A product of a value and a constant, as (value, constant).
    products: dict[Any, tuple[Any, Constant]] = {}
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            defined[v] = eqn
        inputs = [read(v) for v in eqn.invars]
        flags = [is_derived(v) for v in eqn.invars]
        lives = [not is_literal(v) and v in live for v in eqn.invars]
        splats = [is_splat(v) for v in eqn.invars]
        name = eqn.primitive.name
        is_float = _is_float(aval(eqn.outvars[0]).dtype) if eqn.outvars else False
        out_live = [all(flags) and any(lives)] * len(eqn.outvars)
        out_splat = [all(flags) and (name in _SPLAT_KEEPING and all(splats))] * len(eqn.outvars)
        out_keys: list[Any] = [None] * len(eqn.outvars)
        if is_float and name in ("div", "mul") and flags[1] != flags[0] and (name == "mul" or flags[1]):
            if name == "div":  # A / C => A * (1 / C), the reciprocal as the backend folds it
                reciprocal = folded("reciprocal", [eqn.invars[1]], eqn.invars[1], read_in_step=True)
                value, constant = inputs[0], Constant(reciprocal, splats[1], shape(eqn.invars[1]))
                inner = products.get(eqn.invars[0]) if not is_literal(eqn.invars[0]) else None
            else:
                i = 0 if flags[1] else 1  # the operand that is not a constant
                value, constant = inputs[i], Constant(inputs[1 - i], splats[1 - i], shape(eqn.invars[1 - i]))
                inner = products.get(eqn.invars[i]) if not is_literal(eqn.invars[i]) else None
            if inner is not None and reassociates(inner[1], constant, eqn.outvars[0]):
                # (A * C1) * C2 => A * (C1 * C2)
                product = lax.mul(inner[1].value, constant.value)
                splat_product = inner[1].splat and constant.splat
                value, constant = inner[0], Constant(product, splat_product, shape(eqn.outvars[0]))
            outputs = [lax.mul(value, laundered(constant.value))]
            products[eqn.outvars[0]] = (value, constant)
            out_flags = [False]
        elif is_float and name == "mul" and not any(flags) and (found := scaled_product(eqn)) is not None:
            # (A * C) * s => A * (s * C): XLA's algebraic simplifier multiplies the scalars first
            # where the inner factor is a constant scalar (a splat) and the outer one a scalar
            # read at run time (adafactor's learning rate times its parameter scale); with the
            # constant a leaf it would not, so the build does.
            (value, constant), scalar = found
            factor = lax.mul(read(scalar), laundered(_the_scalar(constant.value)))
            outputs = [lax.mul(value, lax.broadcast_in_dim(factor, shape(eqn.outvars[0]), ()))]
            out_flags = [False]
        elif is_float and name == "pow" and lives[0] and not flags[1]:
            # A constant base: the backend's compiler may fold part of the power (its logarithm).
            log2_base = folded("log2", [eqn.invars[0]], eqn.invars[0], read_in_step=True)
            base = laundered(inputs[0])
            outputs = [_backends.lowered(_power_of_constant_base, base, inputs[1], log2_base)]
            out_flags = [False]
        elif name in INLINED and "jaxpr" in eqn.params:
            inner = eqn.params["jaxpr"]
            outputs, out_flags, out_live, out_splat, out_keys = _rewritten(
                inner.jaxpr,
                list(inner.consts),
                inputs,
                flags,
                lives,
                splats,
                [key(v) for v in eqn.invars],
                folds,
            )
        elif name == "cond" and any(lives[1:]) and not eqn.effects:
            # A combinator's branch (MultiSteps, apply_if_finite): XLA folds the constants
            # inside a branch as outside it, so the branches are rewritten too.
            operand_keys = [key(v) for v in eqn.invars[1:]]
            outputs = _rewritten_cond(eqn, inputs, flags[1:], lives[1:], splats[1:], operand_keys, folds)
            out_flags = [False] * len(outputs)
            out_live = out_splat = out_flags
            out_keys = [None] * len(outputs)
        elif is_float and name in _FOLDED and all(flags) and any(lives):
            # Constants alone: folded by XLA on the host, correctly rounded.
            outputs = [folded(name, list(eqn.invars), eqn.outvars[0])]
            out_flags = [not eqn.effects]
            out_keys = [key_of(eqn, [key(v) for v in eqn.invars])]
        else:
            if (
                zero is not None
                and any(lives)
                and not (all(flags) and all(shape(o) in ((), None) for o in eqn.outvars))
            ):
                # Read by the step's work (with its values, or broadcast to them).
                inputs = [laundered(x) if a else x for x, a in zip(inputs, lives)]
            out = bind(eqn, inputs)
            outputs = list(out) if eqn.primitive.multiple_results else [out]
            out_flags = [all(flags) and not eqn.effects] * len(outputs)
            if out_flags[0] and len(outputs) == 1:
                out_keys = [key_of(eqn, [key(v) for v in eqn.invars])]
        for v, x, d, a, b, k in zip(eqn.outvars, outputs, out_flags, out_live, out_splat, out_keys):
            record(v, x, d, a, b, k)
    outs = jaxpr.outvars
    out_live = [not is_literal(v) and v in live for v in outs]
    return (
        [read(v) for v in outs],
        [is_derived(v) for v in outs],
        out_live,
        [is_splat(v) for v in outs],
        [key(v) for v in outs],
    )


def _rewritten_cond(
    eqn: JaxprEqn,
    inputs: list[Any],
    flags: list[bool],
    lives: list[bool],
    splats: list[bool],
    keys: list[Any],
    folds: Folds | None,
) -> list[Any]:
    """A ``cond`` whose branches are evaluated with the rewrites (``lax.switch`` of them)."""
    index, operands = inputs[0], inputs[1:]

    def branch(closed: Any) -> Callable[..., Any]:
        def run(*xs: Any) -> Any:
            return _rewritten(closed.jaxpr, list(closed.consts), list(xs), flags, lives, splats, keys, folds)[
                0
            ]

        return run

    return list(lax.switch(index, [branch(b) for b in eqn.params["branches"]], *operands))


# --------------------------------------------------------------------------
# What a value of the hyperparameters alone is computed from: its key.
#
# The TPU's compiler folds a program's constants on the host (a reciprocal, a quotient, a
# logarithm: correctly rounded); a wrapped object's hyperparameters are arguments, so the
# wrapped build once computed each of those values exactly on the device, in every call
# (hundreds of scalar operations, compiled every time). Now an object carries them,
# computed on its host values when it is made (``_folds``), like the host values of
# optax's Python arithmetic: a *fold* is a (kind, key, ...) of what the compiler folds, and
# a key says what a value is computed from, the same in every program that computes it:
# an input of the program, ``(INPUT, position)``; a literal, ``(LITERAL, dtype, bits)``; or
# ``(primitive, parameters, dtype, *operand keys)`` for a primitive that the host computes
# exactly as the device does (IEEE arithmetic, comparisons, bit operations, conversions,
# data movement). Plain tuples of strings, numbers, bytes and dtypes: a spec's folds are
# part of its analysis, kept on disk.

INPUT = "input"
LITERAL = "literal"
# An owner's own inputs, in the keys of its folds (``Folds``): a dynamic leaf's j-th array, an
# ``exact`` vector.
LEAF = "leaf"
EXACT = "exact"

# Primitives whose host value (NumPy, ``_rules.NUMPY``) is the device's, bit for bit.
_KEYED = frozenset(
    "add sub mul div neg abs max min sqrt sign floor ceil select_n eq ne lt le gt ge and or xor "
    "not shift_left shift_right_arithmetic bitcast_convert_type convert_element_type "
    "broadcast_in_dim reshape squeeze expand_dims slice stop_gradient copy copy_p clamp".split()
)
# (Each has a rule in ``_rules.NUMPY`` and ``_rules.JAX``: checked at the end of the module.)
# Primitives that only reshape: a splat's scalar is found through them.
_SHAPE_ONLY = frozenset(("broadcast_in_dim", "reshape", "squeeze", "expand_dims", "copy", "copy_p"))
_PARAMETER_TYPES = (type(None), bool, int, float, str, np.dtype)
# Parameters that do not change a value (a weak type, a placement): not part of its key.
_VALUELESS = frozenset(("weak_type", "sharding"))


def literal_key(value: Any, dtype: Any) -> Any:
    """The key of a scalar constant (its bits), or None (an array, or not a number)."""
    if dtype is None or is_tracer(value):
        return None
    try:
        x = np.asarray(value, dtype=np.dtype(dtype))
    except (TypeError, ValueError):
        return None
    if x.ndim != 0 or x.dtype.kind not in "biuf":
        return None
    return (LITERAL, x.dtype.name, x.tobytes())


def _frozen(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        items = [_frozen(v) for v in value]
        return _UNKEYED if any(i is _UNKEYED for i in items) else tuple(items)
    if isinstance(value, _PARAMETER_TYPES):
        return value
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value)
    return _UNKEYED


_UNKEYED = object()


def key_of(eqn: JaxprEqn, operands: list[Any]) -> Any:
    """The key of an equation's single output, given its operands' keys (None: no key)."""
    name = eqn.primitive.name
    if name not in _KEYED or len(eqn.outvars) != 1 or any(k is None for k in operands):
        return None
    params = []
    for k, v in sorted(eqn.params.items()):
        if k in _VALUELESS:
            continue
        frozen = _frozen(v)
        if frozen is _UNKEYED:
            return None
        params.append((k, frozen))
    out = aval(eqn.outvars[0])
    if getattr(out, "shape", None) != ():
        if name not in _SHAPE_ONLY:
            return None
    return (name, tuple(params), np.dtype(out.dtype).name, *operands)


def references(keys: Any) -> list[Any]:
    """The owner's own inputs that keys in its terms read: ``(LEAF, name, j)``, ``(EXACT, g)``."""
    out: list[Any] = []
    for key in keys:
        if key[0] in (LEAF, EXACT):
            out.append(key)
        elif key[0] != LITERAL:
            out += references(key[3:])
    return out


def reads_inputs(key: Any) -> bool:
    """Whether a key reads an input of the program (else it is of literals alone)."""
    if key[0] == INPUT:
        return True
    return key[0] != LITERAL and any(reads_inputs(k) for k in key[3:])


def evaluate_key(key: Any, env: Mapping[Any, Any], traced: bool = False) -> Any:
    """A key's value: on the host (NumPy, as the device computes it), or ``traced`` (JAX's
    operations, where ``env``'s values are traced); ``env`` gives its inputs' values."""
    if key[0] == LITERAL:
        return np.frombuffer(key[2], np.dtype(key[1]))[0]
    if key in env:
        return env[key]
    name, params, dtype, *operands = key
    xs = [evaluate_key(k, env, traced) for k in operands]
    if traced:
        return jnp.asarray(_rules.JAX[name](*xs, **dict(params))).astype(np.dtype(dtype))
    with np.errstate(all="ignore"):
        out = _rules.NUMPY[name](*xs, **dict(params))
    return np.asarray(out).astype(np.dtype(dtype), copy=False)


def host_fold(kind: str, values: list[Any]) -> Any:
    """A fold of constants, computed on the host as the compiler folds it (None: the device's)."""
    xs = [np.asarray(x) for x in values]
    if not xs or any(x.dtype not in _HOST_DTYPES or x.dtype != xs[0].dtype for x in xs):
        return None
    if _quiet_numpy():
        out = _HOST_FOLDS[kind](*xs)
    else:
        with np.errstate(all="ignore"):
            out = _HOST_FOLDS[kind](*xs)
    return None if out is None else np.asarray(out, xs[0].dtype)


def _quiet_numpy() -> bool:
    """Whether NumPy's floating-point warnings are off here already (``np.errstate``)."""
    return np.geterr()["divide"] == "ignore" and np.geterr()["invalid"] == "ignore"


_HOST_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # rounded by the host as by the device


_TINY = float(np.finfo(np.float32).tiny)


def _host_log2(c: Any) -> Any:
    if c.dtype != np.float32:
        return None
    if c.ndim == 0:  # a scalar (the common case: at every wrap), in Python's floats
        v = float(c)
        return np.float32(np.log2(v) if _TINY <= v < math.inf else 0.0)
    valid = (c > 0) & np.isfinite(c) & (c >= np.finfo(np.float32).tiny)
    return np.where(valid, np.log2(np.where(valid, c, 1.0).astype(np.float64)), 0.0).astype(np.float32)


_HOST_FOLDS: dict[str, Callable[..., Any]] = {
    "reciprocal": lambda c: np.asarray(1, c.dtype) / c,
    "div": lambda a, b: a / b,
    "sqrt": np.sqrt,
    "rsqrt": lambda a: np.asarray(1, a.dtype) / np.sqrt(a),
    "log2": _host_log2,
}


class Folds:
    """The carried folds a call can use: its owner's and its children's, each at its inputs.

    An owner (a wrapped object's core) carries, in its ``exact`` child, the
    folds its spec lists (``Spec.folds``, in keys of its own: ``(LEAF, name,
    j)`` for its dynamic leaves, ``(EXACT, g)`` for its exact vectors),
    and a fingerprint of what they were computed from. A call's program has
    the owner's leaves and its children's as inputs, in flattening order:
    their positions say whose a key is. ``use`` answers a fold with the
    carried value and whether it is fresh (traced), or None (not carried:
    the device computes it); in a learning run (:func:`learning`) it records
    the owner's own folds.
    """

    def __init__(self, owner: Any, flat: list[Any]):
        self.owner = owner
        self.flat = flat
        self._owners: list[_Owner] | None = None
        self._where: dict[int, tuple[int, Any]] = {}

    def owners(self) -> list[_Owner]:
        if self._owners is None:
            found: list[_Owner] = []
            try:
                end = _walk(self.owner, 0, found)
            except Exception:  # noqa: BLE001 - a layout this walk does not know: no carried folds
                end = -1
            if end != len(self.flat):
                found = []
            self._owners = found
            for i, o in enumerate(found):
                for position, ref in o.refs.items():
                    self._where[position] = (i, ref)
        return self._owners

    def localize(self, key: Any) -> tuple[int, Any] | None:
        """``key`` in the terms of the one owner whose inputs it reads, or None."""
        owners = self.owners()
        if not owners:
            return None
        found: set[int] = set()

        def walk(k: Any) -> Any:
            if k[0] == INPUT:
                where = self._where.get(k[1])
                if where is None:
                    raise LookupError
                found.add(where[0])
                return where[1]
            if k[0] == LITERAL:
                return k
            return (*k[:3], *(walk(c) for c in k[3:]))

        try:
            local = (key[0], *(walk(c) for c in key[1:]))  # (kind, operand keys...)
        except LookupError:
            return None
        if len(found) != 1:
            return None
        return found.pop(), local

    def use(self, fold: Any, float32: bool) -> tuple[Any, Any] | None:
        """(carried value, fresh) of a fold, or None; records it in a learning run."""
        where = self.localize(fold)
        if where is None:
            return None
        index, local = where
        learned = _LEARNED[0]
        if learned is not None and index == 0 and float32 and local not in learned:
            learned.append(local)
        return self.owners()[index].carried(local, self.flat)


class _Owner:
    """One wrapped object among a call's inputs: where its inputs are, what it carries."""

    def __init__(self, core: Any):
        self.core = core
        self.refs: dict[int, Any] = {}  # position in the call's inputs -> (LEAF, name, j) | (EXACT, g)
        # Computed once per trace (a cond's branch is one of its own: a value made there must
        # not be used outside it): (trace, values of the exact child, whether fresh).
        self._read: tuple[Any, list[Any], Any] | None = None

    def carried(self, local: Any, flat: list[Any]) -> tuple[Any, Any] | None:
        spec = self.core.spec
        index = spec.fold_index.get(local)
        if index is None:
            return None
        values, fresh = self._read_exact(flat)
        return values[spec.folds_at + index], fresh

    def _read_exact(self, flat: list[Any]) -> tuple[list[Any], Any]:
        """The values of the owner's ``exact`` child and whether its folds are fresh, once a trace."""
        trace = jax_core.trace_ctx.trace
        if self._read is None or self._read[0] is not trace:
            vectors = [flat[p] for p, ref in sorted(self.refs.items()) if ref[0] == EXACT]
            values = _leaves.exact_values(tuple(vectors), self.core.spec.carried_dtypes)
            self._read = (trace, values, self._check(values, flat))
        return self._read[1], self._read[2]

    def _check(self, values: list[Any], flat: list[Any]) -> Any:
        """Whether the carried folds were computed from these leaves (traced)."""
        at = {ref: p for p, ref in self.refs.items()}
        now = _leaves.fingerprint([flat[at[ref]] for ref in self.core.spec.fold_refs])
        return jnp.all(now == values[-1])


def _walk(core: Any, start: int, out: list[_Owner]) -> int:
    """Appends ``core``'s owner (and its children's, in flattening order); the position after it."""
    me = _Owner(core)
    out.append(me)
    spec = core.spec
    position = start
    for name, leaf in zip(spec.leaf_names, core.leaves):
        dynamic = spec.roles[name] == Role.DYNAMIC
        for j, x in enumerate(jax.tree_util.tree_leaves(leaf, is_leaf=is_wrapped)):
            if is_wrapped(x):
                position = _walk(x._core, position, out)
                continue
            if dynamic:
                me.refs[position] = (LEAF, name, j)
            position += 1
    for g in range(len(core.exact or ())):
        me.refs[position] = (EXACT, g)
        position += 1
    return position


# Where a learning run records the folds it meets (``learning``), else None.
_LEARNED: list[list[Any] | None] = [None]


def is_learning() -> bool:
    """Whether a learning run (:class:`learning`) is recording."""
    return _LEARNED[0] is not None


class learning:
    """Records the folds an object's own call reads (its spec's ``folds``), in order."""

    def __enter__(self) -> list[Any]:
        self.before = _LEARNED[0]
        _LEARNED[0] = found = []
        return found

    def __exit__(self, *exc: Any) -> None:
        _LEARNED[0] = self.before


# Primitives whose output is one scalar in every element where each input is: a broadcast
# of a scalar constant stays one through them in XLA (its simplifier moves the broadcast
# after the operation, and folds the scalar operation), where it folds other values of
# constants alone into an array constant.
_SPLAT_KEEPING = frozenset(
    (
        "broadcast_in_dim",
        "reshape",
        "squeeze",
        "expand_dims",
        "convert_element_type",
        "neg",
        "add",
        "sub",
        "mul",
        "div",
        "max",
        "min",
        "sqrt",
        "rsqrt",
        "exp",
        "log",
        "pow",
        "integer_pow",
        "abs",
        "copy",
    )
)


class Constant(NamedTuple):
    """A constant factor of a product: its value, whether one scalar in every element, its shape."""

    value: Any
    splat: bool
    shape: Any


# The primitives of constants alone some backend folds otherwise than its device computes them.
_FOLDED = frozenset().union(*(t.folded for t in _backends.TABLE.values()))


def _the_scalar(x: Any) -> Any:
    """The one value of a splat (a scalar, or a broadcast of one)."""
    return x if jnp.ndim(x) == 0 else jnp.ravel(x)[0]


def _power_of_constant_base(treatment: _backends.Treatment) -> Callable[[Any, Any, Any], Any]:
    rule = treatment.power_of_constant_base
    return (lambda c, t, _: lax.pow(c, t)) if rule is None else rule


def _is_float(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


# --------------------------------------------------------------------------
# With NumPy (the verification).


def evaluate(closed: ClosedJaxpr, *args: Any) -> list[Any]:
    """The outputs of a closed jaxpr for ``args``, computed with NumPy (see above)."""
    with np.errstate(all="ignore"):
        return _evaluate(closed.jaxpr, list(closed.consts), list(args))


def _value(x: Any) -> Any:
    if isinstance(x, jax.Array) and not jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(x)
    return x


def _evaluate(jaxpr: Jaxpr, consts: list[Any], args: list[Any]) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v: Var | Literal) -> Any:
        if is_literal(v):
            dtype = getattr(v.aval, "dtype", None)  # a token has none
            return v.val if dtype is None else np.asarray(v.val, dtype)
        return env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = _value(x)
    for v, x in zip(jaxpr.invars, args):
        env[v] = _value(x)
    for eqn in jaxpr.eqns:
        inputs = [read(v) for v in eqn.invars]
        outputs = _apply(eqn, inputs)
        for v, x in zip(eqn.outvars, outputs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _apply(eqn: JaxprEqn, inputs: list[Any]) -> list[Any]:
    name, params = eqn.primitive.name, eqn.params
    rule = _rules.NUMPY.get(name)
    if rule is not None and not any(is_key(x) for x in inputs):
        out = rule(*inputs, **params)
        dtype = aval(eqn.outvars[0]).dtype
        return [np.asarray(out).astype(dtype, copy=False)]
    sub = params.get("jaxpr") if name in INLINED else None
    if sub is None and name.startswith("custom_"):
        sub = params.get("call_jaxpr") or params.get("fun_jaxpr")
    if sub is not None and hasattr(sub, "jaxpr"):
        return _evaluate(sub.jaxpr, list(sub.consts), inputs)
    if name == "cond":
        index, operands = inputs[0], inputs[1:]
        branch = params["branches"][int(np.clip(np.asarray(index), 0, len(params["branches"]) - 1))]
        return _evaluate(branch.jaxpr, list(branch.consts), operands)
    if name == "while":
        return _while(params, inputs)
    if name == "scan":  # with NumPy too: a loop of a static length is a scan, of a traced one a while
        return _scan(eqn, inputs)
    # Anything else: JAX's own implementation, eagerly.
    args = [jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x for x in inputs]
    out = bind(eqn, args)
    return [_value(x) for x in (out if eqn.primitive.multiple_results else [out])]


def _scan(eqn: JaxprEqn, inputs: list[Any]) -> list[Any]:
    params = eqn.params
    nc, ncarry, body = params["num_consts"], params["num_carry"], params["jaxpr"]
    consts, carry, xs = inputs[:nc], inputs[nc : nc + ncarry], inputs[nc + ncarry :]
    steps = range(params["length"])
    ys: list[list[Any]] = []
    for i in reversed(steps) if params["reverse"] else steps:
        out = _evaluate(body.jaxpr, list(body.consts), [*consts, *carry, *(x[i] for x in xs)])
        carry = out[:ncarry]
        ys.append(out[ncarry:])
    if params["reverse"]:
        ys.reverse()
    stacked = [
        np.stack([y[j] for y in ys]) if ys else np.zeros(aval(v).shape, aval(v).dtype)
        for j, v in enumerate(eqn.outvars[ncarry:])
    ]
    return [*carry, *stacked]


def _while(params: Any, inputs: list[Any]) -> list[Any]:
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    cond_consts, body_consts, carry = inputs[:nc], inputs[nc : nc + nb], inputs[nc + nb :]
    while bool(_evaluate(cond.jaxpr, list(cond.consts), [*cond_consts, *carry])[0]):
        carry = _evaluate(body.jaxpr, list(body.consts), [*body_consts, *carry])
    return carry


assert _KEYED <= set(_rules.NUMPY) and _KEYED <= set(_rules.JAX), _KEYED - set(_rules.NUMPY) - set(_rules.JAX)
