"""What real programs build, through the drop-in: each case once broke (issue 22)."""

from __future__ import annotations

from typing import Any

import chex
import jax
import optax as plain
from helpers import PARAMS, assert_tree_allclose, loss

import optax_pytree.optax as dropin


def _steps(tx: Any, params: Any, n: int) -> tuple[Any, Any]:
    """``n`` eager steps of ``tx`` on the helpers' problem: (params, state)."""
    state = tx.init(params)
    for _ in range(n):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        params = plain.apply_updates(params, updates)
    return params, state


@jax.jit
def _jitted_steps(tx: Any, params: Any) -> Any:
    """Five steps under ``jit``, the optimizer an argument (the state made inside)."""

    def body(carry: Any, _: Any) -> Any:
        p, s = carry
        updates, s = tx.update(jax.grad(loss)(p), s, p)
        return (plain.apply_updates(p, updates), s), None

    (params, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, length=5)
    return params


def test_multisteps_over_a_warmup_cosine_optimizer() -> None:
    # Gradient accumulation with warmup and cosine decay (EasyLM's recipe):
    # refused while a cond branch's carried value leaked into the next trace.
    def make(optax: Any, peak: float) -> Any:
        sched = optax.warmup_cosine_decay_schedule(0.0, peak, 3, 12)
        return optax.MultiSteps(optax.sgd(sched), every_k_schedule=2)

    for peak in (0.01, 0.02):
        expected = _steps(make(plain, peak), PARAMS, 6)
        chex.assert_trees_all_equal(_steps(make(dropin, peak), PARAMS, 6), expected)
        got = _jitted_steps(make(dropin, peak), PARAMS)
        assert_tree_allclose(got, _jitted_steps_plain(make(plain, peak)))
    assert _jitted_steps._cache_size() == 1  # pyright: ignore[reportFunctionMemberAccess]


def _jitted_steps_plain(tx: Any) -> Any:
    return jax.jit(lambda p: _jitted_steps.__wrapped__(tx, p))(PARAMS)  # pyright: ignore[reportFunctionMemberAccess]
