"""A wrapped call staged once per configuration (``optax_pytree/_staged.py``; issue 46).

The rewritten program of a wrapped object's ``init``, ``update`` or schedule
call (the factory's call traced, then XLA's rewrites of constants redone
equation by equation) is made once per configuration and input types, and
bound again by every later call: a new jitted function with the same
optimizer (a builder called once per trial, a training function made again)
traces none of the factory's code. These tests hold what that must not
change: the numbers (bit for bit against the call rewritten in place), the
transformations (grad with respect to a hyperparameter, vmap over a grid),
a stale carried value, and what is not staged.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import exhaustive
from jax._src import core as jax_core

import optax_pytree as opx
from optax_pytree import _backends, _caches, _staged

PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6), "b": jnp.array([0.5, -0.25], jnp.bfloat16)}


class _Count(NamedTuple):
    steps: jax.Array


# What the Python code of ``counted_sgd``'s transformation ran, in order.
CALLS: list[str] = []


def counted_sgd(learning_rate: float) -> optax.GradientTransformation:
    """sgd whose ``init`` and ``update`` record each time their Python code runs."""

    def init(params: Any) -> _Count:
        CALLS.append("init")
        return _Count(jnp.zeros((), jnp.int32))

    def update(updates: Any, state: _Count, params: Any = None) -> tuple[Any, _Count]:
        CALLS.append("update")
        return jax.tree.map(lambda g: -learning_rate * g, updates), _Count(state.steps + 1)

    return optax.GradientTransformation(init, update)  # pyright: ignore[reportArgumentType]


def _step(tx: Any, state: Any, params: Any = PARAMS) -> Any:
    return tx.update(jax.tree.map(jnp.sin, params), state, params)


def test_a_new_program_with_the_same_optimizer_runs_no_factory_code() -> None:
    _caches.clear_caches()
    state = opx.wrap(counted_sgd, 0.1).init(PARAMS)
    first = jax.jit(lambda tx, s: _step(tx, s))(opx.wrap(counted_sgd, 0.1), state)
    before = len(CALLS)
    # A builder called again, a new jitted function: the staged program is bound as it is.
    second = jax.jit(lambda tx, s: _step(tx, s))(opx.wrap(counted_sgd, 0.3), state)
    assert CALLS[before:] == []
    chex.assert_trees_all_equal(first[1], second[1])
    chex.assert_trees_all_equal(second[0], jax.tree.map(lambda g: -0.3 * jnp.sin(g), PARAMS))
    # Other input types are another program: traced once.
    jax.jit(lambda tx, s: _step(tx, s, {"w": jnp.ones(3)}))(opx.wrap(counted_sgd, 0.1), state)
    assert CALLS[before:] == ["update"]


# The TPU process's variant in the exhaustive sets (and on a TPU machine, where it is the process).
@pytest.fixture(params=["cpu", pytest.param("as-a-tpu-process", marks=exhaustive)])
def platforms(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param != "cpu":  # a TPU machine's process lowers for its CPU too (its choice staged)
        monkeypatch.setattr(_backends, "_platforms", lambda: ("cpu", "tpu"))
    _caches.clear_caches()


def _in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call rewritten in place, as before the staging (nothing staged)."""
    monkeypatch.setattr(_staged, "_program", lambda *args: None)


def _adamw() -> Any:
    return opx.wrap(optax.adamw, opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 3, 50))


@pytest.mark.parametrize(
    "make",
    [_adamw, pytest.param(lambda: opx.wrap(optax.adam, 1e-2), marks=exhaustive)],
    ids=["adamw-schedule", "adam"],
)
def test_the_staged_program_computes_the_call_rewritten_in_place(
    platforms: None, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    def run() -> Any:
        tx = make()
        state, out = tx.init(PARAMS), []
        step = jax.jit(lambda tx, s: _step(tx, s))
        for _ in range(3):
            updates, state = step(tx, state)
            out.append(updates)
        b1 = jax.grad(lambda b1: jnp.sum(_step(tx.replace(b1=b1), state)[0]["w"]))
        out.append(jax.jit(b1)(0.8))
        grid, _ = opx.grid(tx, b1=[0.9, 0.5])
        out.append(jax.jit(jax.vmap(lambda tx: _step(tx, tx.init(PARAMS))))(grid))
        return out

    staged = run()
    assert _staged._PROGRAMS.data  # pyright: ignore[reportPrivateUsage]
    _caches.clear_caches()
    _in_place(monkeypatch)
    chex.assert_trees_all_equal(staged, run())


def test_a_stale_carried_value_is_seen_through_the_staged_program(platforms: None) -> None:
    # One staged program for both: the fingerprint is computed from the leaves it is given, so
    # an object whose leaves were changed behind its back computes from its new leaves.
    tx = opx.wrap(optax.adam, 1e-2, b1=0.9, b2=0.999)
    halved = jax.tree.map(lambda x: x / 2 if x.ndim == 0 else x, tx)
    state = tx.init(PARAMS)
    step = jax.jit(lambda tx, s: _step(tx, s))
    got, fresh = step(halved, state), step(tx, state)
    expected = step(opx.wrap(optax.adam, 5e-3, b1=0.45, b2=0.4995, eps=5e-9), state)
    chex.assert_trees_all_close(got, expected, rtol=1e-6)
    assert not jnp.allclose(got[0]["w"], fresh[0]["w"])
    assert len(_staged._PROGRAMS.data) == 1  # pyright: ignore[reportPrivateUsage]


def test_equal_computations_are_computed_once(platforms: None) -> None:
    # The carried values are read and their fingerprint checked where each rewrite needs them;
    # the staged program computes each once (XLA would share them too, later).
    tx = opx.wrap(optax.adam, 1e-3)
    jaxpr = jax.make_jaxpr(lambda tx, s: _step(tx, s))(tx, tx.init(PARAMS)).jaxpr
    hashes = [e for e in jaxpr.eqns if e.primitive.name == "bitcast_convert_type"]
    assert len(hashes) == 2  # b1 and b2, once each
    seen = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("slice", "squeeze", "bitcast_convert_type") and not eqn.effects:
            key = (eqn.primitive, tuple(sorted(eqn.params.items())), tuple(map(id, eqn.invars)))
            assert key not in seen, eqn
            seen.add(key)


def test_what_is_not_staged_is_rewritten_in_place() -> None:
    _caches.clear_caches()
    # A concrete hyperparameter (the object closed over) is a constant, as in plain optax.
    tx = opx.wrap(optax.adam, 1e-3)
    jax.jit(lambda s: _step(tx, s))(tx.init(PARAMS))
    assert not _staged._PROGRAMS.data  # pyright: ignore[reportPrivateUsage]
    # An argument that is not an array (a line search's value function) is passed as it is.
    lbfgs = opx.wrap(optax.lbfgs)
    params = {"w": jnp.array([1.0, -2.0])}

    def value(p: Any) -> Any:
        return jnp.sum(p["w"] ** 2)

    def step(tx: Any, state: Any) -> Any:
        v, g = jax.value_and_grad(value)(params)
        return tx.update(g, state, params, value=v, grad=g, value_fn=value)

    jax.jit(step)(lbfgs, lbfgs.init(params))
    assert not _staged._PROGRAMS.data  # pyright: ignore[reportPrivateUsage]


def test_a_simplified_program_keeps_its_constants_in_step() -> None:
    # The equation that reads a constant is removed: the program's constants stay those its
    # constvars name (JAX 0.12's program holds its constants, earlier ones are beside it).
    table = jnp.array([1.0, 2.0])

    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        unused = x + table
        del unused
        return jnp.sin(x) * 2.0, jnp.sin(x).astype(jnp.float32)

    closed = jax.make_jaxpr(f)(jnp.ones(2))
    jaxpr, consts = _staged.simplified(closed.jaxpr, list(closed.consts))
    assert len(consts) == len(jaxpr.constvars)
    assert [e.primitive.name for e in jaxpr.eqns] == ["sin", "mul"]
    x = jnp.array([0.5, -1.5])
    chex.assert_trees_all_equal(jax_core.eval_jaxpr(jaxpr, consts, x), list(f(x)))


def test_an_output_dropped_where_it_was_traced_is_not_shared() -> None:
    # The first sort's second output is not read, the second sort's is: where JAX traces the
    # unread one as dropped (``DropVar``: JAX 0.5's jaxprs; found by CI's floor stage), the
    # second is computed, not read from the first's dropped output.
    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        a, _ = jax.lax.sort((x, -x), num_keys=1)
        _, b = jax.lax.sort((x, -x), num_keys=1)
        return a, b

    closed = jax.make_jaxpr(f)(jnp.ones(3))
    jaxpr, consts = _staged.simplified(closed.jaxpr, list(closed.consts))
    x = jnp.array([7.0, -4.0, 1.0])
    chex.assert_trees_all_equal(jax_core.eval_jaxpr(jaxpr, consts, x), list(f(x)))


def test_a_configuration_that_cannot_be_staged_is_tried_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _caches.clear_caches()
    tried: list[int] = []

    def failing(*args: Any) -> None:
        tried.append(1)  # as when the staging fails: rewritten in place

    monkeypatch.setattr(_staged, "_program", failing)
    tx = opx.wrap(optax.adam, 1e-2)
    state = tx.init(PARAMS)
    first = jax.jit(lambda tx, s: _step(tx, s))(tx, state)
    second = jax.jit(lambda tx, s: _step(tx, s))(tx, state)
    assert tried == [1]
    chex.assert_trees_all_equal(first, second)
