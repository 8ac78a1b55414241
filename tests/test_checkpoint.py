"""Checkpoints of the stateful optimizer with orbax: save, restore, train on bit-identically."""

from __future__ import annotations

import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import PARAMS, apply_gradients, counting_jit, run_in_fresh_python, run_in_warm_python

import optax_pytree as opx

ocp = pytest.importorskip("orbax.checkpoint")

with_state = opx.wrap_transformation_as_pytree_with_state


def _make_step() -> tuple[Any, list[int]]:
    """A jitted training step of a stateful optimizer, and its trace counter."""
    return counting_jit(apply_gradients)


def _train(step: Any, opt: Any, params: Any, n: int) -> tuple[Any, Any]:
    for _ in range(n):
        params, opt = step(opt, params)
    return opt, params


def _make_opt() -> Any:
    return with_state(
        optax.chain,
        opx.wrap(optax.clip_by_global_norm, 1.0),
        opx.wrap(optax.adamw, opx.wrap(optax.cosine_decay_schedule, 0.05, 20), mask={"b": False, "w": True}),
    )


def _assert_bitwise_equal(a: Any, b: Any) -> None:
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_plain_orbax_round_trip_trains_on_bit_identically(tmp_path: Any) -> None:
    step, _ = _make_step()
    uninterrupted, params_u = _train(step, _make_opt().init(PARAMS), PARAMS, 6)

    opt, params = _train(step, _make_opt().init(PARAMS), PARAMS, 3)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "opt", opt)
    checkpointer.save(tmp_path / "params", params)
    checkpointer.wait_until_finished()

    # A fresh process would build the template the same way; only its
    # structure, shapes and dtypes matter (eval_shape allocates nothing).
    template = jax.eval_shape(_make_opt().init, PARAMS)
    restored = checkpointer.restore(tmp_path / "opt", template)
    params = checkpointer.restore(tmp_path / "params", jax.eval_shape(lambda: PARAMS))
    checkpointer.close()
    assert int(restored.state[1][0].count) == 3
    _assert_bitwise_equal(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(opt))

    resumed, params_r = _train(step, restored, params, 3)
    _assert_bitwise_equal(params_r, params_u)
    _assert_bitwise_equal(jax.tree_util.tree_leaves(resumed), jax.tree_util.tree_leaves(uninterrupted))


def test_plain_orbax_does_not_check_the_static_configuration(tmp_path: Any) -> None:
    # Why the signature exists: static arguments are aux data, which orbax
    # neither saves nor compares, so this restore succeeds silently.
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "opt", opt)
        checkpointer.wait_until_finished()
        other = jax.eval_shape(with_state(optax.adam, learning_rate=0.05, nesterov=True).init, PARAMS)
        restored = checkpointer.restore(tmp_path / "opt", other)
    assert restored.nesterov is True


def test_save_and_restore_checkpoint(tmp_path: Any) -> None:
    step, traces = _make_step()
    uninterrupted, params_u = _train(step, _make_opt().init(PARAMS), PARAMS, 6)
    assert traces[0] == 1

    opt, params = _train(step, _make_opt().init(PARAMS), PARAMS, 3)
    state = {"opt": opt, "params": params, "step": jnp.asarray(3)}
    opx.save_checkpoint(tmp_path / "ckpt", state)

    template = {"opt": _make_opt().init(PARAMS), "params": PARAMS, "step": jnp.asarray(0)}
    restored = opx.restore_checkpoint(tmp_path / "ckpt", template)
    assert int(restored["step"]) == 3
    # Weak types are restored from the template: the jitted step does not retrace.
    assert restored["opt"].transformation.args[0].max_norm.weak_type
    resumed, params_r = _train(step, restored["opt"], restored["params"], 3)
    assert traces[0] == 1
    _assert_bitwise_equal(params_r, params_u)
    _assert_bitwise_equal(resumed, uninterrupted)


# What a user's script does: trace the step, and only then save and restore.
_RESUME = """
import os, tempfile
import jax, optax
from helpers import PARAMS, apply_gradients, counting_jit
import optax_pytree as opx

compiles = [0]
def count(event, *args, **kwargs):
    compiles[0] += event == "/jax/core/compile/backend_compile_duration"
jax.monitoring.register_event_duration_secs_listener(count)

def make():
    return opx.wrap_transformation_as_pytree_with_state(optax.adam, 0.05).init(PARAMS)

step, traces = counting_jit(apply_gradients)
params, opt = step(make(), PARAMS)
with tempfile.TemporaryDirectory() as directory:
    opx.save_checkpoint(os.path.join(directory, "ckpt"), {"opt": opt, "params": params})
    restored = opx.restore_checkpoint(os.path.join(directory, "ckpt"), {"opt": make(), "params": PARAMS})
before = compiles[0]
step(restored["opt"], restored["params"])
print(f"traces {traces[0]}, compiles after the restore {compiles[0] - before}")
"""


def test_a_restored_optimizer_reuses_the_compiled_step() -> None:
    # A new process (orbax is not among what its server preloaded): this one
    # imported orbax above, before any trace. Here
    # orbax is first imported by save_checkpoint, after the step's trace; on
    # jax >= 0.12 that import adds options to the trace context (see
    # optax_pytree/_checkpoint.py), which used to retrace every jitted
    # function once; and restored arrays placed by orbax (committed) where the
    # step had uncommitted ones used to compile it again.
    assert run_in_warm_python(_RESUME).strip() == "traces 1, compiles after the restore 0"


_IMPORT = """
import os, sys, tempfile
import jax, jax.numpy as jnp, optax
import optax_pytree as opx

def loaded():
    return sorted({m.split(".")[0] for m in sys.modules} & {"orbax", "tensorstore"})

opt = opx.wrap(optax.sgd, 0.1)
print("after building an optimizer:", loaded())
traces = [0]
@jax.jit
def f(opt, x):
    traces[0] += 1
    return opt.update(x, opt.init(x))[0]
f(opt, jnp.ones(3))
with tempfile.TemporaryDirectory() as directory:
    opx.save_checkpoint(os.path.join(directory, "ckpt"), {"opt": opt})
print("after the first save:", loaded())
f(opt, jnp.ones(3))
print("traces:", traces[0])
"""


def test_orbax_is_imported_at_the_first_checkpoint_and_retraces_nothing() -> None:
    # Importing orbax (tensorstore, etils) costs more than importing optax, so
    # the first save imports it, after the user's step was traced; on jax >=
    # 0.12 its imports define configuration states of JAX's trace context,
    # which optax_pytree sets before the first wrapped optimizer is made
    # (optax_pytree/_trace_context.py), so the step is not retraced.
    # benchmarks/import_time.py measures the import.
    assert run_in_fresh_python(_IMPORT).strip().splitlines() == [
        "after building an optimizer: []",
        "after the first save: ['orbax', 'tensorstore']",
        "traces: 1",
    ]


_NO_ORBAX = """
import sys
sys.modules["orbax.checkpoint"] = None  # importing it raises ImportError, as if not installed
import optax, optax_pytree as opx
opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, 0.05)
print(opx.checkpoint_signature(opt)[""])  # needs no orbax
try:
    opx.save_checkpoint("unused", opt)
except ImportError as e:
    print(type(e).__name__, str(e).split(";")[0])
"""


def test_without_orbax_only_saving_and_restoring_fail() -> None:
    assert run_in_fresh_python(_NO_ORBAX).strip().splitlines() == [
        "with_state(uninitialized)",
        "ImportError optax_pytree checkpoints need orbax-checkpoint (pip install orbax-checkpoint)",
    ]


def test_restore_into_an_abstract_template(tmp_path: Any) -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    opx.save_checkpoint(str(tmp_path / "ckpt"), opt)
    restored = opx.restore_checkpoint(str(tmp_path / "ckpt"), jax.eval_shape(opt.init, PARAMS))
    _assert_bitwise_equal(restored, opt)


@pytest.mark.parametrize(
    "template,message",
    [
        (
            lambda: with_state(optax.adam, 0.05, nesterov=True).init(PARAMS),
            r"\.transformation: saved optax.adam\(mu_dtype=None, nesterov=False\), "
            r"template optax.adam\(mu_dtype=None, nesterov=True\)",
        ),
        (
            lambda: with_state(optax.sgd, 0.05, momentum=0.9).init(PARAMS),
            r"\.transformation: saved optax.adam\(.*\), template optax.sgd\(",
        ),
        (
            lambda: with_state(optax.adam, 0.05).init({"b": jnp.ones(5), "w": PARAMS["w"]}),
            r"\.state\[0\]\.mu\['b'\]: saved float32\[3\], template float32\[5\]",
        ),
        (
            lambda: with_state(optax.adam, 0.05, mu_dtype=jnp.bfloat16).init(PARAMS),
            r"mu_dtype=None.*mu_dtype=.*bfloat16",
        ),
        (
            lambda: with_state(optax.adam, 0.05, static_argnames="b1").init(PARAMS),
            r"\.transformation\.b1: saved float32\[\], not in the template",
        ),
        (lambda: with_state(optax.adam, 0.05), r"saved with_state\(initialized\), template with_state"),
    ],
    ids=["static-argument", "factory", "shape", "dtype", "static-vs-dynamic", "uninitialized"],
)
def test_restore_refuses_another_static_configuration(tmp_path: Any, template: Any, message: str) -> None:
    opx.save_checkpoint(tmp_path / "ckpt", with_state(optax.adam, learning_rate=0.05).init(PARAMS))
    with pytest.raises(
        ValueError, match="was saved from another static configuration than the template"
    ) as e:
        opx.restore_checkpoint(tmp_path / "ckpt", template())
    assert e.match(message)


def test_restore_needs_a_signature(tmp_path: Any) -> None:
    opt = with_state(optax.adam, learning_rate=0.05).init(PARAMS)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", opt)
        checkpointer.wait_until_finished()
    with pytest.raises(ValueError, match="has no optax_pytree signature"):
        opx.restore_checkpoint(tmp_path / "ckpt", opt)


def test_signature() -> None:
    def scale(updates: Any, params: Any = None) -> Any:
        del params
        return updates

    tree = {
        "opt": with_state(
            optax.chain,
            opx.wrap(optax.add_decayed_weights, 1e-4, mask={"b": False, "w": True}),
            opx.wrap(optax.scale_by_schedule, opx.wrap(optax.linear_schedule, 1.0, 0.1, 10)),
            opx.wrap(optax.stateless, scale),
        ).init(PARAMS),
        "step": 3,
    }
    signature = opx.checkpoint_signature(tree)
    assert json.loads(json.dumps(signature)) == signature  # fits orbax's JSON metadata
    assert signature["['opt']"] == "with_state(initialized)"
    assert signature["['opt'].transformation"] == "optax.chain(args=(<wrapped>, <wrapped>, <wrapped>))"
    assert signature["['opt'].transformation.args[0]"] == (
        "optax.add_decayed_weights(mask={'b': False, 'w': True})"
    )
    assert signature["['opt'].transformation.args[0].weight_decay"] == "float32[]"
    assert signature["['opt'].transformation.args[1].step_size_fn"] == (
        "optax.linear_schedule(guards=[transition_steps <= 0 is False; transition_begin < 0 is False])"
    )
    # A callable is named, never shown by address.
    assert signature["['opt'].transformation.args[2]"].startswith("optax.stateless(f=")
    assert signature["['opt'].transformation.args[2]"].endswith("test_signature.<locals>.scale)")
    assert signature["['opt'].state[1].count"] == "int32[]"
    assert signature["['step']"] == "int"  # a Python number: its type, not its value
    assert signature == opx.checkpoint_signature(tree)
    with pytest.raises(ValueError, match=r"\['step'\]: saved int, not in the template"):
        opx.checkpoint_signature({"opt": tree["opt"]}, expected=signature)


def test_checkpoint_manager_with_the_signature(tmp_path: Any) -> None:
    # With orbax's CheckpointManager: the signature goes in custom_metadata.
    step, _ = _make_step()
    opt, _ = _train(step, _make_opt().init(PARAMS), PARAMS, 2)
    with ocp.CheckpointManager(tmp_path / "run") as manager:
        manager.save(2, args=ocp.args.StandardSave(opt), custom_metadata=opx.checkpoint_signature(opt))
        manager.wait_until_finished()
        template = _make_opt().init(PARAMS)
        saved = manager.metadata(2).custom_metadata
        opx.checkpoint_signature(template, expected=saved)  # raises if the configuration differs
        restored = manager.restore(2, args=ocp.args.StandardRestore(jax.eval_shape(lambda: template)))
        with pytest.raises(ValueError, match="static configuration differs"):
            opx.checkpoint_signature(with_state(optax.adam, 0.05).init(PARAMS), expected=saved)
    _assert_bitwise_equal(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(opt))
