"""Why two optimizers do not share a compilation: path by path, with the fix in words.

A sweep that recompiles says little about why: ``jax_explain_cache_misses``
reports that a static argument (a treedef) differs, not which hyperparameter
of which member of a ``chain``, nor what to change. :func:`explain` walks
two pytrees side by side, through the library's own structures (a wrapped
object's static configuration, its children, the closures that became
children, the functions held static) and through any other pytree (a dict
of parameters, an optimizer state), and names each difference that makes
another program: its key path, the two values, and the fix.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import re
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from . import _expr, _leaves, _static
from ._bind import is_plain_transformation, is_wrapped
from ._classify import factory_key
from ._differences import (
    Cause,
    analysis_difference,
    cut,
    factory_difference,
    guard_differences,
    short,
    static_difference,
    value_difference,
    why_static,
)
from ._spec import Spec
from ._tree import spec_of
from ._vocabulary import Role


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
        if name in other.analysis.exponents and value in _expr.SPECIALIZED_EXPONENTS:
            return Cause(
                at,
                what,
                f"{spec.info.name} raises to this power, and plain optax's program specializes the "
                "powers 2.0, 3.0, 0.5 and -1.0 (x ** 2.0 is x * x): those values are static, each its "
                "own compilation; any other value is a dynamic leaf, all of them one compilation",
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


__all__ = ["Cause", "Explanation", "explain"]
