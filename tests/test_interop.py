"""Wrapped objects where optax, equinox and sharded ``jit`` expect optimizers (flax: test_flax.py)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import (
    PARAMS,
    apply_gradients,
    assert_tree_allclose,
    counting_jit,
    loss,
    raw_adam,
    run_steps,
    run_with_8_host_devices,
)

import optax_pytree as opx

with_state = opx.wrap_transformation_as_pytree_with_state


def _run(tx: Any, params: Any = PARAMS, steps: int = 4) -> tuple[Any, Any]:
    """``(params, state)`` after ``steps`` steps of any optax transformation under jit (closed over)."""
    return jax.jit(lambda p: run_steps(tx, p, steps, extra="", scan=False)[:2])(params)


# --------------------------------------------------------------------------
# optax's own combinators take wrapped objects.


def test_optax_chain_takes_wrapped_and_plain_transformations() -> None:
    got = _run(
        optax.chain(
            opx.wrap(optax.clip_by_global_norm, 1.0), optax.scale_by_adam(), opx.wrap(optax.scale, -0.05)
        )
    )
    expected = _run(optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam(), optax.scale(-0.05)))
    assert_tree_allclose(got, expected, rtol=1e-5)
    # A wrapped chain of wrapped transformations is one pytree.
    chained = opx.wrap(optax.chain, opx.wrap(optax.clip_by_global_norm, 1.0), opx.wrap(optax.adam, 0.05))
    # max_norm; adam's five arguments; the host values of 1 - b1, 1 - b2 and their fingerprint.
    assert len(jax.tree_util.tree_leaves(chained)) == 7
    assert_tree_allclose(
        _run(chained),
        _run(optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.05))),
        rtol=1e-4,
        atol=1e-5,
    )


def test_optax_multi_steps_takes_a_wrapped_transformation() -> None:
    got = _run(optax.MultiSteps(opx.wrap(optax.adam, 0.05), every_k_schedule=2).gradient_transformation())
    expected = _run(optax.MultiSteps(optax.adam(0.05), every_k_schedule=2).gradient_transformation())
    assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # And wrapped itself, with its state in the stateful optimizer: the state an
    # input of each jitted step, as plain optax's below (its first steps not
    # folded by XLA at compile time, which on a TPU computes other numbers).
    opt = with_state(optax.MultiSteps, opx.wrap(optax.adam, 0.05), every_k_schedule=2).init(PARAMS)
    params, step = PARAMS, jax.jit(apply_gradients)
    for _ in range(4):
        params, opt = step(opt, params)
    plain = optax.MultiSteps(optax.adam(0.05), every_k_schedule=2)

    @jax.jit
    def plain_step(params: Any, state: Any) -> Any:
        updates, state = plain.update(jax.grad(loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    plain_params, plain_state = PARAMS, plain.init(PARAMS)
    for _ in range(4):
        plain_params, plain_state = plain_step(plain_params, plain_state)
    assert_tree_allclose(params, plain_params, rtol=1e-4, atol=1e-5)
    assert int(opt.state.gradient_step) == 2


def test_optax_inject_hyperparams_takes_wrapped_objects() -> None:
    schedule = opx.wrap(optax.linear_schedule, 0.1, 0.01, 4)
    # A wrapped schedule as the hyperparameter inject_hyperparams evaluates.
    got = _run(optax.inject_hyperparams(optax.sgd)(learning_rate=schedule))
    expected = _run(optax.inject_hyperparams(optax.sgd)(learning_rate=optax.linear_schedule(0.1, 0.01, 4)))
    assert_tree_allclose(got, expected, rtol=1e-5)
    # A factory returning wrapped transformations.
    got = _run(optax.inject_hyperparams(opx.pytree_transformation(optax.adam))(learning_rate=0.05))
    expected = _run(optax.inject_hyperparams(optax.adam)(learning_rate=0.05))
    assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # inject_hyperparams(adam) wrapped: its hyperparameters become leaves too.
    tx = opx.wrap(optax.inject_hyperparams(optax.adam), learning_rate=0.05)
    assert_tree_allclose(_run(tx), expected, rtol=1e-4, atol=1e-5)
    opt = with_state(tx).init(PARAMS)
    assert float(opt.state.hyperparams["learning_rate"]) == pytest.approx(0.05)


def test_optax_apply_updates_and_apply_if_finite() -> None:
    tx = opx.wrap(optax.adam, 0.05)
    updates, _ = tx.update(jax.grad(loss)(PARAMS), tx.init(PARAMS), PARAMS)
    assert_tree_allclose(optax.apply_updates(PARAMS, updates), raw_adam([0.05]), rtol=1e-5)
    got = _run(optax.apply_if_finite(opx.wrap(optax.adam, 0.05), 3))
    expected = _run(optax.apply_if_finite(optax.adam(0.05), 3))
    assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------
# equinox

X = jnp.linspace(-1.0, 1.0, 24).reshape(8, 3)
Y = jnp.stack([jnp.sin(X.sum(axis=1)), jnp.cos(X[:, 0])], axis=1)
LRS = (0.05, 0.02, 0.005)


class _EqxTrainState(eqx.Module):
    model: eqx.nn.MLP
    opt: Any


def _eqx_loss(model: Any, x: Any, y: Any) -> Any:
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def test_equinox_module_holding_a_stateful_optimizer() -> None:
    model = eqx.nn.MLP(3, 2, width_size=8, depth=1, key=jax.random.key(0))
    params = eqx.filter(model, eqx.is_inexact_array)
    ts = _EqxTrainState(model, with_state(optax.adam, learning_rate=LRS[0]).init(params))

    def train_step(ts: _EqxTrainState, x: Any, y: Any) -> Any:
        grads = eqx.filter_grad(_eqx_loss)(ts.model, x, y)
        updates, opt = ts.opt.update(grads, eqx.filter(ts.model, eqx.is_inexact_array))
        return _EqxTrainState(eqx.apply_updates(ts.model, updates), opt)

    train_step, traces = counting_jit(train_step, jit=eqx.filter_jit)

    for lr in LRS:
        ts = eqx.tree_at(lambda t: t.opt, ts, ts.opt.replace(learning_rate=lr))
        for _ in range(2):
            ts = train_step(ts, X, Y)
    assert traces == [1]

    # The same with raw optax.
    static = eqx.filter(model, eqx.is_inexact_array, inverse=True)
    expected = raw_adam(
        [lr for lr in LRS for _ in range(2)], params, lambda p: _eqx_loss(eqx.combine(p, static), X, Y)
    )
    assert_tree_allclose(eqx.filter(ts.model, eqx.is_inexact_array), expected, rtol=1e-4, atol=1e-5)


def test_equinox_module_holding_a_wrapped_transformation() -> None:
    class Trainer(eqx.Module):
        tx: Any

    def run(trainer: Trainer, params: Any) -> Any:
        updates, _ = trainer.tx.update(jax.grad(loss)(params), trainer.tx.init(params), params)
        return optax.apply_updates(params, updates)

    run, traces = counting_jit(run, jit=eqx.filter_jit)

    for lr in LRS:
        run(Trainer(opx.wrap(optax.adam, lr)), PARAMS)
    assert traces == [1]


# --------------------------------------------------------------------------
# Sharding: 8 host devices need the XLA flag at JAX's import, hence a subprocess.

_SHARDED = """
    import jax, jax.numpy as jnp, numpy as np, optax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    import optax_pytree as opx
    from helpers import counting_jit, raw_adam

    assert jax.device_count() == 8
    PARAMS = {"b": jnp.ones(4), "w": jnp.arange(64.0).reshape(16, 4) / 64}
    def loss(p):
        return jnp.sum(p["w"] ** 2) + jnp.sum(jnp.sin(p["b"]))
    def step(o, p):
        return o.apply_gradients(jax.grad(loss)(p), p)

    def check(opt, params):
        for x in jax.tree_util.tree_leaves(opt.transformation):
            assert x.sharding.is_fully_replicated and len(x.sharding.device_set) == 8, x.sharding
        for moment in (opt.state[0].mu, opt.state[0].nu):
            for k in params:
                assert moment[k].sharding.is_equivalent_to(params[k].sharding, moment[k].ndim), k
        assert not params["w"].sharding.is_fully_replicated

    # Expected values: raw optax on one device.
    expected = raw_adam([0.05, 0.05, 0.01, 0.01], PARAMS, loss)

    # Auto axes: device_put replicates the hyperparameters (all the leaves
    # there are before init), init follows the parameters' shardings.
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    shardings = {"b": NamedSharding(mesh, P()), "w": NamedSharding(mesh, P("x", None))}
    params = jax.device_put(PARAMS, shardings)
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, 0.05)
    opt = jax.device_put(opt, NamedSharding(mesh, P())).init(params)
    check(opt, params)
    jitted, traces = counting_jit(step)
    for lr in (0.05, 0.05, 0.01, 0.01):
        opt = opt.replace(learning_rate=lr)  # keeps the replicated placement
        params, opt = jitted(opt, params)
        check(opt, params)
    np.testing.assert_allclose(params["w"], expected["w"], rtol=1e-4, atol=1e-5)
    # Raw optax in the same loop traces as often (the fresh `count` scalar is
    # uncommitted until the first step returns it replicated).
    def raw_step(s, p):
        updates, s = optax.adam(0.05).update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, updates), s
    raw_jitted, raw_traces = counting_jit(raw_step)
    p = jax.device_put(PARAMS, shardings)
    s = optax.adam(0.05).init(p)
    for _ in range(4):
        p, s = raw_jitted(s, p)
    assert traces == raw_traces == [2], (traces, raw_traces)

    # Explicit axes: init under jit in the mesh context; one trace throughout.
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    set_mesh = getattr(jax, "set_mesh", None) or jax.sharding.use_mesh  # jax<0.7: use_mesh
    with set_mesh(mesh):
        params = jax.device_put(PARAMS, {"b": P(), "w": P("x", None)})
        opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, 0.05)
        opt = jax.jit(lambda o, p: o.init(p))(opt, params)
        check(opt, params)
        traces[0] = 0
        for lr in (0.05, 0.05, 0.01, 0.01):
            opt = opt.replace(learning_rate=lr)
            params, opt = jitted(opt, params)
            check(opt, params)
        assert traces == [1], traces
    np.testing.assert_allclose(params["w"], expected["w"], rtol=1e-4, atol=1e-5)
    print("OK")
"""


@pytest.mark.skipif(not hasattr(jax.sharding, "AxisType"), reason="jax<0.5.3 lacks jax.sharding.AxisType")
def test_sharded_jit_over_8_host_devices() -> None:
    assert run_with_8_host_devices(_SHARDED).strip().endswith("OK")


# --------------------------------------------------------------------------
# optax's tree utilities find hyperparameters by name (migration from
# inject_hyperparams, whose hyperparameters live in the optimizer state).


def test_optax_tree_get_and_tree_set_find_hyperparameters() -> None:
    from optax.tree_utils import tree_get, tree_set

    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 0.1, 10, 100)
    tx = opx.wrap(optax.chain, opx.wrap(optax.clip_by_global_norm, 1.0), opx.wrap(optax.adamw, schedule))
    assert float(tree_get(tx, "max_norm")) == 1.0
    assert tree_get(tx, "learning_rate") is schedule  # the wrapped schedule itself
    # A wrapped schedule is not a NamedTuple (jax.jit(schedule) needs a weak
    # reference, which tuples refuse), so optax's tree utilities do not look
    # inside it: its arguments are reached through the schedule.
    assert tree_get(tx, "peak_value") is None
    assert float(tree_get(tx, "learning_rate").peak_value) == pytest.approx(0.1)
    assert tree_get(tx, "no_such_name") is None
    new = tree_set(tx, learning_rate=schedule.replace(peak_value=0.05), max_norm=2.0)  # through replace
    assert type(new) is type(tx) and float(tx.args[0].max_norm) == 1.0
    assert float(new.args[0].max_norm) == 2.0
    assert float(new.args[1].learning_rate.peak_value) == pytest.approx(0.05)
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(tx)  # one compilation
    # Validated like replace: another branch is another configuration, a string is refused.
    other = tree_set(tx, learning_rate=schedule.replace(peak_value=0.0))
    assert "peak_value == 0.0 is True" in other.args[1].learning_rate.guards
    with pytest.raises(TypeError, match="argument 'max_norm' got the string"):
        tree_set(tx, max_norm="2")
    with pytest.raises(KeyError):
        tree_set(tx, no_such_name=1.0)


def test_optax_tree_utilities_on_the_stateful_optimizer_and_multi_transform() -> None:
    from optax.tree_utils import tree_get, tree_set

    opt = with_state(optax.adam, 1e-3).init(PARAMS)
    assert float(tree_get(opt, "learning_rate")) == pytest.approx(1e-3)
    new = tree_set(opt, learning_rate=5e-4)
    assert isinstance(new, opx.PyTreeTransformationWithState) and new.initialized
    assert float(new.learning_rate) == pytest.approx(5e-4)
    step, traces = counting_jit(apply_gradients)
    step(opt, PARAMS)
    step(new, PARAMS)
    assert traces == [1]
    labelled = opx.wrap(
        optax.multi_transform,
        {"a": opx.wrap(optax.adam, 0.1), "s": opx.wrap(optax.sgd, 0.01)},
        {"b": "s", "w": "a"},
    )
    assert float(tree_get(labelled, "b1")) == pytest.approx(0.9)
    assert float(tree_set(labelled, b1=0.5).transforms["a"].b1) == pytest.approx(0.5)
