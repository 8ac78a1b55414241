"""Every factory of optax, optax.contrib and optax.schedules, wrapped.

The list is read from optax at test time (``optax_pytree._catalog``): a new
optax release is covered without editing anything here. Each transformation
runs a training loop under ``jax.jit`` (the wrapped object an argument of the
step) and eagerly, and must equal raw optax called with Python numbers bit for
bit (same state structure, same numbers); each schedule must give raw optax's
values bit for bit. Where a float hyperparameter is a leaf, three values of it share one
trace of a jitted function taking the wrapped object as an argument.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import (
    BACKEND,
    BIT_FOR_BIT_UNDER_JIT,
    NO_XLA_CONSTANT_REWRITES,
    PARAMS,
    PARAMS_FOR,
    RUN_OPTIONS,
    SCHEDULE_STEPS,
    SKIP,
    assert_tree_allclose,
    call,
    catalogue,
    catalogue_slice,
    counting_jit,
    exhaustive,
    first_float_leaf,
    one_step,
    raw,
    run_in_fresh_python,
    scale_leaf,
    sliced,
    training_loop,
    version,
    wrapped,
)

from optax_pytree import _backends

CATALOGUE = catalogue()
TRANSFORMATIONS = [(n, f) for n, f, k in CATALOGUE if k == "transformation"]
SCHEDULES = [(n, f) for n, f, k in CATALOGUE if k == "schedule"]
# The default run: each family of factories (an optax module) once; the rest with --exhaustive.
SLICE = catalogue_slice(CATALOGUE)


def test_catalogue_is_read_from_optax() -> None:
    names = {n for n, _, _ in CATALOGUE}
    # A sample from each corner; the full list comes from optax itself.
    for expected in (
        "optax.adam",
        "optax.chain",
        "optax.MultiSteps",
        "optax.lbfgs",
        "optax.nadam",
        "optax.contrib.muon",
        "optax.contrib.schedule_free",
        "optax.linear_schedule",
        "optax.warmup_constant_schedule",
        "optax.named_chain",
    ):
        assert expected in names
    assert "optax.inject_hyperparams" not in names  # a wrapper of factories, not one
    assert "optax.apply_updates" not in names
    assert len(TRANSFORMATIONS) > 90 and len(SCHEDULES) > 12


def _skip(name: str) -> None:
    if name in SKIP:
        pytest.skip(SKIP[name])


# Where plain optax under jit is not matched bit for bit: its hyperparameters
# are constants of the XLA program, a wrapped object's are arguments, and XLA
# rewrites a program around its constants in ways an argument cannot get
# (the wrapped object does XLA's value-independent rewrites itself, see
# optax_pytree/_jaxprs.py; these are the others). Each differs in the last
# bit, and is bit for bit with FMA contraction and the algebraic simplifier
# off (test_jit_exceptions_are_xla_constant_rewrites). Eagerly, all are exact
# but scale_by_novograd, whose update is a ``lax.cond``: compiled even eagerly.
_FMA = "XLA contracts a different multiply-add into an FMA around the constant hyperparameters"
_ALGSIMP = "XLA's algebraic simplifier reassociates products around the constant hyperparameters"
NOT_BIT_FOR_BIT_UNDER_JIT_ON_CPU: dict[str, str] = {
    "optax.MultiSteps": "XLA folds the inner learning rate into the emit mask (select(emit, -lr, 0)) "
    "and contracts it into an FMA",
    "optax.adan": _FMA + " (its scale_by_adan's)",
    "optax.chain": _FMA + " (clip_by_global_norm's 1.0 folded into adam's second moment)",
    "optax.scale_by_adan": _FMA,
    "optax.scale_by_novograd": "its update is a lax.cond, compiled (eagerly too) with plain optax's "
    "hyperparameters as constants: " + _FMA + " and " + _ALGSIMP,
    "optax.optimistic_adam_v2": _FMA + " on an AVX2 CPU (AMD EPYC; bit for bit on the CPU the list was "
    "first measured on: which multiply-adds XLA contracts depends on the instruction set)",
    "optax.contrib.cocob": _FMA + " (its scale_by_cocob's cumulative gradients)",
    "optax.contrib.scale_by_acprop": _FMA,
    "optax.contrib.schedule_free": _ALGSIMP,
    "optax.contrib.schedule_free_adamw": _ALGSIMP,
    "optax.contrib.schedule_free_sgd": _ALGSIMP + ", and " + _FMA,
    "optax.linear_onecycle_schedule": _FMA + " ((end - start) * pct + start)",
}


# Measured on a TPU v5e (jax 0.10.2; benchmarks/constants_probe.py, docs/guide/numerics.md):
# 7 of the 141, against the CPU's 12, each in the last bits after six steps (at most 1.7e-6
# relative). The ALGSIMP ones are bit for bit with XLA's algebraic simplifier off
# (--xla_disable_hlo_passes=algsimp, on the TPU), and no single operation of theirs differs
# with its hyperparameters constants (the probe, op by op): a rewrite across operations.
_TPU_ALGSIMP = "XLA's algebraic simplifier rewrites across operations around the constant hyperparameters"
_TPU_POWER = (
    "max_lr ** weight_lr_power: the TPU specializes a power by the constant 2.0 (the probe, op by op), "
    "and the verification, whose state starts at constants, does not see that the exponent is data's"
)
NOT_BIT_FOR_BIT_UNDER_JIT_ON_TPU: dict[str, str] = {
    # Before the weight decay's Python 0.0 was static at zero (2026-12-07), also that skip; with
    # it, measured on the chip (testing guide).
    "optax.adadelta": _TPU_ALGSIMP,
    "optax.contrib.madgrad": _TPU_ALGSIMP,
    "optax.contrib.schedule_free": _TPU_POWER,
    "optax.contrib.schedule_free_adamw": _TPU_POWER,
    "optax.contrib.schedule_free_sgd": _TPU_ALGSIMP,
    # Measured before the build stopped folding (count * fl(1/interval)) * pi with an array
    # interval (found in the TPU's compiled programs): their programs now have plain optax's
    # operations, the cumulative product of the scales aside (folded on the host in plain
    # optax's, computed on the device in the wrapped one). To measure again on the chip.
    "optax.cosine_onecycle_schedule": _TPU_ALGSIMP,
    "optax.linear_onecycle_schedule": _TPU_ALGSIMP,
}

NOT_BIT_FOR_BIT_UNDER_JIT = {
    "cpu": NOT_BIT_FOR_BIT_UNDER_JIT_ON_CPU,
    "tpu": NOT_BIT_FOR_BIT_UNDER_JIT_ON_TPU,
}.get(BACKEND, NOT_BIT_FOR_BIT_UNDER_JIT_ON_CPU)

# The counts a schedule is compared at under jit (vectorized), and the first of them one a call.
DENSE_STEPS = jnp.concatenate([jnp.arange(0, 160), jnp.array([300, 1000, 10_000])]).astype(jnp.int32)
SCALAR_STEPS = 48

NOT_BIT_FOR_BIT_EAGERLY = frozenset(("optax.scale_by_novograd",))  # its lax.cond is compiled

# Steps of each training loop: on a TPU, adam's bias correction under jit first
# differs from a plain power at the fourth (b1 = 0.9), so a TPU runs five.
STEPS = 3 if BACKEND == "cpu" else 5


def _key_data(tree: Any) -> Any:
    """PRNG keys as their data (an older chex cannot compare key arrays)."""

    def data(x: Any) -> Any:
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(x)
        return x

    return jax.tree_util.tree_map(data, tree)


def _assert_bit_for_bit_or_listed(got: Any, expected: Any, listed: bool) -> None:
    got, expected = _key_data(got), _key_data(expected)
    if listed:
        # One ulp per step at most, amplified by a few steps of training.
        assert_tree_allclose(got, expected, rtol=1e-5, atol=1e-7)
        return
    chex.assert_trees_all_equal(got, expected)


@pytest.mark.parametrize(
    "name,factory", sliced(TRANSFORMATIONS, [n for n, _ in TRANSFORMATIONS], SLICE.__contains__)
)
def test_transformation_matches_optax_bit_for_bit(name: str, factory: Any) -> None:
    _skip(name)
    params = PARAMS_FOR.get(name, lambda: PARAMS)()
    tx = call(name, factory, wrapped)
    reference = call(name, factory, raw)
    options = RUN_OPTIONS.get(name, {})
    step_options = {k: v for k, v in options.items() if k != "scan"}

    def step(tx: Any, params: Any, state: Any) -> Any:
        return one_step(tx, params, state, **step_options)

    jitted, traces = counting_jit(step)
    # Plain optax called with Python numbers, in a training loop (the state a
    # jit argument): under jit, with the wrapped object an argument of the
    # step, and eagerly; bit for bit, every argument dynamic by default.
    _assert_bit_for_bit_or_listed(
        training_loop(tx, params, steps=STEPS, jitted=jitted, **options),
        training_loop(reference, params, steps=STEPS, **options),
        listed=name in NOT_BIT_FOR_BIT_UNDER_JIT or not BIT_FOR_BIT_UNDER_JIT,
    )
    _assert_bit_for_bit_or_listed(
        training_loop(tx, params, steps=STEPS, jit=False, **options),
        training_loop(reference, params, steps=STEPS, jit=False, **options),
        listed=name in NOT_BIT_FOR_BIT_EAGERLY,
    )
    # The jitted step of the loop, given other values of a float leaf and the
    # state of its first call: no new trace.
    traced = traces[0]
    found = first_float_leaf(tx)
    if found is not None:
        path, _ = found
        for factor in (0.5, 0.25):
            changed = scale_leaf(tx, path, factor)
            jitted(changed, params, changed.init(params))
    assert traces == [traced], "changing a leaf retraced"


@pytest.mark.parametrize("name,factory", sliced(SCHEDULES, [n for n, _ in SCHEDULES], SLICE.__contains__))
def test_schedule_matches_optax(name: str, factory: Any) -> None:
    _skip(name)
    schedule = call(name, factory, wrapped)
    reference = call(name, factory, raw)
    # Bit for bit, eagerly (a Python step count) and under jit (a traced one).
    expected = jnp.stack([jnp.asarray(reference(int(s))) for s in SCHEDULE_STEPS])
    eager = jnp.stack([jnp.asarray(schedule(int(s))) for s in SCHEDULE_STEPS])
    chex.assert_trees_all_equal(eager, expected)

    def values(schedule: Any, steps: Any) -> Any:
        return jax.vmap(schedule)(steps)

    # Under jit, every count of a range (a rounding that differs shows at a few counts only:
    # the one-cycle schedules' at 10, 11, 15, 20 and 22 of 0 to 40), vectorized as a
    # population's schedule is, and one count a call as a training loop's is.
    listed = name in NOT_BIT_FOR_BIT_UNDER_JIT or not BIT_FOR_BIT_UNDER_JIT
    raw_values = jax.jit(lambda steps: jax.vmap(reference)(steps))(DENSE_STEPS)
    values, traces = counting_jit(values)
    _assert_bit_for_bit_or_listed(values(schedule, DENSE_STEPS), raw_values, listed=listed)
    one_raw = jax.jit(reference)
    one, one_traces = counting_jit(lambda schedule, step: schedule(step))
    counts = DENSE_STEPS[:SCALAR_STEPS]
    _assert_bit_for_bit_or_listed(
        jnp.stack([one(schedule, c) for c in counts]), jnp.stack([one_raw(c) for c in counts]), listed=listed
    )
    assert one_traces == [1]
    found = first_float_leaf(schedule)
    if found is None:
        return
    path, _ = found
    for factor in (0.5, 0.25):
        values(scale_leaf(schedule, path, factor), DENSE_STEPS)
    assert traces == [1]


def _detected(tree: Any, out: dict[str, list[str]]) -> None:
    """Detected-static and guarded arguments of every wrapped object in ``tree``."""
    from optax_pytree._bind import is_wrapped

    nodes = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is not tree and is_wrapped(x))
    for node in [tree, *(n for n in nodes if is_wrapped(n))]:
        if not is_wrapped(node):
            continue
        name, at_zero = node._core.spec.info.name, node._core.spec.analysis.at_zero
        for a in at_zero:  # static at zero only: the factory skips operations for a zero
            assert node.hyperparams[a] == 0, (name, a, node.hyperparams[a])
        out["at zero"].extend(f"{name}.{a}" for a in at_zero)
        out["static"].extend(f"{name}.{a}" for a in node.detected_static_argnames if a not in at_zero)
        out["guarded"].extend(f"{name}.{a}" for a in node.guarded_argnames)
        if node is not tree:
            _detected(node, out)


# Guarded (compared in Python, dynamic): one of each kind of comparison.
GUARDED = (
    "optax.warmup_cosine_decay_schedule.peak_value",
    "optax.warmup_cosine_decay_schedule.warmup_steps",
    "optax.exponential_decay.decay_rate",
    "optax.linear_schedule.transition_steps",
    "optax.contrib.reduce_on_plateau.factor",
    "optax.scale_by_sm3.b2",
    "optax.lookahead.sync_period",
)


@pytest.mark.parametrize(
    "whole", [pytest.param(False, id="slice"), pytest.param(True, id="whole", marks=exhaustive)]
)
def test_only_what_needs_a_python_value_is_static(whole: bool) -> None:
    """Across the catalogue, at its values: static only for shapes, keys, conversions.

    Everything optax merely compares in a Python ``if`` is guarded (dynamic).
    The default run checks the slice and the factories of :data:`GUARDED`
    (each factory's first wrap probes and verifies it: the whole catalogue
    takes 20 s). Printed with ``pytest -s`` for the record.
    """
    owners = {g.rsplit(".", 1)[0] for g in GUARDED}
    found: dict[str, list[str]] = {"static": [], "guarded": [], "at zero": []}
    for name, factory, _ in CATALOGUE:
        if whole or name in SLICE or name in owners:
            _detected(call(name, factory, wrapped), found)
    static, guarded = sorted(set(found["static"])), sorted(set(found["guarded"]))
    at_zero = sorted(set(found["at zero"]))
    print(
        f"\n{len(static)} detected static: {static}\n{len(guarded)} guarded: {guarded}"
        f"\n{len(at_zero)} static at zero only: {at_zero}"
    )
    # Static at zero only where optax skips a term in Python for the Python 0.0
    # (``isinstance(weight_decay, (int, float)) and weight_decay == 0.0``).
    assert all(a.rsplit(".", 1)[1].endswith("weight_decay") for a in at_zero), at_zero
    # Needed as Python values: allocation sizes, dict keys, int(), isinstance.
    allowed = {
        "optax.MultiSteps.every_k_schedule",  # isinstance(every_k_schedule, int)
        "optax.adafactor.min_dim_size_to_factor",  # compared with each parameter's shape
        "optax.scale_by_factored_rms.min_dim_size_to_factor",
        "optax.lbfgs.memory_size",  # the size of its history
        "optax.scale_by_lbfgs.memory_size",
        "optax.contrib.galore.rank",  # a slice size
        "optax.contrib.scale_by_galore.rank",
        "optax.contrib.mechanize.num_betas",  # an allocation size
        "optax.cosine_onecycle_schedule.transition_steps",  # dict keys: int(pct_start * transition_steps)
        "optax.cosine_onecycle_schedule.pct_start",
        "optax.linear_onecycle_schedule.transition_steps",
        "optax.linear_onecycle_schedule.pct_start",
        "optax.linear_onecycle_schedule.pct_final",
        # A power by 2.0 (the catalogue's value), which XLA specializes as a
        # constant (x * x): a leaf would differ in the last bit under jit.
        "optax.polynomial_schedule.power",
    }
    if version(optax) < (0, 2, 8) or version(jax) >= (0, 12) or _backends.unrolls_constant_loops():
        # optax < 0.2.8: fori_loop(0, ns_steps, ..., unroll=True), a Python trip
        # count; jax 0.12: its loop of a traced trip count is another program,
        # evaluated by the verification otherwise than the unrolled one (static: safe);
        # a TPU: it unrolls plain optax's loop of a constant trip count, not a leaf's.
        allowed |= {"optax.contrib.muon.ns_steps", "optax.contrib.scale_by_muon.ns_steps"}
    if version(optax) < (0, 2, 7):  # np.cumprod of the piecewise schedule's values
        allowed |= {"optax.piecewise_interpolate_schedule.init_value"} | {
            f"optax.{kind}_onecycle_schedule.{arg}"
            for kind in ("cosine", "linear")
            for arg in ("peak_value", "div_factor", "final_div_factor")
        }
    assert set(static) <= allowed, sorted(set(static) - allowed)
    for expected in GUARDED:
        assert expected in guarded, expected


@exhaustive
@pytest.mark.skipif(not BIT_FOR_BIT_UNDER_JIT, reason="the exceptions are measured with jaxlib 0.10's XLA")
def test_jit_exceptions_are_xla_constant_rewrites() -> None:
    """Every listed exception is bit for bit once XLA rewrites nothing around constants."""
    names = sorted(NOT_BIT_FOR_BIT_UNDER_JIT_ON_CPU)  # measured, and proven, on the CPU (a CPU child)
    script = f"""
import warnings
warnings.simplefilter("ignore")
import chex, jax
import test_catalogue as tc
from helpers import PARAMS, RUN_OPTIONS, call, raw, training_loop, wrapped
factories = {{n: f for n, f, _ in tc.CATALOGUE}}
schedules = dict(tc.SCHEDULES)
for name in {names!r}:
    factory = factories[name]
    if name in schedules:
        got = jax.jit(lambda s, st: jax.vmap(s)(st))(call(name, factory, wrapped), tc.SCHEDULE_STEPS)
        reference = call(name, factory, raw)
        chex.assert_trees_all_equal(got, jax.jit(lambda st: jax.vmap(reference)(st))(tc.SCHEDULE_STEPS))
        continue
    params = tc.PARAMS_FOR.get(name, lambda: PARAMS)()
    options = RUN_OPTIONS.get(name, {{}})
    for jit in (True, False):
        chex.assert_trees_all_equal(
            training_loop(call(name, factory, wrapped), params, jit=jit, **options),
            training_loop(call(name, factory, raw), params, jit=jit, **options),
        )
print("bit for bit:", len({names!r}))
"""
    out = run_in_fresh_python(script, timeout=600, XLA_FLAGS=NO_XLA_CONSTANT_REWRITES, JAX_PLATFORMS="cpu")
    assert f"bit for bit: {len(names)}" in out
