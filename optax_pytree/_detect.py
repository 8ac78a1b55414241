"""Analyse: the probe: which numeric arguments a factory needs concrete, and which it guards.

Some numeric hyperparameters cannot be leaves: ``optax.lbfgs`` allocates
``memory_size`` rows, ``optax.contrib.galore`` slices with ``rank``, the
one-cycle schedules make dict keys of ``int(pct_start * transition_steps)``.
Others are only compared (see ``_guard``). Annotations do not tell, so the
factory itself is asked.

The probe runs the factory, then ``init`` and ``update`` of what it returns
(or the schedule at a step count), under ``jax.eval_shape`` (nothing is
compiled), on stand-in parameters shaped like the masks and labels found
anywhere in the configuration (children included), then the defaults (ranks
1 to 4), then shaped like any other tree there (per-parameter
specifications: ``optax.contrib.muon``'s dimension numbers), and with each
candidate argument in one of four modes:

- ``Mode.GUARDED``: a :class:`~optax_pytree._guard.Guarded` stand-in, kept in the
  closures (comparisons at construction and at call time are guards);
- ``Mode.GUARDED_WHILE_BUILT``: a stand-in while the factory runs, its leaf afterwards;
- ``Mode.LEAF``: the abstract leaf itself (a traced value, as before guards);
- ``Mode.PYTHON_VALUE``: the concrete value (the argument is static).

Every candidate starts as ``Mode.GUARDED``. A stand-in used as a concrete value
(``int()``, a shape, a dict key) makes its argument static at once; one that
reached a JAX function goes down a mode; any other failure is found by
bisection (with everything else as it is) and that argument goes down a
mode. The result (the modes, the guards recorded, the static arguments) is an
:class:`Analysis`, cached by the caller per configuration and reused for
every value that takes the same branches.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _bind, _detach, _expr, _guard, _quiet
from ._bind import FactoryInfo
from ._leaves import is_tracer, value_as_given, value_as_static
from ._spec import Analysis
from ._verify import UPDATE_LEVELS, Params, default_param_shapes, exercise
from ._vocabulary import Kind, Level, Mode, Phase

# How far the probe drives what the factory returns, deepest first: the
# updates of the exerciser (``_verify``), init, or construction only.
_LEVELS = {
    Kind.TRANSFORMATION: (*UPDATE_LEVELS, Level.INIT, Level.BUILD),
    Kind.SCHEDULE: (Level.CALL, Level.BUILD),
}


def _other_dims(params: Params) -> Params:
    """The same structure with other sizes: are the guards independent of the shapes?"""
    return jax.tree_util.tree_map(
        lambda s: jax.ShapeDtypeStruct(tuple(d + 3 for d in s.shape), s.dtype), params
    )


def _spec(x: Any) -> Any:
    return jax.ShapeDtypeStruct(
        jnp.shape(x), jnp.result_type(x), weak_type=bool(getattr(x, "weak_type", False))
    )


def stand_in_params(values: Sequence[Any]) -> list[Any]:
    """The stand-in parameters the probe tries, in order: shaped like the masks and
    labels among ``values``, the default ones, then shaped like the other trees there.

    ``values`` are static arguments, anywhere in a configuration: a mask of
    bools or labels of strings tells the parameters' structure, and is tried
    first, in whatever container it comes (a dict, a flax ``FrozenDict``, any
    pytree). So does a mask or label *function* whose result has another
    structure than the parameters it is given (``flax.core.freeze`` of a
    mask: the parameters are a ``FrozenDict``): stand-ins of that structure,
    with the ranks of the defaults it was given. A tree of per-parameter
    specifications (``optax.contrib.muon``'s ``MuonDimensionNumbers``,
    ``None`` for a parameter it leaves to Adam) tells it too, not the ranks:
    it is tried after the defaults (which exercise every rank), each leaf of
    rank 4, 3, then 2. Without them, a factory whose ``init`` needs its
    structure never ran past construction: nothing of ``update`` was
    verified, and its Python arithmetic was not carried (computed in float32).
    """
    masks: list[Any] = []
    specs: list[Any] = []

    def add_mask(stand_in: Any) -> None:
        structure = jax.tree_util.tree_structure(stand_in)
        if all(structure != jax.tree_util.tree_structure(o) for o in masks):
            masks.append(stand_in)

    for value in values:
        if callable(value):
            for stand_in in _shaped_by_function(value):
                add_mask(stand_in)
            continue
        structure = jax.tree_util.tree_structure(value)
        if jax.tree_util.treedef_is_leaf(structure) or not structure.num_leaves:
            continue  # a value (an array, a string, an object) or an empty container
        if _is_mask(value):
            add_mask(_kernels_like(value))
        if not isinstance(value, (Mapping, list, tuple)):
            continue
        for shape in _SPEC_SHAPES:
            stand_in = jax.tree_util.tree_map(
                lambda _, shape=shape: jax.ShapeDtypeStruct(shape, jnp.float32), value, is_leaf=_is_spec
            )
            if stand_in not in specs and stand_in not in masks:
                specs.append(stand_in)
    return [*masks, *default_param_shapes(), *specs]


def _is_mask(value: Any) -> bool:
    """A tree of bools (a mask) or strings (labels)."""
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(isinstance(x, (bool, np.bool_, str)) for x in leaves)


def _shaped_by_function(fn: Any) -> list[Any]:
    """Stand-ins shaped like what a mask or label function returns for the default ones,
    where that is a mask of another structure (the same leaves in another container).

    Any other callable (a loss function, a dtype, one that fails on stand-ins)
    tells nothing: what it returns or raises is ignored.
    """
    out: list[Any] = []
    for params in default_param_shapes():
        structure = jax.tree_util.tree_structure(params)
        try:
            with _quiet.quietly():
                result = fn(params)
            if not _is_mask(result) or jax.tree_util.tree_structure(result) == structure:
                continue
            shaped = jax.tree_util.tree_structure(result)
            leaves = jax.tree_util.tree_leaves(params)
            if shaped.num_leaves == len(leaves):  # the same parameters, in another container
                out.append(jax.tree_util.tree_unflatten(shaped, leaves))
            else:
                out.append(_kernels_like(result))
        except Exception:  # noqa: BLE001 - not a mask function: it tells nothing
            continue
    return out


def _kernels_like(tree: Any) -> Any:
    """Stand-in parameters of ``tree``'s structure: a (4, 3) kernel per leaf."""
    return jax.tree_util.tree_map(lambda _: jax.ShapeDtypeStruct((4, 3), jnp.float32), tree)


# Each rank of the defaults but a bias's (specifications are of matrices and up), the most axes first.
_SPEC_SHAPES = ((2, 3, 2, 4), (3, 2, 4), (4, 3))


def _is_spec(x: Any) -> bool:
    """A leaf of a tree of per-parameter specifications: ``None`` (a parameter left out) or a named tuple."""
    return x is None or (isinstance(x, tuple) and hasattr(x, "_fields"))


class Run:
    __slots__ = ("ctx", "error")

    def __init__(self, error: BaseException | None, ctx: _guard.Context | None):
        self.error = error
        self.ctx = ctx


class Probe:
    """Runs a factory with each candidate argument in a chosen mode."""

    def __init__(
        self,
        info: FactoryInfo,
        kind: Kind,
        base: dict[str, Any],
        concrete: dict[str, Any],
        leaves: dict[str, Any],
        param_shapes: Sequence[Any] = (),
    ):
        self.info = info
        self.kind = kind
        self.base = base  # every non-candidate argument, ready to call with
        self.concrete = {n: value_as_static(v) for n, v in concrete.items()}  # candidate -> static form
        self.abstract = {n: _spec(v) for n, v in leaves.items()}  # candidate -> leaf spec
        self.pyvals = {n: value_as_given(v) for n, v in concrete.items()}
        self.param_shapes = list(param_shapes) or default_param_shapes()  # see stand_in_params
        self.level: Level | None = None
        self.params: Params = None
        self.fixed: dict[str, Mode] = {}  # candidates the verification found must be static

    def run(self, modes: Mapping[str, Mode], level: Level | None = None, params: Params = None) -> Run:
        if level is None:
            assert self.level is not None, "baseline() first"
            level, params = self.level, self.params if params is None else params
        modes = {**modes, **self.fixed}
        holder: list[_guard.Context] = []
        info, at = self.info, level

        def fn(dyn: dict[str, Any], params: Params, count: Any, value: Any) -> Any:
            ctx = _guard.Context(info.name, record=True)
            holder.append(ctx)
            args = dict(self.base)
            for n, mode in modes.items():
                if mode is Mode.PYTHON_VALUE:
                    args[n] = self.concrete[n]
                elif mode is Mode.LEAF:
                    args[n] = dyn[n]
                else:
                    args[n] = _guard.Guarded(ctx, (_expr.ARG, n), dyn[n], self.pyvals[n])
            built = _bind.call_quietly(info, args)
            built = _detach.detach(built, ctx, frozenset(n for n, m in modes.items() if m is Mode.GUARDED))
            ctx.phase = Phase.CALL
            return _guard.unwrap(exercise(built, self.kind, at, params, count, value))

        args = (
            {n: self.abstract[n] for n, m in modes.items() if m is not Mode.PYTHON_VALUE},
            params,
            jax.ShapeDtypeStruct((), jnp.int32),
            jax.ShapeDtypeStruct((), jnp.float32),
        )
        error: BaseException | None = None
        try:
            # The factory's warnings and log lines are the user's to see once,
            # when they use it, not once per probe run.
            with _quiet.quietly():
                jax.eval_shape(fn, *args)
        except Exception as e:  # noqa: BLE001 - any failure counts: that is the point
            error = e
        return Run(error, holder[-1] if holder else None)

    def baseline(self) -> bool:
        """Finds the deepest run that succeeds with every candidate concrete."""
        static = dict.fromkeys(self.concrete, Mode.PYTHON_VALUE)
        for level in _LEVELS[self.kind]:
            for params in self.param_shapes if level is not Level.BUILD else [None]:
                if self.run(static, level, params).error is None:
                    self.level, self.params = level, params
                    return True
        return False


def search(probe: Probe, candidates: Sequence[str], proxiable: frozenset[str]) -> Analysis | None:
    """The modes of the candidates (see the module docstring), or None if undecidable."""
    # Every numeric candidate starts as a stand-in kept for call time: its
    # comparisons are guards, its Python arithmetic (``1 - b2``) an expression
    # whose host value the object carries (exactness, see ``Guarded.exact``),
    # its integer arithmetic checked against int32. Most factories run so at
    # the deepest level on the first stand-in parameters: then that is the
    # level, without a run with every candidate concrete first.
    modes = {n: Mode.GUARDED if n in proxiable else Mode.LEAF for n in candidates}
    level, params = _LEVELS[probe.kind][0], probe.param_shapes[0]
    run = probe.run(modes, level, params)
    if run.error is None and run.ctx is not None and not run.ctx.needs:
        probe.level, probe.params = level, params
    else:
        if not probe.baseline():
            return None
        if probe.level is Level.BUILD:
            modes = {n: Mode.GUARDED_WHILE_BUILT if m is Mode.GUARDED else m for n, m in modes.items()}
        run = probe.run(modes)
    assert probe.level is not None
    call_time = probe.level is not Level.BUILD
    for _ in range(4 * len(candidates) + 4):
        ctx = run.ctx
        if ctx is not None and ctx.needs:
            # A stand-in used as a Python value (int(), a shape, a dict key)
            # answered with the concrete value; a plain leaf may still do
            # (fori_loop takes a traced bound), else bisection makes it static.
            _demote(modes, ctx.needs)
        elif run.error is None:
            assert ctx is not None
            shape_dependent = _shape_dependent_guards(probe, modes, ctx)
            if not shape_dependent:
                break
            for n in shape_dependent:
                modes[n] = Mode.GUARDED_WHILE_BUILT
        elif not (ctx is not None and _demote(modes, ctx.escapes)):
            culprit = _bisect(probe, modes, candidates)
            if culprit is None:  # pragma: no cover - the all-static baseline runs
                return None
            modes[culprit] = modes[culprit].down
        run = probe.run(modes)
    else:  # pragma: no cover - each round moves one argument down a mode
        return None
    assert run.ctx is not None
    guards = tuple(run.ctx.recorded.items())
    # Simpler modes where they do as well: a stand-in neither compared nor in
    # an expression that reached JAX is a plain leaf.
    # (Nothing it recorded changes: no run again.)
    used = _used(run.ctx)
    modes = {n: Mode.LEAF if m.guarded and n not in used else m for n, m in modes.items()}
    static = tuple(n for n in candidates if modes[n] is Mode.PYTHON_VALUE)
    if probe.fixed:  # the verification's static candidates, in signature order
        static = tuple(n for n in probe.concrete if n in probe.fixed or n in static)
    return Analysis.of(
        probe.kind,
        static=static,
        modes={n: m for n, m in modes.items() if m.guarded},
        guards=guards,
        undecided=not call_time,
        values=probe.concrete,
        level=probe.level,
        params=probe.params,
        carried=tuple(run.ctx.exprs.items()),
    )


def _used(ctx: _guard.Context) -> frozenset[str]:
    """The arguments whose stand-ins mattered: compared, or in an expression that reached JAX."""
    names = [_expr.key_names(k) for k in ctx.recorded]
    names += [_expr.names_in(e) for e in ctx.exprs]
    return frozenset().union(*names) if names else frozenset()


def _shape_dependent_guards(probe: Probe, modes: Mapping[str, Mode], ctx: _guard.Context) -> set[str]:
    """Arguments kept for call time whose guards change with the parameters' shapes."""
    kept = {n for n, m in modes.items() if m is Mode.GUARDED}
    call_keys = {k for k in ctx.seen_call if _expr.key_names(k) & kept}
    if not call_keys:
        return set()
    other = probe.run(modes, probe.level, _other_dims(probe.params))
    if other.error is not None or other.ctx is None:
        return set(kept)
    first = {k: ctx.recorded[k] for k in call_keys}
    second = {k: other.ctx.recorded[k] for k in other.ctx.seen_call if _expr.key_names(k) & kept}
    differing = set(first.items()) ^ set(second.items())
    return {n for k, _ in differing for n in _expr.key_names(k) if n in kept}


def _demote(modes: dict[str, Mode], events: Sequence[tuple[frozenset[str], Phase]]) -> bool:
    """Stand-ins that reached JAX or Python-value use go down a mode; whether any did.

    Met only at call time: no longer kept in ``update`` (``Mode.GUARDED_WHILE_BUILT``);
    met while the factory runs: a plain leaf (``Mode.LEAF``).
    """
    phases: dict[str, set[Phase]] = {}
    for names, phase in events:
        for n in names:
            phases.setdefault(n, set()).add(phase)
    moved = False
    for n, seen in phases.items():
        mode = modes.get(n)
        if mode is Mode.GUARDED and seen == {Phase.CALL}:
            modes[n] = Mode.GUARDED_WHILE_BUILT
            moved = True
        elif mode is not None and mode.guarded:
            modes[n] = Mode.LEAF
            moved = True
    return moved


def _bisect(probe: Probe, modes: dict[str, Mode], candidates: Sequence[str]) -> str | None:
    """A candidate whose mode breaks the run, the others as they are (earlier ones not static)."""
    order = [n for n in candidates if modes[n] is not Mode.PYTHON_VALUE]

    def ok(prefix: Sequence[str]) -> bool:
        trial = {n: modes[n] if n in prefix else Mode.PYTHON_VALUE for n in modes}
        run = probe.run(trial)
        return run.error is None and not (run.ctx is not None and run.ctx.needs)

    # Invariant: order[:lo] runs, order[:hi] fails. The culprit is order[hi - 1].
    lo, hi = 0, len(order)
    if not order or ok(order):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(order[:mid]):
            lo = mid
        else:
            hi = mid
    return order[hi - 1]


def analyse(
    info: FactoryInfo,
    kind: Kind,
    base: dict[str, Any],
    concrete: dict[str, Any],
    leaves: dict[str, Any],
    param_shapes: Sequence[Any],
    static: Sequence[str] = (),
) -> Analysis:
    """Probes the candidates (``concrete``: name -> value as given) of one configuration.

    ``static``: candidates already known to be static (the verification found
    that the wrapped build computes something else with them as leaves).
    """
    if not concrete:
        return Analysis.of(kind)
    probe = Probe(info, kind, base, concrete, leaves, param_shapes)
    probe.fixed = dict.fromkeys(static, Mode.PYTHON_VALUE)
    proxiable = frozenset(
        n for n, v in concrete.items() if probe.pyvals[n] is not None or _is_scalar_tracer(v)
    )
    found = search(probe, [n for n in concrete if n not in probe.fixed], proxiable)
    if found is None:
        return Analysis.of(kind, static=tuple(static), undecided=True, values=probe.concrete)
    return found


def _is_scalar_tracer(x: Any) -> bool:
    return is_tracer(x) and jnp.ndim(x) == 0


def callable_kind(result: Any) -> Kind | None:
    """What a factory returned is a transformation, a schedule, or neither (None)."""
    if isinstance(result, optax.GradientTransformation) or (
        callable(getattr(result, "init", None)) and callable(getattr(result, "update", None))
    ):
        return Kind.TRANSFORMATION
    if callable(result):
        return Kind.SCHEDULE
    return None
