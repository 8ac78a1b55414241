"""Exact numbers (issue 16): plain optax's, bit for bit, with every hyperparameter dynamic.

A real training run: a small classifier on scikit-learn's digits, ``adamw``
with a wrapped ``warmup_cosine_decay_schedule``, the optimizer state a jit
input (as in a training loop: initialized outside, each step one call).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import assert_jit_bit_for_bit, counting_jit, raw

import optax_pytree as opx

sklearn_datasets = pytest.importorskip("sklearn.datasets")

STEPS = 40
BATCH = 120


@pytest.fixture(scope="module")
def digits() -> tuple[Any, Any]:
    data = sklearn_datasets.load_digits()
    return jnp.asarray(data.data[:1200] / 16.0, jnp.float32), jnp.asarray(data.target[:1200])


def _init(key: Any) -> Any:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (64, 32)) * 0.1,
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32, 10)) * 0.1,
        "b2": jnp.zeros(10),
    }


def _loss(p: Any, x: Any, y: Any) -> Any:
    logits = jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def _optimizer(peak: float, w: Any) -> Any:
    return w(optax.adamw, w(optax.warmup_cosine_decay_schedule, 0.0, peak, 5, STEPS), weight_decay=1e-4)


def _train(tx: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
    def body(carry: Any, i: Any) -> Any:
        p, s = carry
        xb = jax.lax.dynamic_slice_in_dim(x, (i % 10) * BATCH, BATCH)
        yb = jax.lax.dynamic_slice_in_dim(y, (i % 10) * BATCH, BATCH)
        updates, s = tx.update(jax.grad(_loss)(p, xb, yb), s, p)
        return (optax.apply_updates(p, updates), s), None

    (params, _), _ = jax.lax.scan(body, (params, state), jnp.arange(STEPS))
    return params


def test_adamw_warmup_cosine_on_digits_is_plain_optax_bit_for_bit(digits: Any) -> None:
    x, y = digits
    params = _init(jax.random.key(0))
    step, traces = counting_jit(lambda tx, params, state: _train(tx, params, state, x, y))
    for peak in (0.003, 0.01, 0.02, 0.05):
        plain = _optimizer(peak, raw)
        expected = jax.jit(lambda p, s, plain=plain: _train(plain, p, s, x, y))(params, plain.init(params))
        tx = _optimizer(peak, opx.wrap)
        assert_jit_bit_for_bit(step(tx, params, tx.init(params)), expected)
    assert traces == [1]  # one compilation for the four


@pytest.mark.parametrize("first", [1.0, 3.0])
def test_a_schedules_exponent_that_xla_specializes_is_static(first: float) -> None:
    # optax's cosine decay computes ``cosine_decay ** exponent``: with a
    # Python 3.0 or 0.5, XLA specializes the power (a constant of the
    # program); a leaf cannot get that, so the exponent is static at those
    # values, and only there, whichever value the configuration was first
    # wrapped with (the verification compares both programs' operations, a
    # schedule's step counts being data; the analysis remembers that the
    # leaf is an exponent).
    from optax_pytree import _wrap

    _wrap.clear_caches()  # the configuration's first wrap is with ``first``
    kwargs = {"init_value": 0.0, "peak_value": 0.01, "warmup_steps": 100, "decay_steps": 1000}
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, **kwargs, end_value=1e-4, exponent=first)
    counts = jnp.arange(1200)
    for exponent in (1.5, 3.0, 0.5, 1.0):
        member = schedule.replace(exponent=exponent)
        plain = optax.warmup_cosine_decay_schedule(**kwargs, end_value=1e-4, exponent=exponent)
        assert ("exponent" in member.static_argnames) is (exponent in (3.0, 0.5)), exponent
        got = jax.jit(lambda s, c: jax.vmap(s)(c))(member, counts)
        assert_jit_bit_for_bit(got, jax.jit(jax.vmap(plain))(counts))
    with pytest.raises(ValueError, match=r"'exponent' .* is static in one \(3\.0\)"):
        opx.grid(schedule.replace(exponent=1.0), exponent=[1.0, 3.0])
