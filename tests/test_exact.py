"""Exact numbers (issue 16): plain optax's, bit for bit, with every hyperparameter dynamic.

A real training run: a small classifier on scikit-learn's digits, ``adamw``
with a wrapped ``warmup_cosine_decay_schedule``, the optimizer state a jit
input (as in a training loop: initialized outside, each step one call).
"""

from __future__ import annotations

import math
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import assert_jit_bit_for_bit, counting_jit, raw

import optax_pytree as opx
from optax_pytree._backends import specializes_exponent

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
    for peak in (0.003, 0.02, 0.05):
        plain = _optimizer(peak, raw)
        expected = jax.jit(lambda p, s, plain=plain: _train(plain, p, s, x, y))(params, plain.init(params))
        tx = _optimizer(peak, opx.wrap)
        assert_jit_bit_for_bit(step(tx, params, tx.init(params)), expected)
    assert traces == [1]  # one compilation for the three


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
        # Static where this backend's compiler specializes the power (the CPU: 3.0 and 0.5 here).
        assert ("exponent" in member.static_argnames) is specializes_exponent(exponent), exponent
        got = jax.jit(lambda s, c: jax.vmap(s)(c))(member, counts)
        assert_jit_bit_for_bit(got, jax.jit(jax.vmap(plain))(counts))
    with pytest.raises(ValueError, match=r"'exponent' .* is static in one \(3\.0\)"):
        opx.grid(schedule.replace(exponent=1.0), exponent=[1.0, 3.0])


@pytest.mark.skipif(not hasattr(optax.contrib, "MuonDimensionNumbers"), reason="optax>=0.2.6")
def test_muon_with_dimension_numbers_on_3d_and_4d_parameters_is_plain_optax_bit_for_bit() -> None:
    # muon's dimension numbers are a tree shaped like the parameters (None:
    # a parameter left to Adam): the probe's default stand-in parameters do
    # not fit it, so it used to stop at construction, nothing of ``update``
    # verified and none of its Python arithmetic (``1 - beta``, Adam's
    # ``1 - b1``) carried: 7e-9 off after one update. It takes stand-ins
    # shaped like that tree now.
    import optax_pytree.optax as dropin

    dims = optax.contrib.MuonDimensionNumbers
    params = {
        "conv": jnp.sin(jnp.arange(2 * 3 * 4 * 5.0)).reshape(2, 3, 4, 5),
        "heads": jnp.cos(jnp.arange(3 * 4 * 6.0)).reshape(3, 4, 6),
        "bias": jnp.linspace(-1.0, 1.0, 5),
    }
    numbers = {"conv": dims(reduction_axis=(1, 2), output_axis=3), "heads": dims(0, 2), "bias": None}

    def run(tx: Any) -> Any:
        state, p, out = tx.init(params), params, []
        for i in range(3):
            grads = jax.tree.map(lambda x, i=i: jnp.cos(x * (i + 1)), p)
            updates, state = tx.update(grads, state, p)
            p = optax.apply_updates(p, updates)
            out.append((updates, state))
        return out

    expected = run(optax.contrib.muon(learning_rate=0.02, muon_weight_dimension_numbers=numbers))
    tx = dropin.contrib.muon(learning_rate=0.02, muon_weight_dimension_numbers=numbers)
    chex.assert_trees_all_equal(run(tx), expected)


def _round2(lr: float, k: int) -> Any:
    return optax.sgd(round(lr, 2))


def _round(lr: float, k: int) -> Any:
    return optax.sgd(round(lr * k) / k + round(lr) * 0.01)  # Python's round gives an int


def _divmod(lr: float, k: int) -> Any:
    return optax.sgd(sum(divmod(lr, 0.03)))


def _bitwise(lr: float, k: int) -> Any:
    return optax.sgd(lr * ((k << 2) + (k >> 1) + (k & 3) + (k | 8) + (k ^ 5) + ~k))


def _sqrt(lr: float, k: int) -> Any:
    return optax.sgd(math.sqrt(lr))


def _power(lr: float, k: int) -> Any:
    return optax.sgd(lr**0.5 + lr**1.3)


def _min_abs(lr: float, k: int) -> Any:
    return optax.sgd(min(lr / 3, 0.2) + abs(lr - 0.5))


def _float(lr: float, k: int) -> Any:
    return optax.sgd(float(lr) * 2)


def _per_example(lr: float, k: int) -> Any:
    return optax.sgd(lr / k * (1 - 1 / k))


@pytest.mark.parametrize(
    "make", [_round2, _round, _divmod, _bitwise, _sqrt, _power, _min_abs, _float, _per_example]
)
def test_a_user_factorys_python_arithmetic_is_exact_at_every_value_not_only_the_first(make: Any) -> None:
    # The verification compares the wrapped build with the factory at the
    # first value of a configuration only. An operation a leaf also does
    # (``round``, ``divmod``, ``&``, ``<<``: JAX arrays have them) used to
    # leave its argument a plain leaf, computed in float32: equal at the
    # first value, off in the last bit at others (``round(lr, 2)`` at
    # 0.26978671). Each is an expression now, its host value carried.
    params = {"w": jnp.linspace(-1.0, 1.0, 7)}
    grads = {"w": jnp.cos(jnp.arange(7.0)) * 0.37}
    values = [(0.1234, 7), (0.26978671, 20), (0.8032617205543329, 25), (0.13548742992112237, 86)]
    values += [(0.4387956708341091, 12), (0.9737256720187486, 94), (0.5000000001, 3)]
    for lr, k in values:
        tx = opx.wrap(make, lr=lr, k=k)
        plain = make(lr, k)
        chex.assert_trees_all_equal(
            tx.update(grads, tx.init(params), params), plain.update(grads, plain.init(params), params)
        )


def test_bitwise_integer_arithmetic_is_guarded_also_in_traced_code() -> None:
    # ``k << 2`` computed in Python must fit the int32 leaf (a guard, as for
    # ``k * k``); a leaf changed behind the object's back is checked in traced
    # code on a float32 estimate, the bitwise parts exact.
    params = {"w": jnp.linspace(-1.0, 1.0, 7)}
    tx = opx.wrap(_bitwise, lr=0.1, k=7)
    assert "k << 2 fits in int32 is True" in tx.guards
    assert tx.static_argnames == ()
    off = jax.tree.map(lambda x: x * 2**27 if x.dtype == jnp.int32 else x, tx)  # k << 2 overflows
    updates = jax.jit(lambda t: t.update(params, t.init(params), params)[0])(off)
    assert bool(jnp.all(jnp.isnan(updates["w"])))
