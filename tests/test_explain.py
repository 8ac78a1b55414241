"""``explain(a, b)``: why two optimizers do not share a compilation, by path, with the fix.

Each case builds two objects the way a sweep would and checks the report for
what a user acts on (the path, both values, the fix), not its full text. One
case checks against a jitted function that "shares" means one trace.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optax_pytree as opx
import optax_pytree.optax as dropin
from optax_pytree import _backends
from optax_pytree._explain import explain


def _differences(a: Any, b: Any) -> str:
    found = explain(a, b)
    assert not found and not found.shared and found.differences
    return str(found)


def test_same_configuration_another_rate_shares_one_compilation() -> None:
    found = explain(opx.wrap(optax.adamw, 1e-3), opx.wrap(optax.adamw, 3e-4, weight_decay=0.1))
    assert found and found.shared and found.differences == ()
    assert str(found) == "one compilation: same structure and leaf shapes/dtypes"


def test_it_agrees_with_a_jitted_function() -> None:
    traces: list[int] = []

    @jax.jit
    def f(tx: Any) -> Any:
        traces.append(1)
        return jax.tree_util.tree_leaves(tx)[0]

    base = opx.wrap(optax.adam, 1e-3, static_argnames=("b1",))
    f(base)
    for other, shared in ((base.replace(learning_rate=3e-4), True), (base.replace(b1=0.5), False)):
        before = len(traces)
        f(other)
        assert bool(explain(base, other)) is shared
        assert len(traces) - before == (0 if shared else 1)


def test_another_factory_is_another_program() -> None:
    report = _differences(opx.wrap(optax.adam, 1e-3), opx.wrap(optax.sgd, 1e-3))
    assert "optax.adam vs optax.sgd" in report
    assert "different optimizers" in report


def test_a_static_argument_names_both_values_and_the_fix() -> None:
    a = opx.wrap(optax.adam, 1e-3, b1=0.9, static_argnames=("b1",))
    b = opx.wrap(optax.adam, 1e-3, b1=0.8, static_argnames=("b1",))
    report = _differences(a, b)
    assert "adam.b1: static value 0.9 vs 0.8" in report
    assert "static_argnames" in report and "to keep it a dynamic leaf" in report


def test_static_in_one_dynamic_in_the_other_says_which_made_it_static() -> None:
    a = opx.wrap(optax.adam, 1e-3, b1=opx.static(0.9))
    report = _differences(a, opx.wrap(optax.adam, 1e-3))
    assert "adam.b1: static (0.9; marked static by static_argnames or optax_pytree.static)" in report
    assert "a dynamic leaf (float32[] weakly typed)" in report


def test_a_detected_static_argument_cannot_vary() -> None:
    a = opx.wrap(optax.adafactor, 1e-3, min_dim_size_to_factor=128)
    report = _differences(a, a.replace(min_dim_size_to_factor=64))
    assert "adafactor.min_dim_size_to_factor: static value 128 vs 64" in report
    assert "automatic detection" in report and "cannot vary without recompiling" in report


def test_a_guarded_argument_on_another_branch_names_the_guard() -> None:
    a = dropin.warmup_cosine_decay_schedule(0.0, 1e-3, 5, 50)
    assert "peak_value == 0.0 is True" in dropin.warmup_cosine_decay_schedule(0.0, 0.0, 5, 50).guards
    report = _differences(a, dropin.warmup_cosine_decay_schedule(0.0, 0.0, 5, 50))
    assert "warmup_cosine_decay_schedule.peak_value: peak_value == 0.0 is False vs True" in report
    assert "another branch" in report and "same side of `peak_value == 0.0`" in report
    # A comparison the other branch never made is a consequence: not listed.
    decay = opx.wrap(optax.exponential_decay, 1.0, 10, 0.5)
    found = explain(decay, decay.replace(decay_rate=0.0))
    assert [d.path for d in found.differences] == ["exponential_decay.decay_rate"]


def _nested(staircase: bool, peak: float = 1e-3) -> Any:
    schedule = dropin.exponential_decay(peak, 100, 0.5, staircase=staircase)
    return dropin.chain(dropin.clip_by_global_norm(1.0), dropin.adamw(schedule, weight_decay=1e-4))


def test_a_difference_deep_in_a_chain_is_named_by_its_path() -> None:
    assert explain(_nested(True), _nested(True, peak=3e-3))
    report = _differences(_nested(True), _nested(False))
    assert "chain.args[1].learning_rate.staircase: static value True vs False" in report
    assert "not a number" in report


def test_a_chain_of_another_length() -> None:
    report = _differences(dropin.chain(dropin.sgd(0.1)), dropin.chain(dropin.sgd(0.1), dropin.sgd(0.1)))
    assert "chain.args" in report and "a tuple of 1 item vs a tuple of 2 items" in report


class _Config:
    """A config object whose ``__getattr__`` computes what it gives (not a value it holds, so not
    replaced: the object stays whole) and no ``__eq__``, so compared by identity."""

    def __init__(self, **values: float):
        self.values = values

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name] + 0.0
        except KeyError:
            raise AttributeError(name) from None


class _UnhashableConfig(_Config):
    __hash__ = None  # pyright: ignore[reportAssignmentType] - unhashable, as a mutable config is


def _schedule_over(config: _Config) -> Any:
    def schedule(count: Any) -> Any:
        return config.lr * 0.5 ** (count / 100)

    return schedule


def _schedule_over_both(config: _Config, peak: float) -> Any:
    def schedule(count: Any) -> Any:
        return peak * config.lr * 0.5 ** (count / 100)

    return schedule


@pytest.mark.parametrize("config", [_Config, _UnhashableConfig], ids=["hashable", "unhashable"])
@pytest.mark.parametrize(
    "make", [_schedule_over, lambda c: _schedule_over_both(c, 1.0)], ids=["static", "child"]
)
def test_a_closure_capturing_an_object_compared_by_identity(make: Any, config: Any) -> None:
    a, b = make(config(lr=0.1)), make(config(lr=0.1))
    report = _differences(dropin.adamw(a), dropin.adamw(b))
    code = a.__code__
    assert f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" in report
    assert "adamw.learning_rate" in report and "schedule" in report
    assert "captures config" in report and f"a {config.__name__} compared by identity" in report
    assert "compared by identity" in report
    assert "make the function at module level" in report


def test_a_mask_capturing_other_values() -> None:
    def mask_of(names: tuple[str, ...]) -> Any:
        return lambda params: {k: k in names for k in params}

    report = _differences(dropin.adamw(1e-3, mask=mask_of(("w",))), dropin.adamw(1e-3, mask=mask_of(("b",))))
    assert "adamw.mask: a static function" in report and "captures names" in report
    assert "'w' vs 'b'" in report


def test_a_float_and_an_int() -> None:
    report = _differences(opx.wrap(optax.sgd, 1.0), opx.wrap(optax.sgd, 1))
    assert "sgd.learning_rate: float32[] weakly typed" in report and "int32[] weakly typed" in report
    assert "write 1.0, not 1" in report
    assert "fits in int32" not in report  # the guard an int adds follows from its type: not listed


def test_leaf_dtypes_and_weak_types() -> None:
    report = _differences(opx.wrap(optax.sgd, 1.0), opx.wrap(optax.sgd, jnp.bfloat16(1.0)))
    assert "sgd.learning_rate" in report and "bfloat16[]" in report
    tx = opx.wrap(optax.sgd, 0.1)
    report = _differences((tx, jnp.float32(1.0)), (tx, 1.0))
    assert "[1]: float32[] (an array) vs float32[] weakly typed (a Python float)" in report
    assert "weakly typed and an array is not" in report


def test_plain_pytrees_by_key_path() -> None:
    tx = opx.wrap(optax.sgd, 0.1)
    params = {"w": np.zeros((2, 3), np.float32)}
    assert explain((tx, params), (tx.replace(learning_rate=0.2), {"w": np.ones((2, 3), np.float32)}))
    report = _differences((tx, params), (tx, {"w": np.zeros((3, 3), np.float32)}))
    assert "[1]['w']: float32[2,3]" in report and "float32[3,3]" in report and "shape" in report
    report = _differences((tx, params), (tx, {"v": np.zeros((2, 3), np.float32)}))
    assert "keys ['w'] vs ['v']" in report


def test_stateful_optimizers() -> None:
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, 1e-3)
    report = _differences(opt, opt.init({"w": jnp.zeros(3)}))
    assert "not initialized vs initialized" in report
    report = _differences(opt.init({"w": jnp.zeros(3)}), opt.init({"w": jnp.zeros(4)}))
    assert "float32[3]" in report and "float32[4]" in report
    a = opt.replace(b1=opx.static(0.9)).init({"w": jnp.zeros(3)})
    report = _differences(a, a.replace(b1=0.5))
    assert "transformation.b1: static value 0.9 vs 0.5" in report


def test_never_raises_on_odd_leaves() -> None:
    found = explain(("a", object()), ("b", object()))
    assert not found and "[0]" in str(found) and "[1]" in str(found)
    assert explain(None, None) and explain((), ())


def _decays(params: Any, names: list[str]) -> Any:
    return {k: k in names for k in params}


def test_a_partial_with_other_keywords() -> None:
    def make(names: list[str]) -> Any:
        return dropin.masked(dropin.scale(1.0), functools.partial(_decays, names=names))

    report = _differences(make(["w1", "w2"]), make(["w1"]))
    assert "masked.mask: a static functools.partial of function _decays" in report
    assert "['w1', 'w2'] vs ['w1'] at keywords['names']" in report
    assert explain(make(["w1"]), make(["w1"]))


def test_a_batch_of_another_size_is_one_entry_for_all_its_leaves() -> None:
    base = opx.wrap(optax.adam, 1e-3)
    two, _ = opx.grid(base, learning_rate=[1e-3, 1e-2])
    three, _ = opx.grid(base, learning_rate=[1e-3, 1e-2, 3e-2])
    found = explain(two, three)
    assert len(found.differences) == 1
    assert found.differences[0].path == "adam.learning_rate, adam.b1, adam.b2, adam.eps and 1 more"
    assert "float32[2] weakly typed" in str(found) and "a batch of another size" in str(found)


def test_a_plain_optax_transformation_says_to_wrap_it() -> None:
    report = _differences(optax.adam(1e-3), optax.adam(1e-3))
    assert "a plain optax transformation" in report and "opx.wrap" in report
    report = _differences(opx.wrap(optax.adam, 1e-3), optax.adam(1e-3))
    assert "a wrapped optax.adam vs a plain optax transformation" in report


def test_a_specialized_power_is_static_for_that_value_only() -> None:
    a = opx.wrap(optax.polynomial_schedule, 1.0, 0.0, 2.0, 100)
    report = _differences(a, a.replace(power=1.7))  # a power no backend specializes
    assert "polynomial_schedule.power: static (2.0" in report and "a dynamic leaf" in report
    assert "specializes the power by this constant on this backend" in report
    assert _backends.specialized_exponents_text() in report  # the CPU: 2.0, 3.0, 0.5 and -1.0


def test_an_argument_the_library_made_static_says_why() -> None:
    a = dropin.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100)  # the branch peak_value != 0
    with pytest.warns(UserWarning, match="'peak_value' is static for these values"):
        b = dropin.warmup_cosine_decay_schedule(0.0, 1e-46, 10, 100)  # 0.0 as a float32 leaf
    report = _differences(b, a)
    assert "warmup_cosine_decay_schedule.peak_value: static (1e-46; made static by the library" in report
    assert "takes another branch than the value given" in report
    assert "cannot vary without recompiling" in report


class _Masker:
    def mask(self, params: Any) -> Any:
        return params


def test_a_method_bound_to_another_object() -> None:
    report = _differences(dropin.adamw(1e-3, mask=_Masker().mask), dropin.adamw(1e-3, mask=_Masker().mask))
    assert "adamw.mask: a static method bound to another _Masker, compared by identity" in report
    assert "pass the method of one object in both" in report
