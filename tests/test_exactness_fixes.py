"""Regressions of exact numbers: plain optax's numbers and errors, the smallest static part.

- A mask of another container than a dict (a flax ``FrozenDict``, given as a
  tree or returned by a mask function) told the probe nothing of the
  parameters' structure: it never ran ``init``/``update``, carried no host
  values, and ``1 - b2`` was computed in float32 (issue 35).
- XLA's ``(A * C) * s => A * (s * C)`` with a constant ``C``: adafactor's
  learning rate and parameter scale (issue 47).
- A loop unrolled inside one ``jit``: where it is exact, and where it cannot be
  (issue 47).
"""

from __future__ import annotations

import warnings
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax as plain_optax
import pytest
from helpers import assert_jit_bit_for_bit, counting_jit, raw, run_in_fresh_python

import optax_pytree as opx
import optax_pytree.optax as dropin
from optax_pytree import _backends, _build


def _frozen(tree: Any) -> Any:
    return pytest.importorskip("flax.core.frozen_dict").freeze(tree)


def _params() -> dict[str, Any]:
    return {
        "b": jnp.array([0.1, 0.2, -0.3]),
        "w": jnp.linspace(-1.0, 1.0, 12).reshape(4, 3),
        "enc": {"k": jnp.ones((2, 3)), "z": jnp.array([0.5, 0.25])},
    }


def _loss(params: Any) -> Any:
    return sum((jnp.sum((x - 0.3) ** 2 * 1.7) for x in jax.tree_util.tree_leaves(params)), jnp.zeros(()))


def _eager_steps(tx: Any, params: Any, steps: int = 3) -> tuple[Any, Any]:
    """``steps`` eager optimizer steps on :func:`_loss`: (params, state)."""
    state = tx.init(params)
    for _ in range(steps):
        updates, state = tx.update(jax.grad(_loss)(params), state, params)
        params = plain_optax.apply_updates(params, updates)
    return params, state


def _frozen_decay_mask(params: Any) -> Any:
    # VDM's ``decay_mask_fn``: no weight decay on biases and scales, as a FrozenDict.
    return _frozen(jax.tree_util.tree_map(lambda x: x.ndim != 1, params))


def _compound_schedule(base_learning_rate: float, warmup_steps: int, total_steps: int) -> Any:
    # scenic's compound schedule (constant * linear_warmup * cosine_decay).
    def step_fn(step: Any) -> Any:
        ratio = base_learning_rate * jnp.minimum(1.0, step / warmup_steps)
        progress = jnp.maximum(0.0, (step - warmup_steps) / total_steps)
        ratio *= jnp.maximum(0.0, 0.5 * (1.0 + jnp.cos(jnp.pi * (progress % 1.0))))
        return jnp.asarray(ratio, dtype=jnp.float32)

    return step_fn


def _layerwise_decay(optax: Any, params: Any, layers: int = 4, decay: float = 0.75) -> Any:
    # scenic centernet's ``optimizer_with_layerwise_decay``: a group per
    # layer, each clip + adamw with its own rate and the weight-decay mask
    # ``tree_map(lambda x: x.ndim != 1, params)`` (a FrozenDict of FrozenDict
    # parameters), the layer map a FrozenDict.
    mask = jax.tree_util.tree_map(lambda x: x.ndim != 1, params)
    groups = {
        i: optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adamw(
                _compound_schedule(2e-3 * decay ** (layers - i), 2, 10),
                b1=0.9,
                b2=0.999,
                eps=1e-8,
                weight_decay=1e-4,
                mask=mask,
            ),
        )
        for i in range(layers)
    }
    return optax.multi_transform(groups, _frozen({"b": 0, "w": 1, "enc": {"k": 2, "z": 3}}))


def test_frozen_dict_masks_give_plain_optaxs_numbers_bit_for_bit_eagerly() -> None:
    params = _frozen(_params())
    # VDM: adamw with a mask function returning a FrozenDict.
    tx = dropin.adamw(1e-3, weight_decay=1e-4, mask=_frozen_decay_mask)
    assert tx.exact  # ``1 - b1``, ``1 - b2``: Python's, carried
    expected = _eager_steps(plain_optax.adamw(1e-3, weight_decay=1e-4, mask=_frozen_decay_mask), params)
    chex.assert_trees_all_equal(_eager_steps(tx, params), expected)
    # scenic centernet: a multi_transform of adamw groups, FrozenDict masks.
    tx = _layerwise_decay(dropin, params)
    expected = _eager_steps(_layerwise_decay(plain_optax, params), params)
    chex.assert_trees_all_equal(_eager_steps(tx, params), expected)


def _decay_mask_of_another_model(params: Any) -> Any:
    # Written for a model with a LayerNorm: the parameters trained here have none.
    return {
        "Dense_0": jax.tree_util.tree_map(lambda x: x.ndim > 1, params["Dense_0"]),
        "LayerNorm_0": {"bias": False, "scale": False},
    }


def _raised(fn: Any, *args: Any) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:  # any: compared with plain optax's
        fn(*args)
    return type(info.value), str(info.value)


def test_a_mask_that_does_not_fit_the_params_raises_plain_optaxs_error() -> None:
    params = {"Dense_0": {"bias": jnp.zeros(3), "kernel": jnp.ones((4, 3))}}
    state = plain_optax.adamw(1e-3, weight_decay=1e-4).init(params)  # the mask fails before it is read

    def adamw(optax: Any) -> Any:
        return optax.adamw(1e-3, weight_decay=1e-4, mask=_decay_mask_of_another_model)

    def init(tx: Any, params: Any) -> Any:
        return tx.init(params)

    def update(tx: Any, params: Any) -> Any:
        return tx.update(params, state, params)

    tx = adamw(dropin)
    for call in (init, update):
        expected = _raised(call, adamw(plain_optax), params)
        assert expected[0] is ValueError  # "pytree structure error" (older jax: "Dict key mismatch")
        assert _message(_raised(call, tx, params)) == _message(expected)
        expected = _raised(jax.jit(call, static_argnums=0), adamw(plain_optax), params)
        assert _message(_raised(jax.jit(call), tx, params)) == _message(expected)


def _message(raised: tuple[type, str]) -> tuple[type, str]:
    """The error without the arrays older JAX versions print in it ("Dict key mismatch; ...; dict:
    {...}", the values of an undecided configuration's updates: it ran no probe)."""
    return raised[0], raised[1].split("; dict: ")[0]


def _rsqrt_schedule(learning_rate: float, warmup: int, shift: int) -> Any:
    # nanodo's adamw_mup: a linear warmup, then a reciprocal square root decay from ``shift``.
    def schedule(count: Any) -> Any:
        warm = jnp.minimum(1.0, (count + 1) / warmup)
        return learning_rate * warm * (count + shift) ** -0.5 * shift**0.5

    return schedule


def _accumulated_adamw(optax: Any, rate: float) -> Any:
    schedule = _rsqrt_schedule(rate, 2, 3)
    return optax.MultiSteps(optax.adamw(schedule, b2=0.98, eps=1e-9, weight_decay=1e-4), every_k_schedule=2)


def _step(tx: Any, params: Any, state: Any) -> tuple[Any, Any]:
    updates, state = tx.update(jax.grad(_loss)(params), state, params)
    return plain_optax.apply_updates(params, updates), state


def test_only_the_closure_cell_the_verification_needs_is_static_and_a_sweep_compiles_once() -> None:
    params = _params()
    step, traces = counting_jit(_step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rate in (1e-3, 2e-3, 3e-3):
            tx = _accumulated_adamw(dropin, rate)
            expected = _eager_steps(_accumulated_adamw(plain_optax, rate), params)
            chex.assert_trees_all_equal(_eager_steps(tx, params), expected)
            got, state = params, tx.init(params)
            for _ in range(3):
                got, state = step(tx, got, state)
    assert traces == [1]
    ours = [str(w.message) for w in caught if str(w.message).startswith("optax_pytree:")]
    assert all("argument 'shift' of opt.learning_rate" in m for m in ours), ours
    leaves = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
    assert ".opt.learning_rate.learning_rate" in leaves  # the swept rate, a leaf
    assert ".opt.learning_rate.shift" not in leaves


def _scaled_then_rms(c: float) -> Any:
    # A constant factor, then a scalar read at run time (the parameters' block RMS): adafactor's
    # learning rate and parameter scale, in a factory of the user's.
    return plain_optax.chain(plain_optax.scale(c), plain_optax.scale_by_param_block_rms())


@pytest.mark.parametrize(
    "make",
    [lambda f: f(plain_optax.adafactor, 1e-2), lambda f: f(_scaled_then_rms, 0.37)],
    ids=["adafactor", "user"],
)
def test_a_constant_factor_times_a_scalar_read_at_run_time_is_plain_optaxs(make: Any) -> None:
    # XLA multiplies the scalars first in (A * C) * s, C a constant scalar and s a scalar read at
    # run time: A * (s * C). With C a leaf it would not, so the build does (adafactor: its
    # learning rate times its parameter scale; 11 of 120 elements differed after five steps).
    # Catalogue's parameters are too few to show it (15 elements: equal by chance).
    params = {"b": jnp.linspace(0.3, -0.2, 24), "w": jnp.linspace(-1.0, 1.0, 96).reshape(8, 12)}

    def steps(tx: Any, step: Any) -> Any:
        p, state = params, tx.init(params)
        for _ in range(5):
            updates, state = step(jax.tree.map(lambda x: jnp.sin(3 * x) * 0.1, p), state, p)
            p = plain_optax.apply_updates(p, updates)
        return p

    tx, plain = make(opx.wrap), make(raw)
    on_wrapped = jax.jit(lambda tx, g, s, p: tx.update(g, s, p))
    got = steps(tx, lambda g, s, p: on_wrapped(tx, g, s, p))
    # Where the compiler reassociates so (jax 0.10's XLA does, 0.12's does not: the build asks it).
    assert isinstance(_backends.reassociates_scalar_products(), bool)
    assert_jit_bit_for_bit(got, steps(plain, jax.jit(plain.update)))


def test_a_loop_unrolled_inside_one_jit_is_exact_where_the_object_is_made_inside_it() -> None:
    # Init and five steps in one jitted function, a Python loop: XLA folds what plain optax
    # computes from each step's (constant) count and its constant hyperparameters. Made inside
    # the function from Python numbers, the wrapped object's leaves are constants too: bit for
    # bit. An argument of the function, they are read at run time, and differ from plain
    # optax's folds no more than plain optax's own steps do with its hyperparameters read at
    # run time, or in a lax.scan (docs/guide/numerics.md: 6.4e-5 against 2.0e-4 relative on
    # the CPU; on a TPU v5e 6.7e-3, plain optax's scan against its unrolled loop the same:
    # the device's power of the count, which plain optax's unrolled loop folds on the host);
    # in a lax.scan the same argument is bit for bit.
    params = {"b": jnp.linspace(0.5, -0.5, 8), "w": jnp.linspace(-1.0, 1.0, 32)}

    def make(f: Any) -> Any:
        return f(plain_optax.adamw, f(plain_optax.warmup_cosine_decay_schedule, 0.0, 1e-2, 2, 10))

    def grads(p: Any) -> Any:
        return jax.tree.map(lambda x: jnp.sin(3 * x) * 0.1, p)

    def unrolled(tx: Any) -> Any:
        p, state = params, tx.init(params)
        for _ in range(5):
            updates, state = tx.update(grads(p), state, p)
            p = plain_optax.apply_updates(p, updates)
        return p

    def scanned(tx: Any) -> Any:
        def body(carry: Any, _: Any) -> Any:
            p, state = carry
            updates, state = tx.update(grads(p), state, p)
            return (plain_optax.apply_updates(p, updates), state), None

        return jax.lax.scan(body, (params, tx.init(params)), None, length=5)[0][0]

    # Bit for bit with the jaxlib the XLA rewrites were measured with (helpers), else round-off.
    plain = jax.jit(lambda: unrolled(make(raw)))()
    assert_jit_bit_for_bit(jax.jit(lambda: unrolled(make(opx.wrap)))(), plain)
    argument = jax.jit(unrolled)(make(opx.wrap))
    schedule = plain_optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10)
    read_at_run_time = jax.jit(
        lambda b1, b2, eps, wd: unrolled(plain_optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=wd))
    )(0.9, 0.999, 1e-8, 1e-4)

    def relative(x: Any) -> float:
        differences = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b) / jnp.abs(b))), x, plain)
        return max(jax.tree.leaves(differences))

    plain_scanned = jax.jit(lambda: scanned(make(raw)))()
    got, bounds = relative(argument), (relative(read_at_run_time), relative(plain_scanned))
    assert got <= max(bounds), (got, bounds)
    assert_jit_bit_for_bit(jax.jit(scanned)(make(opx.wrap)), plain_scanned)
    # Made inside jit first, the configuration's analysis is still the one made outside: another
    # peak outside is the same compilation (it was static, every peak a new one, once an
    # analysis made under the trace was cached).
    first = opx.wrap(plain_optax.adamw, opx.wrap(plain_optax.warmup_cosine_decay_schedule, 0.0, 2e-2, 2, 10))
    second = opx.wrap(plain_optax.adamw, opx.wrap(plain_optax.warmup_cosine_decay_schedule, 0.0, 3e-2, 2, 10))
    assert jax.tree.structure(first) == jax.tree.structure(second), opx.explain(first, second)

    # Staged with concrete leaves, the object is plain optax's for its numbers: closed over by a
    # traced function, and as a child that a combinator run eagerly stages in a lax.cond's branch
    # (which makes what the branch closes over the program's operands, where plain optax's Python
    # numbers are constants: on a TPU v5e 0.8 ** 2 was 1 unit in the last place apart). The same
    # program as plain optax's, not the leaves' rebuild; run eagerly, the same numbers.
    g = grads(params)

    def program(tx: Any) -> str:
        return str(jax.make_jaxpr(lambda g, s: tx.update(g, s, params))(g, tx.init(params)))

    exponent2 = lambda f: f(  # noqa: E731 - the composition matrix's exponent-2 schedule
        plain_optax.adamw, f(plain_optax.warmup_cosine_decay_schedule, 0.0, 1e-2, 2, 10, exponent=2.0)
    )
    closed, child = exponent2(opx.wrap), _build.build_child(exponent2(opx.wrap))
    assert program(closed) == program(child) == program(exponent2(raw))
    state = closed.init(params)
    chex.assert_trees_all_equal(child.update(g, state, params), exponent2(raw).update(g, state, params))


_GRADIENT_IN_THE_STEP = """
import json
import jax, jax.numpy as jnp, numpy as np, optax
import optax_pytree as opx

params = {"b": jnp.linspace(0.5, -0.5, 8), "w": jnp.linspace(-1.0, 1.0, 32).reshape(8, 4)}


def loss(p):
    layer = jnp.tanh(p["w"] @ jnp.ones(4))
    return jnp.sum(jnp.sin(3.0 * p["w"])) + jnp.sum(p["b"] ** 2) + jnp.sum(layer * p["b"])


def step(tx, p, s):  # a user's training step: the gradient and the update in one program
    updates, s = tx.update(jax.grad(loss)(p), s, p)
    return optax.apply_updates(p, updates), s


def schedule(f):
    return f(optax.warmup_cosine_decay_schedule, 0.0, 1e-2, 5, 20)


cases = {
    "adam": lambda f: f(optax.adam, 1e-2),
    "adamw": lambda f: f(optax.adamw, 1e-2),
    "adamw-wc": lambda f: f(optax.adamw, schedule(f)),
    "sgd-momentum": lambda f: f(optax.sgd, 1e-2, momentum=0.9),
    "lion": lambda f: f(optax.lion, 1e-3),
    "scale_by_adam": lambda f: f(optax.scale_by_adam),
}
out = {}
for name, make in cases.items():
    plain, wrapped = make(lambda f, *a, **k: f(*a, **k)), make(opx.wrap)
    on_plain, on_wrapped = jax.jit(lambda p, s: step(plain, p, s)), jax.jit(step)
    a, sa, b, sb = params, plain.init(params), params, wrapped.init(params)
    for _ in range(20):
        a, sa = on_plain(a, sa)
        b, sb = on_wrapped(wrapped, b, sb)  # the wrapped object an argument
    out[name] = max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y)) / np.abs(np.asarray(x))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )
print(json.dumps(out))
"""


@pytest.mark.exhaustive
def test_a_gradient_computed_in_the_step_is_bit_for_bit_where_the_cpu_contracts_no_multiply_adds() -> None:
    # XLA fuses the gradient's last operations with the update's, and where the CPU has fused
    # multiply-adds (x86-64's FMA3, AVX-512; ARM), which products LLVM contracts into one
    # differs with a hyperparameter a constant (plain optax) or a scalar read at run time (the
    # wrapped object), though the fused computations are the same operations. Without them
    # (the SSE4.2 instruction set) the two are bit for bit; with them, within the last bits
    # after 20 steps (measured on an AMD EPYC, 2026-12-07: adam 1.4e-7, adamw 7.3e-7, adamw
    # with warmup-cosine 1.3e-6, scale_by_adam 2.6e-6 relative; sgd with momentum and lion 0).
    import json

    without = json.loads(run_in_fresh_python(_GRADIENT_IN_THE_STEP, XLA_FLAGS="--xla_cpu_max_isa=SSE4_2"))
    assert without == dict.fromkeys(without, 0.0), without
    with_them = json.loads(run_in_fresh_python(_GRADIENT_IN_THE_STEP))
    assert max(with_them.values()) <= 1e-5, with_them
