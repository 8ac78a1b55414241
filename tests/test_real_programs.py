"""What real programs build, through the drop-in: each case once broke (issue 22)."""

from __future__ import annotations

import functools
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import warnings
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax as plain
import pytest
from helpers import PARAMS, assert_jit_bit_for_bit, assert_tree_allclose, loss
from warm_python import on_the_cpu

import optax_pytree as opx
import optax_pytree.optax as dropin
from optax_pytree import _caches


def _steps(tx: Any, params: Any, n: int) -> tuple[Any, Any]:
    """``n`` eager steps of ``tx`` on the helpers' problem: (params, state)."""
    state = tx.init(params)
    for _ in range(n):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        params = plain.apply_updates(params, updates)
    return params, state


def _five_steps(tx: Any, params: Any) -> Any:
    """Five steps in a scan (the state made inside)."""

    def body(carry: Any, _: Any) -> Any:
        p, s = carry
        updates, s = tx.update(jax.grad(loss)(p), s, p)
        return (plain.apply_updates(p, updates), s), None

    (params, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, length=5)
    return params


def _counting_jit(fn: Any) -> tuple[Any, list[int]]:
    """``jax.jit(fn)`` and the list its traces append to."""
    traces: list[int] = []

    def counted(*args: Any) -> Any:
        traces.append(1)
        return fn(*args)

    return jax.jit(counted), traces


def test_multisteps_over_a_warmup_cosine_optimizer() -> None:
    # Gradient accumulation with warmup and cosine decay (EasyLM's recipe):
    # refused while a cond branch's carried value leaked into the next trace.
    def make(optax: Any, peak: float) -> Any:
        sched = optax.warmup_cosine_decay_schedule(0.0, peak, 3, 12)
        return optax.MultiSteps(optax.sgd(sched), every_k_schedule=2)

    jitted, traces = _counting_jit(_five_steps)  # the optimizer an argument
    for peak in (0.01, 0.02):
        expected = _steps(make(plain, peak), PARAMS, 6)
        chex.assert_trees_all_equal(_steps(make(dropin, peak), PARAMS, 6), expected)
        expected = jax.jit(functools.partial(_five_steps, make(plain, peak)))(PARAMS)
        assert_tree_allclose(jitted(make(dropin, peak), PARAMS), expected)
    assert len(traces) == 1


# --------------------------------------------------------------------------
# inject_hyperparams through the drop-in: a pytree with optax's state layout.

_G = jax.tree_util.tree_map(lambda x: 0.1 * x + 0.05, PARAMS)


def _step(tx: Any, state: Any, params: Any) -> Any:
    updates, state = tx.update(_G, state, params)
    return plain.apply_updates(params, updates), state


def test_inject_hyperparams_is_a_pytree_a_sweep_compiles_once() -> None:
    step, traces = _counting_jit(_step)
    for lr in (1e-3, 3e-3, 1e-2):
        tx = dropin.inject_hyperparams(dropin.adamw)(learning_rate=lr, weight_decay=0.1)
        expected = plain.inject_hyperparams(plain.adamw)(learning_rate=lr, weight_decay=0.1)
        assert isinstance(tx, opx.PyTreeTransformation)
        assert_tree_allclose(step(tx, tx.init(PARAMS), PARAMS), _plain_step(expected))
        state = tx.init(PARAMS)
        chex.assert_trees_all_equal(tx.update(_G, state, PARAMS), expected.update(_G, state, PARAMS))
    assert len(traces) == 1
    assert tx.learning_rate == np.float32(1e-2)
    assert "optax.inject_hyperparams(optax.adamw)" in repr(tx)


def _plain_step(tx: Any) -> Any:
    state = tx.init(PARAMS)
    updates, state = jax.jit(tx.update)(_G, state, PARAMS)
    return plain.apply_updates(PARAMS, updates), state


def test_inject_hyperparams_state_is_read_and_written_as_in_optax() -> None:
    tx = dropin.inject_hyperparams(dropin.sgd)(learning_rate=0.1, momentum=0.9)
    expected = plain.inject_hyperparams(plain.sgd)(learning_rate=0.1, momentum=0.9)
    state: Any = tx.init(PARAMS)
    plain_state: Any = expected.init(PARAMS)
    assert type(state) is type(plain_state)
    # What programs log: the rate in the state.
    assert float(state.hyperparams["learning_rate"]) == float(plain_state.hyperparams["learning_rate"])
    # What programs write to change the rate, as optax documents.
    step, traces = _counting_jit(_step)
    for rate in (0.05, 0.01):
        state.hyperparams["learning_rate"] = jnp.asarray(rate, jnp.float32)
        plain_state.hyperparams["learning_rate"] = jnp.asarray(rate, jnp.float32)
        _, state = step(tx, state, PARAMS)
        chex.assert_trees_all_close(state, expected.update(_G, plain_state, PARAMS)[1])
        plain_state = expected.update(_G, plain_state, PARAMS)[1]
    assert len(traces) == 1
    assert float(state.hyperparams["learning_rate"]) == np.float32(0.01)


def test_inject_hyperparams_over_a_builder_with_a_schedule() -> None:
    # levanter's pattern: an inner function of the builder, a wrapped schedule for the rate.
    def make(optax: Any, peak: float) -> Any:
        def _optimizer(learning_rate: Any, weight_decay: float) -> Any:
            return optax.chain(
                optax.clip_by_global_norm(1.0),
                optax.scale_by_adam(0.9, 0.95),
                optax.add_decayed_weights(weight_decay),
                optax.scale(-learning_rate),
            )

        schedule = optax.warmup_cosine_decay_schedule(0.0, peak, 2, 10)
        return optax.inject_hyperparams(_optimizer)(learning_rate=schedule, weight_decay=0.1)

    got, expected = make(dropin, 1e-3), make(plain, 1e-3)
    state, plain_state = got.init(PARAMS), expected.init(PARAMS)
    updates = plain_updates = None
    for _ in range(3):
        updates, state = got.update(_G, state, PARAMS)
        plain_updates, plain_state = expected.update(_G, plain_state, PARAMS)
    chex.assert_trees_all_equal((updates, state), (plain_updates, plain_state))


def test_inject_hyperparams_pickles_and_keeps_optax_checks() -> None:
    tx = dropin.inject_hyperparams(dropin.adam, static_args="nesterov")(learning_rate=0.1, nesterov=True)
    again = pickle.loads(pickle.dumps(tx))
    assert jax.tree_util.tree_structure(again) == jax.tree_util.tree_structure(tx)
    assert again.nesterov is True and "nesterov" in again.static_argnames
    with pytest.raises(ValueError, match="static_args"):
        dropin.inject_hyperparams(dropin.adam, static_args=("no_such_argument",))


# --------------------------------------------------------------------------
# The library's own runs of a factory (probe, verification, rebuilds) show nothing.

_OUTPUT_SCRIPT = """
import logging, sys, warnings
import jax, jax.numpy as jnp
from absl import logging as absl_logging
import {module} as optax

warnings.simplefilter("always")
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
logging.getLogger("jax").setLevel(logging.WARNING)  # JAX's own start-up lines (with times) on older jax
absl_logging.set_verbosity(absl_logging.INFO)
log = logging.getLogger("user")

def make(learning_rate):
    print("factory", learning_rate)
    log.info("factory log")
    inner = optax.sgd(learning_rate)
    def init(params):
        print("init")
        log.warning("init log")
        warnings.warn("init warning")
        return inner.init(params)
    def update(updates, state, params=None):
        print("update")
        return inner.update(updates, state, params)
    return optax.GradientTransformation(init, update)

if optax.__name__ != "optax":
    import optax_pytree as opx
    make = opx.pytree_transformation(make)
params = {{"w": jnp.ones(3)}}
synced = optax.LookaheadParams.init_synced(params)
for tx, given in (
    (optax.lookahead(optax.adam(2e-3), 5, 0.1), synced),       # absl warns in its init
    (optax.sgd(optax.polynomial_schedule(1.0, 0.1, 2.0, 0)), params),  # absl info when made
    (make(0.1), params),
):
    print("made")
    state = tx.init(params)
    print("initialized")
    for _ in range(2):
        _, state = tx.update(params, state, given)
    print("updated")
"""


def _output(module: str) -> str:
    script = textwrap.dedent(_OUTPUT_SCRIPT).format(module=module)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=on_the_cpu(os.environ),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def test_probing_shows_nothing_the_program_sees_what_optax_shows() -> None:
    plain_output = _output("optax")
    assert "has no attribute `fast`" in plain_output and "polynomial schedule" in plain_output
    assert _output("optax_pytree.optax") == plain_output


def test_quiet_runs_drop_only_their_own_threads_output(caplog: pytest.LogCaptureFixture) -> None:
    from optax_pytree import _quiet

    log = logging.getLogger("optax_pytree_test")
    inside, outside = threading.Event(), threading.Event()

    def other_thread() -> None:
        inside.wait()
        log.warning("from another thread")
        outside.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with caplog.at_level(logging.INFO), _quiet.quietly():
        log.warning("from the quiet block")
        inside.set()
        outside.wait()
    thread.join()
    log.warning("after the block")
    assert [r.getMessage() for r in caplog.records] == ["from another thread", "after the block"]


# --------------------------------------------------------------------------
# Never refuse what plain optax accepts: a part the mechanism cannot honour is static.


@pytest.fixture
def fresh_caches() -> Any:
    """Forgets every cached analysis before and after (a planted failure must not outlive its test)."""
    _caches.clear_caches()
    yield
    _caches.clear_caches()


def _accumulating(optax: Any, peak: float) -> Any:
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak, 3, 12)
    return optax.MultiSteps(optax.adam(schedule), every_k_schedule=2)


@pytest.mark.usefixtures("fresh_caches")
@pytest.mark.parametrize("plant", ["difference", "crash"])
def test_a_failure_of_the_mechanism_degrades_to_static_with_one_warning(
    plant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optax_pytree import _detect, _verify
    from optax_pytree._vocabulary import Differs

    if plant == "difference":  # the verification finds a difference no argument explains
        real = _verify.compare

        def planted(info: Any, *args: Any) -> Any:
            if info.name == "optax.MultiSteps":
                return _verify.Difference(Differs.NUMBERS, "planted")
            return real(info, *args)

        monkeypatch.setattr(_verify, "compare", planted)
    else:  # the analysis itself raises
        real_analyse = _detect.analyse

        def crash(info: Any, *args: Any, **kwargs: Any) -> Any:
            if info.name == "optax.MultiSteps":
                raise RuntimeError("planted")
            return real_analyse(info, *args, **kwargs)

        monkeypatch.setattr(_detect, "analyse", crash)
    jitted, traces = _counting_jit(_five_steps)
    for i, peak in enumerate((0.01, 0.02)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tx = _accumulating(dropin, peak)
        messages = [str(w.message) for w in caught]
        if i == 0:  # one warning, naming the part made static and why
            assert len(messages) == 1, messages
            assert "optax.MultiSteps" in messages[0] and "planted" in messages[0]
            assert "['every_k_schedule', 'opt'] are static" in messages[0]
            assert caught[0].filename == __file__  # at the user's line
        else:  # the configuration is known: no warning again
            assert messages == []
        assert set(tx.static_argnames) >= {"opt", "every_k_schedule"}
        if i == 0:  # eagerly, once (its numerics do not depend on the value)
            # MultiSteps runs its inner optimizer in a lax.cond, compiled even eagerly: bit for
            # bit where the jit numerics are (helpers.BIT_FOR_BIT_UNDER_JIT).
            assert_jit_bit_for_bit(_steps(tx, PARAMS, 4), _steps(_accumulating(plain, peak), PARAMS, 4))
        expected = jax.jit(functools.partial(_five_steps, _accumulating(plain, peak)))(PARAMS)
        assert_tree_allclose(jitted(tx, PARAMS), expected)
    assert len(traces) == 2  # static: a new value is a new compilation, as with plain optax


@pytest.mark.usefixtures("fresh_caches")
def test_a_value_whose_leaf_takes_another_branch_is_static_with_a_warning() -> None:
    opx.wrap(plain.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 100)  # the branch peak_value != 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        schedule = dropin.warmup_cosine_decay_schedule(0.0, 1e-46, 10, 100)  # 0.0 in float32
    assert len(caught) == 1 and "'peak_value'" in str(caught[0].message)
    assert "peak_value" in schedule.static_argnames
    expected = plain.warmup_cosine_decay_schedule(0.0, 1e-46, 10, 100)
    for count in (0, 5, 10, 50, 100):
        chex.assert_trees_all_equal(schedule(count), expected(count))


def _noise(key: Any, scale: Any) -> Any:
    """optax's own test factory (schedules/_inject_test.py): a typed PRNG key as an argument."""

    def init(params: Any) -> Any:
        del params
        return key, scale

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        del params
        key, scale = state
        keys = iter(jax.random.split(key, len(jax.tree_util.tree_leaves(updates)) + 1))
        noise = jax.tree_util.tree_map(lambda x: scale * jax.random.normal(next(keys), x.shape), updates)
        return noise, (next(keys), scale)

    return plain.GradientTransformation(init, update)


def test_a_typed_prng_key_argument_is_a_leaf() -> None:
    # Was refused through the drop-in's inject_hyperparams (no NumPy dtype for key<fry>).
    key = jax.random.key(17)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # taken as it is: no warning, no static fallback
        wrapped = opx.wrap(_noise, key=key, scale=1e-3)
        injected = dropin.inject_hyperparams(_noise)(key=key, scale=1e-3)
    assert wrapped.dynamic_argnames == ("key", "scale")
    for got, expected in (
        (wrapped, _noise(key, 1e-3)),
        (injected, plain.inject_hyperparams(_noise)(key=key, scale=1e-3)),
    ):
        state, plain_state = jax.jit(got.init)(PARAMS), expected.init(PARAMS)
        updates, _ = jax.jit(got.update)(_G, state)
        plain_updates, _ = expected.update(_G, plain_state)
        assert_tree_allclose(updates, plain_updates)


def test_a_failure_of_the_constant_rewrites_warns_and_computes_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Redoing XLA's rewrites of constants runs the factory's traced program again; if that
    # fails, it is the mechanism's failure, not the factory's (once it raised from inside,
    # for flax's hijax hyperparameters, and was reported as the factory needing a concrete
    # learning rate). It warns, saying so, and computes the update by plain tracing.
    from optax_pytree import _jaxprs

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted")

    tx = opx.wrap(plain.adam, 0.05)
    params = {"w": jnp.linspace(-1.0, 1.0, 4)}
    monkeypatch.setattr(_jaxprs, "_rewritten", crash)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        updates, _ = jax.jit(lambda tx, g, s: tx.update(g, s))(tx, params, tx.init(params))
    messages = [str(w.message) for w in caught]
    assert messages and all("redoing XLA's rewrites of constants failed" in m for m in messages)
    assert "RuntimeError: planted" in messages[0] and "not the factory's" in messages[0]
    raw = plain.adam(0.05)
    expected, _ = jax.jit(raw.update)(params, raw.init(params))
    assert_tree_allclose(updates, expected, rtol=1e-6, atol=0)
