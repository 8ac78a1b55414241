"""The workloads the sections share.

- The MLP of sections 1, 2, 5 and 7: a 128-256-256-10 MLP (101,386
  parameters, batch 128) trained for ``STEPS`` steps in ``lax.scan`` by
  ``train(tx, params, batch)``; the approaches (a)-(e) of section 1; adamw
  with a warmup-cosine schedule, raw and wrapped (sections 2 and 7).
- The tiny step of sections 3 and 6: adam ``init`` + one ``update``, with the
  wrapped optimizer or with its hyperparameters as a plain tuple of arrays,
  and the stateful variant carried through ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

import optax_pytree as opx
from _common import Settings, compared, eqx, fresh, interleaved, ratios, summary

# --------------------------------------------------------------------------
# The workload: a small MLP trained for 50 steps in lax.scan.

SIZES = (128, 256, 256, 10)
BATCH = 128
STEPS = 50


def mlp_params(key: jax.Array, sizes: Sequence[int] = SIZES) -> list[dict[str, jax.Array]]:
    params = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        w = jax.random.normal(jax.random.fold_in(key, i), (n_in, n_out)) / np.sqrt(n_in)
        params.append({"w": w, "b": jnp.zeros(n_out)})
    return params


def mlp_loss(params: list[dict[str, jax.Array]], batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    x, y = batch
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def train(tx: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    """``STEPS`` steps of ``tx`` on one batch; returns the parameters and the last loss."""
    return train_from(tx, params, tx.init(params), batch)


def train_from(tx: Any, params: Any, state: Any, batch: Any) -> tuple[Any, jax.Array]:
    """``train`` from a given optimizer state."""

    def body(carry: Any, _: Any) -> tuple[Any, jax.Array]:
        p, s = carry
        loss, grads = jax.value_and_grad(mlp_loss)(p, batch)
        updates, s = tx.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), loss

    (params, _), losses = lax.scan(body, (params, state), None, length=STEPS)
    return params, losses[-1]


def train_inject(lr: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    return train(optax.inject_hyperparams(optax.adam)(learning_rate=lr), params, batch)


def train_inject_state(state: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    """As ``train`` with ``optax.inject_hyperparams(optax.adam)``, its state (and so every
    hyperparameter of it) an argument: read at run time, as a wrapped object's leaves are.
    ``train_inject`` makes the state inside the jitted function, where its hyperparameters
    but the learning rate are constants of the program."""
    return train_from(optax.inject_hyperparams(optax.adam)(learning_rate=0.0), params, state, batch)


def train_stateful(opt: Any, params: Any, batch: Any) -> tuple[Any, jax.Array]:
    """As ``train``, with the optimizer state folded into the wrapped object."""
    opt = opt.init(params)

    def body(carry: Any, _: Any) -> tuple[Any, jax.Array]:
        p, o = carry
        loss, grads = jax.value_and_grad(mlp_loss)(p, batch)
        p, o = o.apply_gradients(grads, p)
        return (p, o), loss

    (params, _), losses = lax.scan(body, (params, opt), None, length=STEPS)
    return params, losses[-1]


@dataclasses.dataclass
class Workload:
    params: Any
    batch: Any
    lrs: list[float]

    @classmethod
    def make(cls, n: int, sizes: Sequence[int] = SIZES, batch: int = BATCH) -> Workload:
        key = jax.random.key(0)
        x = jax.random.normal(jax.random.fold_in(key, 100), (batch, sizes[0]))
        y = jax.random.randint(jax.random.fold_in(key, 101), (batch,), 0, sizes[-1])
        lrs = [float(v) for v in np.geomspace(1e-4, 1e-2, n)]
        return cls(mlp_params(key, sizes), (x, y), lrs)

    @classmethod
    def tiny(cls, n: int) -> Workload:
        """Same program shape on a toy MLP: pays one-time process costs cheaply."""
        return cls.make(n, sizes=(4, 8, 8, 2), batch=4)


# --------------------------------------------------------------------------
# adamw with a warmup-cosine schedule (sections 2 and 7). ``peak_value`` is
# guarded: optax compares it with 0.0 in Python, so the wrapped schedule keeps
# it a leaf and the outcome of the comparison static; inside jit the library
# re-checks the guard (traced) and selects its outputs with ``jnp.where``.

WARMUP_STEPS = 10
DECAY_STEPS = 100


def raw_adamw_schedule(peak: float) -> optax.GradientTransformation:
    """``optax.adamw`` with ``optax.warmup_cosine_decay_schedule(0.0, peak, 10, 100)``."""
    return optax.adamw(optax.warmup_cosine_decay_schedule(0.0, peak, WARMUP_STEPS, DECAY_STEPS))


def wrapped_adamw_schedule(peak: Any) -> Any:
    """The same, wrapped: the schedule's parameters are leaves of the optimizer."""
    schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, peak, WARMUP_STEPS, DECAY_STEPS)
    return opx.wrap(optax.adamw, learning_rate=schedule)


# --------------------------------------------------------------------------
# The approaches of section 1 (and 2, 5).


@dataclasses.dataclass
class Approach:
    key: str
    label: str
    # A fresh "learning rate -> result" for one round (new jit caches).
    per_config: Callable[[Workload], Callable[[float], Any]]
    # A compiled zero-argument call for the steady-state measurement.
    steady: Callable[[Workload], Callable[[], Any]]
    # The lowered program, for XLA's cost analysis (None: not analysed).
    lowered: Callable[[Workload], Any] | None = None


def per_config_static(w: Workload) -> Callable[[float], Any]:
    f = jax.jit(fresh(train, count="a"), static_argnums=0)
    return lambda lr: f(optax.adam(lr), w.params, w.batch)


def per_config_closure(w: Workload) -> Callable[[float], Any]:
    body = fresh(train, count="b")

    def run(lr: float) -> Any:
        tx = optax.adam(lr)
        return jax.jit(lambda p, b: body(tx, p, b))(w.params, w.batch)

    return run


def per_config_inject(w: Workload) -> Callable[[float], Any]:
    f = jax.jit(fresh(train_inject, count="c"))
    return lambda lr: f(lr, w.params, w.batch)


def per_config_wrapped(
    w: Workload, jit: Callable[[Any], Any] = jax.jit, key: str | None = "d"
) -> Callable[[float], Any]:
    f = jit(fresh(train, count=key))
    return lambda lr: f(opx.wrap(optax.adam, learning_rate=lr), w.params, w.batch)


def per_config_stateful(
    w: Workload, jit: Callable[[Any], Any] = jax.jit, key: str = "e"
) -> Callable[[float], Any]:
    f = jit(fresh(train_stateful, count=key))
    make = opx.wrap_transformation_as_pytree_with_state
    return lambda lr: f(make(optax.adam, learning_rate=lr), w.params, w.batch)


def steady_static(w: Workload) -> Callable[[], Any]:
    f, tx = jax.jit(train, static_argnums=0), optax.adam(w.lrs[0])
    return lambda: f(tx, w.params, w.batch)


def steady_closure(w: Workload) -> Callable[[], Any]:
    tx = optax.adam(w.lrs[0])
    f = jax.jit(lambda p, b: train(tx, p, b))
    return lambda: f(w.params, w.batch)


def steady_wrapped(w: Workload, jit: Callable[[Any], Any] = jax.jit) -> Callable[[], Any]:
    f, tx = jit(train), opx.wrap(optax.adam, learning_rate=w.lrs[0])
    return lambda: f(tx, w.params, w.batch)


def steady_inject_state(w: Workload) -> Callable[[], Any]:
    f = jax.jit(train_inject_state)
    state = optax.inject_hyperparams(optax.adam)(learning_rate=w.lrs[0]).init(w.params)
    return lambda: f(state, w.params, w.batch)


def steady_wrapped_rate(w: Workload) -> Callable[[], Any]:
    f = jax.jit(train)
    tx = opx.wrap(optax.adam, learning_rate=w.lrs[0], dynamic_only=("learning_rate",))
    return lambda: f(tx, w.params, w.batch)


def steady_stateful(w: Workload, jit: Callable[[Any], Any] = jax.jit) -> Callable[[], Any]:
    f = jit(train_stateful)
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=w.lrs[0])
    return lambda: f(opt, w.params, w.batch)


def steady_inject(w: Workload) -> Callable[[], Any]:
    f, lr = jax.jit(train_inject), w.lrs[0]
    return lambda: f(lr, w.params, w.batch)


def steady_closure_schedule(w: Workload) -> Callable[[], Any]:
    tx = raw_adamw_schedule(w.lrs[0])
    f = jax.jit(lambda p, b: train(tx, p, b))
    return lambda: f(w.params, w.batch)


def steady_wrapped_schedule(w: Workload) -> Callable[[], Any]:
    f, tx = jax.jit(train), wrapped_adamw_schedule(w.lrs[0])
    return lambda: f(tx, w.params, w.batch)


def lowered_closure(w: Workload) -> Any:
    tx = optax.adam(w.lrs[0])
    return jax.jit(lambda p, b: train(tx, p, b)).lower(w.params, w.batch)


def lowered_wrapped(w: Workload) -> Any:
    return jax.jit(train).lower(opx.wrap(optax.adam, learning_rate=w.lrs[0]), w.params, w.batch)


def lowered_wrapped_static_eps_root(w: Workload) -> Any:
    tx = opx.wrap(optax.adam, learning_rate=w.lrs[0], static_argnames=("eps_root",))
    return jax.jit(train).lower(tx, w.params, w.batch)


def lowered_inject(w: Workload) -> Any:
    return jax.jit(train_inject).lower(w.lrs[0], w.params, w.batch)


def lowered_stateful(w: Workload) -> Any:
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=w.lrs[0])
    return jax.jit(train_stateful).lower(opt, w.params, w.batch)


def lowered_closure_schedule(w: Workload) -> Any:
    tx = raw_adamw_schedule(w.lrs[0])
    return jax.jit(lambda p, b: train(tx, p, b)).lower(w.params, w.batch)


def lowered_wrapped_schedule(w: Workload) -> Any:
    return jax.jit(train).lower(wrapped_adamw_schedule(w.lrs[0]), w.params, w.batch)


def approaches() -> list[Approach]:
    """The approaches of section 1 (and 2); those under ``eqx.filter_jit`` where equinox is installed."""
    found = [
        Approach("a", "(a) optax, optimizer as a static argument", per_config_static, steady_static),
        Approach("b", "(b) optax, new jitted closure per configuration", per_config_closure, steady_closure),
        Approach(
            "c", "(c) optax.inject_hyperparams inside jit", per_config_inject, steady_inject, lowered_inject
        ),
        Approach(
            "d",
            "(d) wrapped, ordinary argument of jax.jit",
            per_config_wrapped,
            steady_wrapped,
            lowered_wrapped,
        ),
        Approach(
            "d_eqx",
            "(d) wrapped, under eqx.filter_jit",
            functools.partial(per_config_wrapped, jit=eqx.filter_jit, key="d_eqx"),
            functools.partial(steady_wrapped, jit=eqx.filter_jit),
        )
        if eqx is not None
        else None,
        Approach(
            "e", "(e) wrapped with state, jax.jit", per_config_stateful, steady_stateful, lowered_stateful
        ),
        Approach(
            "e_eqx",
            "(e) wrapped with state, under eqx.filter_jit",
            functools.partial(per_config_stateful, jit=eqx.filter_jit, key="e_eqx"),
            functools.partial(steady_stateful, jit=eqx.filter_jit),
        )
        if eqx is not None
        else None,
    ]
    return [a for a in found if a is not None]


# --------------------------------------------------------------------------
# The tiny step of sections 3 and 6.


def tiny_step(tx: Any, params: Any, grads: Any) -> Any:
    state = tx.init(params)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def plain_hyperparams(tx: Any) -> tuple[Any, ...]:
    """The plain baseline: the dynamic hyperparameters of ``tx`` as a tuple of the same arrays.

    One entry per argument (whatever its number of leaves), in the order of
    ``tx.dynamic_argnames``.
    """
    return tuple(tx.hyperparams[n] for n in tx.dynamic_argnames)


def plain_adam(hp: tuple[Any, ...]) -> Any:
    """``optax.adam`` from ``plain_hyperparams(opx.wrap(optax.adam, ...))``.

    The dynamic arguments of ``optax.adam`` are its leading positional ones.
    """
    return optax.adam(*hp)


def plain_tiny_step(hp: tuple[Any, ...], params: Any, grads: Any) -> Any:
    """``tiny_step`` with adam built from plain hyperparameter arrays: the baseline of (d)."""
    return tiny_step(plain_adam(hp), params, grads)


def plain_carried_step(carry: Any, params: Any, grads: Any) -> Any:
    """One adam step carrying ``(hyperparameter arrays, optax state)``: the baseline of (e)."""
    hp, state = carry
    updates, state = plain_adam(hp).update(grads, state, params)
    return optax.apply_updates(params, updates), (hp, state)


def stateful_step(opt: Any, params: Any, grads: Any) -> Any:
    return opt.apply_gradients(grads, params)


def tree_fns(tree: Any, plain: Any, ref: str = "plain") -> dict[str, Callable[[], Any]]:
    """``tree_flatten`` and ``tree_unflatten`` of ``tree`` and of ``plain`` (keys suffixed ``_{ref}``).

    Pure Python work: pass the result as ``pure`` to ``interleaved``.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    plain_leaves, plain_def = jax.tree_util.tree_flatten(plain)
    return {
        "flatten": lambda: jax.tree_util.tree_flatten(tree),
        f"flatten_{ref}": lambda: jax.tree_util.tree_flatten(plain),
        "unflatten": lambda: jax.tree_util.tree_unflatten(treedef, leaves),
        f"unflatten_{ref}": lambda: jax.tree_util.tree_unflatten(plain_def, plain_leaves),
    }


def stateful_carried(params: Any, grads: Any, s: Settings) -> dict[str, Any]:
    """(e) in a loop that carries the optimizer through jit, against the same with plain arrays.

    The wrapped object with state comes out of every call, so this pays
    ``tree_unflatten`` on the way out and the treedef comparison (its aux data
    holds the parameter structure) on the way in, as a training loop does.
    """
    opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=1e-3).init(params)
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    plain = (plain_hyperparams(tx), tx.init(params))
    # The floor of what carrying the exact values costs: the same plain carry
    # with one more array (the size of the object's carried host values).
    extra = (plain, jax.tree.map(jnp.zeros_like, opt.transformation.exact))
    f, g, h = jax.jit(stateful_step), jax.jit(plain_carried_step), jax.jit(plain_carried_step_extra)
    carry = {
        "wrapped": jax.block_until_ready(f(opt, params, grads))[1],
        "plain": jax.block_until_ready(g(plain, params, grads))[1],
        "extra": jax.block_until_ready(h(extra, params, grads))[1],
    }

    def call_wrapped() -> Any:
        carry["wrapped"] = f(carry["wrapped"], params, grads)[1]
        return carry["wrapped"]

    def call_plain() -> Any:
        carry["plain"] = g(carry["plain"], params, grads)[1]
        return carry["plain"]

    def call_extra() -> Any:
        carry["extra"] = h(carry["extra"], params, grads)[1]
        return carry["extra"]

    flat = tree_fns(opt, plain)
    t = interleaved(
        {"step": call_wrapped, "step_plain": call_plain, "step_extra": call_extra, **flat},
        s.micro_repeats,
        s.micro_seconds * 2,
        pure=flat,
    )
    out: dict[str, Any] = {}
    for k in ("step", "flatten", "unflatten"):
        out.update(compared(t, k))
    out["step_extra_s"] = summary(t["step_extra"])
    out["step_ratio_extra"] = summary(ratios(t["step"], t["step_extra"]))
    return out


def plain_carried_step_extra(carry: Any, params: Any, grads: Any) -> Any:
    """``plain_carried_step`` carrying one more array, passed through (the floor of (e))."""
    inner, extra = carry
    params, inner = plain_carried_step(inner, params, grads)
    return params, (inner, extra)
