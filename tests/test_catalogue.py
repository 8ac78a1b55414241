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
    PARAMS,
    PARAMS_FOR,
    RUN_OPTIONS,
    SCHEDULE_STEPS,
    SKIP,
    call,
    catalogue,
    counting_jit,
    first_float_leaf,
    raw,
    run_steps,
    scale_leaf,
    training_loop,
    version,
    wrapped,
)

CATALOGUE = catalogue()
TRANSFORMATIONS = [(n, f) for n, f, k in CATALOGUE if k == "transformation"]
SCHEDULES = [(n, f) for n, f, k in CATALOGUE if k == "schedule"]


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


@pytest.mark.parametrize("name,factory", TRANSFORMATIONS, ids=[n for n, _ in TRANSFORMATIONS])
def test_transformation_matches_optax_bit_for_bit(name: str, factory: Any) -> None:
    _skip(name)
    params = PARAMS_FOR.get(name, lambda: PARAMS)()
    tx = call(name, factory, wrapped)
    reference = call(name, factory, raw)
    options = RUN_OPTIONS.get(name, {})
    # Plain optax called with Python numbers, in a training loop (the state a
    # jit argument): under jit, with the wrapped object an argument of the
    # step, and eagerly; bit for bit, every argument dynamic by default.
    chex.assert_trees_all_equal(
        training_loop(tx, params, **options), training_loop(reference, params, **options)
    )
    chex.assert_trees_all_equal(
        training_loop(tx, params, jit=False, **options),
        training_loop(reference, params, jit=False, **options),
    )

    def train(tx: Any, params: Any) -> Any:
        return run_steps(tx, params, **options)

    train, traces = counting_jit(train)
    train(tx, params)
    found = first_float_leaf(tx)
    if found is not None:
        path, _ = found
        for factor in (0.5, 0.25):
            train(scale_leaf(tx, path, factor), params)
    assert traces == [1], "changing a leaf retraced"


@pytest.mark.parametrize("name,factory", SCHEDULES, ids=[n for n, _ in SCHEDULES])
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

    raw_values = jax.jit(lambda steps: jax.vmap(reference)(steps))(SCHEDULE_STEPS)
    values, traces = counting_jit(values)
    chex.assert_trees_all_equal(values(schedule, SCHEDULE_STEPS), raw_values)
    found = first_float_leaf(schedule)
    if found is None:
        return
    path, _ = found
    for factor in (0.5, 0.25):
        values(scale_leaf(schedule, path, factor), SCHEDULE_STEPS)
    assert traces == [1]


def _detected(tree: Any, out: dict[str, list[str]]) -> None:
    """Detected-static and guarded arguments of every wrapped object in ``tree``."""
    from optax_pytree._classify import is_wrapped

    nodes = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is not tree and is_wrapped(x))
    for node in [tree, *(n for n in nodes if is_wrapped(n))]:
        if not is_wrapped(node):
            continue
        name = node._core.spec.info.name
        out["static"].extend(f"{name}.{a}" for a in node.detected_static_argnames)
        out["guarded"].extend(f"{name}.{a}" for a in node.guarded_argnames)
        if node is not tree:
            _detected(node, out)


def test_only_what_needs_a_python_value_is_static() -> None:
    """Across the catalogue, at its values: static only for shapes, keys, conversions.

    Everything optax merely compares in a Python ``if`` is guarded (dynamic).
    Printed with ``pytest -s`` for the record.
    """
    found: dict[str, list[str]] = {"static": [], "guarded": []}
    for name, factory, _ in CATALOGUE:
        _detected(call(name, factory, wrapped), found)
    static, guarded = sorted(set(found["static"])), sorted(set(found["guarded"]))
    print(f"\n{len(static)} detected static: {static}\n{len(guarded)} guarded: {guarded}")
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
    }
    if version(optax) < (0, 2, 8):  # fori_loop(0, ns_steps, ..., unroll=True): a Python trip count
        allowed |= {"optax.contrib.muon.ns_steps", "optax.contrib.scale_by_muon.ns_steps"}
    if version(optax) < (0, 2, 7):  # np.cumprod of the piecewise schedule's values
        allowed |= {"optax.piecewise_interpolate_schedule.init_value"} | {
            f"optax.{kind}_onecycle_schedule.{arg}"
            for kind in ("cosine", "linear")
            for arg in ("peak_value", "div_factor", "final_div_factor")
        }
    assert set(static) <= allowed, sorted(set(static) - allowed)
    for expected in (
        "optax.warmup_cosine_decay_schedule.peak_value",
        "optax.warmup_cosine_decay_schedule.warmup_steps",
        "optax.exponential_decay.decay_rate",
        "optax.linear_schedule.transition_steps",
        "optax.contrib.reduce_on_plateau.factor",
        "optax.scale_by_sm3.b2",
        "optax.lookahead.sync_period",
    ):
        assert expected in guarded, expected
