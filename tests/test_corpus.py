"""Real optimizer configurations of public JAX projects through the drop-in (tests/corpus.py).

``import optax_pytree.optax as optax`` promises that changing the import
breaks nothing and changes no number. Each configuration of the corpus is
built as its source builds it, once with plain optax and once with the
drop-in, and:

1. under ``jax.jit``, the drop-in optimizer an ordinary argument of the
   jitted function (its state made inside), three steps equal plain optax
   closed over in a jitted function, to float32 round-off;
2. eagerly, three steps are bit for bit plain optax's (parameters and state);
3. a sweep of three rates through one jitted step, the optimizer built anew
   by the configuration's builder for each rate (as a user's
   ``make_optimizer(config)`` per trial), traces the step once and gives
   plain optax's numbers for every rate;
4. building and running it prints, logs and warns exactly what plain optax
   does (the library's probing is invisible).

A failure names the configuration (the test id), the check, and what broke.
"""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax as plain
import pytest
from corpus import CORPUS, Config
from helpers import assert_tree_allclose

import optax_pytree.optax as dropin

STEPS = 3

CONFIGS = [pytest.param(cfg, id=cfg.name) for cfg in CORPUS]


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40
    assert len({cfg.name for cfg in CORPUS}) == len(CORPUS), "duplicate ids"


# ---------------------------------------------------------------------------
# A tiny problem over any parameter tree.


def loss(params: Any) -> jax.Array:
    """A small nonlinear loss of every leaf; the parameters' elements all differ, so every
    element (and every masked or labelled group) gets a gradient of its own."""
    total = jnp.zeros(())
    for p in jax.tree_util.tree_leaves(params):
        total = total + jnp.sum((p - 0.3) ** 2 + 0.1 * jnp.sin(3.0 * p))
    return total


def step(tx: Any, params: Any, state: Any, extra: str, lookahead: bool) -> tuple[Any, Any]:
    """One training step: the gradient of :func:`loss`, the update, the new parameters."""
    value, grads = jax.value_and_grad(loss)(params.fast if lookahead else params)
    kwargs = {"value": value} if extra == "value" else {}
    updates, state = tx.update(grads, state, params, **kwargs)
    return plain.apply_updates(params, updates), state


def train(tx: Any, params: Any, extra: str, lookahead: bool, scan: bool = False) -> tuple[Any, Any]:
    """:data:`STEPS` steps from ``tx.init``: (params, state); under jit a ``scan`` (its body
    traced and compiled once), eagerly a Python loop."""
    state = tx.init(params)
    if scan:
        (params, state), _ = jax.lax.scan(
            lambda carry, _: (step(tx, *carry, extra, lookahead), None), (params, state), None, length=STEPS
        )
        return params, state
    for _ in range(STEPS):
        params, state = step(tx, params, state, extra, lookahead)
    return params, state


# One jitted function for every configuration: the drop-in optimizer is an argument.
train_jit = jax.jit(functools.partial(train, scan=True), static_argnames=("extra", "lookahead"))


def options(cfg: Config) -> dict[str, Any]:
    return {"extra": cfg.extra, "lookahead": cfg.lookahead}


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def build(cfg: Config, optax: Any, rate: float) -> Any:
    """``cfg.make(optax, rate)``; a failure through the drop-in says so."""
    try:
        return cfg.make(optax, rate)
    except Exception as error:
        raise AssertionError(
            f"{cfg.name}: building the optimizer through {optax.__name__} raised {first_line(error)}"
        ) from error


# ---------------------------------------------------------------------------
# 1. Under jit, the drop-in optimizer an argument: plain optax's numbers.


@pytest.mark.parametrize("cfg", CONFIGS)
def test_jit_argument_matches_plain_optax(cfg: Config) -> None:
    plain_tx = build(cfg, plain, cfg.rates[0])
    expected = jax.jit(functools.partial(train, plain_tx, **options(cfg), scan=True))(cfg.params)
    tx = build(cfg, dropin, cfg.rates[0])
    try:
        got = train_jit(tx, cfg.params, **options(cfg))
    except Exception as error:
        raise AssertionError(
            f"{cfg.name} [jit equality]: jax.jit with the drop-in optimizer as an argument raised "
            f"{first_line(error)}"
        ) from error
    try:
        assert_tree_allclose(got, expected, rtol=1e-5, atol=1e-6)
    except AssertionError as error:
        raise AssertionError(
            f"{cfg.name} [jit equality]: (params, state) after {STEPS} jitted steps differ from plain "
            f"optax's: {error}"
        ) from error


# ---------------------------------------------------------------------------
# 2. Eagerly: bit for bit.


@pytest.mark.parametrize("cfg", CONFIGS)
def test_eager_bit_for_bit(cfg: Config) -> None:
    expected = train(build(cfg, plain, cfg.rates[0]), cfg.params, **options(cfg))
    tx = build(cfg, dropin, cfg.rates[0])
    try:
        got = train(tx, cfg.params, **options(cfg))
    except Exception as error:
        raise AssertionError(
            f"{cfg.name} [eager bit for bit]: {STEPS} eager steps with the drop-in optimizer raised "
            f"{first_line(error)}"
        ) from error
    try:
        chex.assert_trees_all_equal(got, expected, strict=True)
    except AssertionError as error:
        raise AssertionError(
            f"{cfg.name} [eager bit for bit]: (params, state) after {STEPS} eager steps are not plain "
            f"optax's bit for bit: {error}"
        ) from error


# ---------------------------------------------------------------------------
# 3. A sweep through the configuration's builder: one trace, plain optax's numbers.


@pytest.mark.parametrize("cfg", CONFIGS)
def test_sweep_traces_once(cfg: Config) -> None:
    traces = 0

    def counted_step(tx: Any, params: Any, state: Any) -> tuple[Any, Any]:
        nonlocal traces
        traces += 1
        return step(tx, params, state, **options(cfg))

    jitted_step = jax.jit(counted_step)
    problems = []
    for rate in cfg.rates:
        tx = build(cfg, dropin, rate)
        try:
            got = jitted_step(tx, cfg.params, tx.init(cfg.params))
        except Exception as error:
            raise AssertionError(
                f"{cfg.name} [one trace]: the jitted step with the drop-in optimizer (rate {rate}) as an "
                f"argument raised {first_line(error)}"
            ) from error
        plain_tx = build(cfg, plain, rate)
        expected = step(plain_tx, cfg.params, plain_tx.init(cfg.params), **options(cfg))
        try:
            assert_tree_allclose(got, expected, rtol=1e-5, atol=1e-6)
        except AssertionError as error:
            problems.append(f"rate {rate}: the step's (params, state) differ from plain optax's: {error}")
    if traces != 1:
        why = f" ({cfg.note})" if cfg.note else ""
        problems.insert(
            0,
            f"a sweep of {len(cfg.rates)} rates through one jitted step traced it {traces} times, "
            f"not once{why}",
        )
    assert not problems, f"{cfg.name} [one trace]: " + "\n".join(problems)


# ---------------------------------------------------------------------------
# 4. Nothing printed, logged or warned that plain optax does not.


def _observe(cfg: Config, optax: Any, capsys: Any, caplog: Any) -> tuple[str, list[str], list[str]]:
    """Build with ``optax`` and take one eager step: (printed, log records, warnings)."""
    caplog.clear()
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        tx = build(cfg, optax, cfg.rates[0])
        jax.block_until_ready(step(tx, cfg.params, tx.init(cfg.params), **options(cfg)))
    out, err = capsys.readouterr()
    records = [
        f"{r.name} {r.levelname}: {r.getMessage()}" for r in caplog.records if not r.name.startswith("jax")
    ]
    return out + err, records, [f"{w.category.__name__}: {w.message}" for w in caught]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_as_quiet_as_plain_optax(cfg: Config, capsys: Any, caplog: Any) -> None:
    _observe(cfg, plain, capsys, caplog)  # once first: one-time messages (deprecations) are not compared
    expected = _observe(cfg, plain, capsys, caplog)
    got = _observe(cfg, dropin, capsys, caplog)
    for what, g, e in zip(("printed", "logged", "warned"), got, expected):
        assert g == e, f"{cfg.name} [quiet]: the drop-in {what} {g!r}; plain optax {what} {e!r}"


# The rates are distinct, and the parameters small float32 arrays (a sanity check of the corpus).
@pytest.mark.parametrize("cfg", CONFIGS)
def test_corpus_entry(cfg: Config) -> None:
    assert len(set(cfg.rates)) == 3, cfg.rates
    for leaf in jax.tree_util.tree_leaves(cfg.params):
        assert np.asarray(leaf).dtype == np.float32 and np.size(leaf) <= 1024, (cfg.name, np.shape(leaf))
