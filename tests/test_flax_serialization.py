"""flax's serialization and checkpoints round-trip wrapped optimizers, in every holder.

flax serializes a tuple with ``_fields`` as a NamedTuple and rebuilds it with
``type(obj)(**fields)``, which cannot rebuild a wrapped transformation (its
static configuration is in the target): optax_pytree registers a handler with
flax. For each holder (a wrapped transformation with its state, a linen
``TrainState``, an nnx ``Optimizer``) and each way of saving (flax bytes, flax
state dicts, ``flax.training.checkpoints``, orbax, ``opx.save_checkpoint``):
train, save, train on (the reference); then a fresh holder made with other
hyperparameter values, restored, trained on: bit for bit the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_tree_allclose, counting_jit

import optax_pytree as opx

nnx = pytest.importorskip("flax.nnx", reason="flax is an optional dependency")
ocp = pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is a test extra")
from flax import serialization  # noqa: E402
from flax.training import checkpoints  # noqa: E402
from flax_helpers import MLP, X, Y, linen_state, linen_step, nnx_step  # noqa: E402

from optax_pytree.linen import TrainState  # noqa: E402
from optax_pytree.nnx import Optimizer  # noqa: E402


def make_tx(lr: float) -> Any:
    """A chain with a wrapped schedule (a child) whose arguments are guarded."""
    schedule = opx.wrap(optax.exponential_decay, lr, 3, 0.5)
    return opx.wrap(
        optax.chain,
        opx.wrap(optax.clip_by_global_norm, 1.0),
        opx.wrap(optax.adamw, schedule, weight_decay=1e-2),
    )


def hyperparameters(tree: Any) -> dict[str, Any]:
    """Key path -> leaf, for the leaves under a ``tx``: what the checkpoint must bring back."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in flat if "tx" in jax.tree_util.keystr(p)}


def avals(tree: Any) -> dict[str, Any]:
    """Key path -> (dtype, weak type) of the leaves under a ``tx``: what ``jit`` keys its cache on."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        jax.tree_util.keystr(p): (jnp.result_type(x), getattr(x, "weak_type", False))
        for p, x in flat
        if "tx" in jax.tree_util.keystr(p)
    }


def bytes_round_trip(target: Any, saved: Any, tmp_path: Any) -> Any:
    del tmp_path
    return serialization.from_bytes(target, serialization.to_bytes(saved))


def state_dict_round_trip(target: Any, saved: Any, tmp_path: Any) -> Any:
    del tmp_path
    return serialization.from_state_dict(target, serialization.to_state_dict(saved))


def flax_checkpoints_round_trip(target: Any, saved: Any, tmp_path: Any) -> Any:
    checkpoints.save_checkpoint(str(tmp_path / "flax"), saved, step=0)
    return checkpoints.restore_checkpoint(str(tmp_path / "flax"), target)


def orbax_round_trip(target: Any, saved: Any, tmp_path: Any) -> Any:
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(str(tmp_path / "orbax"), saved)
        checkpointer.wait_until_finished()
        return checkpointer.restore(str(tmp_path / "orbax"), target)


def optax_pytree_round_trip(target: Any, saved: Any, tmp_path: Any) -> Any:
    opx.save_checkpoint(tmp_path / "opx", saved)
    # Its signature check wants arrays where the saved object has them (a fresh
    # TrainState's step is the Python int 0): the template as a jitted step sees it.
    return opx.restore_checkpoint(tmp_path / "opx", jax.jit(lambda t: t)(target))


ROUND_TRIPS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "bytes": bytes_round_trip,
    "state-dict": state_dict_round_trip,
    "flax-checkpoints": flax_checkpoints_round_trip,
    "orbax": orbax_round_trip,
    "opx-checkpoint": optax_pytree_round_trip,
}
# Each keeps the hyperparameters' dtypes and weak types, so a jitted step taking
# them does not retrace for them; plain orbax does not keep weak types (one
# retrace, the same numbers). opx.restore_checkpoint keeps every leaf's.
KEEP_WEAK_TYPES = {"bytes", "state-dict", "flax-checkpoints", "opx-checkpoint"}


def resume(make: Callable[[float], Any], step: Callable[[Any], Any], round_trip: str, tmp_path: Any) -> None:
    """Train, save, train on; restore into a fresh holder made with another learning rate, train on."""
    jitted, traces = counting_jit(step)
    saved = jitted(jitted(make(0.05)))
    reference = jitted(jitted(saved))
    template = make(0.01)  # another value: the checkpoint's must come back
    restored = ROUND_TRIPS[round_trip](template, saved, tmp_path)
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(saved)
    assert_tree_allclose(hyperparameters(restored), hyperparameters(saved), rtol=0, atol=0)
    if round_trip in KEEP_WEAK_TYPES:
        assert avals(restored) == avals(saved)
    resumed = jitted(jitted(restored))
    assert_tree_allclose(resumed, reference, rtol=0, atol=0)  # bit for bit
    if round_trip == "opx-checkpoint":
        assert traces == [1], traces


# --------------------------------------------------------------------------
# A wrapped transformation alone (with its state and the parameters).


def tx_holder(lr: float) -> dict[str, Any]:
    params = {"w": jnp.ones((2, 1)), "b": jnp.zeros(1)}
    tx = make_tx(lr)
    return {"params": params, "opt_state": tx.init(params), "tx": tx}


def tx_step(holder: dict[str, Any]) -> dict[str, Any]:
    params, tx = holder["params"], holder["tx"]
    grads = jax.grad(lambda p: jnp.mean((X @ p["w"] + p["b"] - Y) ** 2))(params)
    updates, opt_state = tx.update(grads, holder["opt_state"], params)
    return {"params": optax.apply_updates(params, updates), "opt_state": opt_state, "tx": tx}


@pytest.mark.parametrize("round_trip", list(ROUND_TRIPS))
def test_wrapped_transformation_round_trips(round_trip: str, tmp_path: Any) -> None:
    resume(tx_holder, tx_step, round_trip, tmp_path)


def test_wrapped_transformation_alone_through_flax() -> None:
    tx = make_tx(0.05)
    restorations: list[Any] = [
        serialization.from_bytes(make_tx(0.01), serialization.to_bytes(tx)),
        serialization.from_state_dict(make_tx(0.01), serialization.to_state_dict(tx)),
    ]
    for restored in restorations:
        assert type(restored) is type(tx)
        assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(tx)
        assert float(restored.args[1].learning_rate.init_value) == pytest.approx(0.05)
        assert all(x.weak_type for x in jax.tree_util.tree_leaves(restored))  # as wrap makes them
    # The state dict names the arguments, and children by their place.
    state_dict = serialization.to_state_dict(tx)
    assert set(state_dict) == {"args"}
    assert set(state_dict["args"]["1"]) == {
        "learning_rate",
        "b1",
        "b2",
        "eps",
        "eps_root",
        "weight_decay",
        "exact",
    }
    # With the host values of what adamw computes from them in Python (1 - b1, 1 - b2, ...).
    assert set(state_dict["args"]["1"]["exact"]) == {str(i) for i in range(len(tx.args[1].exact))}
    assert float(state_dict["args"]["1"]["learning_rate"]["init_value"]) == pytest.approx(0.05)


def test_a_saved_value_on_another_branch_is_another_configuration() -> None:
    # decay_rate == 0 is a branch of optax.exponential_decay: the saved value's
    # branch wins, as replace() would make it, and numbers are the factory's.
    saved = opx.wrap(optax.exponential_decay, 1.0, 10, 0.5)
    template = opx.wrap(optax.exponential_decay, 1.0, 10, 0.0)
    assert jax.tree_util.tree_structure(saved) != jax.tree_util.tree_structure(template)
    restored: Any = serialization.from_bytes(template, serialization.to_bytes(saved))
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(saved)
    assert "decay_rate == 0 is False" in restored.guards
    expected: Any = optax.exponential_decay(1.0, 10, 0.5)(20)
    assert float(restored(20)) == float(expected)


def test_a_population_round_trips() -> None:
    # Batched leaves (a vmapped population of train states): the target's configuration.
    batch, _ = opx.grid(opx.wrap(optax.exponential_decay, 1.0, 10, 0.5), decay_rate=[0.5, 0.6, 0.7])
    restored = serialization.from_bytes(batch, serialization.to_bytes(batch))
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(batch)
    assert_tree_allclose(restored, batch, rtol=0, atol=0)
    assert [x.weak_type for x in jax.tree_util.tree_leaves(restored)] == [
        x.weak_type for x in jax.tree_util.tree_leaves(batch)
    ]


def test_other_named_tuples_are_flax_s() -> None:
    # The handler flax keeps for NamedTuples still serves every other one.
    state: Any = optax.adam(0.1).init({"w": jnp.ones(2)})
    restored: Any = serialization.from_bytes(state, serialization.to_bytes(state))
    assert type(restored[0]) is type(state[0])
    assert_tree_allclose(restored, state, rtol=0, atol=0)
    with pytest.raises(
        ValueError, match="The field names of the state dict and the named tuple do not match"
    ):
        serialization.from_state_dict(state[0], {"count": 0})


# --------------------------------------------------------------------------
# flax.linen: TrainState.


def linen_holder(lr: float) -> Any:
    return linen_state(TrainState, make_tx(lr))


@pytest.mark.parametrize("round_trip", list(ROUND_TRIPS))
def test_linen_train_state_round_trips(round_trip: str, tmp_path: Any) -> None:
    resume(linen_holder, linen_step, round_trip, tmp_path)


# --------------------------------------------------------------------------
# flax.nnx: Optimizer, through nnx.state.


def _replaced(state: Any, pure: dict[str, Any]) -> Any:
    nnx.replace_by_pure_dict(state, pure)  # in place
    return state


def nnx_save(method: str, state: Any, tmp_path: Any) -> Callable[[Any], Any]:
    """Saves ``nnx.state((model, optimizer))``; returns how to restore it into a template state."""
    if method == "bytes":  # flax's way for nnx: a pure dict
        data = serialization.to_bytes(nnx.to_pure_dict(state))
        return lambda template: _replaced(
            template, serialization.from_bytes(nnx.to_pure_dict(template), data)
        )
    if method == "state-dict":
        pure = serialization.to_state_dict(nnx.to_pure_dict(state))
        return lambda template: _replaced(
            template, serialization.from_state_dict(nnx.to_pure_dict(template), pure)
        )
    if method == "orbax":
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(str(tmp_path / "orbax"), state)
            checkpointer.wait_until_finished()

        def restore(template: Any) -> Any:
            with ocp.StandardCheckpointer() as checkpointer:
                return checkpointer.restore(str(tmp_path / "orbax"), template)

        return restore
    opx.save_checkpoint(tmp_path / "opx", state)
    return lambda template: opx.restore_checkpoint(tmp_path / "opx", template)


@pytest.mark.parametrize("method", ["bytes", "state-dict", "orbax", "opx-checkpoint"])
def test_nnx_optimizer_round_trips(method: str, tmp_path: Any) -> None:
    step, traces = counting_jit(nnx_step, jit=nnx.jit)

    def make(lr: float) -> tuple[Any, Any]:
        model = MLP(nnx.Rngs(0))
        return model, Optimizer(model, make_tx(lr), wrt=nnx.Param)

    model, optimizer = make(0.05)
    step(model, optimizer)
    step(model, optimizer)
    restore = nnx_save(method, nnx.state((model, optimizer)), tmp_path)
    saved_hyperparameters = hyperparameters(nnx.to_pure_dict(nnx.state(optimizer)))
    step(model, optimizer)
    step(model, optimizer)  # the uninterrupted run
    expected = nnx.to_pure_dict(nnx.state((model, optimizer)))

    resumed_model, resumed = make(0.01)  # another value: the checkpoint's must come back
    restored = restore(nnx.state((resumed_model, resumed)))
    nnx.update((resumed_model, resumed), restored)
    restored_hyperparameters = hyperparameters(nnx.to_pure_dict(nnx.state(resumed)))
    assert_tree_allclose(restored_hyperparameters, saved_hyperparameters, rtol=0, atol=0)
    assert float(resumed.transformation.args[1].learning_rate.init_value) == pytest.approx(0.05)
    step(resumed_model, resumed)
    step(resumed_model, resumed)
    assert_tree_allclose(nnx.to_pure_dict(nnx.state((resumed_model, resumed))), expected, rtol=0, atol=0)
    if method == "opx-checkpoint":  # keeps the weak types: no retrace
        assert traces == [1], traces
