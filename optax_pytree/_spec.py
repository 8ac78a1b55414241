"""Spec: everything static about a wrapped object (its pytree aux data), and the analyses per configuration.

JAX compares the aux data of two treedefs with ``==`` and hashes it to key
the ``jit`` cache. A :class:`Spec` holds the factory, the role of each
argument, the static values (compared by value, see ``_static``), the
templates of child containers, the detected static arguments and the guards
(comparison -> outcome). Equal configurations share one interned spec object,
so treedef comparisons are identity checks.

The caches: per configuration (factory, argument roles and types, static
values, options), the list of :class:`Analysis` found so
far, one per branch; each analysis makes one spec.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Generator, Mapping
from typing import Any

import jax
import numpy as np

from . import _backends, _checks, _expr, _jaxprs, _leaves, _static
from ._bind import FactoryInfo
from ._caches import cache
from ._caches import clear_caches as clear_caches  # the name benchmarks/versus.py looks up
from ._children import Template
from ._classify import Classified, Options, Roles, factory_key
from ._leaves import is_tracer, value_as_given, value_as_static
from ._value import ConfigKey, ValueObject
from ._vocabulary import Kind, Level, Mode, Role


@dataclasses.dataclass(frozen=True, eq=False)
class Analysis:
    """What the analysis found for one configuration and one branch of its values.

    Made whole, never changed: by the probe (``_detect``, through
    :meth:`of`), then by the verification as a new record with what its
    comparison learned (``_verify.compare``: ``exponents``), and read back
    from disk whole (``_disk``). Compared by identity (``eq=False``): each is
    one entry of the analysis cache, and the interned spec of a configuration
    is looked up by (configuration, analysis).
    """

    kind: Kind
    """What the factory returns."""
    static_names: tuple[str, ...] = ()
    """The candidates the factory needs as Python values (found by the probe or the verification)."""
    static_key: tuple[Any, ...] = ()
    """Their values, frozen (``_static.freeze``): an analysis is for these values of them only."""
    modes: Mapping[str, Mode] = dataclasses.field(default_factory=dict[str, Mode])
    """The guarded candidates: ``Mode.GUARDED`` (kept for call time) or ``Mode.GUARDED_WHILE_BUILT``."""
    guards: _expr.Guards = ()
    """The comparisons the factory made on its candidates, and their outcomes: the branch."""
    undecided: bool = False
    """The probe could not run ``init``/``update`` (its stand-in parameters did not fit): a
    failure at trace time names the dynamic arguments."""
    example: Mapping[str, Any] = dataclasses.field(default_factory=dict[str, Any])
    """Where ``undecided``: the scalar values it was made from (name -> Python or NumPy
    scalar), with which such a failure is tried again as plain optax would run it
    (``_build``): an error of plain optax's own is the user's, not the mechanism's."""
    level: Level = Level.BUILD
    """How deep the probe could drive the result: where the verification runs it too."""
    params: Any = None
    """The stand-in parameters (a tree of ``jax.ShapeDtypeStruct``) it ran on, or None."""
    carried: tuple[tuple[_expr.Expr, str], ...] = ()
    """Expressions of the arguments that reach JAX (``1 - b2``) and the dtype of each value:
    evaluated on the host when an object is made, and carried as its leaves."""
    folds: tuple[Any, ...] = ()
    """What the backend's compiler folds from the object's own hyperparameters alone in its
    calls (found by the verification: ``_jaxprs.learning``), each ``(kind, key, ...)`` in the
    object's own terms (``_jaxprs.Folds``): computed on the host when an object is made
    (``_folds``) and carried as its leaves, so the device does not compute them in every call."""
    exponents: tuple[str, ...] = ()
    """Leaves that are a power's exponent (found by the verification): plain optax's program
    specializes a power by some constants (the backend's, ``_backends.specializes_exponent``:
    2.0, 3.0, 0.5 or -1.0 on the CPU), a leaf's cannot, so those values are not this
    analysis' (see :meth:`matches`)."""
    nonzero: tuple[str, ...] = ()
    """Scalar leaves verified at a nonzero value only: given zero, a factory may skip operations
    in Python that a leaf would compute (optax's ``add_decayed_weights`` skips ``g + weight_decay
    * p`` for the Python ``0.0``), so a zero is not this analysis' (see :meth:`matches`): it is
    verified anew, and static there where the factory skips."""
    at_zero: tuple[str, ...] = ()
    """Of ``static_names``, those static only because they are zero here (the factory skips
    operations in Python for a zero): a batch (``opx.grid``, ``opx.stack``) takes them as
    leaves instead (:func:`batch_members`), the numbers the same."""

    @classmethod
    def of(
        cls,
        kind: Kind,
        *,
        static: tuple[str, ...] = (),
        values: Mapping[str, Any] | None = None,
        undecided: bool = False,
        **found: Any,
    ) -> Analysis:
        """An analysis of ``kind`` with ``static`` candidates, their ``values`` (name -> value
        as given) frozen into ``static_key``; ``found``: the other fields."""
        values = values or {}
        given = {n: value_as_given(v) for n, v in values.items()} if undecided else {}
        return cls(
            kind,
            static,
            tuple(_static.freeze(value_as_static(values[n])) for n in static),
            undecided=undecided,
            example={n: v for n, v in given.items() if v is not None},
            **found,
        )

    @functools.cached_property
    def checker(self) -> _checks.Checker:
        """The guards compiled, once asked (a cache, not a field: ``_disk`` writes the fields)."""
        return _checks.checker(self.guards)

    @property
    def decides(self) -> bool:
        """Whether anything of the values decides between this analysis and another (else every
        value matches it): static candidates, specialized exponents, guards."""
        return bool(self.static_names or self.exponents or self.guards)

    def zero_in(self, values: Mapping[str, Any]) -> bool:
        """Whether a leaf this analysis was verified nonzero for is zero in ``values``."""
        return any(is_zero(values[n]) for n in self.nonzero)

    def check(self, env: Mapping[str, Any]) -> list[tuple[_expr.Key, bool, Any]]:
        """The guards whose outcome for ``env`` is not the recorded one (see ``_checks``)."""
        return self.checker.mismatches(env)

    def matches(self, values: Mapping[str, Any], zeros: bool = True) -> bool | None:
        """Whether these values take this analysis' branches (None: cannot tell, traced).

        ``zeros``: whether a zero where it was verified nonzero is another
        branch (``nonzero``); not for an object's own analysis, which its spec
        may share with an equal one verified at other values.

        Python values are compared as the factory compared them; a batch of
        concrete values (a population) matches if every member does.
        """
        if self.at_zero or self.nonzero:
            if _BATCH.get():
                if self.at_zero:
                    return False  # a batch's members take a zero as a leaf
            elif zeros and self.nonzero and self.zero_in(values):
                return False
        if not self.decides:
            return True  # the common case
        if tuple(_static.freeze(value_as_static(values[n])) for n in self.static_names) != self.static_key:
            return False
        for n in self.exponents:
            value = value_as_given(values[n])
            if value is not None and _backends.specializes_exponent(value):
                return False
        if not self.guards:
            return True
        env = {n: value_as_given(values[n]) for n in self.modes}
        if any(v is None for v in env.values()):
            batch = {n: values[n] for n in self.modes}
            if any(is_tracer(v) for v in batch.values()):
                return None
            env = {n: np.asarray(v) for n, v in batch.items()}
        return not self.check(env)


# Inside ``batch_members``: wrapped objects made for a batch.
_BATCH: contextvars.ContextVar[bool] = contextvars.ContextVar("optax_pytree_batch", default=False)


@contextlib.contextmanager
def batch_members() -> Generator[None]:
    """Objects made inside are members of a batch: a zero is a leaf, as any other value.

    A zero the factory skips operations for is static in an object of its own
    (the factory's numbers, bit for bit: ``Analysis.at_zero``). A batch whose
    members hold zeros and other values (``opx.grid(..., weight_decay=[0.0,
    1e-4])``) shares one program: there the zero is a leaf, and the program
    computes the skipped term, ``g + 0.0 * p``, the same numbers up to how
    XLA compiles them.
    """
    token = _BATCH.set(True)
    try:
        yield
    finally:
        _BATCH.reset(token)


def in_batch() -> bool:
    return _BATCH.get()


def is_zero(x: Any) -> bool:
    """Whether ``x`` is a scalar number equal to zero (a bool is not a number here)."""
    value = value_as_given(x)
    if value is None or isinstance(value, (bool, np.bool_)):
        return False
    return bool(value == 0)


class Spec(ValueObject):
    """Aux data of a wrapped object: hashable, compared by value (``key``).

    Made once per configuration and branch, interned (:func:`spec_for`), read
    on every flatten, rebuild and jitted call. Its fields, by what they serve:

    - the key: ``key`` (what equality compares: the factory, the kind, each
      argument's role and static value, the detected statics, the guards,
      the modes, the carried expressions, the options) and its ``hash``;
    - what the analysis found, for the hot path (``kind``, ``guards`` and
      their ``outcomes``, ``tracked``, ``keep``, ``guarded``, ``detected``,
      the ``carried`` expressions and their layout); the rest of it (its
      modes, whether it ran ``update``) is read through ``analysis``;
    - the configuration: ``info`` (the factory), ``names``, ``roles``,
      ``static`` values, ``templates`` (containers of wrapped values),
      ``options``, ``config_key`` (the analysis cache's key);
    - the leaves' layout: ``leaf_names``, ``leaf_index``, ``keys`` (key
      paths), ``dynamic_names`` and ``fingerprint_of`` (one dispatch for a
      wrap from Python numbers).
    """

    __slots__ = (
        "analysis",
        "carried",
        "carried_dtypes",
        "carried_index",
        "carried_names",
        "child_names",
        "config_key",
        "detected",
        "dynamic_names",
        "fingerprint_at",
        "fingerprint_of",
        "fold_index",
        "fold_reads",
        "fold_reads_exact",
        "fold_refs",
        "folds",
        "folds_at",
        "guarded",
        "guards",
        "info",
        "keep",
        "keys",
        "kind",
        "leaf_index",
        "leaf_names",
        "names",
        "options",
        "outcomes",
        "roles",
        "static",
        "templates",
        "tracked",
    )

    def __init__(
        self,
        info: FactoryInfo,
        roles: Roles,
        static: dict[str, Any],
        templates: dict[str, Template],
        options: Options,
        analysis: Analysis,
        wide: tuple[str, ...] = (),
    ):
        self.info = info
        self.analysis = analysis  # what it was made from (not part of the key)
        self.config_key: ConfigKey | None = None
        self.kind = analysis.kind
        self.names = tuple(roles)
        self.roles = roles
        self.static = static
        self.templates = templates
        self.options = options
        self.detected = wide + analysis.static_names  # found static: too wide for a leaf, or needed concrete
        self.guards = analysis.guards
        self.outcomes = dict(self.guards)  # guard -> outcome, what a rebuild replays
        # Stand-ins in a rebuild: compared (guarded), or in carried expressions.
        self.tracked = tuple(n for n in roles if n in analysis.modes)
        compared = frozenset().union(*(_expr.key_names(k) for k, _ in self.guards))
        self.guarded = tuple(n for n in self.tracked if n in compared)
        # Exactness (see _guard.Guarded.exact): the expressions whose host
        # values the object carries (its ``exact`` child: a vector per dtype,
        # ``.exact[0]``), then the fingerprint of the arguments they were
        # computed from; ``carried_dtypes`` their dtypes, in that order.
        self.carried = tuple(e for e, _ in analysis.carried)
        names = frozenset().union(*(_expr.names_in(e) for e in self.carried))
        self.carried_names = tuple(n for n in self.tracked if n in names)
        self.carried_index = {e: i for i, e in enumerate(self.carried)}
        fingerprint = _leaves.FINGERPRINT_DTYPE
        carried_part = (*(d for _, d in analysis.carried), fingerprint) if self.carried else ()
        self.fingerprint_at = len(self.carried) if self.carried else None
        # Then the folds (``Analysis.folds``): their host values (float32) and the fingerprint
        # of the leaves they were computed from (``fold_refs``; a carried value they read is
        # itself computed from the leaves).
        self.folds = analysis.folds
        self.fold_index = {f: i for i, f in enumerate(self.folds)}
        self.folds_at = len(carried_part)
        # The leaves each fold reads, and whether one reads the exact vectors.
        reads = [_jaxprs.references(fold[1:]) for fold in self.folds]
        self.fold_reads = tuple(tuple(sorted({r for r in refs if r[0] == _jaxprs.LEAF})) for refs in reads)
        self.fold_refs = tuple(sorted({ref for refs in self.fold_reads for ref in refs}))
        self.fold_reads_exact = any(ref[0] == _jaxprs.EXACT for refs in reads for ref in refs)
        fold_part = (*(("float32",) * len(self.folds)), fingerprint) if self.folds else ()
        self.carried_dtypes: tuple[str, ...] = (*carried_part, *fold_part)
        self.keep = frozenset(n for n, m in analysis.modes.items() if m is Mode.GUARDED)
        self.leaf_names = tuple(n for n, r in roles.items() if r != Role.STATIC)
        self.leaf_index = {n: i for i, n in enumerate(self.leaf_names)}
        # For a wrap from Python numbers (one dispatch, _leaves.make_exact):
        # the numeric leaves, and which of them the fingerprint covers.
        self.dynamic_names = tuple(n for n, r in roles.items() if r == Role.DYNAMIC)
        self.child_names = tuple(n for n, r in roles.items() if r == Role.CHILD)
        self.fingerprint_of = tuple(self.dynamic_names.index(n) for n in self.carried_names)
        self.keys = tuple(jax.tree_util.GetAttrKey(n) for n in self.leaf_names)  # flattening with paths
        parts = []
        for name, role in roles.items():
            if role == Role.STATIC:
                parts.append((name, role, _static.freeze(static[name])))
            elif name in templates:
                parts.append((name, role, templates[name].key))
            else:
                parts.append((name, role))
        self.key = (
            factory_key(info),
            self.kind,
            tuple(parts),
            self.detected,
            self.guards,
            tuple(sorted(analysis.modes.items())),
            self.carried,
            self.folds,
            options.key,
        )
        self.cache_hash()

    def __repr__(self) -> str:
        return f"<spec of {self.info.name}: dynamic={list(self.leaf_names)}>"

    @property
    def undecided(self) -> bool:
        """The probe could not run init/update: a failure at trace time names the dynamic arguments."""
        return self.analysis.undecided

    def guard_text(self) -> tuple[str, ...]:
        return _expr.describe(self.guards)


_ANALYSES = cache("configuration key -> [Analysis, ...], one per branch seen", 4096)
_SPECS = cache("interned specs: equal specs are the same object", 4096)
_SPEC_OF = cache("(configuration key, Analysis) -> interned spec", 8192)
_MAX_BRANCHES = 64


def analyses(key: ConfigKey) -> list[Analysis]:
    found = _ANALYSES.get(key)
    return [] if found is None else found


def remember(key: ConfigKey, analysis: Analysis) -> None:
    found = _ANALYSES.setdefault(key, [])
    with _ANALYSES.lock:
        found.append(analysis)
        del found[:-_MAX_BRANCHES]


# The configurations whose first analysis nothing of the values decides (no
# guards, no static candidates, no exponents): every value matches it, so
# ``_find_analysis`` would return it; their spec is found at once.
_PLANNED = cache("analysis key -> its spec, where nothing of the values decides the analysis", 4096)


def planned(key: ConfigKey) -> Spec | None:
    return _PLANNED.get(key)


def plan(key: ConfigKey, spec: Spec) -> None:
    """Remembers ``spec`` for ``key`` if its analysis is the first of the key's and decides nothing."""
    analysis = spec.analysis
    if analysis.decides:
        return
    found = _ANALYSES.get(key)
    if found and found[0] is analysis and _DEGRADED.get(key) is None:
        _PLANNED.set(key, spec)


def new_spec(info: FactoryInfo, classified: Classified, analysis: Analysis) -> Spec:
    """The spec of a configuration and one of its analyses (not interned: see :func:`spec_for`)."""
    roles = dict(classified.roles)
    for name in analysis.static_names:
        roles[name] = Role.STATIC
    static = {n: classified.values[n] for n, r in roles.items() if r == Role.STATIC}
    for name in analysis.static_names:  # found to be needed as Python values: never JAX arrays
        static[name] = value_as_static(static[name])
    spec = Spec(
        info, roles, static, classified.templates, classified.options, analysis, tuple(classified.wide)
    )
    spec.config_key = classified.key
    return spec


def spec_for(info: FactoryInfo, classified: Classified, analysis: Analysis) -> Spec:
    """The interned spec of a configuration and one of its analyses."""
    key = (classified.key, analysis)
    spec = _SPEC_OF.get(key)
    if spec is None:
        spec = new_spec(info, classified, analysis)
        spec = _SPECS.setdefault(spec, spec)
        _SPEC_OF.setdefault(key, spec)
    return spec


# A new value of one of them (another static key) is analysed with them
# static from the start, not bisected again.
_VERIFIED_STATIC = cache("configuration key -> the arguments the verification found static", 4096)


def verified_static(key: ConfigKey) -> tuple[str, ...]:
    found = _VERIFIED_STATIC.get(key)
    return () if found is None else found


def remember_verified_static(key: ConfigKey, names: tuple[str, ...]) -> None:
    _VERIFIED_STATIC.set(key, names)  # grows as bisection finds each argument


# Configurations the mechanism could not honour (``_pipeline.Degraded``): the
# arguments made static, why (said once, when found), and the arguments of
# wrapped children made static instead of the children whole (``_descend.Inner``).
_DEGRADED = cache("analysis key -> (the arguments made static, why, the children's made static)", 1024)


def degraded(key: ConfigKey) -> tuple[tuple[str, ...], str, tuple[Any, ...]] | None:
    return _DEGRADED.get(key)


def remember_degraded(key: ConfigKey, found: tuple[tuple[str, ...], str, tuple[Any, ...]]) -> None:
    _DEGRADED.set(key, found)


# The same by the spec they gave, for messages (``_explain``): a spec's options
# hold the arguments the user marked static and those the library made so.
_MADE_STATIC = cache("spec -> (the arguments the library made static, why)", 1024)


def made_static(spec: Spec) -> tuple[tuple[str, ...], str] | None:
    return _MADE_STATIC.get(spec)


def remember_made_static(spec: Spec, found: tuple[tuple[str, ...], str]) -> None:
    _MADE_STATIC.set(spec, found)


__all__ = ["Spec", "clear_caches", "spec_for"]
