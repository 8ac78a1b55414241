"""flax: the one-line replacements optax_pytree.nnx.Optimizer and optax_pytree.linen.TrainState.

With flax's own classes the optimizer is static (``nnx.Optimizer.tx``,
``TrainState.tx``): a new learning rate is a new compilation, and a wrapped
optimizer is refused (nnx) or silently static (linen). The replacements keep
the hyperparameters dynamic: one trace across learning rates, results equal
to flax with raw optax, and ``nnx.state``/``split`` carry them (checkpoints:
test_flax_serialization.py). With a plain optax ``tx`` they are flax's
classes: changing the import never breaks a working program (scenarios of
flax's own linen, cursor and serialization tests, run on both). Without the
replacements, wrapped objects work in flax's own ``nnx.Optimizer`` (its
``tx`` made nnx data) and a stateful wrapped optimizer in nnx modules. The
nnx sweep patterns of the ``optax_pytree.nnx`` docs are run here: the loop
that compiles once and the vmapped population. The models, steps and data
are in flax_helpers.py.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_tree_allclose, counting_jit, run_in_fresh_python

import optax_pytree as opx
import optax_pytree.optax as dropin

nnx = pytest.importorskip("flax.nnx", reason="flax is an optional dependency")
linen = pytest.importorskip("flax.linen", reason="flax is an optional dependency")
import flax  # noqa: E402
from flax import serialization, struct  # noqa: E402
from flax.cursor import cursor  # noqa: E402
from flax.training import train_state  # noqa: E402
from flax_helpers import (  # noqa: E402
    MLP,
    X,
    Y,
    linen_state,
    linen_step,
    nnx_loss,
    nnx_params,
    nnx_step,
    train_with_flax,
)

from optax_pytree.linen import TrainState  # noqa: E402
from optax_pytree.nnx import Hyperparameter, Optimizer  # noqa: E402

LEARNING_RATES = (0.05, 0.02, 0.01)


def key_paths(tree: Any) -> list[str]:
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


# --------------------------------------------------------------------------
# flax.nnx: optax_pytree.nnx.Optimizer


def test_nnx_optimizer_keeps_hyperparameters_dynamic_and_equals_flax() -> None:
    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adamw, LEARNING_RATES[0], weight_decay=1e-2), wrt=nnx.Param)
    for lr in LEARNING_RATES:  # the documented way to change one
        optimizer.set_hyperparams(learning_rate=lr)
        step(model, optimizer, X, Y)
    assert traces == [1]
    assert int(optimizer.step[...]) == 3
    expected, _ = train_with_flax(LEARNING_RATES, optax.adamw, weight_decay=1e-2)
    assert_tree_allclose(nnx_params(model), expected, rtol=1e-4, atol=1e-6)
    # A static change replaces the transformation: another program.
    optimizer.set_hyperparams(nesterov=True)
    assert optimizer.transformation.nesterov is True
    step(model, optimizer, X, Y)
    assert traces == [2]


def test_nnx_new_optimizer_objects_reuse_the_compiled_step() -> None:
    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    for lr in LEARNING_RATES:
        model = MLP(nnx.Rngs(0))
        step(model, Optimizer(model, opx.wrap(optax.adam, lr), wrt=nnx.Param), X, Y)
    assert traces == [1]


def test_flax_nnx_optimizer_refuses_a_wrapped_transformation() -> None:
    # The problem the replacement solves: nnx.Optimizer keeps `tx` as a static
    # attribute and refuses a value with array leaves there; nnx.data(tx) as
    # the argument is only a marker for an attribute assignment, not a
    # transformation.
    model = MLP(nnx.Rngs(0))
    with pytest.raises(ValueError, match="static attribute 'tx'"):
        nnx.Optimizer(model, opx.wrap(optax.adam, 0.05), wrt=nnx.Param)
    with pytest.raises(TypeError):
        nnx.Optimizer(model, nnx.data(opx.wrap(optax.adam, 0.05)), wrt=nnx.Param)


def test_model_and_optimizer_takes_a_wrapped_transformation_as_the_drop_in_gives_it() -> None:
    # flax's own optimizer tests (tests/nnx/optimizer_test.py: test_jit,
    # test_metrics) use nnx.ModelAndOptimizer; with the drop-in's optax it
    # refuses the wrapped tx, ours takes it and trains as flax does.
    from optax_pytree.nnx import ModelAndOptimizer

    with pytest.raises((ValueError, TypeError)):
        nnx.ModelAndOptimizer(MLP(nnx.Rngs(0)), dropin.sgd(0.1))

    def train_step(state: Any, x: Any, y: Any) -> Any:
        loss, grads = nnx.value_and_grad(nnx_loss)(state.model, x, y)
        state.update(grads)
        return loss

    step, traces = counting_jit(train_step, jit=nnx.jit)
    ours, theirs = (
        ModelAndOptimizer(MLP(nnx.Rngs(0)), dropin.sgd(0.1)),
        nnx.ModelAndOptimizer(MLP(nnx.Rngs(0)), optax.sgd(0.1)),
    )
    for lr in (0.1, 0.05):
        ours.set_hyperparams(learning_rate=lr)
        theirs = nnx.ModelAndOptimizer(theirs.model, optax.sgd(lr))
        step(ours, X, Y)
        nnx.jit(train_step)(theirs, X, Y)
    assert traces == [1]
    assert_tree_allclose(nnx_params(ours.model), nnx_params(theirs.model), rtol=1e-6, atol=1e-7)


def test_nnx_optimizer_with_a_plain_transformation_is_flax_s() -> None:
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    nnx.jit(nnx_step)(model, optimizer, X, Y)
    assert int(optimizer.step[...]) == 1


def test_nnx_state_split_and_merge_carry_the_hyperparameters() -> None:
    # Checkpoints of nnx.state: test_flax_serialization.py (test_nnx_optimizer_round_trips).
    optimizer = Optimizer(MLP(nnx.Rngs(0)), opx.wrap(optax.adam, 0.05), wrt=nnx.Param)
    paths = key_paths(nnx.state(optimizer))
    assert any(p.startswith("['tx']['learning_rate']") for p in paths), paths
    graphdef, split = nnx.split(optimizer)
    merged = nnx.merge(graphdef, split)
    assert float(merged.hyperparams["learning_rate"]) == pytest.approx(0.05)
    assert float(merged.transformation.learning_rate) == pytest.approx(0.05)


def test_nnx_without_flax_is_a_clear_import_error() -> None:
    code = "import sys; sys.modules['flax'] = None\n"
    for module in ("optax_pytree.nnx", "optax_pytree.linen"):  # one fresh process for both
        code += f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)\n"
    out = run_in_fresh_python(code)
    assert "optax_pytree.nnx needs flax" in out
    assert "optax_pytree.linen needs flax" in out


# --------------------------------------------------------------------------
# flax.nnx: wrapped objects in flax's own nnx.Optimizer and in nnx modules.

with_state = opx.wrap_transformation_as_pytree_with_state
# Two steps at each learning rate.
TWICE = [lr for lr in LEARNING_RATES for _ in range(2)]


def test_nnx_stateful_optimizer_as_an_argument_of_nnx_jit() -> None:
    model = MLP(nnx.Rngs(0))
    opt = with_state(optax.adam, learning_rate=LEARNING_RATES[0]).init(nnx_params(model))

    def train_step(model: Any, opt: Any, x: Any, y: Any) -> Any:
        loss, grads = nnx.value_and_grad(nnx_loss)(model, x, y)
        params, opt = opt.apply_gradients(nnx.as_pure(grads), nnx_params(model))
        nnx.update(model, params)
        return loss, opt

    train_step, traces = counting_jit(train_step, jit=nnx.jit)

    for lr in LEARNING_RATES:
        opt = opt.replace(learning_rate=lr)
        for _ in range(2):
            _, opt = train_step(model, opt, X, Y)
    assert traces == [1]
    assert int(opt.state[0].count) == 6
    assert_tree_allclose(nnx_params(model), train_with_flax(TWICE)[0], rtol=1e-4, atol=1e-5)


def test_nnx_stateful_optimizer_held_as_nnx_data() -> None:
    class Trainer(nnx.Module):
        def __init__(self, model: Any, opt: Any):
            self.model = model
            # nnx.data: the optimizer's arrays are nnx state, not static config.
            self.opt = nnx.data(opt.init(nnx_params(model)))

    trainer = Trainer(MLP(nnx.Rngs(0)), with_state(optax.adam, learning_rate=LEARNING_RATES[0]))

    def train_step(trainer: Any, x: Any, y: Any) -> Any:
        loss, grads = nnx.value_and_grad(nnx_loss)(trainer.model, x, y)
        params, trainer.opt = trainer.opt.apply_gradients(nnx.as_pure(grads), nnx_params(trainer.model))
        nnx.update(trainer.model, params)
        return loss

    train_step, traces = counting_jit(train_step, jit=nnx.jit)

    for lr in LEARNING_RATES:
        trainer.opt = trainer.opt.replace(learning_rate=lr)
        for _ in range(2):
            train_step(trainer, X, Y)
    assert traces == [1]
    assert int(trainer.opt.state[0].count) == 6
    assert float(trainer.opt.learning_rate) == pytest.approx(LEARNING_RATES[-1])
    assert_tree_allclose(nnx_params(trainer.model), train_with_flax(TWICE)[0], rtol=1e-4, atol=1e-5)


def test_nnx_optimizer_with_its_tx_made_nnx_data() -> None:
    model = MLP(nnx.Rngs(0))
    tx = opx.wrap(optax.adam, learning_rate=LEARNING_RATES[0])
    optimizer = nnx.Optimizer(model, tx.build(), wrt=nnx.Param)  # the same state as tx's
    optimizer.tx = nnx.data(tx)  # the hyperparameters become nnx data: dynamic under nnx.jit
    step, traces = counting_jit(nnx_step, jit=nnx.jit)

    for lr in LEARNING_RATES:
        optimizer.tx = optimizer.tx.replace(learning_rate=lr)
        for _ in range(2):
            step(model, optimizer, X, Y)
    assert traces == [1]
    assert int(optimizer.step[...]) == 6
    assert_tree_allclose(nnx_params(model), train_with_flax(TWICE)[0], rtol=1e-4, atol=1e-5)


def _hijax_step(model: Any, optimizer: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    """flax's hijax training step (mutable_array_test.py): the update of the hijax parameters."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_fn(params: Any) -> jax.Array:
        return nnx_loss(nnx.merge(graphdef, params, rest), x, y)

    loss, grads = jax.value_and_grad(loss_fn)(nnx.with_vars(params, hijax=False))
    optimizer.update(params, grads)
    return loss


def _hijax_one_step(optimizer_class: Any, tx: Any) -> Any:
    """One jitted hijax step from a fresh model: its parameters, or the exception it raised."""
    with nnx.var_defaults(hijax=True):
        model = MLP(nnx.Rngs(0))
        try:
            jax.jit(_hijax_step)(model, optimizer_class(model, tx, wrt=nnx.Param), X, Y)
        except Exception as error:  # noqa: BLE001 - the reference's own failure is the expectation
            return error
    return nnx_params(model)


def test_nnx_optimizer_with_hijax_variables_under_jax_jit() -> None:
    # flax's mutable_array_test.py::TestOptimizer::test_optimize_hijax with the drop-in.
    # Hijax Variables are JAX types of their own: under jax.jit the optimizer's
    # Hyperparameter variables are tracers with no dtype (was AttributeError in the
    # fingerprint of the carried exact values). Plain flax is the reference: where
    # its own nnx.Optimizer with raw optax runs the step, the drop-in gives its
    # parameters bit for bit; where flax itself refuses it (flax 0.12.12 raises
    # ImmutableVariableError when nnx.update writes a non-ref hijax parameter
    # inside jax.jit, after the optimizer's update), the drop-in raises flax's
    # same error, not one of its own.
    expected = _hijax_one_step(nnx.Optimizer, optax.adam(LEARNING_RATES[0]))
    got = _hijax_one_step(Optimizer, dropin.adam(LEARNING_RATES[0]))
    if isinstance(expected, Exception):
        assert type(got) is type(expected) and str(got) == str(expected), (got, expected)
        pytest.skip(
            f"flax {flax.__version__} refuses its own hijax training step under jax.jit with plain "
            f"optax ({type(expected).__name__}); the drop-in raises the same error"
        )
    assert not isinstance(got, Exception), got
    assert_tree_allclose(got, expected, rtol=0, atol=0)  # one step: bit for bit

    step, traces = counting_jit(_hijax_step)
    with nnx.var_defaults(hijax=True):
        model = MLP(nnx.Rngs(0))
        optimizer = Optimizer(model, dropin.adam(LEARNING_RATES[0]), wrt=nnx.Param)
        hyperparameters = jax.tree_util.tree_leaves(nnx.state(optimizer, Hyperparameter))
        assert hyperparameters and all(v.hijax for v in hyperparameters)
        for lr in LEARNING_RATES:
            optimizer.set_hyperparams(learning_rate=lr)
            step(model, optimizer, X, Y)
    assert traces == [1]  # the hyperparameters stay dynamic
    assert int(optimizer.step[...]) == 3
    assert_tree_allclose(nnx_params(model), train_with_flax(LEARNING_RATES)[0])


# --------------------------------------------------------------------------
# flax.linen


def test_linen_train_state_keeps_hyperparameters_dynamic_and_equals_flax() -> None:
    step, traces = counting_jit(linen_step)
    state = linen_state(TrainState, opx.wrap(optax.adam, LEARNING_RATES[0]))
    reference = linen_state(train_state.TrainState, optax.adam(LEARNING_RATES[0]))
    for lr in LEARNING_RATES:
        state = step(state.replace(tx=state.tx.replace(learning_rate=lr)), X, Y)
        reference = jax.jit(linen_step)(reference.replace(tx=optax.adam(lr)), X, Y)
    assert traces == [1]
    assert int(state.step) == 3
    assert_tree_allclose(state.params, reference.params, rtol=1e-4, atol=1e-6)
    assert_tree_allclose(state.opt_state, reference.opt_state, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(state.tx.learning_rate), LEARNING_RATES[-1], rtol=1e-6)


def test_flax_train_state_treats_the_optimizer_as_static() -> None:
    # The problem the replacement solves: tx is a static field there.
    step, traces = counting_jit(linen_step)
    for lr in LEARNING_RATES:
        step(linen_state(train_state.TrainState, opx.wrap(optax.adam, lr)), X, Y)
    assert traces == [3]


def test_linen_train_state_with_a_plain_transformation_is_flax_s() -> None:
    # The same leaves, key paths and aux data as flax's: tx is static.
    tx = optax.adam(0.1)
    ours, theirs = linen_state(TrainState, tx), linen_state(train_state.TrainState, tx)
    assert key_paths(ours) == key_paths(theirs)
    assert key_paths(ours) == [
        ".step",
        ".params['bias']",
        ".params['kernel']",
        ".opt_state[0].count",
        ".opt_state[0].mu['bias']",
        ".opt_state[0].mu['kernel']",
        ".opt_state[0].nu['bias']",
        ".opt_state[0].nu['kernel']",
    ]
    assert_tree_allclose(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs), rtol=0, atol=0)
    # jit over the state: one trace per optimizer object, as flax's.
    for cls in (TrainState, train_state.TrainState):
        step, traces = counting_jit(linen_step)
        state = step(step(linen_state(cls, tx), X, Y), X, Y)
        state = step(state.replace(tx=optax.adam(0.05), opt_state=optax.adam(0.05).init(state.params)), X, Y)
        assert traces == [2], cls
        assert int(state.step) == 3
    # A wrapped tx in the same class: a child, its hyperparameters leaves.
    wrapped = linen_state(TrainState, opx.wrap(optax.adam, 0.1))
    assert key_paths(wrapped)[2:4] == [".params['kernel']", ".tx.learning_rate"]
    assert_tree_allclose(jax.jit(linen_step)(wrapped, X, Y).params, jax.jit(linen_step)(ours, X, Y).params)


def test_linen_train_state_under_flax_cursor() -> None:
    # Scenarios of flax's cursor tests, on flax's TrainState and ours.
    new_fn = lambda x: x + 1  # noqa: E731
    holders = [
        (train_state.TrainState, optax.adam(1e-3)),
        (TrainState, optax.adam(1e-3)),
        (TrainState, opx.wrap(optax.adam, 1e-3)),
    ]
    for cls, tx in holders:
        state = cls.create(apply_fn=lambda x: x, params={"a": 1, "b": (2, 3), "c": [4, 5]}, tx=tx)
        assert cursor(state).params["b"][0].set(10).params == {"a": 1, "b": (10, 3), "c": [4, 5]}
        c = cursor(state)
        c.apply_fn = new_fn
        c.params["b"][0] = 20
        c.params["a"] = (100, 200)
        built = c.build()
        assert type(built) is cls and built.apply_fn is new_fn and built.tx is state.tx
        assert built.params == {"a": (100, 200), "b": (20, 3), "c": [4, 5]}
        assert state.params == {"a": 1, "b": (2, 3), "c": [4, 5]}  # unchanged
        emptied = cursor(state).apply_update(lambda path, v: {} if "params" in path else v).build()
        assert emptied.params == {}
        found = list(cursor(state).find_all(lambda path, v: path.endswith("params")))
        assert len(found) == 1 and found[0]["b"].set(-1).params["b"] == -1
    # A wrapped tx is a NamedTuple to the cursor: a hyperparameter is set through replace.
    state = TrainState.create(apply_fn=lambda x: x, params={"w": jnp.ones(2)}, tx=opx.wrap(optax.adam, 1e-3))
    changed: Any = cursor(state).tx.learning_rate.set(0.5)
    assert float(changed.tx.learning_rate) == 0.5 and changed.tx.learning_rate.weak_type
    assert jax.tree_util.tree_structure(changed) == jax.tree_util.tree_structure(state)  # no recompilation


class _SpectralNormed(linen.Module):
    @linen.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        x = linen.SpectralNorm(linen.Dense(4))(x, update_stats=train)
        return linen.Dense(2)(linen.WeightNorm(linen.Dense(3))(x))


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain-tx", "wrapped-tx"])
def test_linen_train_state_subclass_with_batch_stats(wrapped: bool) -> None:
    # flax's spectral/weight norm test: a TrainState subclass with batch_stats, jitted.
    x, y = jax.random.normal(jax.random.key(1), (3, 4)), jax.random.normal(jax.random.key(2), (3, 2))
    variables = _SpectralNormed().init(jax.random.key(3), x, train=False)

    def make(base: Any, tx: Any) -> Any:
        class State(base):
            batch_stats: Any

        params, batch_stats = variables["params"], variables["batch_stats"]
        return State.create(apply_fn=_SpectralNormed().apply, params=params, batch_stats=batch_stats, tx=tx)

    def train_step(state: Any) -> tuple[Any, jax.Array]:
        def loss_fn(params: Any) -> tuple[jax.Array, Any]:
            out, updates = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats}, x, train=True, mutable=["batch_stats"]
            )
            return jnp.mean((out - y) ** 2), updates

        (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"]), loss

    step, traces = counting_jit(train_step)
    reference = make(train_state.TrainState, optax.adam(1e-2))
    state = make(TrainState, opx.wrap(optax.adam, 1e-2) if wrapped else optax.adam(1e-2))
    assert "batch_stats" in serialization.to_state_dict(state)
    losses = []
    for _ in range(4):
        state, loss = step(state)
        reference, _ = jax.jit(train_step)(reference)
        losses.append(float(loss))
    assert losses == sorted(losses, reverse=True), losses  # training
    assert traces == [1]
    tol = {"rtol": 1e-5, "atol": 1e-6} if wrapped else {"rtol": 0, "atol": 0}  # plain: flax's program
    assert_tree_allclose(state.params, reference.params, **tol)
    assert_tree_allclose(state.batch_stats, reference.batch_stats, **tol)


def test_linen_train_state_subclass_declared_the_old_way() -> None:
    # ``@struct.dataclass`` on a subclass (flax's older spelling) is accepted, as with flax.
    @struct.dataclass
    class State(TrainState):
        extra: Any = None

    state = linen_state(State, opx.wrap(optax.sgd, 0.1)).replace(extra=jnp.zeros(2))
    assert ".tx.learning_rate" in key_paths(state)
    # linen's keyless flatten (the dispatch path) is its keyed one without keys.
    for s in (state, linen_state(State, optax.sgd(0.1))):
        assert jax.tree_util.tree_structure(s) == jax.tree_util.tree_flatten_with_path(s)[1]
    assert jax.tree_util.tree_structure(jax.jit(lambda s: s)(state)) == jax.tree_util.tree_structure(state)


class _Original(linen.Module):
    @linen.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return linen.Dense(1)(x)


class _Wrong(linen.Module):  # one layer more than the checkpoint's
    @linen.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return linen.Dense(1)(linen.Dense(3)(x))


def test_linen_serialization_errors_are_flax_s() -> None:
    # flax's serialization test: restoring into a target of another model.
    def error(cls: Any, tx: Any) -> str:
        def state(module: Any) -> Any:
            return cls.create(apply_fn=module.apply, params=module.init(jax.random.key(1), X), tx=tx)

        with pytest.raises(ValueError) as raised:
            serialization.from_bytes(state(_Wrong()), serialization.to_bytes(state(_Original())))
        return str(raised.value)

    expected = error(train_state.TrainState, optax.sgd(0.1, momentum=0.9))
    assert expected == (
        "The target dict keys and state dict keys do not match, target dict contains keys {'Dense_1'} "
        "which are not present in state dict at path ./params/params"
    )
    assert error(TrainState, optax.sgd(0.1, momentum=0.9)) == expected
    # A wrapped tx: the same message (params are restored first).
    assert error(TrainState, opx.wrap(optax.sgd, 0.1, momentum=0.9)) == expected
    # A flax checkpoint (no tx in it) into a state with a wrapped tx: the field is named.
    plain = linen_state(TrainState, optax.sgd(0.1))
    with pytest.raises(
        ValueError, match="Missing field tx in state dict while restoring an instance of TrainState"
    ):
        serialization.from_bytes(
            linen_state(TrainState, opx.wrap(optax.sgd, 0.1)), serialization.to_bytes(plain)
        )
    # And the other way round, as flax's unknown field.
    with pytest.raises(ValueError, match=r'Unknown field\(s\) "tx" in state dict'):
        serialization.from_bytes(
            plain, serialization.to_bytes(linen_state(TrainState, opx.wrap(optax.sgd, 0.1)))
        )
    # Into another factory: the wrapped object names what differs.
    with pytest.raises(ValueError, match=r"dynamic arguments of optax\.adam and the state dict do not match"):
        serialization.from_state_dict(
            opx.wrap(optax.adam, 0.1), serialization.to_state_dict(opx.wrap(optax.sgd, 0.1))
        )


def test_linen_train_state_vmaps_over_a_population() -> None:
    batch = opx.stack([opx.wrap(optax.sgd, lr) for lr in LEARNING_RATES])
    states = jax.vmap(lambda tx: linen_state(TrainState, tx))(batch)
    states = jax.jit(jax.vmap(linen_step, in_axes=(0, None, None)))(states, X, Y)
    # Like with like: plain optax's own population (inject_hyperparams, the learning rate an
    # argument), through the same vmapped program (a TPU's batched matrix products differ from
    # one model's at its default precision).
    plain = jax.vmap(
        lambda lr: linen_state(train_state.TrainState, optax.inject_hyperparams(optax.sgd)(learning_rate=lr))
    )(jnp.asarray(LEARNING_RATES))
    expected = jax.jit(jax.vmap(linen_step, in_axes=(0, None, None)))(plain, X, Y)
    assert_tree_allclose(states.params, expected.params)


# --------------------------------------------------------------------------
# flax.nnx sweeps, as the optax_pytree.nnx docs show them.

SWEEP = (0.05, 0.03, 0.02, 0.01)


class PooledMLP(MLP):
    """Holds a ``functools.partial``, as flax's tutorial CNN does: each object has its own graphdef."""

    def __init__(self, rngs: Any):
        super().__init__(rngs)
        self.pool = functools.partial(nnx.avg_pool, window_shape=(1,), strides=(1,))

    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(self.pool(x[..., None])[..., 0])


@functools.cache
def _train_alone(lr: float, steps: int) -> Any:
    """One learning rate with flax and raw optax: the reference of a sweep (shared by its tests)."""
    return train_with_flax([lr] * steps, model=PooledMLP(nnx.Rngs(0)))


def test_nnx_sweep_compiles_once_with_one_model_reset_between_values() -> None:
    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    # New objects per value: a new graphdef each (the partial), so a trace each,
    # whatever the optimizer. flax's doing; the docs say so.
    for lr in SWEEP:
        model = PooledMLP(nnx.Rngs(0))
        step(model, Optimizer(model, opx.wrap(optax.adam, lr), wrt=nnx.Param), X, Y)
    assert traces == [len(SWEEP)]

    # The way that compiles once: one model and optimizer, reset, set_hyperparams.
    step, traces = counting_jit(nnx_step, jit=nnx.jit)
    model = PooledMLP(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adam, 1e-3), wrt=nnx.Param)
    initial = nnx.clone(nnx.state((model, optimizer)))
    for lr in SWEEP:
        nnx.update((model, optimizer), initial)
        optimizer.set_hyperparams(learning_rate=lr)
        losses = jnp.stack([step(model, optimizer, X, Y) for _ in range(3)])
        expected_params, expected_losses = _train_alone(lr, 3)
        assert int(optimizer.step[...]) == 3  # the reset took
        assert_tree_allclose(losses, expected_losses, rtol=1e-4, atol=1e-6)
        assert_tree_allclose(nnx_params(model), expected_params, rtol=1e-4, atol=1e-6)
    assert traces == [1]


def test_nnx_vmapped_population_equals_the_loop() -> None:
    steps = 3
    batch, labels = opx.grid(opx.wrap(optax.adam, 1e-3), learning_rate=SWEEP)
    expected = [_train_alone(label["learning_rate"], steps) for label in labels]

    # nnx.vmap: one model and optimizer per member, one compiled step for all.
    @nnx.vmap(in_axes=0)
    def create(tx: Any) -> Any:
        model = PooledMLP(nnx.Rngs(0))
        return model, Optimizer(model, tx, wrt=nnx.Param)

    models, optimizers = create(batch)
    population_step, traces = counting_jit(nnx.vmap(nnx_step, in_axes=(0, 0, None, None)), jit=nnx.jit)
    losses = jnp.stack([population_step(models, optimizers, X, Y) for _ in range(steps)], axis=1)
    assert traces == [1]
    np.testing.assert_allclose(optimizers.tx.learning_rate[...], SWEEP, rtol=1e-7)
    for i, (params, member_losses) in enumerate(expected):
        assert_tree_allclose(losses[i], member_losses, rtol=1e-4, atol=1e-6)
        member = jax.tree_util.tree_map(lambda x, i=i: x[i], nnx_params(models))
        assert_tree_allclose(member, params, rtol=1e-4, atol=1e-6)

    # The functional API: jax.vmap over the members' states (split/merge).
    def create_state(tx: Any) -> Any:
        model = PooledMLP(nnx.Rngs(0))
        return nnx.state((model, Optimizer(model, tx, wrt=nnx.Param)))

    model = PooledMLP(nnx.Rngs(0))
    graphdef = nnx.graphdef((model, Optimizer(model, opx.wrap(optax.adam, 1e-3), wrt=nnx.Param)))
    states = jax.vmap(create_state)(batch)

    @functools.partial(jax.vmap, in_axes=(0, None, None))
    def functional_step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        model, optimizer = nnx.merge(graphdef, state)
        loss = nnx_step(model, optimizer, x, y)
        return nnx.state((model, optimizer)), loss

    functional_step, traces = counting_jit(functional_step)
    functional_losses = []
    for _ in range(steps):
        states, loss = functional_step(states, X, Y)
        functional_losses.append(loss)
    assert traces == [1]
    assert_tree_allclose(jnp.stack(functional_losses, axis=1), losses, rtol=1e-6, atol=1e-7)
    merged_model, _ = nnx.merge(graphdef, states)
    assert_tree_allclose(nnx_params(merged_model), nnx_params(models), rtol=1e-6, atol=1e-7)


def test_nnx_errors_say_the_fix() -> None:
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(model, opx.wrap(optax.adam, 1e-3), wrt=nnx.Param)
    # An unknown name: the same exception as wrap, replace and grid give, in set_hyperparams' words.
    with pytest.raises(TypeError) as raised:
        optimizer.set_hyperparams(lr=0.1)
    message = str(raised.value)
    assert message.startswith("Optimizer.set_hyperparams: optax.adam has no argument 'lr'")
    assert "did you mean 'learning_rate'?" in message and "replace" not in message
    assert type(raised.value).__name__ == "UnknownArgumentError" and isinstance(raised.value, ValueError)
    # grid over optimizer.tx (nnx variables): short, and names what to pass.
    with pytest.raises(TypeError) as raised:
        opx.grid(optimizer.tx, learning_rate=SWEEP)
    message = str(raised.value)
    assert "pass optimizer.transformation" in message and len(message) < 400, message
    batch, _ = opx.grid(optimizer.transformation, learning_rate=SWEEP)  # the fix works
    assert batch.learning_rate.shape == (len(SWEEP),)
    # set_hyperparams on a plain transformation: how to wrap.
    plain = Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    with pytest.raises(TypeError, match=r"opx\.wrap\(optax\.adam, learning_rate=1e-3\)"):
        plain.set_hyperparams(learning_rate=0.1)
