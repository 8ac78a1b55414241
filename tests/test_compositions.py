"""The composition matrix: every optax combinator around inner optimizers carrying each schedule.

Three dimensions:

- COMBINATORS: every optax factory that takes a transformation (``chain``,
  ``MultiSteps``, ``masked``, ``partition``, ``lookahead``, ``contrib.sam``,
  ...), and ``inject_hyperparams``, which takes a factory.
- INNERS: an optimizer per optax schedule, including guarded arguments
  (compared in Python by the schedule), exponents XLA specializes (2.0) and
  joined schedules.
- MODES: how the user builds it: ``dropin`` (everything from
  ``optax_pytree.optax``), ``wrap`` (``opx.wrap`` at every level: schedule,
  inner, combinator) and ``plain_outer`` (a plain optax combinator around a
  drop-in inner optimizer).

Each case is compared with the same configuration built with plain optax
only (run once per pair, eagerly): a few eager steps bit for bit (updates,
parameters and state), and the same steps under ``jax.jit`` (the optimizer an
argument where it is a pytree, closed over where it is not) to float32
round-off. A rebuilt pytree optimizer must have the same treedef.

Which cases run (the others are not generated, so nothing is skipped
silently):

- the default run, a slice: each combinator once, the modes in turn;
- ``pytest --exhaustive`` (CI; the root conftest.py): every (combinator,
  inner) pair, each in one mode, the modes in turn, so every pair of values
  of any two dimensions is there;
- ``OPTAX_PYTREE_FULL_MATRIX=all pytest --exhaustive``: every (combinator,
  inner, mode) triple.

Combinations plain optax refuses are left out, with the reason where they
are (``Combinator.invalid``, :func:`_valid`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax as plain_optax
import pytest
from helpers import (
    BIT_FOR_BIT_UNDER_JIT,
    NO_XLA_CONSTANT_REWRITES,
    PARAMS,
    assert_jit_bit_for_bit,
    assert_tree_allclose,
    exhaustive,
    loss,
    run_in_fresh_python,
    sliced,
)

import optax_pytree as opx
import optax_pytree.optax as dropin_optax

# Four steps: MultiSteps (every 2), lookahead and sam (sync period 2) update
# their inner optimizer twice, so an inner state that has moved once is used.
STEPS = 4


# --------------------------------------------------------------------------
# Namespaces: a builder calls ``ox.adamw(ox.cosine_decay_schedule(...))`` on
# one of these, so one builder describes a configuration in every mode.


class Wrapping:
    """``opx.wrap`` at every level: ``WRAPPING.adam(0.1)`` is ``opx.wrap(optax.adam, 0.1)``.

    What the drop-in passes through unchanged (``skip_not_finite``,
    ``LookaheadParams``, ``apply_updates``) is optax's own object here too.
    """

    def __init__(self, plain: types.ModuleType, dropin: types.ModuleType) -> None:
        self._plain, self._dropin = plain, dropin

    def __getattr__(self, name: str) -> Any:
        if name == "contrib":
            return Wrapping(self._plain.contrib, self._dropin.contrib)
        obj = getattr(self._plain, name)
        if getattr(self._dropin, name) is obj:  # not a factory
            return obj
        return functools.partial(opx.wrap, obj)


WRAPPING = Wrapping(plain_optax, dropin_optax)


@dataclasses.dataclass(frozen=True)
class Mode:
    """How a case is built: the namespace of the combinator, that of the inner
    optimizer (its schedule and factory), and how ``inject_hyperparams`` is
    applied to a factory named in the inner namespace."""

    id: str
    outer: Any
    inner: Any
    inject: Callable[[str, dict[str, Any]], Any]


def _inject(module: Any, namespace: Any) -> Callable[[str, dict[str, Any]], Any]:
    return lambda factory, kwargs: module.inject_hyperparams(getattr(namespace, factory))(**kwargs)


def _inject_wrapped(factory: str, kwargs: dict[str, Any]) -> Any:
    # ``opx.wrap(optax.inject_hyperparams, optax.adamw)`` would wrap a factory
    # of factories; what the user wraps is the injected factory itself.
    return opx.wrap(plain_optax.inject_hyperparams(getattr(plain_optax, factory)), **kwargs)


REFERENCE = Mode("plain", plain_optax, plain_optax, _inject(plain_optax, plain_optax))
MODES = [
    Mode("dropin", dropin_optax, dropin_optax, _inject(dropin_optax, dropin_optax)),
    Mode("wrap", WRAPPING, WRAPPING, _inject_wrapped),
    Mode("plain_outer", plain_optax, dropin_optax, _inject(plain_optax, dropin_optax)),
]


# --------------------------------------------------------------------------
# Inner optimizers, one per schedule of optax (and a constant rate). Those
# given as ``factory`` + ``kwargs`` can also go through inject_hyperparams.
#
# SGD's rates stay off 0.1: the loss's curvature on ``b[2]`` is 10, so a step
# of 0.1 lands exactly on the minimum and every later gradient there is
# round-off, of either sign (a comparison of signs, not of optimizers).


@dataclasses.dataclass(frozen=True)
class Inner:
    id: str
    factory: str | None = None
    kwargs: Callable[[Any], dict[str, Any]] | None = None
    custom: Callable[[Any], Any] | None = None  # a builder, where no single factory makes it

    def build(self, ox: Any) -> Any:
        if self.custom is not None:
            return self.custom(ox)
        assert self.factory is not None and self.kwargs is not None
        return getattr(ox, self.factory)(**self.kwargs(ox))


def _sgdr_kwargs(peak: float) -> dict[str, Any]:
    return {"init_value": 0.0, "peak_value": peak, "decay_steps": 3, "warmup_steps": 1}


INNERS = [
    Inner("adam_constant", "adam", lambda ox: {"learning_rate": 0.01}),
    # The real-world recipe; peak_value and warmup_steps are guarded.
    Inner(
        "adamw_warmup_cosine",
        "adamw",
        lambda ox: {
            "learning_rate": ox.warmup_cosine_decay_schedule(0.0, 0.02, 2, 10, end_value=1e-3),
            "weight_decay": 1e-2,
        },
    ),
    # exponent=2.0 is a power XLA specializes.
    Inner(
        "adamw_warmup_cosine_exponent2",
        "adamw",
        lambda ox: {
            "learning_rate": ox.warmup_cosine_decay_schedule(1e-3, 0.02, 2, 10, end_value=1e-3, exponent=2.0),
            "b1": 0.8,
        },
    ),
    # warmup_steps=0: the other branch of the guarded warmup (a constant warmup).
    Inner(
        "adamw_cosine_no_warmup",
        "adamw",
        lambda ox: {"learning_rate": ox.warmup_cosine_decay_schedule(0.0, 0.02, 0, 10)},
    ),
    Inner(
        "sgd_momentum_exponential_decay",
        "sgd",
        lambda ox: {
            "learning_rate": ox.exponential_decay(
                0.07, transition_steps=2, decay_rate=0.5, transition_begin=1
            ),
            "momentum": 0.9,
        },
    ),
    # staircase and a lower bound (end_value with decay_rate < 1).
    Inner(
        "sgd_nesterov_exponential_decay_staircase_end",
        "sgd",
        lambda ox: {
            "learning_rate": ox.exponential_decay(
                0.07, transition_steps=1, decay_rate=0.5, transition_begin=1, staircase=True, end_value=0.02
            ),
            "momentum": 0.9,
            "nesterov": True,
        },
    ),
    # decay_rate > 1: end_value is an upper bound (the other guarded branch).
    Inner(
        "sgd_exponential_growth_end",
        "sgd",
        lambda ox: {"learning_rate": ox.exponential_decay(0.01, 1, 2.0, end_value=0.05)},
    ),
    # A chain as the inner optimizer: the schedule inside scale_by_schedule.
    Inner(
        "chain_clip_adam_cosine",
        custom=lambda ox: ox.chain(
            ox.clip_by_global_norm(1.0),
            ox.scale_by_adam(),
            ox.scale_by_schedule(ox.cosine_decay_schedule(0.05, 10, alpha=0.1)),
            ox.scale(-1.0),
        ),
    ),
    Inner(
        "lion_join_linear_cosine",
        "lion",
        lambda ox: {
            "learning_rate": ox.join_schedules(
                [ox.linear_schedule(0.0, 0.01, 2), ox.cosine_decay_schedule(0.01, 8)], boundaries=[2]
            )
        },
    ),
    Inner(
        "sgd_polynomial_power1",
        "sgd",
        lambda ox: {
            "learning_rate": ox.polynomial_schedule(
                0.07, 0.01, power=1.0, transition_steps=5, transition_begin=1
            )
        },
    ),
    # power=2.0 is a power XLA specializes.
    Inner(
        "rmsprop_polynomial_power2",
        "rmsprop",
        lambda ox: {"learning_rate": ox.polynomial_schedule(0.05, 0.005, power=2.0, transition_steps=5)},
    ),
    # The one-cycle schedules: int(pct_start * transition_steps) is a dict key.
    Inner(
        "adam_cosine_onecycle",
        "adam",
        lambda ox: {"learning_rate": ox.cosine_onecycle_schedule(10, 0.05, pct_start=0.3)},
    ),
    Inner(
        "adabelief_linear_onecycle",
        "adabelief",
        lambda ox: {"learning_rate": ox.linear_onecycle_schedule(10, 0.05)},
    ),
    Inner(
        "sgd_piecewise_constant",
        "sgd",
        lambda ox: {"learning_rate": ox.piecewise_constant_schedule(0.07, {2: 0.5, 3: 0.1})},
    ),
    Inner(
        "adagrad_piecewise_interpolate_cosine",
        "adagrad",
        lambda ox: {"learning_rate": ox.piecewise_interpolate_schedule("cosine", 0.1, {1: 0.5, 3: 2.0})},
    ),
    Inner(
        "adam_warmup_exponential_decay",
        "adam",
        lambda ox: {
            "learning_rate": ox.warmup_exponential_decay_schedule(
                0.0,
                0.05,
                warmup_steps=2,
                transition_steps=1,
                decay_rate=0.5,
                transition_begin=1,
                end_value=0.01,
            )
        },
    ),
    Inner(
        "adam_warmup_constant",
        "adam",
        lambda ox: {"learning_rate": ox.warmup_constant_schedule(0.0, 0.02, 2)},
    ),
    Inner(
        "adam_sgdr",
        "adam",
        lambda ox: {"learning_rate": ox.sgdr_schedule([_sgdr_kwargs(0.05), _sgdr_kwargs(0.02)])},
    ),
    Inner(
        "sgd_linear",
        "sgd",
        lambda ox: {"learning_rate": ox.linear_schedule(0.07, 0.01, transition_steps=3, transition_begin=1)},
    ),
    Inner("nadam_constant_schedule", "nadam", lambda ox: {"learning_rate": ox.constant_schedule(0.02)}),
]


# --------------------------------------------------------------------------
# Combinators. ``build(mode, inner)`` builds the case; the auxiliary
# transformations a combinator needs come from the mode's outer namespace.


@dataclasses.dataclass(frozen=True)
class Options:
    """How a case is driven: gradients w.r.t. ``params.fast`` (lookahead), a
    ``value=`` extra argument (reduce_on_plateau), a NaN gradient at the second
    step (what apply_if_finite and skip_not_finite are for)."""

    fast: bool = False
    value: bool = False
    nonfinite: bool = False


@dataclasses.dataclass(frozen=True)
class Combinator:
    id: str
    build: Callable[[Mode, Inner], Any]
    options: Options = Options()
    # Ids of the inners it cannot take, where plain optax raises too (the
    # reason is given where the tuple is made).
    invalid: tuple[str, ...] = ()


def _combine(make: Callable[[Any, Any], Any]) -> Callable[[Mode, Inner], Any]:
    """A combinator of a transformation: ``make(outer_namespace, inner_transformation)``."""
    return lambda mode, inner: make(mode.outer, inner.build(mode.inner))


def _every_other_step(step: jax.Array) -> jax.Array:
    return step % 2 == 0


def _inject_hyperparams(mode: Mode, inner: Inner) -> Any:
    assert inner.factory is not None and inner.kwargs is not None
    return mode.inject(inner.factory, inner.kwargs(mode.inner))


# Inners whose update needs ``params`` (weight decay: adamw, and lion by
# default): scale_by_galore updates its base optimizer with ``params=None``, and
# plain optax raises (its docstring lists adamw as incompatible).
_NEEDS_PARAMS = tuple(i.id for i in INNERS if i.factory in ("adamw", "lion"))

COMBINATORS = [
    Combinator("chain", _combine(lambda ox, tx: ox.chain(ox.clip_by_global_norm(1.0), tx))),
    Combinator("named_chain", _combine(lambda ox, tx: ox.named_chain(("clip", ox.clip(0.5)), ("opt", tx)))),
    Combinator("multisteps", _combine(lambda ox, tx: ox.MultiSteps(tx, every_k_schedule=2))),
    Combinator(
        "multisteps_skip_not_finite",
        _combine(
            lambda ox, tx: ox.MultiSteps(tx, every_k_schedule=2, should_skip_update_fn=ox.skip_not_finite)
        ),
        Options(nonfinite=True),
    ),
    Combinator(
        "apply_if_finite",
        _combine(lambda ox, tx: ox.apply_if_finite(tx, max_consecutive_errors=2)),
        Options(nonfinite=True),
    ),
    Combinator("masked_dict", _combine(lambda ox, tx: ox.masked(tx, {"b": False, "w": True}))),
    # A mask function made anew in each build, as a user's make_optimizer does.
    Combinator(
        "masked_fn",
        _combine(lambda ox, tx: ox.masked(tx, lambda p: jax.tree.map(lambda x: x.ndim == 2, p))),
    ),
    Combinator(
        "multi_transform_dict",
        _combine(
            lambda ox, tx: ox.multi_transform(
                {"inner": tx, "other": ox.sgd(0.01)}, {"b": "other", "w": "inner"}
            )
        ),
    ),
    Combinator(
        "multi_transform_fn",
        _combine(
            lambda ox, tx: ox.multi_transform(
                {"inner": tx, "other": ox.sgd(0.01)},
                lambda p: jax.tree.map(lambda x: "inner" if x.ndim == 2 else "other", p),
            )
        ),
    ),
    Combinator(
        "partition",
        _combine(
            lambda ox, tx: ox.partition(
                {"train": tx, "freeze": ox.set_to_zero()}, param_labels={"b": "freeze", "w": "train"}
            )
        ),
    ),
    Combinator("flatten", _combine(lambda ox, tx: ox.flatten(tx))),
    Combinator(
        "lookahead",
        _combine(lambda ox, tx: ox.lookahead(tx, sync_period=2, slow_step_size=0.5)),
        Options(fast=True),
    ),
    # Over a factory, not a transformation: the inners made by one factory call.
    Combinator("inject_hyperparams", _inject_hyperparams),
    Combinator(
        "conditionally_mask",
        _combine(lambda ox, tx: ox.conditionally_mask(tx, should_transform_fn=_every_other_step)),
    ),
    Combinator(
        "conditionally_transform",
        _combine(lambda ox, tx: ox.conditionally_transform(tx, should_transform_fn=_every_other_step)),
    ),
    Combinator(
        "sam",
        _combine(
            lambda ox, tx: ox.contrib.sam(
                tx, ox.chain(ox.contrib.normalize(), ox.sgd(0.05)), sync_period=2, reset_state=True
            )
        ),
    ),
    # rtol=0.5 and patience=1: the loss plateaus by that measure within the
    # steps, so the scale is reduced (the cond's other branch runs).
    Combinator(
        "reduce_on_plateau",
        _combine(lambda ox, tx: ox.chain(tx, ox.contrib.reduce_on_plateau(factor=0.5, patience=1, rtol=0.5))),
        Options(value=True),
    ),
    Combinator("freeze", _combine(lambda ox, tx: ox.chain(ox.freeze({"b": True, "w": False}), tx))),
    Combinator(
        "selective_transform",
        _combine(lambda ox, tx: ox.selective_transform(tx, freeze_mask={"b": True, "w": False})),
    ),
    Combinator("with_extra_args_support", _combine(lambda ox, tx: ox.with_extra_args_support(tx))),
    Combinator("mechanize", _combine(lambda ox, tx: ox.contrib.mechanize(tx))),
    Combinator(
        "schedule_free",
        _combine(lambda ox, tx: ox.contrib.schedule_free(tx, learning_rate=0.05, b1=0.9)),
    ),
    Combinator(
        "scale_by_galore",
        _combine(lambda ox, tx: ox.contrib.scale_by_galore(rank=2, update_proj_gap=2, base_optimizer=tx)),
        invalid=_NEEDS_PARAMS,
    ),
    # With real parameters every leaf passes through (as the inner's own).
    Combinator("split_real_and_imaginary", _combine(lambda ox, tx: ox.contrib.split_real_and_imaginary(tx))),
]


# --------------------------------------------------------------------------
# The cases.


@dataclasses.dataclass(frozen=True)
class Case:
    combinator: Combinator
    inner: Inner
    mode: Mode

    @property
    def id(self) -> str:
        return f"{self.combinator.id}-{self.inner.id}-{self.mode.id}"


def _valid(combinator: Combinator, inner: Inner) -> bool:
    if combinator.id == "inject_hyperparams" and inner.factory is None:
        return False  # inject_hyperparams takes a factory: a chain built by hand is none
    return inner.id not in combinator.invalid


def _every_triple() -> list[Case]:
    """The whole matrix: every valid (combinator, inner) pair in every mode."""
    return [Case(c, i, m) for c in COMBINATORS for i in INNERS if _valid(c, i) for m in MODES]


def _every_pair() -> list[Case]:
    """Every valid (combinator, inner) pair once, in the mode ``(c + i) % 3``.

    Consecutive inners of a combinator (and combinators of an inner) take the
    modes in turn, so every (combinator, mode) and (inner, mode) pair is there
    too: all two-way interactions, for a third of :func:`_every_triple`'s cost.
    The drop-in and ``opx.wrap`` build the same pytree (tests/test_dropin.py),
    so what a third mode per pair would add is mostly the plain outer.
    """
    return [
        Case(c, i, MODES[(nc + ni) % len(MODES)])
        for nc, c in enumerate(COMBINATORS)
        for ni, i in enumerate(INNERS)
        if _valid(c, i)
    ]


# The inner of the combinator sweep: the recipe most programs use.
SLICE_INNER = "adamw_warmup_cosine"


def _fast_slice() -> list[Case]:
    """Each combinator once (over SLICE_INNER, or the next inner it takes):
    cases of :func:`_every_pair`, so the modes come in turn there too. Each
    inner (each of optax's schedules inside a combinator) is in the pairs,
    which CI runs; the default run's catalogue slice runs each schedule family."""
    pairs = {(c.combinator.id, c.inner.id): c for c in _every_pair()}
    inner_ids = [i.id for i in INNERS]
    order = [SLICE_INNER] + [i for i in inner_ids if i != SLICE_INNER]
    return [next(pairs[c.id, i] for i in order if (c.id, i) in pairs) for c in COMBINATORS]


# Every pair, those outside the default run's slice marked exhaustive (CI runs
# them: pytest --exhaustive); OPTAX_PYTREE_FULL_MATRIX=all: every triple.
MATRIX = os.environ.get("OPTAX_PYTREE_FULL_MATRIX", "")
CASES = _every_triple() if MATRIX == "all" else _every_pair()
SLICE = {c.id for c in _fast_slice()}


def _params_of(cases: list[Case]) -> list[Any]:
    return sliced([(c,) for c in cases], [c.id for c in cases], SLICE.__contains__)


# --------------------------------------------------------------------------
# Running the steps.


def _params(options: Options) -> Any:
    return plain_optax.LookaheadParams.init_synced(PARAMS) if options.fast else PARAMS


def _grad_and_extra(params: Any, step: int | jax.Array, options: Options) -> tuple[Any, dict[str, Any]]:
    value, grad = jax.value_and_grad(loss)(params.fast if options.fast else params)
    if options.nonfinite:
        # NaN at the second step only: the non-finite guards reject it.
        grad = jax.tree.map(lambda g: jnp.where(step == 1, jnp.nan, g), grad)
    return grad, ({"value": value} if options.value else {})


def _eager_steps(tx: Any, params: Any, options: Options) -> tuple[Any, Any, Any]:
    """STEPS steps, op by op as an eager user runs them: (params, state, each step's updates)."""
    state = tx.init(params)
    history = []
    for step in range(STEPS):
        grad, extra = _grad_and_extra(params, step, options)
        updates, state = tx.update(grad, state, params, **extra)
        params = plain_optax.apply_updates(params, updates)
        history.append(updates)
    return params, state, jax.tree.map(lambda *u: jnp.stack(u), *history)


def _scanned_steps(tx: Any, params: Any, options: Options) -> tuple[Any, Any, Any]:
    """The same steps as a ``lax.scan`` (traced): (params, state, stacked updates)."""

    def body(carry: Any, step: jax.Array) -> Any:
        params, state = carry
        grad, extra = _grad_and_extra(params, step, options)
        updates, state = tx.update(grad, state, params, **extra)
        return (plain_optax.apply_updates(params, updates), state), updates

    (params, state), history = jax.lax.scan(body, (params, tx.init(params)), jnp.arange(STEPS))
    return params, state, history


# One jitted function for every case whose optimizer is a pytree: cases of one
# treedef share a compilation.
_jitted_steps = jax.jit(_scanned_steps, static_argnames="options")


@functools.cache
def _reference(combinator: Combinator, inner: Inner) -> Any:
    """Plain optax's eager steps, shared by the modes and the checks of a pair.

    The jitted runs are compared with these too, to round-off: plain optax's
    own jitted run differs from them by round-off only, and a jitted
    reference would be one more compilation per pair, a third of the matrix's
    time.
    """
    tx = combinator.build(REFERENCE, inner)
    return _eager_steps(tx, _params(combinator.options), combinator.options)


# Float32 round-off on this problem: its gradients reach ~25 (one ulp ~2e-6),
# and an element whose gradient cancels to ~0 keeps that absolute error (plain
# optax's own eager and jitted runs differ by 3e-6 on one, at a rate that lands
# on the minimum), so the absolute tolerance is 1e-5, as tests/test_dropin.py's.
RTOL, ATOL = 1e-5, 1e-5


# Combinators that run their inner optimizer inside ``lax.cond``: eagerly, the
# cond's branches are compiled, so the inner runs as under ``jit``, its
# hyperparameters runtime operands where plain optax's are constants. Around
# ``clip_by_global_norm`` before a moment update XLA's algebraic simplifier
# reassociates plain optax's ``(g / norm) * max_norm`` with the constant
# ``max_norm``, which it cannot do with a leaf: the last bit of Adam's ``nu``
# differs (9e-13 after two steps). Those pairs are compared as the jitted runs
# are, to round-off (docs/guide/numerics.md lists them).
# Those and MultiSteps, whose lax.cond is compiled too, are bit for bit where
# the jit numerics are (helpers.BIT_FOR_BIT_UNDER_JIT: the jaxlib the XLA
# rewrites were measured with), to round-off on other jaxlibs.
# MultiSteps is one of the catalogue's exceptions under jit (XLA folds the
# inner learning rate into the emit mask and contracts it into an FMA:
# test_catalogue.NOT_BIT_FOR_BIT_UNDER_JIT), and where it does depends on the
# CPU: on an AVX2 AMD EPYC, Adam-family inners under MultiSteps differ in the
# last bit (1e-9 after four steps), bit for bit on the CPU the matrix was first
# run on. Its pairs are compared to round-off, and proven bit for bit without
# XLA's rewrites around constants
# (test_multisteps_pairs_are_bit_for_bit_without_xla_constant_rewrites).
COMPILED_EAGERLY = {"apply_if_finite", "conditionally_mask", "conditionally_transform"}
MULTISTEPS = {"multisteps", "multisteps_skip_not_finite"}
IN_A_COND = {*COMPILED_EAGERLY, *MULTISTEPS}
CLIP_BEFORE_ADAM = {"chain_clip_adam_cosine"}


def _round_off_in_a_cond(case: Case) -> bool:
    """Whether a pair's compiled steps are compared to round-off (see above)."""
    combinator = case.combinator.id
    return combinator in MULTISTEPS or (combinator in COMPILED_EAGERLY and case.inner.id in CLIP_BEFORE_ADAM)


@pytest.mark.parametrize("case", _params_of(CASES))
def test_eager_steps_equal_optax_bit_for_bit(case: Case) -> None:
    _needs_available(case)
    tx = case.combinator.build(case.mode, case.inner)
    options = case.combinator.options
    got = _eager_steps(tx, _params(options), options)
    expected = _reference(case.combinator, case.inner)
    if _round_off_in_a_cond(case):
        assert_tree_allclose(got, expected, rtol=RTOL, atol=ATOL)
    elif case.combinator.id in IN_A_COND:
        assert_jit_bit_for_bit(got, expected)
    else:
        chex.assert_trees_all_equal(got, expected, strict=True)


@exhaustive
@pytest.mark.skipif(not BIT_FOR_BIT_UNDER_JIT, reason="the exceptions are measured with jaxlib 0.10's XLA")
def test_round_off_pairs_are_bit_for_bit_without_xla_constant_rewrites() -> None:
    """The pairs compared to round-off above are bit for bit once XLA rewrites
    nothing around constants: their differences are only those rewrites."""
    ids = [case.id for case in CASES if _round_off_in_a_cond(case)]
    assert ids
    script = f"""
import warnings
warnings.simplefilter("ignore")
import chex
import test_compositions as tc
cases = [case for case in tc.CASES if case.id in {ids!r}]
for case in cases:
    tx = case.combinator.build(case.mode, case.inner)
    options = case.combinator.options
    got = tc._eager_steps(tx, tc._params(options), options)
    chex.assert_trees_all_equal(got, tc._reference(case.combinator, case.inner), strict=True)
print("bit for bit:", len(cases))
"""
    out = run_in_fresh_python(script, timeout=1200, XLA_FLAGS=NO_XLA_CONSTANT_REWRITES, JAX_PLATFORMS="cpu")
    assert f"bit for bit: {len(ids)}" in out


# Combinators newer than the oldest optax supported (0.2.5): (module, name).
NEWER = {
    "freeze": (plain_optax, "freeze"),
    "selective_transform": (plain_optax, "selective_transform"),
    "scale_by_galore": (plain_optax.contrib, "scale_by_galore"),
}


def _needs_available(case: Case) -> None:
    found = NEWER.get(case.combinator.id)
    if found is not None and not hasattr(*found):
        pytest.skip(f"optax {plain_optax.__version__} has no {found[0].__name__}.{found[1]}")


@pytest.mark.parametrize("case", _params_of(CASES))
def test_jitted_steps_equal_optax(case: Case) -> None:
    _needs_available(case)
    tx = case.combinator.build(case.mode, case.inner)
    options = case.combinator.options
    if case.mode.outer is plain_optax:
        # The plain combinator is no pytree: closed over, as optax users do.
        got = jax.jit(lambda p: _scanned_steps(tx, p, options))(_params(options))
    else:
        got = _jitted_steps(tx, _params(options), options=options)
    assert_tree_allclose(got, _reference(case.combinator, case.inner), rtol=RTOL, atol=ATOL)


PYTREE_CASES = [c for c in CASES if c.mode.outer is not plain_optax]


@pytest.mark.parametrize("case", _params_of(PYTREE_CASES))
def test_rebuilt_optimizer_has_the_same_treedef(case: Case) -> None:
    """The same builder called again (fresh lambdas, new objects) gives the
    same treedef: a jitted step taking the optimizer compiles once."""
    _needs_available(case)
    first, again = (case.combinator.build(case.mode, case.inner) for _ in range(2))
    assert jax.tree.structure(first) == jax.tree.structure(again)


def test_slices_cover_every_dimension() -> None:
    """The default slice sees every combinator and mode, the pairs every inner too; the slice lies in
    the pairs, which lie in the triples."""
    fast, pairs, triples = _fast_slice(), _every_pair(), _every_triple()
    for cases in (fast, pairs):
        assert {c.combinator.id for c in cases} == {c.id for c in COMBINATORS}
        assert {c.mode.id for c in cases} == {m.id for m in MODES}
    assert {c.inner.id for c in pairs} == {i.id for i in INNERS}
    valid = [(c, i) for c in COMBINATORS for i in INNERS if _valid(c, i)]
    assert {(c.combinator.id, c.mode.id) for c in pairs} == {(c.id, m.id) for c, _ in valid for m in MODES}
    assert {(c.inner.id, c.mode.id) for c in pairs} == {(i.id, m.id) for _, i in valid for m in MODES}
    ids = [c.id for c in triples]
    assert len(set(ids)) == len(ids) == len(valid) * len(MODES)
    assert {c.id for c in fast} <= {c.id for c in pairs} <= set(ids)
