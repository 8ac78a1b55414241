"""Feature: why two optimizers do not share a compilation: path by path, with the fix in words.

A sweep that recompiles says little about why: ``jax_explain_cache_misses``
reports that a static argument (a treedef) differs, not which hyperparameter
of which member of a ``chain``, nor what to change. :func:`explain` walks
two pytrees side by side, through the library's own structures (a wrapped
object's static configuration, its children, the closures that became
children, the functions held static) and through any other pytree (a dict
of parameters, an optimizer state), and names each difference that makes
another program: its key path, the two values, and the fix.

Two parts: the walk (:func:`explain`, the pytrees side by side), and how
two static values differ, in words (the end of the module): why an argument
is static (detected, marked, made static by the library), where two static
values differ, read off their keys (``_static.freeze``: a function by its
code, module, defaults and captured cells; an object of the program's by
what is read of it, else by identity), and the short texts a report shows.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import os
import re
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from . import _backends, _expr, _leaves, _spec, _static
from ._bind import is_plain_transformation, is_wrapped
from ._classify import factory_key
from ._spec import Spec
from ._tree import spec_of
from ._vocabulary import Role

_LIMIT = 80  # a value's repr in a report, at most


class Cause(NamedTuple):
    """One reason two pytrees do not share a compilation."""

    path: str  # where, as a key path (``adamw.learning_rate.peak_value``); the root's is ``(root)``
    what: str  # what differs, both values
    fix: str  # what to do about it, in words


class Explanation:
    """What :func:`explain` returns: ``str()`` is the report, ``bool()`` whether they share.

    Attributes:
        shared: whether the two pytrees share one compilation (equal treedefs
            and leaves of equal shape, dtype and weak type).
        differences: each reason they do not (empty when they share).
    """

    __slots__ = ("differences", "shared")

    def __init__(self, shared: bool, differences: tuple[Cause, ...]):
        self.shared = shared
        self.differences = differences

    def __bool__(self) -> bool:
        return self.shared

    def __str__(self) -> str:
        if self.shared:
            return "one compilation: same structure and leaf shapes/dtypes"
        n = len(self.differences)
        lines = [f"two compilations: {n} difference{'' if n == 1 else 's'}"]
        for d in self.differences:
            lines.append(f"- {d.path}: {d.what}")
            lines.append(f"  fix: {d.fix}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def explain(a: Any, b: Any) -> Explanation:
    """Says why two optimizers do not share a compilation, path by path, with the fix.

    A sweep compiles once when every trial's optimizer has the same static
    configuration; one that does not recompiles, and JAX's
    ``jax_explain_cache_misses`` only says that a static argument (a treedef)
    differs. ``explain`` names each argument that differs, by its key path
    (through ``chain``, schedules, closures given as schedules), with both
    values and what to change: a static argument's value (and why it is
    static), a guarded argument on another branch of the factory, an
    argument dynamic in one and static in the other, a function compared by
    identity (and what it captures), a leaf's shape, dtype or weak type, or
    another factory altogether.

    Two pytrees share a compilation of a function that takes them as
    arguments when their treedefs are equal and their leaves have the same
    shapes, dtypes and weak types.

    Args:
        a: a pytree: a wrapped optimizer or schedule (``opx.wrap``, the
            drop-in ``optax_pytree.optax``), a stateful one
            (``opx.wrap_transformation_as_pytree_with_state``), or any pytree
            holding them (``(tx, params)``).
        b: another, to compare with ``a``.

    Returns:
        An :class:`Explanation`: ``str()`` of it is the report (one line when
        they share, else one entry per difference with its fix),
        ``bool()`` of it is True when they share one compilation, and
        ``.differences`` holds each difference as ``(path, what, fix)``.

    Examples:
        >>> import optax, optax_pytree as opx
        >>> a = opx.wrap(optax.adam, 1e-3, b1=opx.static(0.9))
        >>> print(opx.explain(a, a.replace(learning_rate=3e-4)))
        one compilation: same structure and leaf shapes/dtypes
        >>> print(opx.explain(a, a.replace(b1=0.8)))  # doctest: +NORMALIZE_WHITESPACE
        two compilations: 1 difference
        - adam.b1: static value 0.9 vs 0.8 (static: marked static by static_argnames or optax_pytree.static)
          fix: pass it as a number, not in static_argnames nor optax_pytree.static, to keep it a
          dynamic leaf; as it is, each value is a compilation
    """
    shared = _shares(a, b)
    if shared:
        return Explanation(True, ())
    out: list[Cause] = []
    root = _root_name(a)
    try:
        _walk(a, b, root, out)
    except Exception as e:  # noqa: BLE001 - a report never raises: say what could not be walked
        out.append(Cause(root or "(root)", f"could not be compared further ({type(e).__name__}: {e})", _ASK))
    if not out:
        out.append(
            Cause(
                "(root)",
                f"the treedefs differ: {cut(jax.tree_util.tree_structure(a))} vs "
                f"{cut(jax.tree_util.tree_structure(b))}",
                _ASK,
            )
        )
    return Explanation(False, _grouped(out))


def _grouped(found: list[Cause]) -> tuple[Cause, ...]:
    """Consecutive differences alike (every leaf of a batch) as one, their paths listed."""
    groups: list[list[Cause]] = []
    for d in found:
        if groups and (groups[-1][0].what, groups[-1][0].fix) == (d.what, d.fix):
            groups[-1].append(d)
        else:
            groups.append([d])
    out: list[Cause] = []
    for group in groups:
        paths = [d.path for d in group]
        shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
        out.append(group[0]._replace(path=shown))
    return tuple(out)


_ASK = "make both the same there (explain could not name the part that differs)"


# --------------------------------------------------------------------------
# Whether they share, and leaves.


def _aval(x: Any) -> Any:
    """What ``jit`` keys a leaf by (a ShapedArray: shape, dtype, weak type), or None."""
    typeof: Callable[[Any], Any] | None = getattr(jax, "typeof", None)
    try:
        if typeof is not None:
            return typeof(x)
        return jax.api_util.shaped_abstractify(x)  # pyright: ignore[reportAttributeAccessIssue] - JAX < 0.6
    except Exception:  # noqa: BLE001 - not a JAX type (a str leaf): compared by value instead
        return None


def _shares(a: Any, b: Any) -> bool:
    leaves_a, treedef_a = jax.tree_util.tree_flatten(a)
    leaves_b, treedef_b = jax.tree_util.tree_flatten(b)
    if treedef_a != treedef_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        ax, ay = _aval(x), _aval(y)
        if ax is None or ay is None:
            if not (ax is None and ay is None and _same_object_leaf(x, y)):
                return False
        elif ax != ay:
            return False
    return True


def _same_object_leaf(x: Any, y: Any) -> bool:
    """Leaves that are no arrays (a function, a string) as ``eqx.filter_jit`` compares them: by
    ``==`` (``jax.jit`` refuses them as arguments)."""
    try:
        return type(x) is type(y) and bool(x == y)
    except Exception:  # noqa: BLE001 - an ``==`` that does not give a bool
        return x is y


def _aval_text(aval: Any) -> str:
    text = _leaves.aval_text(tuple(aval.shape), aval.dtype)
    return f"{text} weakly typed" if getattr(aval, "weak_type", False) else text


def _given(x: Any) -> str:
    """A leaf as the user gave it: ``a Python float``, ``a NumPy float64[3] array``."""
    if type(x) in (bool, int, float, complex):
        return f"a Python {type(x).__name__}"
    if isinstance(x, np.ndarray):
        return f"a NumPy {_leaves.aval_text(x.shape, x.dtype)} array"
    if isinstance(x, np.generic):
        return f"a NumPy {type(x).__name__} scalar"
    if isinstance(x, jax.Array):
        weak = getattr(x, "weak_type", False)
        return "from a Python number" if weak and x.ndim == 0 else "an array"
    return f"a {type(x).__name__}"


def _leaf(a: Any, b: Any, path: str, out: list[Cause]) -> None:
    """Two leaves: their avals (shape, dtype, weak type), else (not arrays) their values."""
    aa, ab = _aval(a), _aval(b)
    if aa is None or ab is None:
        if aa is None and ab is None and _same_object_leaf(a, b):
            return
        out.append(
            Cause(
                path,
                f"{short(a)} vs {short(b)}: a leaf that is not an array (jax.jit refuses it as an "
                "argument; eqx.filter_jit compares it with ==)",
                "make the leaves arrays or numbers, or keep this value out of the arguments",
            )
        )
        return
    if aa == ab:
        return
    what = f"{_aval_text(aa)} ({_given(a)}) vs {_aval_text(ab)} ({_given(b)})"
    shape_a, shape_b = tuple(aa.shape), tuple(ab.shape)
    # A batch (``opx.grid``, ``opx.stack``) differs from another in its leading axis only.
    batches = (shape_a and shape_b and shape_a[1:] == shape_b[1:]) or shape_a[1:] == shape_b
    if shape_a != shape_b and (batches or shape_b[1:] == shape_a):
        fix = (
            "a leaf's shape is part of the compiled program: give arrays of one shape (a batch of "
            "another size, or a batch and one member, is another program)"
        )
    elif shape_a != shape_b:
        fix = "a leaf's shape is part of the compiled program: give arrays of one shape"
    elif aa.dtype == ab.dtype:
        fix = (
            "a Python number is weakly typed and an array is not: give the same kind in both "
            "(Python numbers, or arrays of one dtype)"
        )
    elif {np.dtype(aa.dtype).kind, np.dtype(ab.dtype).kind} == {"i", "f"}:
        fix = "an int and a float are different dtypes: write 1.0, not 1 (or give arrays of one dtype)"
    else:
        fix = "a leaf's dtype is part of the compiled program: give the same dtype in both"
    out.append(Cause(path, what, fix))


# --------------------------------------------------------------------------
# The walk.


def _root_name(x: Any) -> str:
    """The root's label: a wrapped object's factory (``adam``), else empty (key paths from the root)."""
    if is_wrapped(x):
        return _short_name(spec_of(x))
    return ""


def _short_name(spec: Spec) -> str:
    """``adam`` for ``optax.adam``; ``inject_hyperparams(optax.adam)`` as it is, less ``optax.``."""
    name = spec.info.name
    if re.fullmatch(r"[\w.<>]+", name):
        return name.rsplit(".", 1)[-1]
    return name.removeprefix("optax.")


def _join(path: str, key: Any) -> str:
    """``path`` followed by one key, as ``jax.tree_util.keystr`` writes it."""
    return (path + jax.tree_util.keystr((key,))).lstrip(".")


def _one_level(x: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """The children of ``x``'s root node with their keys, and its treedef (children as leaves)."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    return [(path[0], child) for path, child in pairs if path], treedef


def _is_leaf(treedef: Any) -> bool:
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def _walk(a: Any, b: Any, path: str, out: list[Cause]) -> None:
    where = path or "(root)"
    if is_wrapped(a) and is_wrapped(b):
        _wrapped(a, b, path, out)
        return
    if is_plain_transformation(a) or is_plain_transformation(b):
        out.append(
            Cause(
                where,
                f"{short(a)} vs {short(b)}",
                "a plain optax transformation is two functions, not a pytree of its hyperparameters: "
                "jax.jit refuses it as an argument, and as a static one each new object is a "
                "compilation; wrap it (opx.wrap(optax.adam, 1e-3), or import optax_pytree.optax as optax)",
            )
        )
        return
    if is_wrapped(a) or is_wrapped(b):
        out.append(Cause(where, f"{short(a)} vs {short(b)}", "give the same kind of object in both"))
        return
    kids_a, treedef_a = _one_level(a)
    kids_b, treedef_b = _one_level(b)
    leaf_a, leaf_b = _is_leaf(treedef_a), _is_leaf(treedef_b)
    if leaf_a and leaf_b:
        _leaf(a, b, where, out)
        return
    if leaf_a or leaf_b or treedef_a.node_data()[0] is not treedef_b.node_data()[0]:
        out.append(
            Cause(
                where,
                f"{short(a)} vs {short(b)}",
                "a pytree's structure is part of the compiled program: give the same structure in both",
            )
        )
        return
    node_a, node_b = treedef_a.node_data()[1], treedef_b.node_data()[1]
    if node_a != node_b:
        out.append(_node_difference(a, node_a, node_b, where))
        return
    if len(kids_a) != len(kids_b):
        out.append(
            Cause(
                where,
                f"{len(kids_a)} children vs {len(kids_b)}",
                "a pytree's structure is part of the compiled program: give the same structure in both",
            )
        )
        return
    for (key_a, x), (key_b, y) in zip(kids_a, kids_b):
        if key_a != key_b:
            out.append(Cause(where, f"keys {key_a} vs {key_b}", "give the same structure in both"))
            return
        _walk(x, y, _join(path, key_a), out)


def _node_difference(a: Any, node_a: Any, node_b: Any, where: str) -> Cause:
    """The static data of one node (a dict's keys, a stateful optimizer's state) differs."""
    if isinstance(a, dict):
        return Cause(
            where,
            f"a dict with keys {cut(node_a)} vs {cut(node_b)}",
            "the keys of a dict are part of the compiled program: give the same keys in both",
        )
    initialized = (getattr(node_a, "initialized", None), getattr(node_b, "initialized", None))
    if None not in initialized:  # a stateful optimizer (optax_pytree._stateful)
        if initialized[0] != initialized[1]:
            state = {True: "initialized", False: "not initialized"}
            return Cause(
                where,
                f"{state[bool(initialized[0])]} vs {state[bool(initialized[1])]}",
                "call .init(params) on both (or on neither) before passing them",
            )
        return Cause(
            where,
            f"initialized for other parameters: {cut(node_a)} vs {cut(node_b)}",
            "the state's parameters are part of the compiled program: init both with parameters "
            "of the same shapes and dtypes",
        )
    return Cause(
        where,
        f"a {type(a).__name__} whose static data differs: {cut(node_a)} vs {cut(node_b)}",
        "make its static part the same in both",
    )


# --------------------------------------------------------------------------
# Wrapped objects.


def _wrapped(a: Any, b: Any, path: str, out: list[Cause]) -> None:
    spec_a, spec_b = spec_of(a), spec_of(b)
    where = path or "(root)"
    if spec_a is not spec_b and spec_a != spec_b:
        if factory_key(spec_a.info) != factory_key(spec_b.info):
            out.append(factory_difference(spec_a, spec_b, where))
            return
        if spec_a.kind != spec_b.kind:
            out.append(
                Cause(
                    where,
                    f"{spec_a.info.name} gave a {spec_a.kind} vs a {spec_b.kind}",
                    "give the factory arguments that make the same kind of object",
                )
            )
            return
    found = len(out)
    names_a, names_b = spec_a.names, spec_b.names
    reported: set[str] = set()
    for name in [*names_a, *(n for n in names_b if n not in names_a)]:
        at = f"{path}.{name}".lstrip(".")
        if name not in names_a or name not in names_b:
            out.append(
                Cause(
                    at,
                    f"an argument of {spec_a.info.name} given in {'one' if name in names_a else 'the other'} "
                    "only",
                    "give the same arguments in both",
                )
            )
            reported.add(name)
            continue
        before = len(out)
        _argument(a, b, name, at, out)
        if len(out) > before:
            reported.add(name)
    out.extend(guard_differences(spec_a, spec_b, path, reported))
    if len(out) == found and spec_a is not spec_b and spec_a != spec_b:
        out.append(analysis_difference(spec_a, spec_b, where))
    if len(out) == found:  # the carried values (``exact``) last: they follow the arguments
        exact_a, exact_b = a._core.exact, b._core.exact
        if (exact_a is None) != (exact_b is None):
            out.append(Cause(where, "carried host values in one only", _ASK))
        elif exact_a is not None:
            _walk(exact_a, exact_b, f"{path}.exact".lstrip("."), out)


def _argument(a: Any, b: Any, name: str, at: str, out: list[Cause]) -> None:
    spec_a, spec_b = spec_of(a), spec_of(b)
    role_a, role_b = spec_a.roles[name], spec_b.roles[name]
    if role_a != role_b:
        out.append(_role_difference(a, b, name, at))
        return
    if role_a == Role.STATIC:
        va, vb = spec_a.static[name], spec_b.static[name]
        ka, kb = _static.freeze(va), _static.freeze(vb)
        if ka != kb:
            out.append(static_difference(spec_a, spec_b, name, va, vb, ka, kb, at))
        return
    leaf_a = a._core.leaves[spec_a.leaf_index[name]]
    leaf_b = b._core.leaves[spec_b.leaf_index[name]]
    if role_a == Role.CHILD:
        template_a, template_b = spec_a.templates.get(name), spec_b.templates.get(name)
        key_a = None if template_a is None else template_a.key
        key_b = None if template_b is None else template_b.key
        if key_a != key_b:
            va, vb = a.hyperparams[name], b.hyperparams[name]
            inner = value_difference(va, _static.freeze(va), vb, _static.freeze(vb), "")
            out.append(
                Cause(
                    at,
                    f"the container of {spec_a.info.name}'s {name!r} differs: {inner.text()}",
                    "a container's length, keys and static items are part of the compiled program: "
                    "give the same in both",
                )
            )
            return
        _walk(leaf_a, leaf_b, at, out)
        return
    _walk(leaf_a, leaf_b, at, out)  # a dynamic leaf (or a pytree forced dynamic)


def _role_text(w: Any, name: str) -> str:
    spec = spec_of(w)
    role = spec.roles[name]
    if role == Role.STATIC:
        value = spec.static[name]
        return f"static ({short(value)}; {why_static(spec, name, value).why})"
    value = w._core.leaves[spec.leaf_index[name]]
    if role == Role.CHILD:
        return short(value)
    aval = _aval(value)
    return "a dynamic leaf" + ("" if aval is None else f" ({_aval_text(aval)})")


def _role_difference(a: Any, b: Any, name: str, at: str) -> Cause:
    spec_a, spec_b = spec_of(a), spec_of(b)
    what = f"{_role_text(a, name)} vs {_role_text(b, name)}"
    statics = [(s, s.static[name]) for s in (spec_a, spec_b) if s.roles[name] == Role.STATIC]
    if statics:
        spec, value = statics[0]
        reason = why_static(spec, name, value)
        other = spec_b if spec is spec_a else spec_a
        if name in other.analysis.exponents and _backends.specializes_exponent(value):
            return Cause(
                at,
                what,
                f"{spec.info.name} raises to this power, and plain optax's program specializes the "
                f"power by this constant on this backend ({_backends.specialized_exponents_text()}; "
                "x ** 2.0 is x * x): those values are static, each its own compilation; any other "
                "value is a dynamic leaf, all of them one compilation",
            )
        if reason.chosen:
            return Cause(at, what, reason.fix)
        return Cause(
            at,
            what,
            "give the same kind of value in both (a number is a dynamic leaf, a schedule a child, "
            "anything else static)",
        )
    return Cause(
        at,
        what,
        "give the same kind of value in both: a number is a dynamic leaf, a wrapped schedule (or a "
        "closure schedule) a child with its own leaves",
    )


# --------------------------------------------------------------------------
# How two static values differ, in words.


def closure_code(spec: Spec) -> types.CodeType | None:
    """The code of a closure that became a child (``_closures.ClosureFactory``), else None."""
    code = getattr(spec.info.factory, "code", None)
    if isinstance(code, types.CodeType) and type(spec.info.factory).__name__ == "ClosureFactory":
        return code
    return None


def where_code(code: types.CodeType) -> str:
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def describe_factory(spec: Spec) -> str:
    code = closure_code(spec)
    if code is not None:
        qualname = getattr(spec.info.factory, "__qualname__", spec.info.name)
        return f"the closure {spec.kind} {qualname} ({where_code(code)})"
    return spec.info.name


def factory_difference(spec_a: Spec, spec_b: Spec, where: str) -> Cause:
    name_a, name_b = describe_factory(spec_a), describe_factory(spec_b)
    if name_a != name_b:
        return Cause(
            where,
            f"{name_a} vs {name_b}",
            "different optimizers (or schedules) are different programs: they cannot share a compilation",
        )
    # The same name, made by different things: a builder's factory, a closure made again.
    fa, fb = spec_a.info.factory, spec_b.info.factory
    code_a, code_b = closure_code(spec_a), closure_code(spec_b)
    if code_a is not None and code_b is not None:
        if code_a is not code_b:
            return Cause(
                where,
                f"{name_a}: its code was defined again (another code object for the same function)",
                "define the function once (at module level), not in a cell or loop that runs again",
            )
        ga, gb = getattr(fa, "globals", None), getattr(fb, "globals", None)
        if ga is not gb:
            return Cause(
                where, f"{name_a}: the same code in another module's globals", "define it in one module"
            )
        return Cause(
            where,
            f"{name_a}: its defaults or attributes differ",
            "give the function the same defaults and attributes in both",
        )
    inner = value_difference(fa, _static.freeze(fa), fb, _static.freeze(fb), "")
    return Cause(where, f"the factory {name_a}: {inner.text()}", inner.fix or _CAPTURED_FIX)


class WhyStatic(NamedTuple):
    """Why an argument is static, and the fix for a sweep over it."""

    why: str  # in a few words: ``found by automatic detection: optax.lbfgs needs it as a Python value``
    fix: str
    chosen: bool  # made static for its value (marked, detected, too wide, degraded), not by its kind


def why_static(spec: Spec, name: str, value: Any) -> WhyStatic:
    factory = spec.info.name
    if name in spec.analysis.at_zero:
        return WhyStatic(
            f"static at zero only: {factory} skips operations in Python for a zero, which plain "
            "optax's program then lacks",
            f"it is static at zero only: {factory} skips operations in Python for the number 0 "
            "(optax: isinstance(weight_decay, (int, float)) and weight_decay == 0.0), so plain "
            "optax's program for 0 has fewer operations; any other value is a dynamic leaf, all of "
            "them one compilation (opx.grid and opx.stack take a zero as a leaf too)",
            True,
        )
    if name in spec.analysis.static_names:
        return WhyStatic(
            f"found by automatic detection: {factory} needs it as a Python value",
            f"it is static because {factory} needs it as a Python value (a shape, a range, a "
            "Python branch): it cannot vary without recompiling; sweep it with a loop, one "
            "compilation per value",
            True,
        )
    if name in spec.detected:
        return WhyStatic(
            "an integer too large for an int32 leaf",
            "it is static because it does not fit an int32 leaf: it cannot vary without "
            "recompiling (enable jax_enable_x64 for int64 leaves)",
            True,
        )
    if name in spec.options.static:
        made = _spec.made_static(spec)
        if made is not None and name in made[0]:
            return WhyStatic(
                f"made static by the library, which could not honour it: {made[1]}",
                "the library could not keep it dynamic for this value (its warning said why): it "
                "cannot vary without recompiling; a value it can honour is a dynamic leaf",
                True,
            )
        return WhyStatic(
            "marked static by static_argnames or optax_pytree.static",
            "pass it as a number, not in static_argnames nor optax_pytree.static, to keep it a "
            "dynamic leaf; as it is, each value is a compilation",
            True,
        )
    if callable(value):
        return WhyStatic("a function, compared by its code and what it captures", _CAPTURED_FIX, False)
    return WhyStatic(
        f"a {type(value).__name__}, not a number: part of the program",
        "it is not a number, so it is part of the program: each value is a compilation; keep it "
        "the same to share one",
        False,
    )


_FUNCTIONS = (types.FunctionType, types.MethodType, functools.partial)


def static_difference(
    spec_a: Spec, spec_b: Spec, name: str, va: Any, vb: Any, ka: Any, kb: Any, at: str
) -> Cause:
    """A static argument's two values: which part differs, why it is static, the fix."""
    closure = closure_code(spec_a) is not None  # its arguments are captured names
    inner = value_difference(va, ka, vb, kb, name if closure else "")
    located = inner.what if inner.where == name else inner.text()
    if isinstance(va, _FUNCTIONS) and isinstance(vb, _FUNCTIONS):
        what, fix = f"a static {located}", inner.fix or _CAPTURED_FIX
    elif inner.identity:
        what, fix = located, inner.fix
        if not closure:
            what = f"static value, {located}"
            fix = (
                "an object compared by identity is another static value each time: pass the same "
                "object, or one compared by value (a dataclass, a hashable value)"
            )
    else:
        reason = why_static(spec_a, name, va)
        what, fix = f"static value {located} (static: {reason.why})", reason.fix
    if closure:
        what = f"{describe_factory(spec_a)} captures {name}, {what}"
    return Cause(at, what, fix)


# Guards and analyses.


def guard_differences(spec_a: Spec, spec_b: Spec, path: str, reported: set[str]) -> list[Cause]:
    """Guarded arguments on other branches (``peak_value == 0.0 is True`` vs ``False``)."""
    out: list[Cause] = []
    ga, gb = dict(spec_a.guards), dict(spec_b.guards)
    keys = [*ga, *(k for k in gb if k not in ga)]
    # A comparison made in one only follows from another branch taken earlier
    # (the factory returned before it): named only when no outcome differs.
    other_branch = any(k in ga and k in gb and ga[k] != gb[k] for k in keys)
    for key in keys:
        if ga.get(key) == gb.get(key) or (other_branch and (key not in ga or key not in gb)):
            continue
        names = sorted(_expr.key_names(key))
        if set(names) & reported:  # explained already (an int given for a float, say)
            continue
        text = _expr.key_text(key)
        at = ", ".join(f"{path}.{n}".lstrip(".") for n in names) or path or "(root)"
        outcome_a = ga.get(key, "not compared")
        outcome_b = gb.get(key, "not compared")
        out.append(
            Cause(
                at,
                f"{text} is {outcome_a} vs {outcome_b}: a guarded value on another branch of "
                f"{describe_factory(spec_a)}",
                f"{spec_a.info.name} compares it in Python: values on the same side of `{text}` share "
                "one compilation, a value on the other side is another program",
            )
        )
    return out


def analysis_difference(spec_a: Spec, spec_b: Spec, where: str) -> Cause:
    """Nothing named: what else the analyses differ in (modes, carried expressions, options)."""
    parts: list[str] = []
    if spec_a.options.key != spec_b.options.key:
        parts.append(f"static_argnames/dynamic_argnames {_options(spec_a)} vs {_options(spec_b)}")
    modes_a, modes_b = spec_a.analysis.modes, spec_b.analysis.modes
    for n in sorted(set(modes_a) | set(modes_b)):
        if modes_a.get(n) != modes_b.get(n):
            parts.append(f"{n} is {_mode(modes_a.get(n))} vs {_mode(modes_b.get(n))}")
    if spec_a.carried != spec_b.carried:
        parts.append("it computes other expressions of its arguments in Python")
    what = "; ".join(parts) or "its analysis differs (another branch of the factory's Python code)"
    return Cause(
        where,
        f"{spec_a.info.name}: {what}",
        "the values take another path through the factory's Python code: give values of the same "
        "kind (and on the same side of its comparisons)",
    )


def _options(spec: Spec) -> str:
    o = spec.options
    return f"({sorted(o.static)}, {sorted(o.dynamic)})"


def _mode(mode: Any) -> str:
    if mode is None:
        return "a plain leaf"
    return "compared in Python (guarded)" if mode.guarded else str(mode.name).lower()


# Static values, functions included: where two frozen keys (``_static.freeze``) differ.


_CAPTURED_FIX = (
    "what a static function holds is part of the program, one compilation per value: keep it the "
    "same in both (a schedule written as a closure over numbers is the exception: its numbers are leaves)"
)


class Found(NamedTuple):
    """Where two static values differ, found inside them."""

    what: str  # without its place: ``'a' vs 'b'``, ``a Config compared by identity``
    where: str  # its place inside the values (``names[0]``, ``keywords['names']``); "" for the values
    fix: str = ""  # "": the caller's
    identity: bool = False  # an object compared by identity (the fix says so)

    def text(self) -> str:
        return f"{self.what} at {self.where}" if self.where else self.what


def _identity_fix(where: str) -> str:
    return (
        f"the function captures {where}, which is compared by identity; make the function at "
        "module level, or capture plain numbers or a dataclass"
    )


def _compared_by_identity(value: Any) -> bool:
    """A hashable value whose ``==`` is ``is`` (a plain instance of a class of the program's)."""
    eq = getattr(type(value), "__eq__", None)
    return eq is object.__eq__ and not isinstance(value, (type, types.ModuleType, types.BuiltinFunctionType))


def _function_text(f: Any) -> str:
    code = getattr(f, "__code__", None)
    qualname = getattr(f, "__qualname__", None) or repr(f)
    if isinstance(code, types.CodeType):
        return f"function {qualname} ({where_code(code)})"
    return f"callable {cut(qualname)}"


def value_difference(va: Any, ka: Any, vb: Any, kb: Any, where: str) -> Found:
    """How two static values differ, from their frozen keys; ``where``: their place."""
    try:
        found = _key_difference(va, ka, vb, kb, where)
    except Exception:  # noqa: BLE001 - a report never raises
        found = None
    if found is not None:
        return found
    return Found(f"{short(va)} vs {short(vb)}", where, "make it the same in both")


def _numbers_text(ka: Any, kb: Any, where: str) -> str:
    """The numbers two keys differ by, where they differ in numbers alone (``_static``): what the
    warning of a number held static says too; "" otherwise."""
    found = _static.number_differences(ka, kb, where)
    if not found:
        return ""
    return "; ".join(f"{path or 'its value'} = {a!r} vs {b!r}" for path, a, b in found[:4])


_NUMBER_FIX = (
    "a number a static function holds is part of the program: each value is a compilation; read it "
    "in a schedule (its numbers are leaves), or pass it as a hyperparameter"
)


def _key_difference(va: Any, ka: Any, vb: Any, kb: Any, where: str) -> Found | None:
    if isinstance(ka, _static.ByIdentity) or isinstance(kb, _static.ByIdentity):
        found = _identity(va, vb, where)
        numbers = _numbers_text(ka, kb, where)
        return found._replace(what=f"{found.what}, holding {numbers}") if numbers else found
    if not (isinstance(ka, tuple) and isinstance(kb, tuple) and ka and kb):
        return None
    head_a, head_b = ka[0], kb[0]
    if head_a == "function" and head_b == "function":
        return _function_difference(va, ka, vb, kb, where)
    if head_a != head_b:
        return Found(f"{short(va)} vs {short(vb)}", where, "give the same kind of value in both")
    if head_a == "method":
        if ka[1] != kb[1]:
            return _key_difference(va.__func__, ka[1], vb.__func__, kb[1], where)
        kind = type(va.__self__).__name__
        fix = (
            f"a bound method is compared by its object, and a {kind} by identity: pass the method of "
            "one object in both, or a function at module level"
        )
        return Found(f"method bound to another {kind}, compared by identity", where, fix, True)
    if isinstance(head_a, type) and issubclass(head_a, functools.partial):
        if ka[1] != kb[1]:
            return _key_difference(va.func, ka[1], vb.func, kb[1], where)
        text = f"functools.partial of {_function_text(va.func)}"
        for i, part in ((2, "args"), (3, "keywords")):
            if ka[i] != kb[i]:
                pa, pb = getattr(va, part), getattr(vb, part)
                inner = _key_difference(pa, ka[i], pb, kb[i], part) or Found(
                    f"{short(pa)} vs {short(pb)}", part
                )
                return inner._replace(what=f"{text}: {inner.text()}", where=where)
        return Found(f"{text}: its attributes differ", where)
    if head_a == "object" and (numbers := _numbers_text(ka, kb, "")):
        return Found(f"a number held static: {numbers}", where, _NUMBER_FIX)
    if head_a == "dataclass" or head_a == "object":
        if ka[1] is not kb[1]:
            return Found(f"a {ka[1].__name__} vs a {kb[1].__name__}", where, "give the same type")
        fields_b = dict(kb[2])
        for field, sub_a in ka[2]:
            sub_b = fields_b.get(field)
            if sub_a != sub_b:
                va, vb = getattr(va, field, None), getattr(vb, field, None)
                return _key_difference(va, sub_a, vb, sub_b, f"{where}.{field}".lstrip("."))
        return None
    if head_a in (dict, list, tuple) and len(ka) == 2 and len(kb) == 2:
        items_a, items_b = ka[1], kb[1]
        keys_a, keys_b = [k for k, _ in items_a], [k for k, _ in items_b]
        if keys_a != keys_b:
            keys = f" (keys {keys_a} vs {keys_b})" if head_a is dict else ""
            return Found(f"{short(va)} vs {short(vb)}{keys}", where)
        for (k, sub_a), (_, sub_b) in zip(items_a, items_b):
            if sub_a != sub_b:
                return _key_difference(va[k], sub_a, vb[k], sub_b, f"{where}[{k!r}]")
        return None
    if head_a in ("array", "tree", "wrapped", "key", "back"):
        return Found(f"{short(va)} vs {short(vb)} ({head_a}s compared by value)", where)
    # (type, value): a hashable value, compared by ==.
    if va is not vb and type(va) is type(vb) and _compared_by_identity(va):
        found = _identity(va, vb, where)
        numbers = _numbers_text(ka, kb, where)
        return found._replace(what=f"{found.what}, holding {numbers}") if numbers else found
    if (numbers := _numbers_text(ka, kb, where)) and not isinstance(va, (int, float, complex, np.number)):
        return Found(f"a number held static: {numbers}", where, _NUMBER_FIX)
    if type(va) is not type(vb):
        return Found(f"{short(va)} vs {short(vb)} (a {type(va).__name__} vs a {type(vb).__name__})", where)
    return Found(f"{short(va)} vs {short(vb)}", where)


def _identity(va: Any, vb: Any, where: str) -> Found:
    kind = type(va).__name__ if type(va) is type(vb) else f"{type(va).__name__} / {type(vb).__name__}"
    return Found(f"a {kind} compared by identity", where, _identity_fix(where or "it"), True)


def _function_difference(va: Any, ka: Any, vb: Any, kb: Any, where: str) -> Found:
    """Two functions (``_static._function_key``): code, module, defaults, attributes, cells."""
    text = _function_text(va)
    code_a, code_b = ka[1], kb[1]
    if code_a is not code_b:
        return Found(
            f"{text} vs {_function_text(vb)}",
            where,
            "different functions are different programs; pass the same function (defined once, at "
            "module level) in both",
        )
    if ka[2] != kb[2]:
        return Found(f"{text}, from another module's globals", where, "define it in one module")
    parts = (
        ("its defaults", 3, getattr(va, "__defaults__", None), getattr(vb, "__defaults__", None)),
        ("its keyword defaults", 4, getattr(va, "__kwdefaults__", None), getattr(vb, "__kwdefaults__", None)),
        ("its attributes", 5, getattr(va, "__dict__", None), getattr(vb, "__dict__", None)),
    )
    for label, i, pa, pb in parts:
        if ka[i] != kb[i]:
            inner = _key_difference(pa, ka[i], pb, kb[i], "") or Found(f"{short(pa)} vs {short(pb)}", "")
            return Found(
                f"{text}: {label} differ: {inner.text()}", where, "give the function the same ones in both"
            )
    cells_a, cells_b = ka[6], kb[6]
    for i, name in enumerate(code_a.co_freevars):
        if i >= len(cells_a) or i >= len(cells_b) or cells_a[i] == cells_b[i]:
            continue
        ca, cb = _cell(va, i), _cell(vb, i)
        inner = _key_difference(ca, cells_a[i], cb, cells_b[i], name) or Found(
            f"{short(ca)} vs {short(cb)}", name
        )
        located = inner.what if inner.where == name else inner.text()
        separator = ", " if inner.identity else ": "  # ``captures config, a Config compared by identity``
        return Found(
            f"{text} captures {name}{separator}{located}", where, inner.fix or _CAPTURED_FIX, inner.identity
        )
    if len(ka) > 7 and len(kb) > 7 and ka[7] != kb[7]:  # what it reads of its module's globals
        read_a, read_b = dict((g[0], g[1:]) for g in ka[7]), dict((g[0], g[1:]) for g in kb[7])
        for name in sorted(read_a.keys() | read_b.keys()):
            if read_a.get(name) != read_b.get(name):
                return Found(f"{text} reads the global {name}, which differs", where, _CAPTURED_FIX, False)
    return Found(f"{text} differs", where)


def _cell(f: Any, i: int) -> Any:
    try:
        return f.__closure__[i].cell_contents
    except Exception:  # noqa: BLE001 - an empty cell
        return None


# --------------------------------------------------------------------------
# Short texts.


def _items(n: int) -> str:
    return f"{n} item{'' if n == 1 else 's'}"


def cut(x: Any, limit: int = _LIMIT) -> str:
    text = str(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(x: Any) -> str:
    """A value in a few words: ``0.9``, ``a wrapped optax.adam``, ``a dict of 2 items``."""
    try:
        if is_plain_transformation(x):
            return "a plain optax transformation"
        if is_wrapped(x):
            spec = spec_of(x)
            described = describe_factory(spec)
            return described if closure_code(spec) is not None else f"a wrapped {described}"
        if isinstance(x, (jax.Array, np.ndarray)):
            if x.size == 1:
                return f"{np.asarray(x).reshape(())[()]!r} ({_leaves.aval_text(x.shape, x.dtype)})"
            return f"an array {_leaves.aval_text(x.shape, x.dtype)}"
        if isinstance(x, types.FunctionType):
            return _function_text(x)
        text = repr(x)
        if isinstance(x, (list, tuple, dict)) and len(text) > _LIMIT:
            return f"a {type(x).__name__} of {_items(len(x))}"
        return cut(text)
    except Exception:  # noqa: BLE001 - only for a message
        return f"a {type(x).__name__}"


__all__ = ["Cause", "Explanation", "explain"]
