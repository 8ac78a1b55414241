"""Build: a wrapped object's call staged once per configuration, and its program simplified.

Every ``init``, ``update`` and schedule call of a wrapped object whose
hyperparameters are traced builds the optax object anew and redoes XLA's
rewrites of constants on its program (``_jaxprs.rewritten_call``): the
factory's call traced to a jaxpr, then evaluated again equation by equation.
That work is the same for every call of one configuration with inputs of the
same types, so :func:`call` does it once (:func:`_program`: a jaxpr of the
rewritten call and its constants, kept in ``_PROGRAMS``) and each later call binds that
program's equations into its own trace: a new jitted function with the same
optimizer (a builder called once per trial, a training function made again,
a notebook cell run again) traces none of the factory's code again. JAX's own
``jit`` caches do the same for one function; these hold across functions.

The staged program is simplified once (:func:`simplified`): what XLA would
do first anyway (equal computations shared, conversions to the same type
dropped, what nothing reads removed), so that lowering and the compiler start
from fewer operations. Where the process lowers for several backends, each
operation a backend treats otherwise keeps its own choice of platform
(``_backends.lowered``): one choice for the whole call, measured on a TPU's
machine, made the lowering twice as slow (the whole call inside one branch).

What is not staged is rewritten in place, as before: a call with a concrete
hyperparameter (a constant of the program, as in plain optax) or an argument
that is not an array, a learning run (``_jaxprs.learning``), a call whose
program captures a value of another trace, or one the staging fails for.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
from jax._src import core as jax_core
from jax._src.config import trace_context  # JAX's configuration that tracing depends on

from . import _backends, _jaxprs, _leaves
from ._caches import cache

if TYPE_CHECKING:  # JAX's own types of a program (``jax.extend.core``), for the reader and pyright
    from jax.extend.core import Jaxpr, JaxprEqn


def call(owner: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``method`` (``"init"``, ``"update"``, ``"__call__"``) of what ``owner`` builds from its
    ``(leaves, exact)``, dividing by values of the hyperparameters alone as by constants;
    ``owner``: the wrapped object's core (``_core.Core``), whose carried folds (and its
    children's) stand for what the backend's compiler folds.

    Where every hyperparameter is traced (the object an argument of ``jit``, ``grad`` with
    respect to it, a ``vmap`` over it) and every argument is an array, the rewritten program
    is traced once per configuration and argument types (:func:`_program`), and each call
    binds its equations again: a new program with the same optimizer does not trace and
    rewrite the factory's call again.
    """

    def fn(h: Any, *a: Any, **k: Any) -> Any:
        return getattr(owner.built_from(h), method)(*a, **k)

    hyper = (owner.leaves, owner.exact)
    hyper_flat, hyper_tree = jax.tree_util.tree_flatten(hyper)
    if not _jaxprs.REWRITE or not any(_leaves.is_tracer(x) for x in hyper_flat):
        return fn(hyper, *args, **kwargs)
    flat, tree = jax.tree_util.tree_flatten((args, kwargs))
    # Arrays are inputs of the jaxpr; anything else (a loss function given
    # to a line search) is passed through as it is.
    where = [i for i, x in enumerate(flat) if _jaxprs.is_array(x)]
    inputs = [*hyper_flat, *(flat[i] for i in where)]
    key = None
    staged = len(where) == len(flat) and all(_leaves.is_tracer(x) for x in hyper_flat)
    if staged and not _jaxprs.is_learning():
        key = _program_key(owner, method, hyper_tree, tree, inputs)
    if key is not None:
        found = _PROGRAMS.get(key)
        if found is None:
            # A configuration that cannot be staged is remembered so too: not tried again.
            found = _program(fn, owner, hyper_tree, tree, where, flat, inputs) or _NOT_STAGED
            _PROGRAMS.set(key, found)
        if found is not _NOT_STAGED:
            jaxpr, consts, out_tree = found
            # Each equation takes this call's source location, as when traced here: the
            # staging's own frames would make every location of the lowered program longer.
            outs = jax_core.eval_jaxpr(jaxpr, consts, *inputs, propagate_source_info=False)
            return jax.tree_util.tree_unflatten(out_tree, outs)
    plain = lambda: fn(hyper, *args, **kwargs)  # noqa: E731
    return _jaxprs.rewritten_call(fn, owner, hyper_tree, flat, tree, where, inputs, plain)


def _program(
    fn: Callable[..., Any],
    owner: Any,
    hyper_tree: Any,
    tree: Any,
    where: list[int],
    flat: list[Any],
    inputs: list[Any],
) -> tuple[Jaxpr, list[Any], Any] | None:
    """The rewritten call as one jaxpr of ``inputs`` (the hyperparameters, then the arguments)
    and its constants, simplified (:func:`simplified`), and its output structure; None where
    it cannot be staged so (the caller rewrites in place, as before)."""
    box: list[Any] = []

    def staged(*xs: Any) -> Any:
        out = _jaxprs.rewritten_call(fn, owner, hyper_tree, flat, tree, where, list(xs), None)
        out_flat, out_tree = jax.tree_util.tree_flatten(out)
        box[:] = [out_tree]
        return out_flat

    try:
        closed = jax.make_jaxpr(staged)(*inputs)
    except Exception:  # noqa: BLE001 - anything the staging adds: rewritten in place, as before
        return None
    if not box or any(_leaves.is_tracer(c) for c in closed.consts):
        return None  # a value of another trace captured: not a program of its inputs alone
    return (*simplified(closed.jaxpr, list(closed.consts)), box[0])


def _program_key(owner: Any, method: str, hyper_tree: Any, tree: Any, inputs: list[Any]) -> Any:
    """What the staged program of a call depends on: the owner's configuration, the method, the
    structures and types of its inputs, the backends' treatments and JAX's tracing context;
    None: not hashable (not staged)."""
    try:
        avals = tuple(_typeof(x) for x in inputs)
        treatments = tuple((p, id(_backends.treatment(p))) for p in _backends.platforms())
        key = (owner.spec, method, hyper_tree, tree, avals, treatments, trace_context())
        hash(key)
    except Exception:  # noqa: BLE001 - an input or aux data that cannot be a key: not staged
        return None
    return key


# A value's abstract type (shape, dtype, weak type, sharding): ``jax.typeof`` where JAX has it.
_typeof: Callable[[Any], Any] = getattr(jax, "typeof", None) or vars(jax_core)["get_aval"]


# What ``_PROGRAMS`` keeps for a configuration whose call could not be staged.
_NOT_STAGED: Any = object()

_PROGRAMS = cache(
    "(configuration, method, input structures and types, treatments, tracing context) -> the "
    "rewritten call's jaxpr, its constants and its output structure (or: not staged)",
    512,
)


# --------------------------------------------------------------------------
# Simplifying a staged program: what XLA would do first, done once per program.


def simplified(jaxpr: Jaxpr, consts: list[Any]) -> tuple[Jaxpr, list[Any]]:
    """``jaxpr`` (and its ``consts``) with equal computations shared and conversions to the same
    type dropped.

    Each equation of an effect-free, first-order primitive whose operands and
    parameters equal an earlier one's is replaced by that one's outputs (the
    rewrite reads an object's carried values and their fingerprint in several
    places); a ``convert_element_type`` to its operand's own type is dropped;
    then what nothing reads is removed. The same values: XLA does each of these
    at compile time, so only the work of getting there is saved.
    """
    rename: dict[Any, Any] = {}
    seen: dict[Any, list[Any]] = {}
    eqns: list[Any] = []

    def sub(v: Any) -> Any:
        return v if _jaxprs.is_literal(v) else rename.get(v, v)

    for eqn in jaxpr.eqns:
        invars = [sub(v) for v in eqn.invars]
        if invars != list(eqn.invars):
            eqn = eqn.replace(invars=invars)
        if _is_noop_convert(eqn):
            rename[eqn.outvars[0]] = invars[0]
            continue
        k = _eqn_key(eqn)
        if k is not None:
            earlier = seen.get(k)
            if earlier is not None:
                rename.update(zip(eqn.outvars, earlier))
                continue
            # An output nothing read where it was traced (``_``) cannot stand for a later one.
            if not any(isinstance(v, jax_core.DropVar) for v in eqn.outvars):
                seen[k] = list(eqn.outvars)
        eqns.append(eqn)
    outvars = [sub(v) for v in jaxpr.outvars]
    new = jaxpr.replace(eqns=eqns, outvars=outvars)
    from jax._src.interpreters import partial_eval as pe

    new, used_consts, _ = pe.dce_jaxpr_consts(new, [True] * len(outvars), instantiate=True)
    return new, [c for c, used in zip(consts, used_consts) if used]


def _is_noop_convert(eqn: JaxprEqn) -> bool:
    if eqn.primitive.name != "convert_element_type":
        return False
    operand: Any = eqn.invars[0]
    if _jaxprs.is_literal(operand):
        return False
    a, out = _jaxprs.aval(operand), _jaxprs.aval(eqn.outvars[0])
    return (
        getattr(a, "dtype", None) == getattr(out, "dtype", 0)
        and getattr(a, "weak_type", None) == getattr(out, "weak_type", 0)
        and getattr(a, "shape", None) == getattr(out, "shape", 0)
        and eqn.params.get("sharding") is None
    )


def _eqn_key(eqn: JaxprEqn) -> Any:
    """What makes an equation's outputs equal to another's: its primitive, parameters and
    operands; None where it is not shared (effects, sub-programs, unhashable parameters)."""
    if eqn.effects or _jaxprs.sub_jaxprs(eqn) or eqn.primitive.name in _UNSHARED:
        return None
    operands: list[Any] = []
    for v in eqn.invars:
        if _jaxprs.is_literal(v):
            k = _jaxprs.literal_key(v.val, getattr(v.aval, "dtype", None))
            if k is None:
                return None
            operands.append(k)
        else:
            operands.append(v)
    try:
        params = tuple(sorted(eqn.params.items()))
        key = (eqn.primitive, params, tuple(operands))
        hash(key)
    except TypeError:
        return None
    return key


# Primitives not shared even where equal (each call is a value of its own).
_UNSHARED = frozenset(("rng_uniform", "rng_bit_generator", "create_token", "after_all"))
