"""Sweeps: grid / stack / unstack / index / shard, vmap and grad over populations."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import PARAMS, assert_tree_allclose, counting_jit, loss, run_steps, run_with_8_host_devices

import optax_pytree as opx

LEARNING_RATES = [0.3, 0.1, 0.03, 0.01]
B1S = [0.9, 0.5]


def train(tx: Any, params: Any) -> Any:
    """Final parameters and loss after a few steps of ``tx`` on the helpers' problem."""
    params = run_steps(tx, params, steps=4)[0]
    return params, loss(params)


def structure(x: Any) -> Any:
    return jax.tree_util.tree_structure(x)


def chain() -> Any:
    """A nested configuration: clipping, then Adam with a wrapped schedule as learning rate."""
    schedule = opx.wrap(optax.linear_schedule, 0.1, 0.01, 10)
    return opx.wrap(optax.chain, opx.wrap(optax.clip_by_global_norm, 1.0), opx.wrap(optax.adam, schedule))


# --------------------------------------------------------------------------
# grid / stack / unstack / index.


def test_grid_is_the_cartesian_product_with_labels() -> None:
    base = opx.wrap(optax.adam, learning_rate=1e-3, b2=0.99)
    batch, labels = opx.grid(base, learning_rate=LEARNING_RATES, b1=B1S)
    assert labels == [{"learning_rate": lr, "b1": b1} for lr in LEARNING_RATES for b1 in B1S]
    n = len(labels)
    assert structure(batch) == structure(base)
    assert all(getattr(batch, a).shape == (n,) for a in batch.dynamic_argnames)  # b2... broadcast
    # Each member's 1 - b1, 1 - b2 and their fingerprint; its log2(b1), log2(b2) (what a TPU's
    # compiler folds for the bias correction) and theirs.
    assert batch.exact[0].shape == (n, 6)
    for i, label in enumerate(labels):
        member = opx.index(batch, i)
        expected = base.replace(**label)
        assert structure(member) == structure(expected)
        assert_tree_allclose(member, expected, rtol=0, atol=0)


def test_stack_unstack_index_round_trip() -> None:
    members = [opx.wrap(optax.adam, lr, b1=b1) for lr in LEARNING_RATES for b1 in B1S]
    batch = opx.stack(members)
    assert batch.learning_rate.shape == (len(members),)
    back = opx.unstack(batch)
    assert len(back) == len(members)
    for a, b in zip(back, members):
        assert structure(a) == structure(b)
        assert_tree_allclose(a, b, rtol=0, atol=0)
    assert_tree_allclose(opx.index(batch, -1), members[-1], rtol=0, atol=0)
    sub = opx.index(batch, jnp.array([3, 3, 0]))  # a sub-population, members repeated
    assert sub.learning_rate.shape == (3,)
    assert_tree_allclose(opx.unstack(sub)[1], members[3], rtol=0, atol=0)
    assert_tree_allclose(opx.index(batch, slice(2, 4)), opx.stack(members[2:4]), rtol=0, atol=0)
    assert_tree_allclose(opx.stack(opx.unstack(batch)), batch, rtol=0, atol=0)


def test_weak_types_survive_so_a_member_shares_the_unbatched_compilation() -> None:
    def step(tx: Any, params: Any) -> Any:
        updates, _ = tx.update(params, tx.init(params), params)
        return optax.apply_updates(params, updates)

    step, traces = counting_jit(step)

    batch, _ = opx.grid(opx.wrap(optax.adam, 0.1), learning_rate=[0.1, 0.2], b1=[0.9, 0.5])
    assert all(leaf.weak_type for leaf in jax.tree_util.tree_leaves(batch))
    step(opx.wrap(optax.adam, 0.1), PARAMS)
    step(opx.index(batch, 3), PARAMS)
    for member in opx.unstack(batch):
        step(member, PARAMS)
    assert traces == [1]
    # A dtype chosen on purpose is kept.
    explicit = opx.stack([opx.wrap(optax.sgd, jnp.bfloat16(0.1)) for _ in range(2)])
    assert explicit.learning_rate.dtype == jnp.bfloat16


def test_grid_over_nested_children_by_path() -> None:
    base = chain()
    paths = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(base)[0]}
    assert ".args[1].learning_rate.init_value" in paths
    batch, labels = opx.grid(
        base, {"args[1].learning_rate.init_value": [0.1, 0.2, 0.3], ".args[0].max_norm": [1.0, 5.0]}
    )
    assert len(labels) == 6 and labels[1] == {
        "args[1].learning_rate.init_value": 0.1,
        ".args[0].max_norm": 5.0,
    }
    # Every leaf has the batch axis (the carried host values a vector per member).
    assert all(leaf.shape[:1] == (6,) for leaf in jax.tree_util.tree_leaves(batch))
    member = opx.index(batch, 5)
    expected = base.replace(
        args=(
            base.args[0].replace(max_norm=5.0),
            base.args[1].replace(learning_rate=base.args[1].learning_rate.replace(init_value=0.3)),
        )
    )
    assert structure(member) == structure(expected)
    assert_tree_allclose(member, expected, rtol=0, atol=0)

    # Values may be wrapped objects (here whole schedules) sharing the static configuration.
    schedules = [opx.wrap(optax.linear_schedule, v, 0.01, 10) for v in (0.1, 0.5)]
    batch, _ = opx.grid(base, {"args[1].learning_rate": schedules})
    np.testing.assert_allclose(batch.args[1].learning_rate.init_value, [0.1, 0.5])

    # Dict children: multi_transform's transforms.
    multi = opx.wrap(
        optax.multi_transform,
        {"fast": opx.wrap(optax.adam, 0.05), "slow": opx.wrap(optax.sgd, 0.01)},
        {"b": "slow", "w": "fast"},
    )
    batch, _ = opx.grid(
        multi, {"transforms['fast'].b1": [0.9, 0.8], 'transforms["slow"].learning_rate': [1.0]}
    )
    np.testing.assert_allclose(batch.transforms["fast"].b1, [0.9, 0.8])
    np.testing.assert_allclose(batch.transforms["slow"].learning_rate, [1.0, 1.0])


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: opx.grid(chain(), {"args[1].nesterov": [True, False]}),
            ValueError,
            r"'nesterov' of optax\.adam is static",
        ),
        (
            lambda: opx.grid(opx.wrap(optax.chain, opx.wrap(optax.lbfgs)), {"args[0].memory_size": [5, 6]}),
            ValueError,
            r"'memory_size' of optax\.lbfgs is static \(found by automatic detection\)",
        ),
        (lambda: opx.grid(chain(), {"args[1].lr": [0.1]}), ValueError, r"optax\.adam has no argument 'lr'"),
        (lambda: opx.grid(chain(), {"args[5].b1": [0.1]}), ValueError, r"no '\[5\]' in a tuple of 2 items"),
        (lambda: opx.grid(chain(), {"args[1]..b1": [0.1]}), ValueError, r"cannot read the path"),
        (lambda: opx.grid(chain(), {"args[1].b1": []}), ValueError, r"'args\[1\].b1' has no values"),
        (
            lambda: opx.grid(
                chain(), {"args[1].learning_rate": [0.1], "args[1].learning_rate.init_value": [1.0]}
            ),
            ValueError,
            r"overlap",
        ),
        (
            lambda: opx.grid(chain(), {"args[1].learning_rate": [0.1]}),
            ValueError,
            r"'args\[1\]\.learning_rate' is wrap\(optax\.linear_schedule, \.\.\.\) in one and a dynamic",
        ),
        (lambda: opx.grid(optax.adam(0.1), learning_rate=[0.1]), TypeError, r"plain optax transformation"),
        (
            lambda: opx.grid(0.1, learning_rate=[0.1]),
            TypeError,
            r"expects a wrapped transformation or schedule",
        ),
        (lambda: opx.stack([{"f": print}]), TypeError, r"leaf \"\['f'\]\" of member 0 is <built-in function"),
        (
            lambda: opx.stack([opx.wrap(optax.sgd, 0.1), opx.wrap(optax.sgd, 0.2, nesterov=True)]),
            ValueError,
            r"member 1 does not share .*: static argument 'nesterov' of optax\.sgd: False vs True",
        ),
        (
            lambda: opx.stack([chain(), chain().replace(args=(chain().args[0], opx.wrap(optax.adam, 0.1)))]),
            ValueError,
            r"'args\[1\]\.learning_rate' is wrap\(optax\.linear_schedule, \.\.\.\) in one and a dynamic",
        ),
        (
            lambda: opx.stack([opx.wrap(optax.adam, 0.1), opx.wrap(optax.sgd, 0.1)]),
            ValueError,
            r"optax\.adam in one and optax\.sgd in the other",
        ),
        (
            lambda: opx.stack([opx.wrap(optax.sgd, 0.1), opx.wrap(optax.sgd, jnp.ones(2))]),
            ValueError,
            r"leaf 'learning_rate' has shape \(\) in the first and \(2,\)",
        ),
        (lambda: opx.stack([]), ValueError, r"no members"),
        (lambda: opx.index(opx.stack([opx.wrap(optax.sgd, 0.1)] * 3), 3), IndexError, r"out of range"),
        (lambda: opx.unstack(opx.wrap(optax.sgd, 0.1)), ValueError, r"'learning_rate' is a scalar"),
        (
            lambda: opx.shard(
                opx.stack([opx.wrap(optax.sgd, 0.1)] * 2),
                jax.sharding.Mesh(np.array(jax.devices()), ("x",)),
                "y",
            ),
            ValueError,
            r"'y' is not an axis of the mesh",
        ),
    ],
)
def test_bad_input(call: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()


untyped: Any = opx  # calls that the type checker rightly refuses
HOW_TO_WRAP = r"opx\.wrap\(optax\.adam, learning_rate=1e-3\)"


@pytest.mark.parametrize(
    "call",
    [
        lambda: opx.stack([optax.adam(1e-3), optax.adam(1e-2)]),
        lambda: opx.grid(optax.adam(1e-3), learning_rate=[1e-3, 1e-2]),
        lambda: opx.wrap(optax.adam(1e-3)),  # pyright: ignore[reportArgumentType, reportCallIssue]
    ],
    ids=["stack", "grid", "wrap"],
)
def test_a_plain_transformation_is_an_error_that_says_how_to_wrap(call: Any) -> None:
    # Not JAX's "stack requires ndarray or scalar arguments": what is wrong, then the fix.
    with pytest.raises(
        TypeError, match=r"plain optax transformation.*hidden in its closures.*" + HOW_TO_WRAP
    ):
        call()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: untyped.wrap(optax.adam, lr=1e-3), r"optax\.adam: unknown argument 'lr'"),
        (
            lambda: untyped.wrap(optax.chain, opx.wrap(optax.sgd, 0.1), lr=1e-3),
            r"optax\.chain: unknown argument 'lr'; its arguments are \['\*args'\]",
        ),
        (lambda: opx.wrap(optax.adam, 1e-3, static_argnames="lr"), r"static_argnames names 'lr'"),
        (
            lambda: opx.wrap(optax.adam, 1e-3).replace(lr=1e-4),
            r"optax\.adam: replace\(\) got unknown argument 'lr'",
        ),
        (
            lambda: opx.grid(opx.wrap(optax.adam, 1e-3), lr=[1e-4]),
            r"grid: path 'lr': optax\.adam has no argument 'lr'",
        ),
        (
            lambda: opx.wrap_transformation_as_pytree_with_state(optax.adam, 1e-3).replace(lr=1e-4),
            r"replace\(\) got unknown argument 'lr'",
        ),
    ],
    ids=["wrap", "wrap-varargs", "static_argnames", "replace", "grid", "with-state-replace"],
)
def test_an_unknown_name_is_one_exception_everywhere(call: Any, message: str) -> None:
    # One class, both a TypeError (as wrap raised) and a ValueError (as replace
    # and grid raised), so that callers catching either keep working.
    with pytest.raises(TypeError, match=message) as raised:
        call()
    assert type(raised.value).__name__ == "UnknownArgumentError"
    assert isinstance(raised.value, ValueError)
    if "'lr'" in str(raised.value) and "learning_rate" in str(raised.value):
        assert "did you mean 'learning_rate'?" in str(raised.value)


def test_a_static_difference_that_cannot_be_named_is_short() -> None:
    # Two pytrees whose only difference is deep inside a custom node: the
    # message shows both structures, clipped, not two pages of treedef.
    a = {"x": jnp.ones(2), "f": jax.tree_util.Partial(print, *range(50))}
    b = {"x": jnp.ones(2), "f": jax.tree_util.Partial(print, *range(51))}
    with pytest.raises(ValueError, match=r"does not share the static configuration") as raised:
        opx.stack([a, b])
    assert len(str(raised.value)) < 600, str(raised.value)


# --------------------------------------------------------------------------
# The sweep: vmap, one compilation, sharding.


def test_vmapped_sweep_equals_the_loop_and_compiles_once() -> None:
    def sweep(batch: Any, params: Any) -> Any:
        return jax.vmap(train, in_axes=(0, None))(batch, params)

    sweep, traces = counting_jit(sweep)

    base = opx.wrap(optax.adam, learning_rate=1e-3)
    batch, labels = opx.grid(base, learning_rate=LEARNING_RATES, b1=B1S)
    params, losses = sweep(batch, PARAMS)
    for i, label in enumerate(labels):
        raw_params, raw_loss = train(optax.adam(**label), PARAMS)  # raw optax, one config at a time
        # Adam's first steps are ~ lr * sign(g): float32 round-off, amplified a little.
        assert_tree_allclose(opx.index(params, i), raw_params, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(losses[i], raw_loss, rtol=1e-4)
    # Another grid of the same size, another base value: the same program.
    other, _ = opx.grid(base.replace(eps=1e-6), learning_rate=[1.0, 2.0], b1=[0.1, 0.2, 0.3, 0.4])
    sweep(other, PARAMS)
    assert traces == [1]


SHARDED_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np, optax
import optax_pytree as opx
from helpers import PARAMS, assert_tree_allclose, loss, run_steps

assert len(jax.devices()) == 8, jax.devices()

def train(tx, params):
    params = run_steps(tx, params, steps=4)[0]
    return params, loss(params)

sweep = jax.jit(jax.vmap(train, in_axes=(0, 0)))
batch, labels = opx.grid(opx.wrap(optax.adam, 1e-3), learning_rate=np.geomspace(1e-3, 1.0, 8), b1=[0.9, 0.5])
assert len(labels) == 16
params = opx.stack([PARAMS] * 16)  # per-member parameters, batched like the optimizer
expected = sweep(batch, params)

mesh = jax.sharding.Mesh(np.array(jax.devices()), ("pop",))
sharded_batch, sharded_params = opx.shard(batch, mesh, "pop"), opx.shard(params, mesh, "pop")
assert sharded_batch.learning_rate.sharding.spec == jax.sharding.PartitionSpec("pop")
assert len(sharded_batch.learning_rate.addressable_shards) == 8
assert sharded_batch.learning_rate.addressable_shards[0].data.shape == (2,)
assert sharded_batch.learning_rate.weak_type
got = sweep(sharded_batch, sharded_params)
# The outputs stay spread over the eight devices, two members each.
assert len(got[1].sharding.device_set) == 8, got[1].sharding
assert got[1].addressable_shards[0].data.shape == (2,)
assert_tree_allclose(got, expected)
try:
    opx.shard(opx.index(batch, slice(0, 12)), mesh, "pop")
except ValueError as e:
    assert "does not split evenly over the 8 devices" in str(e), e
else:
    raise AssertionError("no error for 12 members over 8 devices")
print("OK")
"""


def test_sharded_sweep_equals_the_unsharded_one() -> None:
    assert run_with_8_host_devices(SHARDED_SCRIPT).strip().endswith("OK")


# --------------------------------------------------------------------------
# Meta-gradients.


def unrolled_loss(tx: Any) -> Any:
    """The loss after a few steps, differentiated through all of them: a function of the hyperparameters."""
    return loss(run_steps(tx, PARAMS, steps=5)[0])


def test_meta_gradient_matches_central_finite_differences() -> None:
    # float32 throughout: a relative step of 1e-2 keeps the round-off of the
    # difference (~1e-7 / 1e-2 of the loss) well below the 1 % tolerance, and
    # the truncation error (the step squared) too.
    tx = opx.wrap(optax.adam, learning_rate=0.05, b1=0.8)
    grads = jax.jit(jax.grad(unrolled_loss))(tx)
    assert structure(grads) == structure(tx)  # the gradient is a wrapped adam too
    f = jax.jit(unrolled_loss)
    for name in ("learning_rate", "b1"):
        value = float(getattr(tx, name))
        h = 1e-2 * value
        fd = (f(tx.replace(**{name: value + h})) - f(tx.replace(**{name: value - h}))) / (2 * h)
        np.testing.assert_allclose(getattr(grads, name), fd, rtol=1e-2, err_msg=name)
        assert abs(float(fd)) > 1e-3  # a gradient worth comparing


def test_meta_gradients_of_a_whole_population() -> None:
    batch, labels = opx.grid(opx.wrap(optax.adam, 0.05), learning_rate=[0.05, 0.02], b1=[0.8, 0.5])
    grads = jax.jit(jax.vmap(jax.grad(unrolled_loss)))(batch)
    assert structure(grads) == structure(batch)
    grad_one = jax.jit(jax.grad(unrolled_loss))  # one compilation for every member
    for i, label in enumerate(labels):
        one = grad_one(opx.wrap(optax.adam, **label))
        # Compared where float32 is well conditioned: d/d b2 and d/d eps go through
        # 1 - b2**t and sqrt(v) + eps, which cancel catastrophically after a few steps.
        for name in ("learning_rate", "b1"):
            np.testing.assert_allclose(getattr(opx.index(grads, i), name), getattr(one, name), rtol=1e-4)
