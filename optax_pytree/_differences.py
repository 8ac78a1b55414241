"""How two static values differ, in words: functions by what they capture, factories, statics.

The part of :func:`optax_pytree._explain.explain` that reads a wrapped
object's static configuration: why an argument is static (detected, marked,
made static by the library), where two static values differ, read off their
keys (``_static.freeze``: a function by its code, module, defaults and
captured cells; an object of the program's by what is read of it, else by
identity), and the short texts a report shows.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import os
import types
from typing import Any, NamedTuple

import jax
import numpy as np

from . import _expr, _leaves, _spec, _static
from ._bind import is_plain_transformation, is_wrapped
from ._spec import Spec
from ._tree import spec_of

_LIMIT = 80  # a value's repr in a report, at most


class Cause(NamedTuple):
    """One reason two pytrees do not share a compilation."""

    path: str  # where, as a key path (``adamw.learning_rate.peak_value``); the root's is ``(root)``
    what: str  # what differs, both values
    fix: str  # what to do about it, in words


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


def _key_difference(va: Any, ka: Any, vb: Any, kb: Any, where: str) -> Found | None:
    if isinstance(ka, _static.ByIdentity) or isinstance(kb, _static.ByIdentity):
        return _identity(va, vb, where)
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
        return _identity(va, vb, where)
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


__all__ = [
    "Cause",
    "Found",
    "WhyStatic",
    "analysis_difference",
    "closure_code",
    "cut",
    "describe_factory",
    "factory_difference",
    "guard_differences",
    "short",
    "static_difference",
    "value_difference",
    "why_static",
]
