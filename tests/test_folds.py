"""Exact at no cost: what the compiler folds from hyperparameters alone, carried (issue 46).

On a TPU the compiler folds a constant's reciprocal, a quotient or square
root of constants, and a power's logarithm on the host, correctly rounded. A
wrapped object's hyperparameters are arguments of its program, so its build
computed those exactly on the device, in every call: hundreds of scalar
operations in every step, and in every compilation. Now the object computes
them on the host when it is made and carries them (``optax_pytree/_folds.py``).

These tests run on the CPU with the TPU's treatment compiled for it (the
TPU's rewrites staged as a TPU machine stages them, the CPU's compiler
running them): the same numbers and programs, without the chip.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import scan_steps, sliced

import optax_pytree as opx
from optax_pytree import _backends, _folds, _leaves

PARAMS = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(4, 3), "b": jnp.array([0.1, -0.2, 0.3])}


@pytest.fixture
def tpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TPU's treatment of constants, compiled by the CPU (on a TPU, the TPU's own), the
    default backend's alone (a TPU machine's process also lowers for the CPU)."""
    monkeypatch.setitem(_backends.TABLE, jax.default_backend(), _backends.TPU)
    monkeypatch.setattr(_backends, "platforms", lambda: (jax.default_backend(),))


def _without_carried_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TPU's treatment computing every fold on the device, exactly (as before the folds)."""
    monkeypatch.setitem(
        _backends.TABLE, jax.default_backend(), dataclasses.replace(_backends.TPU, carries=False)
    )


def _steps(tx: Any, n: int = 3) -> Any:
    def step(tx: Any, params: Any, state: Any) -> Any:
        updates, state = tx.update(jax.tree.map(lambda p: jnp.sin(3 * p), params), state, params)
        return optax.apply_updates(params, updates), state

    jitted = jax.jit(step)
    params, state, out = PARAMS, tx.init(PARAMS), []
    for _ in range(n):
        params, state = jitted(tx, params, state)
        out.append(params)
    return out


def _schedule_values(schedule: Any) -> Any:
    return jax.jit(lambda s, c: jax.vmap(s)(c))(schedule, jnp.arange(0, 120, dtype=jnp.int32))


MAKERS = {
    "adam": lambda: opx.wrap(optax.adam, 1e-2),
    "adamw + warmup-cosine": lambda: opx.wrap(
        optax.adamw, opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-2, 10, 100), weight_decay=1e-4
    ),
    "radam": lambda: opx.wrap(optax.radam, 1e-2),
    "adafactor": lambda: opx.wrap(optax.adafactor, 1e-2),
}
SCHEDULES = {
    "exponential_decay": lambda: opx.wrap(optax.exponential_decay, 1e-2, 7, 0.9),
    "cosine_onecycle": lambda: opx.wrap(optax.cosine_onecycle_schedule, 100, 1e-2),
    "warmup_cosine": lambda: opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-2, 10, 100),
}


def test_what_an_object_carries_is_learned_from_its_own_call() -> None:
    adam = opx.wrap(optax.adam, 1e-3)._core.spec
    # The bias correction's powers b1 ** count, b2 ** count: the TPU folds each base's logarithm.
    assert adam.folds == (("log2", ("leaf", "b1", 0)), ("log2", ("leaf", "b2", 0)))
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000)
    kinds = sorted(f[0] for f in schedule._core.spec.folds)
    assert kinds == ["div", "reciprocal", "reciprocal"]  # end / peak, 1 / warmup, 1 / (decay - warmup)
    values = np.asarray(schedule.exact[0])
    np.testing.assert_array_equal(values[-4:-1], np.array([0.0, 1 / 10, 1 / 990], np.float32))
    # sgd folds nothing, and carries nothing.
    assert opx.wrap(optax.sgd, 1e-3).exact == ()


# The default run: one transformation and one schedule; the rest with --exhaustive.
FOLDED = [(n,) for n in (*MAKERS, *SCHEDULES)]


@pytest.mark.parametrize(
    "name", sliced(FOLDED, [n for (n,) in FOLDED], {"adam", "warmup_cosine"}.__contains__)
)
def test_carried_folds_are_the_devices_exact_ones_bit_for_bit(
    name: str, tpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _steps if name in MAKERS else _schedule_values
    make = MAKERS.get(name) or SCHEDULES[name]
    carried = run(make())
    _without_carried_folds(monkeypatch)
    chex.assert_trees_all_equal(carried, run(make()))


def _operations(text: str) -> list[str]:
    return re.findall(r"^\s*(?:ROOT )?%[\w.\-]+ = (?:\(.*?\)|\S+) ([\w\-]+)\(", text, re.M)


def test_the_tpus_treatment_adds_little_to_a_wrapped_steps_program(monkeypatch: pytest.MonkeyPatch) -> None:
    # A step's compiled program, all of it, the CPU compiling the TPU's rewrites against its
    # own: with the folds computed on the device, 4.6 and 4.2 times the size (adam: 1,064
    # operations against 231; on the TPU itself 741 against plain optax's 56); carried, 1.5.
    def update(tx: Any, grads: Any, state: Any, params: Any) -> Any:
        return tx.update(grads, state, params)

    grads = jax.tree.map(jnp.cos, PARAMS)
    makers = [
        lambda: opx.wrap(optax.adam, 1e-3),
        lambda: opx.wrap(optax.adamw, opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000)),
    ]
    for make in makers:
        programs = {}
        for name, treatment in (("cpu", _backends.CPU), ("tpu", _backends.TPU)):
            monkeypatch.setitem(_backends.TABLE, "cpu", treatment)
            tx = make()
            programs[name] = (
                jax.jit(update).lower(tx, grads, tx.init(PARAMS), PARAMS).compile().as_text() or ""
            )
        # The exact operations split floats with Dekker's constant 4097, and the logarithm
        # reads a table of 193 values: none of it is left.
        assert "constant(4097)" not in programs["tpu"] and "f32[193]" not in programs["tpu"]
        # What is left: the fingerprint that tells a stale object, the device's own folds
        # for one, and the powers' selects (measured 1.55 and 1.47).
        ours, theirs = len(_operations(programs["tpu"])), len(_operations(programs["cpu"]))
        assert ours <= 1.6 * theirs, (ours, theirs)


def test_a_stale_object_computes_from_its_current_leaves(tpu: None) -> None:
    # jax.tree.map changes the leaves and, blindly, the carried values: the fingerprint no
    # longer matches, and the device computes the folds from the current leaves.
    tx = opx.wrap(optax.adam, 1e-2, b1=0.9)
    halved = jax.tree.map(lambda x: x * 0.5, tx)  # b1 0.45, and the carried values halved
    fresh = opx.wrap(optax.adam, 5e-3, b1=0.45, b2=0.4995, eps=5e-9)
    got, expected = _steps(halved), _steps(fresh)
    chex.assert_trees_all_close(got, expected, rtol=1e-5)
    # Inside jit too (the map traced).
    inside = jax.jit(lambda t: _steps_traced(jax.tree.map(lambda x: x * 0.5, t)))(tx)
    chex.assert_trees_all_close(inside, _steps_traced(fresh), rtol=1e-5)


def _steps_traced(tx: Any) -> Any:
    return scan_steps(tx, PARAMS)


def test_grid_members_carry_their_own_folds(tpu: None) -> None:
    base = opx.wrap(optax.exponential_decay, 1e-2, 7, 0.9)
    batch, labels = opx.grid(base, decay_rate=[0.5, 0.9, 0.99], transition_steps=[3, 7])
    values = jax.jit(lambda s, c: jax.vmap(lambda m: jax.vmap(m)(c))(s))(
        batch, jnp.arange(50, dtype=jnp.int32)
    )
    for i, label in enumerate(labels):
        alone = _schedule_values(base.replace(**label))
        chex.assert_trees_all_equal(values[i, :50], alone[:50])
    for i in range(len(labels)):
        chex.assert_trees_all_equal(
            _schedule_values(opx.index(batch, i)), _schedule_values(base.replace(**labels[i]))
        )


def test_an_object_made_inside_jit_computes_its_folds_once_exactly(tpu: None) -> None:
    # From traced values no host value exists: the folds are computed on the device when the
    # object is made, as the TPU's compiler folds them, once (not in every step).
    base = opx.wrap(optax.exponential_decay, 1e-2, 5, 0.5)

    def make(rate: Any, steps: Any) -> Any:
        return base.replace(decay_rate=rate, transition_steps=steps)

    concrete = _schedule_values(make(0.9, 7))
    traced = jax.jit(lambda r, s: jax.vmap(make(r, s))(jnp.arange(0, 120, dtype=jnp.int32)))(
        jnp.float32(0.9), jnp.int32(7)
    )
    chex.assert_trees_all_equal(traced, concrete)


def test_a_restored_object_keeps_its_folds(tpu: None) -> None:
    from optax_pytree import _tree

    tx = opx.wrap(optax.adam, 1e-2, b1=0.8)
    rebuilt = _tree.with_exact(opx.wrap(optax.adam, 1e-2, b1=0.8), [np.asarray(x) for x in tx.exact])
    chex.assert_trees_all_equal(rebuilt.exact, tx.exact)
    chex.assert_trees_all_equal(_steps(rebuilt), _steps(tx))


def test_folds_of_a_batch_are_computed_member_by_member() -> None:
    spec = opx.wrap(optax.adam, 1e-3)._core.spec
    out = _folds.values(spec, {"b1": np.array([0.5, 0.9], np.float32), "b2": np.float32(0.999)}, [])
    np.testing.assert_array_equal(
        np.asarray(out[0]), np.log2(np.array([0.5, 0.9], np.float32).astype(np.float64)).astype(np.float32)
    )
    assert np.shape(out[1]) == (2,)


def test_the_fingerprint_of_python_numbers_is_numpys() -> None:
    # A wrap from Python numbers computes the folds' fingerprint in Python's integers; the
    # traced check computes it with JAX, as _leaves.fingerprint does with NumPy: one hash.
    rng = np.random.default_rng(0)
    for _ in range(200):
        floats = (rng.normal(size=3) * 10.0 ** rng.integers(-40, 38)).astype(np.float32)
        values = [*floats, np.float32(-0.0), np.int32(rng.integers(-(2**31), 2**31 - 1))]
        assert _folds.fingerprint_of_scalars(values) == float(_leaves.fingerprint(values))


@pytest.mark.parametrize("outer", ["MultiSteps", "apply_if_finite"])
def test_a_combinators_branches_get_the_backends_rewrites(outer: str, tpu: None) -> None:
    # MultiSteps and apply_if_finite run the inner optimizer in a lax.cond, whose branches
    # XLA folds as the rest of the program: the wrapped build rewrites them too. On a TPU
    # v5e, over adam, adamw with a warmup-cosine schedule and a scheduled chain, these were
    # 1e-7 relative off plain optax (6 of 12 pairs: every_k_schedule=1, apply_if_finite),
    # and are bit for bit. Here, the TPU's rules staged: adam's bias correction in the
    # branches is the TPU's power of a constant base, not the general power (2 of them).
    inner = opx.wrap(optax.adam, 1e-2)
    if outer == "MultiSteps":
        tx = opx.wrap(optax.MultiSteps, inner, every_k_schedule=1)
    else:
        tx = opx.wrap(optax.apply_if_finite, inner, 3)
    grads = jax.tree.map(jnp.sin, PARAMS)
    closed = jax.make_jaxpr(lambda t, g, s, p: t.update(g, s, p))(tx, grads, tx.init(PARAMS), PARAMS)
    in_branches = _in_branches(closed.jaxpr)
    assert "pow" not in in_branches
    assert in_branches.count("custom_jvp_call") == 4  # the power's rule, b1 and b2, both branches


def _in_branches(jaxpr: Any, inside: bool = False) -> list[str]:
    """The primitives a jaxpr's cond branches bind (at their top level, nested jits inlined)."""
    out: list[str] = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "cond":
            for branch in eqn.params["branches"]:
                out += _in_branches(branch.jaxpr, True)
        elif name in ("pjit", "jit", "closed_call"):
            out += _in_branches(eqn.params["jaxpr"].jaxpr, inside)
        elif inside:
            out.append(name)
    return out
