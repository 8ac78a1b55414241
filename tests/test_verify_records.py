"""The verification's outcome is a record the pipeline branches on, never the words of a message.

``_verify.compare`` returns a ``Difference`` whose ``kind``
(``_vocabulary.Differs``) decides what happens; the pipeline's ``Degraded``
carries what to make static and why. Each scenario below reaches one of
those branches; run again with every message of both records reworded, it
must end the same way (the same static arguments, the same warnings, the
same exception type, the same numbers) with the new words where a message
shows them. Issue 37.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optax_pytree as opx
from optax_pytree import _pipeline, _spec, _verify
from optax_pytree._vocabulary import Differs

PARAMS = {"w": jnp.arange(1.0, 7.0).reshape(2, 3)}
GRADS = jax.tree_util.tree_map(lambda x: 0.1 * x + 0.3, PARAMS)


def clip_if_float(learning_rate: Any = 0.1, clip: Any = 1.0) -> Any:
    """A decision about the value (``isinstance``): NUMBERS, bisected to ``clip``."""
    clipping = [optax.clip_by_global_norm(clip)] if isinstance(clip, float) else []
    return optax.chain(*clipping, optax.sgd(learning_rate))


def needs_a_loop_bound(learning_rate: Any = 0.1, k: Any = 2) -> Any:
    """``k`` used as a Python int at call time: forced dynamic, the build FAILS."""

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        del params
        for _ in range(k):
            updates = jax.tree_util.tree_map(lambda g: 0.5 * g, updates)
        return updates, state

    return optax.chain(
        optax.GradientTransformation(lambda params: optax.EmptyState(), update), optax.sgd(learning_rate)
    )


_CALLS = itertools.count()


def impure(learning_rate: Any = 0.1) -> Any:
    """Another number at each call (it reads state): no static argument removes the difference."""
    return optax.sgd(learning_rate * (1 + next(_CALLS) % 7))


def _steps(tx: Any) -> Any:
    state = tx.init(PARAMS)
    updates, state = tx.update(GRADS, state, PARAMS)
    return updates


SCENARIOS: dict[str, Callable[[], Any]] = {
    # Differs.NUMBERS: bisected, 'clip' static, no warning.
    "numbers": lambda: opx.wrap(clip_if_float, learning_rate=0.1, clip=0.5),
    # Differs.SPECIALIZED_EXPONENT: 'exponent' static at 2.0 only.
    "exponent": lambda: opx.wrap(optax.cosine_decay_schedule, init_value=0.1, decay_steps=100, exponent=2.0),
    # A leaf: 1.7 is specialized by no backend (the TPU specializes 1.5).
    "exponent-general": lambda: opx.wrap(
        optax.cosine_decay_schedule, init_value=0.1, decay_steps=100, exponent=1.7
    ),
    # Differs.FAILS with an argument forced dynamic: its error at trace time.
    "forced-fails": lambda: opx.wrap(needs_a_loop_bound, learning_rate=0.1, k=opx.dynamic(2)),
    # Differs.NUMBERS with an argument forced dynamic: ForcedDynamicError.
    "forced-numbers": lambda: opx.wrap(clip_if_float, learning_rate=0.1, clip=opx.dynamic(0.5)),
    # Nothing removes it: Degraded, the configuration static, one warning.
    "degraded": lambda: opx.wrap(impure, learning_rate=0.1),
}


def _outcome(make: Callable[[], Any]) -> dict[str, Any]:
    """What happened, without the words: the exception's type, the static arguments, the
    warnings' count, the numbers (or the type of the exception they raise)."""
    _spec.clear_caches()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tx = make()
        except Exception as e:  # noqa: BLE001 - the outcome compared
            return {"raised": type(e), "warned": len(caught), "texts": [str(e)]}
    texts = [str(w.message) for w in caught]
    out: dict[str, Any] = {
        "raised": None,
        "warned": len(caught),
        "static": tx.static_argnames,
        "texts": texts,
    }
    try:
        if isinstance(tx, opx.PyTreeSchedule):
            got = jax.jit(lambda s: s(np.arange(0, 120, 7)))(tx)
        else:
            got = jax.jit(_steps)(tx)
        out["numbers"] = jax.tree_util.tree_map(np.asarray, got)
    except Exception as e:  # noqa: BLE001 - the outcome compared
        out["numbers"] = type(e)
        texts.append(str(e))
    return out


@pytest.fixture
def reworded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every message of the verification's and the pipeline's records, in other words."""
    real_difference, real_degraded = _verify.Difference, _pipeline.Degraded

    def difference(kind: Differs, detail: str) -> Any:
        return real_difference(kind, f"REWORDED {detail[::-1]}")

    def degraded(names: tuple[str, ...], why: str, remember: bool = True, descend: bool = False) -> Any:
        return real_degraded(names, f"REWORDED {why[::-1]}", remember, descend)

    monkeypatch.setattr(_verify, "Difference", difference)
    monkeypatch.setattr(_pipeline, "Degraded", degraded)
    yield
    _spec.clear_caches()


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a.keys() - {"texts"}:
        if key == "numbers" and not isinstance(a[key], type):
            jax.tree_util.tree_map(np.testing.assert_array_equal, a[key], b[key])
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_outcome_does_not_depend_on_the_words(name: str, request: pytest.FixtureRequest) -> None:
    as_written = _outcome(SCENARIOS[name])
    request.getfixturevalue("reworded")
    in_other_words = _outcome(SCENARIOS[name])
    _same(as_written, in_other_words)
    assert not any("REWORDED" in t for t in as_written["texts"])
    if name in ("forced-numbers", "degraded"):  # a message shows the verification's words
        assert any("REWORDED" in t for t in in_other_words["texts"]), in_other_words["texts"]


def test_the_scenarios_reach_each_branch() -> None:
    # The test above cannot pass vacuously: each scenario ends as its comment says.
    outcomes = {name: _outcome(make) for name, make in SCENARIOS.items()}
    assert outcomes["numbers"]["static"] == ("clip",) and outcomes["numbers"]["warned"] == 0
    assert outcomes["exponent"]["static"] == ("exponent",)
    assert outcomes["exponent-general"]["static"] == ()
    assert outcomes["forced-fails"]["raised"] is None and isinstance(
        outcomes["forced-fails"]["numbers"], type
    )
    assert outcomes["forced-numbers"]["raised"] is _pipeline.ForcedDynamicError
    assert outcomes["degraded"]["static"] == ("learning_rate",) and outcomes["degraded"]["warned"] == 1


def test_every_kind_is_produced_by_the_comparison() -> None:
    # Differs names the outcomes compare can give; none is dead.
    source = open(_verify.__file__).read()
    for kind in Differs:
        assert f"Differs.{kind.name}" in source, kind
