"""``import optax_pytree.optax as optax``: the drop-in module (issue #5).

An optax training script runs unchanged but for its import line, with the same
losses, and its optimizer becomes an ordinary ``jax.jit`` argument. Every
factory of the catalogue, called through the drop-in, builds exactly what
``opx.wrap`` builds and matches raw optax under ``jit``; everything else is
optax's own object.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pickle
import pydoc
import re
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax as plain_optax
import optax.contrib
import optax.schedules
import pytest
from helpers import (
    DROPIN_SLICE,
    OPTAX_SKIPS_A_ZERO_WEIGHT_DECAY,
    PARAMS,
    PARAMS_FOR,
    RUN_OPTIONS,
    SCHEDULE_STEPS,
    assert_tree_allclose,
    call,
    catalogue,
    counting_jit,
    raw,
    run_steps,
    sliced,
    version,
    wrapped,
)

import optax_pytree as opx
import optax_pytree.optax as dropin_optax
from optax_pytree import _catalog
from optax_pytree._bind import is_wrapped

# --------------------------------------------------------------------------
# A training script written against plain optax. Only its ``optax`` changes.

STEPS = 30


def make_optimizer(
    optax: Any, peak_value: float = 1e-2, weight_decay: float = 1e-4, max_norm: float = 1.0
) -> Any:
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak_value, warmup_steps=5, decay_steps=STEPS, end_value=1e-4
    )
    return optax.chain(
        optax.clip_by_global_norm(max_norm),
        optax.adamw(schedule, weight_decay=weight_decay),
    )


def init_mlp(key: jax.Array, sizes: tuple[int, ...] = (2, 32, 32, 1)) -> list[dict[str, jax.Array]]:
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (m, n)) / jnp.sqrt(m), "b": jnp.zeros(n)}
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def mse(params: list[dict[str, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((mlp(params, x) - y) ** 2)


def data() -> tuple[jax.Array, jax.Array]:
    x = jax.random.uniform(jax.random.key(1), (STEPS, 64, 2), minval=-1.0, maxval=1.0)
    y = jnp.sin(jnp.pi * x[..., :1]) * x[..., 1:]
    return x, y


def train(optax: Any, *hyperparams: float) -> np.ndarray:
    """The script: a jitted step closing over the optimizer, as optax users write it."""
    optimizer = make_optimizer(optax, *hyperparams)
    params = init_mlp(jax.random.key(0))
    opt_state = optimizer.init(params)

    @jax.jit
    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(mse)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for x, y in zip(*data()):
        params, opt_state, loss = step(params, opt_state, x, y)
        losses.append(loss)
    return np.asarray(losses)


plain_losses = functools.lru_cache(maxsize=None)(functools.partial(train, plain_optax))


def test_script_runs_unchanged_with_the_same_losses() -> None:
    expected = plain_losses()
    # It does train (over five batches each: one batch's loss is noisy, and
    # the random numbers, hence the batches, differ between JAX versions).
    assert expected[-5:].mean() < 0.5 * expected[:5].mean()
    np.testing.assert_allclose(train(dropin_optax), expected, rtol=1e-4)


def test_script_optimizer_is_an_ordinary_jit_argument() -> None:
    def fit(optimizer: Any, params: Any, xs: jax.Array, ys: jax.Array) -> jax.Array:

        def body(carry: Any, batch: Any) -> Any:
            params, opt_state = carry
            loss, grads = jax.value_and_grad(mse)(params, *batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (plain_optax.apply_updates(params, updates), opt_state), loss

        _, losses = jax.lax.scan(body, (params, optimizer.init(params)), (xs, ys))
        return losses

    fit, traces = counting_jit(fit)

    params = init_mlp(jax.random.key(0))
    for hyperparams in ((1e-2, 1e-4, 1.0), (1e-2, 1e-3, 0.5), (1e-2, 0.0, 2.0)):
        losses = fit(make_optimizer(dropin_optax, *hyperparams), params, *data())
        np.testing.assert_allclose(losses, plain_losses(*hyperparams), rtol=1e-4)
    # The weight decay 0.0 is a second program: optax skips its term in Python
    # for the Python 0.0, so plain optax's program has none, and neither has
    # the wrapped one there (the numbers bit for bit).
    zero_static = 1 if OPTAX_SKIPS_A_ZERO_WEIGHT_DECAY else 0
    assert traces == [1 + zero_static]
    # optax's warmup_cosine_decay_schedule tests ``peak_value == 0.0`` in
    # Python: peak_value is guarded, so another nonzero peak is the same
    # program, and 0.0 (the other branch) is another one.
    for peak in (3e-3, 0.0):
        losses = fit(make_optimizer(dropin_optax, peak), params, *data())
        np.testing.assert_allclose(losses, plain_losses(peak), rtol=1e-4)
    assert traces == [2 + zero_static]
    # The problem the drop-in solves: a plain optax optimizer is no JAX type.
    with pytest.raises(TypeError):
        fit(make_optimizer(plain_optax), params, *data())


# --------------------------------------------------------------------------
# The catalogue through the drop-in.

MODULES = [
    (plain_optax, dropin_optax),
    (optax.contrib, dropin_optax.contrib),
    (optax.schedules, dropin_optax.schedules),
]
CATALOGUE = catalogue()


def dropin_of(qualified: str) -> Any:
    """``"optax.contrib.muon"`` -> ``optax_pytree.optax.contrib.muon``."""
    obj: Any = dropin_optax
    for part in qualified.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def public_names(module: types.ModuleType) -> list[str]:
    return sorted({n for n in dir(module) if not n.startswith("_")} | set(getattr(module, "__all__", ())))


def _extra_factories() -> list[tuple[str, Any, str]]:
    """Factories the drop-in would wrap that the catalogue misses (none, we check).

    Read independently of ``_catalog.public_names``: ``dir()`` and
    ``__all__``, which optax leaves incomplete (``optax.named_chain``, ...).
    """
    listed = {id(f) for _, f, _ in CATALOGUE}
    out = []
    for plain, _ in MODULES:
        for name in public_names(plain):
            obj, deprecated = _catalog.get_quietly(plain, name)
            kind = _catalog.factory_kind(obj)
            if kind is not None and not deprecated and id(obj) not in listed:
                listed.add(id(obj))
                out.append((f"{plain.__name__}.{name}", obj, kind))
    return out


EXTRA = _extra_factories()
ALL = CATALOGUE + EXTRA
TRANSFORMATIONS = [(n, f) for n, f, k in ALL if k == "transformation"]
SCHEDULES = [(n, f) for n, f, k in ALL if k == "schedule"]
DROPIN = {id(f): dropin_of(n) for n, f, _ in ALL}
# The default run: one factory of each kind (helpers.DROPIN_SLICE); the rest with --exhaustive.
SLICE = DROPIN_SLICE


def build(factory: Any, *args: Any, **kwargs: Any) -> Any:
    """The catalogue's ``w`` for the drop-in: children are built by drop-in factories too."""
    return DROPIN.get(id(factory), factory)(*args, **kwargs)


def test_catalogue_sees_every_factory_the_dropin_wraps() -> None:
    assert EXTRA == []
    names = {n for n, _, _ in CATALOGUE}
    # freeze and snapshot came with optax 0.2.6.
    assert {f"optax.{n}" for n in ("named_chain", "freeze", "snapshot") if hasattr(plain_optax, n)} <= names


@pytest.mark.parametrize(
    "name,factory", sliced(TRANSFORMATIONS, [n for n, _ in TRANSFORMATIONS], SLICE.__contains__)
)
def test_dropin_transformation_matches_optax(name: str, factory: Any) -> None:
    tx = call(name, dropin_of(name), build)
    assert is_wrapped(tx) and isinstance(tx, plain_optax.GradientTransformation)
    # Exactly what opx.wrap builds: the same treedef (so one jit cache), the same leaves.
    assert_tree_allclose(tx, call(name, factory, wrapped))

    reference = call(name, factory, raw)
    params = PARAMS_FOR.get(name, lambda: PARAMS)()
    run = functools.partial(run_steps, steps=3, **RUN_OPTIONS.get(name, {}))
    got, expected = jax.jit(lambda tx, p: (run(tx, p), run(reference, p)))(tx, params)
    # 1e-4: see test_catalogue.py (hyperparameter arithmetic in float32 vs float64).
    assert_tree_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,factory", sliced(SCHEDULES, [n for n, _ in SCHEDULES], SLICE.__contains__))
def test_dropin_schedule_matches_optax(name: str, factory: Any) -> None:
    schedule = call(name, dropin_of(name), build)
    assert is_wrapped(schedule) and callable(schedule)
    assert_tree_allclose(schedule, call(name, factory, wrapped))
    reference = call(name, factory, raw)
    got, expected = jax.jit(lambda schedule, steps: (jax.vmap(schedule)(steps), jax.vmap(reference)(steps)))(
        schedule, SCHEDULE_STEPS
    )
    assert_tree_allclose(got, expected)


# --------------------------------------------------------------------------
# The namespace.


@pytest.mark.parametrize("plain,dropin", MODULES, ids=[p.__name__ for p, _ in MODULES])
def test_dir_lists_optax_names(plain: types.ModuleType, dropin: types.ModuleType) -> None:
    assert dir(dropin) == dir(plain)


@pytest.mark.parametrize("plain,dropin", MODULES, ids=[p.__name__ for p, _ in MODULES])
def test_every_name_is_optax_object_or_its_dropin(plain: types.ModuleType, dropin: types.ModuleType) -> None:
    submodules = {"contrib": dropin_optax.contrib, "schedules": dropin_optax.schedules}
    factories = 0
    for name in public_names(plain):
        obj, deprecated = _catalog.get_quietly(plain, name)
        if deprecated:
            continue
        mine = getattr(dropin, name)
        if plain is plain_optax and name in submodules:
            assert mine is submodules[name]
        elif name in ("inject_hyperparams", "inject_stateful_hyperparams"):
            # Factories of factories (test_real_programs.py): optax's signature and docstring.
            assert mine is not obj and inspect.signature(mine) == inspect.signature(obj), name
            assert mine.__doc__ == obj.__doc__, name
        elif _catalog.factory_kind(obj) is None:
            assert mine is obj, name
        else:
            factories += 1
            assert mine is not obj, name
            assert inspect.signature(mine) == inspect.signature(obj), name
            assert mine.__doc__ == obj.__doc__, name
            assert mine.__name__ == getattr(obj, "__name__", name), name  # partition = multi_transform
    assert factories > 10


def test_help_shows_optax_doc_and_signature() -> None:
    for factory in (dropin_optax.adamw, dropin_optax.nadam, dropin_optax.contrib.muon):
        text = pydoc.plain(pydoc.render_doc(factory))
        # Python 3.13's pydoc puts each parameter of a long signature on a line of its own.
        assert re.search(rf"\b{factory.__name__}\(\s*learning_rate\b", text), text[:300]
        assert (factory.__doc__ or "").strip().splitlines()[0] in text


def test_submodules_import_and_share_factories() -> None:
    assert importlib.import_module("optax_pytree.optax.contrib") is dropin_optax.contrib
    assert importlib.import_module("optax_pytree.optax.schedules") is dropin_optax.schedules
    # One drop-in per optax object: names optax shares stay one object.
    assert dropin_optax.linear_schedule is dropin_optax.schedules.linear_schedule
    assert dropin_optax.__version__ == plain_optax.__version__


def test_star_import_gives_optax_names() -> None:
    namespace: dict[str, Any] = {}
    with pytest.warns(DeprecationWarning):  # optax.__all__ lists deprecated names (dpsgd)
        exec("from optax_pytree.optax import *", namespace)
    for name in ("__builtins__", "__warningregistry__"):
        namespace.pop(name, None)
    assert set(namespace) == set(plain_optax.__all__)
    assert namespace["adam"] is dropin_optax.adam


def test_deprecated_names_behave_like_optax() -> None:
    with pytest.warns(DeprecationWarning, match="optax.dpsgd is deprecated") as record:
        dpsgd = dropin_optax.dpsgd
    assert record[0].filename == __file__  # at the user's line
    assert dpsgd is dropin_optax.contrib.dpsgd
    if version(plain_optax) >= (0, 2, 7):  # where optax removed it, with a message
        with pytest.raises(AttributeError, match="monte_carlo is deprecated"):
            dropin_optax.monte_carlo  # noqa: B018  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(AttributeError, match=r"'optax_pytree\.optax' has no attribute 'nope'"):
        dropin_optax.nope  # noqa: B018  # pyright: ignore[reportAttributeAccessIssue]


def test_combinators_make_one_pytree() -> None:
    tx = dropin_optax.named_chain(
        ("clip", dropin_optax.clip_by_global_norm(1.0)),
        ("opt", dropin_optax.adamw(dropin_optax.cosine_decay_schedule(1e-3, 100), weight_decay=1e-4)),
    )
    paths = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]}
    assert ".args[0][1].max_norm" in paths
    assert ".args[1][1].learning_rate.init_value" in paths
    assert ".args[1][1].weight_decay" in paths
    tx = dropin_optax.MultiSteps(dropin_optax.sgd(0.1), every_k_schedule=2)
    assert {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]} == {
        ".opt.learning_rate"
    }


def test_multisteps_is_a_function() -> None:
    """Documented difference: ``MultiSteps`` returns the wrapped transformation."""
    tx = dropin_optax.MultiSteps(dropin_optax.sgd(0.1), 2)
    assert is_wrapped(tx) and tx.factory is plain_optax.MultiSteps
    assert not inspect.isclass(dropin_optax.MultiSteps)
    # The optax idioms still read the same.
    assert tx.gradient_transformation() is tx
    state = tx.init({"w": jnp.ones(3)})
    assert not tx.has_updated(state)
    with pytest.raises(TypeError):
        isinstance(tx, dropin_optax.MultiSteps)  # pyright: ignore[reportArgumentType]


def test_factories_accept_traced_values_like_optax() -> None:
    params, grads = {"w": jnp.ones(3)}, {"w": jnp.full(3, 0.5)}

    def step(lr: jax.Array) -> Any:
        tx = dropin_optax.adam(lr)
        return tx.update(grads, tx.init(params), params)[0]["w"]

    np.testing.assert_allclose(jax.vmap(step)(jnp.array([0.1, 0.2]))[:, 0], [-0.1, -0.2], rtol=1e-5)
    # inject_hyperparams takes drop-in factories (its own makes pytrees: test_real_programs.py).
    tx = dropin_optax.inject_hyperparams(dropin_optax.adam)(learning_rate=0.1)
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], -0.1, rtol=1e-5)


def test_wrap_takes_dropin_factories() -> None:
    tx = opx.wrap(dropin_optax.adam, 0.1, static_argnames="b1")
    expected = opx.wrap(plain_optax.adam, 0.1, static_argnames="b1")
    assert jax.tree_util.tree_structure(tx) == jax.tree_util.tree_structure(expected)


def test_pickles() -> None:
    tx = make_optimizer(dropin_optax)
    again = pickle.loads(pickle.dumps(tx))
    assert jax.tree_util.tree_structure(again) == jax.tree_util.tree_structure(tx)
    assert_tree_allclose(again, tx)


def test_pickles_partial_factory() -> None:
    tx = dropin_optax.nadam(0.1)
    again = pickle.loads(pickle.dumps(tx))
    assert jax.tree_util.tree_structure(again) == jax.tree_util.tree_structure(tx)
