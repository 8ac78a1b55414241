"""A zero a factory skips operations for in Python: static at zero only, and a leaf in a batch.

optax's ``add_decayed_weights`` (so ``adamw``, ``muon``, ``adadelta``,
``madgrad``, ...) skips ``g + weight_decay * p`` when ``weight_decay`` is the
Python ``0.0`` (``isinstance(weight_decay, (int, float)) and weight_decay ==
0.0``). A leaf is no Python float, so it would compute the term: the same
numbers, which XLA compiles otherwise (on the CPU an FMA contracted, on a
TPU another last fusion: the last bit). The verification finds it (the
wrapped program has operations the factory's lacks, and the factory's own
program has them for a nonzero value): such a zero is static, every other
value a leaf.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import (
    OPTAX_SKIPS_A_ZERO_WEIGHT_DECAY,
    assert_jit_bit_for_bit,
    assert_tree_allclose,
    counting_jit,
    scan_steps,
    version,
)

import optax_pytree as opx
from optax_pytree import _backends, _caches

# optax 0.2.5 (the floor) computes g + 0.0 * p: nothing skipped, nothing static.
ZERO_STATIC = ("weight_decay",) if OPTAX_SKIPS_A_ZERO_WEIGHT_DECAY else ()

PARAMS = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.linspace(0.5, -0.5, 3)}


steps = scan_steps


def plain(tx: Any) -> Any:
    return jax.jit(lambda params: steps(tx, params))(PARAMS)


def my_sgd(learning_rate: float, l2: float = 0.0) -> optax.GradientTransformation:
    """A user's factory that skips its term for a Python 0.0, as optax does."""

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        if not (isinstance(l2, float) and l2 == 0.0):
            updates = jax.tree.map(lambda g, p: g + l2 * p, updates, params)
        return jax.tree.map(lambda g: -learning_rate * g, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def test_a_zero_the_factory_skips_for_is_static_there_only_whichever_comes_first() -> None:
    _caches.clear_caches()
    nonzero = opx.wrap(optax.adamw, 1e-3, weight_decay=1e-4)  # analysed first: a leaf
    zero = opx.wrap(optax.adamw, 1e-3, weight_decay=0.0)
    assert "weight_decay" in nonzero.dynamic_argnames
    assert zero.detected_static_argnames == ZERO_STATIC
    assert nonzero.replace(weight_decay=0.0).detected_static_argnames == ZERO_STATIC
    assert "weight_decay" in zero.replace(weight_decay=1e-3).dynamic_argnames
    # A zero the factory computes with stays a leaf: adam's eps_root (0.0 here too).
    assert "eps_root" in zero.dynamic_argnames and "eps_root" in nonzero.dynamic_argnames
    _caches.clear_caches()
    zero = opx.wrap(optax.adamw, 1e-3, weight_decay=0.0)  # analysed first: static
    nonzero = opx.wrap(optax.adamw, 1e-3, weight_decay=1e-4)
    assert zero.detected_static_argnames == ZERO_STATIC
    assert "weight_decay" in nonzero.dynamic_argnames
    if ZERO_STATIC:
        assert "static at zero only" in str(opx.explain(zero, nonzero))


def test_each_value_is_plain_optax_bit_for_bit_the_zero_one_more_compilation() -> None:
    run, traces = counting_jit(steps)
    for wd in (1e-4, 0.0, 1e-3, 0.0):
        assert_jit_bit_for_bit(
            run(opx.wrap(optax.adamw, 1e-3, weight_decay=wd), PARAMS),
            plain(optax.adamw(1e-3, weight_decay=wd)),
        )
    assert traces == [2 if ZERO_STATIC else 1]


def test_a_users_factory_is_verified_so_too() -> None:
    zero, nonzero = opx.wrap(my_sgd, 0.1), opx.wrap(my_sgd, 0.1, l2=0.5)
    assert zero.detected_static_argnames == ("l2",) and "l2" in nonzero.dynamic_argnames
    # A zero learning rate: the factory computes with it (no operation skipped), a leaf.
    assert "learning_rate" in opx.wrap(my_sgd, 0.0).dynamic_argnames
    for tx, l2 in ((zero, 0.0), (nonzero, 0.5)):
        assert_jit_bit_for_bit(jax.jit(steps)(tx, PARAMS), plain(my_sgd(0.1, l2)))


def test_a_batch_takes_the_zero_as_a_leaf() -> None:
    # grid from an object whose zero is static, stack of members of both kinds: one program,
    # each from nothing analysed (the zero's analysis the only one of the configuration).
    _caches.clear_caches()
    batch, points = opx.grid(opx.wrap(optax.adamw, 1e-3, weight_decay=0.0), weight_decay=[0.0, 1e-4])
    _caches.clear_caches()
    stacked = opx.stack([opx.wrap(optax.adamw, 1e-3, weight_decay=wd) for wd in (0.0, 1e-4)])
    assert jax.tree.structure(batch) == jax.tree.structure(stacked)
    assert "weight_decay" in batch.dynamic_argnames
    run, traces = counting_jit(jax.vmap(steps, in_axes=(0, None)))
    for made in (batch, stacked):
        out = run(made, PARAMS)
        for i, point in enumerate(points):
            # The zero member computes g + 0.0 * p: the same numbers, compiled otherwise.
            got = jax.tree.map(lambda x, i=i: x[i], out)
            assert_tree_allclose(got, plain(optax.adamw(1e-3, **point)), rtol=1e-6, atol=1e-7)
    assert traces == [1]


def test_found_with_another_difference_the_zero_is_still_static_at_zero_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where the backend unrolls a loop of a constant trip count (a TPU), muon's ns_steps differs
    # too (static for every value, ``test_backends``): that bisection does not take the zeros
    # along, which are found next, static at zero only.
    if not ZERO_STATIC:
        pytest.skip("this optax computes g + 0.0 * p for a zero weight decay: nothing to find")
    if version(jax) >= (0, 12):
        pytest.skip(
            "jax 0.12: the verification cannot run muon's own program with its loop with the Python "
            "values (a KeyError), so ns_steps is static there and nothing more of muon is compared"
        )
    _caches.clear_caches()
    monkeypatch.setitem(
        _backends.TABLE, "cpu", dataclasses.replace(_backends.CPU, unrolls_constant_loops=True)
    )
    try:
        tx = opx.wrap(optax.contrib.muon, 1e-3)
        assert set(tx.detected_static_argnames) == {"ns_steps", "weight_decay", "adam_weight_decay"}
        assert set(tx._core.spec.analysis.at_zero) == {"weight_decay", "adam_weight_decay"}
        assert "weight_decay" in opx.wrap(optax.contrib.muon, 1e-3, weight_decay=1e-4).dynamic_argnames
    finally:
        _caches.clear_caches()


def test_a_value_traced_inside_jit_keeps_the_branches_of_the_object_it_replaces() -> None:
    # An equal configuration verified at a nonzero init_value first: the object made at 0.0 may
    # hold that analysis (specs are interned by key); replace inside jit keeps its branches.
    _caches.clear_caches()
    opx.wrap(optax.warmup_cosine_decay_schedule, 1e-4, 1e-3, 10, 1000)
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000)
    value = jax.jit(lambda peak: schedule.replace(peak_value=peak)(5))(jnp.float32(2e-3))
    # Computed from the traced peak in float32 (no host value exists): to round-off.
    assert_tree_allclose(value, optax.warmup_cosine_decay_schedule(0.0, 2e-3, 10, 1000)(5), rtol=1e-6)
