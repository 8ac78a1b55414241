"""Analyse: the driver from classify to spec: a factory's bound arguments -> what a wrapped object is made of.

``make`` binds nothing itself (``_bind`` did): it classifies the arguments
(``_classify``; a callable given as an argument may become a child there,
see ``_closures``, made by the ``make_child`` it is handed), calls the
factory with the values as given (its checks,
exceptions and warnings are optax's, on every wrap; children are handed to
it as what their own factories returned, ``plain_child``), finds the
analysis of this configuration and branch (cached per configuration in
``_spec``, else probed by ``_detect`` and verified bit for bit by
``_verify``, bisecting a difference to the argument that must be static,
into the children's own arguments where the configuration's own do not
remove it; both run quietly, see ``_quiet``), checks the leaves take the
branches their Python values took, interns the static configuration
(``_spec``), and computes the host values the object carries (see
``_guard.Guarded.exact``).
From Python numbers, the leaf arrays themselves are made when the object is
first used (``_leaves.Pending``). It returns a :class:`Made`; ``_tree.new``
makes the object from it. The object (``_tree``) calls this for ``replace``
and unpickling; the entry points (``_wrap``) for ``wrap``.

Never a refusal of what plain optax accepts: where the mechanism cannot
honour a part of a configuration (:class:`Degraded`), that part is made
static, with one warning that says which part and why.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import contextlib
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np

from . import (
    _bind,
    _build,
    _carry,
    _checks,
    _descend,
    _detect,
    _disk,
    _expr,
    _leaves,
    _quiet,
    _recompiled,
    _spec,
    _verify,
)
from ._bind import FactoryInfo, is_wrapped
from ._classify import Classified, MakeChild, Options, classify
from ._closures import ClosureFactory
from ._core import Kept
from ._leaves import Exact, Leaves, Pending
from ._spec import Analysis
from ._vocabulary import Differs, Kind, Role


class Made(NamedTuple):
    """What a wrapped object is made of (the arguments of ``_tree.new``)."""

    spec: _spec.Spec  # the static configuration: the treedef's aux data
    leaves: Leaves  # one per dynamic argument or child, in signature order
    exact: Exact  # the carried host values (a tuple of vectors), or None
    python: dict[str, Any]  # the Python numbers given, for replace() and pickling
    # What the factory returned for the values given (a parent's wrap hands it
    # to its own factory instead of rebuilding this object), or None.
    plain: Any = None
    # The leaves and ``exact`` child still to be made from Python numbers
    # (``leaves`` and ``exact`` are then empty), or None: see ``_leaves.Pending``.
    pending: Pending | None = None


def _statics_of_children(children: Any) -> list[Any]:
    """The static values of every wrapped object in ``children``, at any depth (masks, labels)."""
    out: list[Any] = []
    for w in jax.tree_util.tree_leaves(children, is_leaf=is_wrapped):
        if is_wrapped(w):
            out.extend(w._core.spec.static.values())
            out.extend(_statics_of_children(w._core.leaves))
    return out


def _base(classified: Classified) -> dict[str, Any]:
    """The factory's arguments as it takes them: values as given, wrapped children as plain optax."""
    if classified.python:
        return classified.values  # the common case: Python numbers and static values
    base = dict(classified.values)
    if not classified.python_numbers:
        for name in classified.candidates:
            base[name] = _leaves.as_python_number(base[name])
    templates = classified.templates
    for name in classified.children:
        t = templates.get(name)
        base[name] = t.merge(base[name], plain_child) if t is not None else plain_child(base[name])
    return base


def plain_child(w: Any) -> Any:
    """A wrapped child as its parent's factory takes it: what its own factory returned for
    the values it was made from, where it still has that; else rebuilt from its leaves."""
    from ._build import build_child

    plain = w._core.plain if is_wrapped(w) else None
    return plain if plain is not None else build_child(w)


def _traced(classified: Classified) -> list[str]:
    if classified.python_numbers:  # its numeric arguments are Python numbers: no tracer
        return []
    values = classified.values
    return [n for n in (*classified.candidates, *classified.forced) if _leaves.is_tracer(values[n])]


def _call_factory(
    info: FactoryInfo, classified: Classified, base: dict[str, Any], tolerant: bool = False
) -> tuple[Kind | None, Any]:
    """Calls the factory with the values given, as optax would be called: its checks, its
    exceptions and its warnings happen here, on every wrap. Returns the kind of its result.

    ``tolerant``: the values are traced (a wrap inside ``jit``,
    ``optax.inject_hyperparams`` calling a drop-in factory), no Python values
    to check; the call gives the factory's warnings as optax would, and a
    failure on tracers returns None (the analysis, if one is needed, says why).
    """
    try:
        result = info.call(base)
    except Exception as e:
        if tolerant:
            return None, None
        traced = _traced(classified)
        if traced and isinstance(e, (jax.errors.ConcretizationTypeError, TypeError)):
            raise TypeError(
                f"{info.name}: wrap got traced values for {traced} (it was called inside jit, vmap "
                "or grad), and the factory needs a Python value of one of them; wrap it outside "
                "and pass the wrapped object in, or replace() the value of an object wrapped "
                f"outside: {type(e).__name__}: {e}"
            ) from e
        values, roles = classified.values, classified.roles
        shown = ", ".join(f"{n}={values[n]!r}" for n, r in roles.items() if r != Role.CHILD)
        note = f"(raised by {info.name} when optax_pytree.wrap called it with {shown})"
        if hasattr(e, "add_note"):
            e.add_note(note)  # pyright: ignore[reportAttributeAccessIssue]
        else:  # Python 3.10: PEP 678's attribute itself (pytest and the exceptiongroup backport show it)
            e.__notes__ = [*getattr(e, "__notes__", ()), note]  # pyright: ignore[reportAttributeAccessIssue]
        raise
    kind = _detect.callable_kind(result)
    if kind is None:
        raise TypeError(
            f"optax_pytree.wrap: {info.name} returned {type(result).__name__}, which is neither an "
            "optax transformation (init/update) nor a schedule (a callable of the step count)"
        )
    return kind, result


def _analyse(
    info: FactoryInfo, classified: Classified, base: dict[str, Any], kind: Kind
) -> Analysis | Degraded:
    """Probes the candidates (``_detect``), then verifies the result (``_verify``)."""
    values, roles = classified.values, classified.roles
    candidates = {n: values[n] for n in classified.candidates}
    if not candidates:
        return Analysis.of(kind)
    leaves = _leaves.to_leaves(candidates)
    probe_base = {n: v for n, v in base.items() if n not in candidates}
    probe_base.update(_leaves.to_leaves({n: values[n] for n in classified.forced}))
    own = [v for n, v in values.items() if roles[n] != Role.CHILD]
    children = [values[n] for n, r in roles.items() if r == Role.CHILD]
    shapes = _detect.stand_in_params([*own, *_statics_of_children(children)])

    def analyse(static: tuple[str, ...]) -> Analysis:
        return _detect.analyse(info, kind, probe_base, candidates, leaves, shapes, static)

    known = _spec.verified_static(classified.analysis_key)
    if _traced(classified):
        # No Python values to compare with: checked where it is used.
        return _verify.with_folds(info, classified, base, analyse(known))
    verdict = _verify.verify(info, classified, base, analyse, known)
    if verdict.static_for_every_value != known:  # later analyses start with them static
        _spec.remember_verified_static(classified.analysis_key, verdict.static_for_every_value)
    found = verdict.difference
    if found is None:
        return verdict.analysis
    forced = list(classified.forced)
    if forced and found.kind is Differs.FAILS:
        # Forced dynamic, and the build fails with it traced: the error at
        # trace time names it (no detection was asked for).
        return verdict.analysis
    if forced:
        raise ForcedDynamicError(
            f"{info.name}: the wrapped build computes other numbers than the factory with the "
            f"same values ({found}), because of {_bind.which(forced)} forced dynamic; let it "
            "be static"
        )
    return Degraded(
        _not_static(classified),
        "optax_pytree could not rebuild it from leaves that compute what it computes with "
        f"the values given, even with every numeric argument static ({found})",
        descend=bool(classified.children),
    )


def _not_static(classified: Classified) -> tuple[str, ...]:
    """The numeric arguments and children: what degrading a whole configuration makes static."""
    return tuple(n for n, r in classified.roles.items() if r != Role.STATIC)


class ForcedDynamicError(TypeError):
    """An argument the user forced dynamic cannot be: their choice, so an error."""


class Degraded(NamedTuple):
    """The mechanism cannot honour ``names`` for these values: ``make`` makes them static.

    ``descend``: the difference stays with every numeric argument of the
    configuration's own static, so it may be a wrapped child's: ``make``
    first looks for the fewest arguments of its children (at any depth) to
    make static instead (:func:`_smallest_inner_static`).
    """

    names: tuple[str, ...]
    why: str  # said once, in the warning
    remember: bool = True  # for the whole configuration (else these values only)
    descend: bool = False


def _smallest_inner_static(
    info: FactoryInfo, arguments: dict[str, Any], options: Options, make_child: MakeChild | None
) -> tuple[_descend.Inner, ...] | None:
    """The fewest arguments of the children (at any depth) that, made static, let the
    configuration be verified (``_descend.smallest``); None if even all of them do not."""

    def works(marks: tuple[_descend.Inner, ...]) -> bool:
        try:
            with _quiet.quietly():
                made = _make(
                    info,
                    _descend.with_inner_static(arguments, marks),
                    options,
                    make_child,
                    None,
                    None,
                    quiet=True,
                )
        except Exception:  # noqa: BLE001 - any failure of a trial: not these
            return False
        return isinstance(made, Made)

    order = _descend.inner_arguments(arguments, classify(info, arguments, options, make_child).roles)
    return _descend.smallest(order, works)


def _find_analysis(
    info: FactoryInfo,
    classified: Classified,
    previous: _spec.Spec | None,
    base: dict[str, Any],
    kind: Kind | None,
) -> Analysis | Degraded:
    """The cached analysis these values match, or a new one (or why the mechanism cannot make one)."""
    values = classified.values
    for analysis in _spec.analyses(classified.analysis_key):
        if analysis.matches(values):
            return analysis
    if previous is not None and previous.config_key == classified.key:
        # Traced values (replace inside jit) cannot be matched: they keep the
        # branches of the object they replace, checked where it is used. Not its
        # zeros there: the object's spec may hold an equal analysis verified at
        # other values (specs are interned by key), and a zero a factory skips
        # operations for is a static value, in the key.
        if previous.analysis.matches(values, zeros=not _traced(classified)) is not False:
            return previous.analysis
    # Analysed by an earlier process, with the same code (``_disk``).
    probed = bool(classified.candidates) and kind is not None and not _traced(classified)
    name = _disk.digest(classified) if probed else None
    if name is not None:
        for analysis in _disk.load(name):
            if analysis.matches(values):
                _spec.remember(classified.analysis_key, analysis)
                return analysis
    if kind is None:
        # The factory failed on traced values: called again to say why (its
        # warnings were given by that first call).
        with _quiet.quietly():
            kind = _call_factory(info, classified, base)[0]
        assert kind is not None
    try:
        with _quiet.quietly():  # the library's runs of the factory: nothing shows (``_quiet``)
            analysis = _analyse(info, classified, base, kind)
    except ForcedDynamicError:
        raise
    except Exception as e:  # noqa: BLE001 - a failure of the mechanism itself: degrade, never refuse
        why = f"optax_pytree's analysis of it failed ({type(e).__name__}: {_build.first_line(str(e))})"
        return Degraded(_not_static(classified), why)
    if not isinstance(analysis, Analysis):
        return analysis  # Degraded
    _spec.remember(classified.analysis_key, analysis)
    if name is not None:
        _disk.store(name, analysis)
    return analysis


def _check_leaves(info: FactoryInfo, classified: Classified, analysis: Analysis) -> Degraded | None:
    """The leaves must take the branches their Python values took (float32 round-off): None
    if they do; what to make static if a value's leaf would take another branch."""
    values = classified.values
    for name in analysis.static_names:
        if _leaves.is_tracer(values[name]):
            raise TypeError(
                f"{info.name}: argument {name!r} must be static (the factory needs it as a Python "
                "value), but its value is traced here (wrap or replace inside jit, vmap or grad); "
                "give it a concrete value"
            )
    if not analysis.guards:
        return None
    guarded = {n: values[n] for n in analysis.modes}
    if any(_leaves.is_tracer(v) for v in guarded.values()):
        return None
    host = {n: _leaves.value_as_leaf(v) for n, v in guarded.items()}
    bad = analysis.check(host)
    names: tuple[str, ...] = tuple(sorted(_expr.key_names(bad[0][0]))) if bad else ()
    if bad and not classified.options.dynamic and all(np.ndim(host[n]) == 0 for n in names):
        # Plain optax takes the value as given; as a leaf it would take another
        # branch (float32 round-off): static, these values only. (A batch of
        # values on several branches, from grid or stack, is refused below.)
        key, recorded, got = bad[0]
        dtype = np.asarray(next(host[n] for n in names)).dtype
        return Degraded(
            names,
            f"{_bind.which(names)} as a {dtype.name} leaf takes "
            f"another branch than the value given ({_expr.key_text(key)} is "
            f"{_checks.value_text(got)} for the leaf, {recorded} for the value)",
            remember=False,
        )
    if not bad:
        return None
    _checks.check(
        info.name,
        analysis.guards,
        host,
        lambda n: f"{values[n]!r} (as a leaf: {host[n]!r})",
        "the value given",
        "pass it as an array of the precision you need",
    )
    return None


def make(
    info: FactoryInfo,
    arguments: dict[str, Any],
    options: Options,
    make_child: MakeChild | None,
    previous: _spec.Spec | None = None,
    kept: Kept = None,
) -> Made:
    """Classifies, analyses (or finds the cached analysis): what the wrapped object is made of.

    ``make_child``: how a callable argument becomes a child (``_tree.make_child``, see
    ``_closures``). ``kept``: for ``replace``, (the replaced object's core, the names changed);
    the carried values of its
    expressions whose arguments did not change are kept (they were computed
    from Python values that its leaves no longer tell exactly).

    Never refuses what plain optax accepts: where the mechanism cannot honour
    a part of the configuration (the verification finds a difference it
    cannot bisect to a numeric argument, the analysis itself fails, a value
    whose leaf would take another branch), that part becomes static, the
    smallest that does (an argument of a child, at any depth, rather than the
    child whole: :func:`_smallest_inner_static`), with one warning that says
    which and why, and the object works as plain optax does (a new value of
    a static argument is a new compilation).
    """
    static: list[str] = []  # made static so far (each round can find another part)
    inner: tuple[_descend.Inner, ...] = ()  # arguments of children made static so far
    descended = False
    whys: list[str] = []
    while True:
        marked = options.with_marks(static, ()) if static else options
        given = _descend.with_inner_static(arguments, inner, "; ".join(whys)) if inner else arguments
        # After the first round the factory was called for the user: quietly.
        made = _make(info, given, marked, make_child, previous, kept, quiet=bool(static or inner))
        if isinstance(made, Made):
            if static:  # for ``explain``: static by the library's choice, not the user's
                _spec.remember_made_static(made.spec, (tuple(static), "; ".join(whys)))
            return made
        # The mechanism cannot honour a part: that part becomes static, and the object is made again.
        found = None
        if made.descend and not descended:
            # The smallest part first: arguments of the children, not the children whole.
            descended = True
            found = _smallest_inner_static(info, given, marked, make_child)
        if found:
            parts, count = [m.text() for m in found], len(found)
            inner = (*inner, *found)
        else:
            names = [n for n in made.names if n in arguments and n not in static]
            if not names:  # nothing left to make static: cannot happen, but never loop
                raise TypeError(f"{info.name}: {made.why}") from None
            parts, count = [_bind.which(names)], len(names)
            static += names
        if made.remember:  # all of it, for the configuration as the user gives it
            key = classify(info, arguments, options, make_child).analysis_key
            _spec.remember_degraded(key, (tuple(static), made.why, inner))
        _warn_degraded(info, parts, count, made.why)
        whys.append(made.why)


def _warn_degraded(info: FactoryInfo, parts: list[str], count: int, why: str) -> None:
    """``parts``: what is made static, in words (``arguments ['a', 'b']``, ``argument 'shift' of ...``),
    ``count`` arguments in all."""
    plural = count > 1
    warnings.warn(
        f"optax_pytree: {info.name}: {why}; so {', '.join(parts)} "
        f"{'are' if plural else 'is'} static for these values: the object computes what "
        "plain optax computes, and a new value of a static argument is a new compilation",
        stacklevel=_recompiled.user_stacklevel(),
    )


def _outside_traces() -> Any:
    """A context in which JAX operations run eagerly, whatever trace is active around it."""
    from jax._src import core as jax_core

    eval_context = getattr(jax_core, "eval_context", None)
    return eval_context() if eval_context is not None else contextlib.nullcontext()


def _warn_static_numbers(info: FactoryInfo, analysis: Analysis, base: dict[str, Any]) -> None:
    """A number the factory needs as a Python value (static, found by the probe) other than the
    one the same line of code gave before: a new compilation, never in silence (``_recompiled``);
    once per line. A closure's child: ``_closures`` says it, of the closure's code."""
    if isinstance(info.factory, ClosureFactory):
        return
    where = (info.name, *_recompiled.user_line())
    shown = tuple(base[n] for n in analysis.static_names)
    before = _recompiled.last(where, (analysis.static_names, analysis.static_key, shown))
    if before is None or _recompiled.warned(where):
        return
    names, key, values = before
    if names != analysis.static_names or key == analysis.static_key:
        return
    # By type and text too: 0 and 0.0, -0.0 and 0.0 are other static values (other programs).
    found = [(n, a, b) for n, a, b in zip(names, values, shown) if (type(a), repr(a)) != (type(b), repr(b))]
    _recompiled.warn(
        where,
        f"optax_pytree: {info.name}: {_bind.which(tuple(n for n, _, _ in found))} is static (the "
        "factory needs it as a Python value), and this optimizer differs from one the same line built "
        f"before there ({_recompiled.shown(found)}): each value is a new compilation "
        "(optax_pytree.explain(a, b) says the same)",
    )


def _make(
    info: FactoryInfo,
    arguments: dict[str, Any],
    options: Options,
    make_child: MakeChild | None,
    previous: _spec.Spec | None,
    kept: Kept,
    quiet: bool,
) -> Made | Degraded:
    classified = classify(info, arguments, options, make_child)
    # A configuration made before whose analysis nothing of the values
    # decides (no guards, no static candidates): its spec, found at once.
    spec = _spec.planned(classified.analysis_key)
    if spec is not None and spec.analysis.matches(classified.values) is False:
        spec = None  # a zero where it was verified nonzero: verified anew (``Analysis.nonzero``)
    if spec is None:
        degraded = _spec.degraded(classified.analysis_key)
        if degraded is not None:  # the mechanism could not honour this configuration: static
            names, why, inner = degraded
            arguments = _descend.with_inner_static(arguments, inner, why) if inner else arguments
            options = options.with_marks(names, ())
            classified = classify(info, arguments, options, make_child)
    base = _base(classified)
    # Traced values (wrap or replace inside jit, optax.inject_hyperparams
    # calling a drop-in factory) are no Python values to check: the factory
    # is called with them for its warnings only (as optax would warn), its
    # failures on tracers left to the analysis. A second call (a degraded
    # configuration made again) is quiet: the user saw the first.
    traced = bool(_traced(classified))
    if quiet:
        with _quiet.quietly():
            kind, result = _call_factory(info, classified, base, tolerant=traced)
    else:
        kind, result = _call_factory(info, classified, base, tolerant=traced)
    if spec is None:
        # Values of Python numbers made inside jit: analysed as outside it (an ambient trace would
        # stage the probe's arithmetic on them and find them needed as Python values; the
        # analysis, cached by configuration, would then make them static everywhere).
        with _outside_traces() if not traced else contextlib.nullcontext():
            analysis = _find_analysis(info, classified, previous, base, kind)
        if not isinstance(analysis, Analysis):
            return analysis  # Degraded
        degraded = _check_leaves(info, classified, analysis)
        if degraded is not None:
            return degraded
        spec = _spec.spec_for(info, classified, analysis)
        _spec.plan(classified.analysis_key, spec)
    if spec.analysis.static_names and not traced:
        _warn_static_numbers(info, spec.analysis, base)
    python = {n: base[n] for n in classified.candidates if type(base[n]) in _carry.PYTHON_NUMBERS}
    hosts = _carry.host_values(spec, base, kept) if spec.carried else {}
    pending = _carry.pending(spec, classified, hosts)
    if pending is not None:
        leaves, exact = (), None
    else:
        leaves, exact = _carry.leaves_and_exact(spec, classified, hosts)
    plain = None
    if not traced and kind is not None:  # concrete: what a parent's factory takes (``plain_child``)
        plain = _build.as_transformation(result) if kind is Kind.TRANSFORMATION else result
    return Made(spec, leaves, exact, python, plain, pending)
