"""Schedules that read their numbers through the program's config: one compilation per sweep (``_closures``).

Real programs hand optax a schedule written as a closure over their
configuration object (ml_collections, OmegaConf, argparse, dataclasses,
``self``, dicts), a ``functools.partial`` of one, or arrays. Each builder
below re-expresses one public project's (named in its docstring); through
the drop-in, a sweep of its learning rate traces the jitted step once, with
plain optax's numbers bit for bit eagerly and plain optax's state layout.
"""

from __future__ import annotations

import argparse
import dataclasses
import dis
import functools
import types
import warnings
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax as plain
import pytest
from helpers import exhaustive, sliced

import optax_pytree as opx
import optax_pytree.optax as dropin
from optax_pytree import _bytecode, _lookups

ml_collections = pytest.importorskip("ml_collections", reason="a test extra: configs of ml_collections")
omegaconf = pytest.importorskip("omegaconf", reason="a test extra: configs of OmegaConf (Hydra)")
pydantic = pytest.importorskip("pydantic", reason="a test extra: settings as pydantic models")
eqx = pytest.importorskip("equinox", reason="a test extra: modules of equinox")


class _Settings(pydantic.BaseModel):
    learning_rate: float
    warmup_steps: int = 2
    decay_factor: float = 0.9
    weight_decay: float = 1e-4


@functools.cache
def _equinox_schedule() -> Any:
    class Schedule(eqx.Module):
        learning_rate: float
        warmup_steps: int = eqx.field(static=True, default=2)

        def __call__(self, step: Any) -> Any:
            return self.learning_rate * jnp.minimum(1.0, (step + 1) / self.warmup_steps)

    return Schedule


PARAMS = {"kernel": jnp.linspace(-1.0, 1.0, 6).reshape(3, 2), "bias": jnp.array([0.1, -0.2])}
GRADS = jax.tree_util.tree_map(lambda x: 0.3 * x + 0.05, PARAMS)
RATES = (1e-3, 3e-3, 2e-2)


# --------------------------------------------------------------------------
# The builders, each (optax module, learning rate) -> transformation.


def cleanrl_ppo(optax: Any, lr: float) -> Any:
    """cleanrl ppo_atari_envpool: ``linear_schedule`` over ``args``, through ``inject_hyperparams(adam)``."""
    args = argparse.Namespace(
        learning_rate=lr,
        num_minibatches=4,
        update_epochs=4,
        num_iterations=50,
        max_grad_norm=0.5,
        anneal_lr=True,
    )

    def linear_schedule(count: Any) -> Any:
        frac = 1.0 - (count // (args.num_minibatches * args.update_epochs)) / args.num_iterations
        return args.learning_rate * frac

    return optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(
            learning_rate=linear_schedule if args.anneal_lr else args.learning_rate, eps=1e-5
        ),
    )


def _ferminet_cfg(lr: float) -> Any:
    cfg = ml_collections.ConfigDict()
    cfg.optim = ml_collections.ConfigDict()
    cfg.optim.lr = ml_collections.ConfigDict({"rate": lr, "decay": 1.0, "delay": 10.0})
    cfg.optim.optimizer = "adam"
    cfg.optim.adam = ml_collections.ConfigDict({"b1": 0.9, "b2": 0.999, "eps": 1e-8})
    cfg.lock()
    return cfg


def ferminet_adam(optax: Any, lr: float) -> Any:
    """ferminet train.py: ``learning_rate_schedule`` over a locked, nested ``cfg`` (``cfg.optim.lr.rate``)."""
    cfg = _ferminet_cfg(lr)

    def learning_rate_schedule(t_: Any) -> Any:
        return cfg.optim.lr.rate * jnp.power((1.0 / (1.0 + (t_ / cfg.optim.lr.delay))), cfg.optim.lr.decay)

    return optax.chain(
        optax.scale_by_adam(**cfg.optim.adam),
        optax.scale_by_schedule(learning_rate_schedule),
        optax.scale(-1.0),
    )


def ferminet_lamb(optax: Any, lr: float) -> Any:
    """ferminet: the same schedule through ``optax.lamb``."""
    cfg = _ferminet_cfg(lr)

    def learning_rate_schedule(t_: Any) -> Any:
        return cfg.optim.lr.rate * jnp.power((1.0 / (1.0 + (t_ / cfg.optim.lr.delay))), cfg.optim.lr.decay)

    return optax.lamb(learning_rate_schedule, eps=1e-7)


def scenic_compound(optax: Any, lr: float) -> Any:
    """scenic lr_schedules.compound_lr_scheduler: factors parsed from ``config.lr_configs`` in the closure."""
    config = ml_collections.ConfigDict()
    config.lr_configs = ml_collections.ConfigDict(
        {
            "factors": "constant * linear_warmup * cosine_decay",
            "base_learning_rate": lr,
            "warmup_steps": 2,
            "steps_per_cycle": 20,
        }
    )

    def lr_fn(step: Any) -> Any:
        ratio = 1.0
        for name in [n.strip() for n in config.lr_configs.factors.split("*")]:
            if name == "constant":
                ratio *= config.lr_configs.base_learning_rate
            elif name == "linear_warmup":
                ratio *= jnp.minimum(1.0, step / config.lr_configs.warmup_steps)
            elif name == "cosine_decay":
                progress = jnp.maximum(
                    0.0, (step - config.lr_configs.warmup_steps) / config.lr_configs.steps_per_cycle
                )
                ratio *= jnp.maximum(0.0, 0.5 * (1.0 + jnp.cos(jnp.pi * (progress % 1.0))))
        return jnp.asarray(ratio, dtype=jnp.float32)

    return optax.adamw(lr_fn, weight_decay=1e-4)


def scenic_layerwise(optax: Any, lr: float) -> Any:
    """scenic centernet optimizer_with_layerwise_decay: a multi_transform of adamw groups, each with
    its lr closure."""
    config = ml_collections.ConfigDict(
        {"lr_configs": {"base_learning_rate": lr, "warmup_steps": 2}, "decay": 0.7}
    )

    def make_lr_fn(scale: float) -> Any:
        def lr_fn(step: Any) -> Any:
            warmup = jnp.minimum(1.0, step / config.lr_configs.warmup_steps)
            return config.lr_configs.base_learning_rate * scale * warmup

        return lr_fn

    transforms = {
        f"layer_{i}": optax.adamw(
            make_lr_fn(config.decay**i),
            weight_decay=1e-4,
            mask=lambda p: jax.tree.map(lambda x: x.ndim != 1, p),
        )
        for i in range(2)
    }
    return optax.multi_transform(transforms, {"kernel": "layer_0", "bias": "layer_1"})


def learned_optimization_pwl(optax: Any, lr: float) -> Any:
    """learned_optimization PiecewiseLinearAdam: times and values captured as arrays."""
    times = jnp.asarray([0, 2, 10], dtype=jnp.int32)
    vals = jnp.asarray([0.0, lr, lr * 0.1])

    def schedule(step: Any) -> Any:
        return jnp.interp(step, times, vals)

    return optax.adam(schedule)


def mava_omegaconf(optax: Any, lr: float) -> Any:
    """Mava ff_ppo: a linear decay closure over an OmegaConf ``DictConfig`` (a Hydra program)."""
    config = omegaconf.OmegaConf.create(
        {
            "system": {"actor_lr": lr, "ppo_epochs": 2, "num_minibatches": 2, "max_grad_norm": 0.5},
            "arch": {"num_updates": 40},
        }
    )

    def linear_scheduling(count: Any) -> Any:
        frac = (
            1.0
            - (count // (config.system.ppo_epochs * config.system.num_minibatches)) / config.arch.num_updates
        )
        return config.system.actor_lr * frac

    return optax.chain(
        optax.clip_by_global_norm(config.system.max_grad_norm), optax.adam(linear_scheduling, eps=1e-5)
    )


def hydra_interpolation(optax: Any, lr: float) -> Any:
    """A Hydra config whose rate is an interpolation (``${base_lr}``)."""
    cfg = omegaconf.OmegaConf.create({"base_lr": lr, "optimizer": {"lr": "${base_lr}", "warmup": 2}})
    return optax.sgd(
        lambda step: cfg.optimizer.lr * jnp.minimum(1.0, (step + 1) / cfg.optimizer.warmup), momentum=0.9
    )


def _learning_rate_decay(
    step: Any,
    lr_init: float,
    lr_final: float,
    max_steps: int,
    lr_delay_steps: int = 0,
    lr_delay_mult: float = 1.0,
) -> Any:
    if lr_delay_steps > 0:
        delay_rate = lr_delay_mult + (1 - lr_delay_mult) * jnp.sin(
            0.5 * jnp.pi * jnp.clip(step / lr_delay_steps, 0, 1)
        )
    else:
        delay_rate = 1.0
    t = jnp.clip(step / max_steps, 0, 1)
    log_lerp = jnp.exp(jnp.log(lr_init) * (1 - t) + jnp.log(lr_final) * t)
    return delay_rate * log_lerp


def multinerf_partial(optax: Any, lr: float) -> Any:
    """multinerf train_utils: ``functools.partial(learning_rate_decay, lr_init=..., ...)``."""
    lr_kwargs = {"max_steps": 100, "lr_delay_steps": 5, "lr_delay_mult": 0.01}
    schedule = functools.partial(_learning_rate_decay, lr_init=lr, lr_final=lr / 100, **lr_kwargs)
    return optax.adam(learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-6)


def octo_kwargs(optax: Any, lr: float) -> Any:
    """octo create_lr_schedule: a lambda over its kwargs dict (``kwargs['peak_value']``)."""
    kwargs = {"peak_value": lr, "warmup_steps": 2}

    def schedule(step: Any) -> Any:  # octo: a lambda
        return jnp.minimum(kwargs["peak_value"] * step / kwargs["warmup_steps"], kwargs["peak_value"])

    return optax.adamw(schedule, weight_decay=1e-2, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))


def nanodo_rsqrt(optax: Any, lr: float) -> Any:
    """nanodo optimizer: an rsqrt schedule closure over its config (a frozen dataclass)."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        peak_learning_rate: float
        warmup_steps: int = 2
        weight_decay: float = 0.1

    c = Config(lr)

    def schedule(step: Any) -> Any:
        warmup = jnp.minimum(1.0, (step + 1) / c.warmup_steps)
        return (
            c.peak_learning_rate
            * warmup
            * jax.lax.rsqrt(jnp.maximum(step + 1, c.warmup_steps) / c.warmup_steps)
        )

    return optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=c.weight_decay)


@dataclasses.dataclass(frozen=True)
class LevanterAdamConfig:
    """levanter's OptimizerConfig: ``lr_scheduler`` a method whose closure reads ``self``."""

    learning_rate: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 2
    weight_decay: float = 0.0

    def lr_scheduler(self, num_train_steps: int) -> Any:
        def schedule(step: Any) -> Any:
            warmup = jnp.minimum(1.0, step / self.warmup_steps)
            t = jnp.clip((step - self.warmup_steps) / num_train_steps, 0.0, 1.0)
            return self.learning_rate * warmup * (1.0 - (1.0 - self.min_lr_ratio) * t)

        return schedule


def levanter_dataclass(optax: Any, lr: float) -> Any:
    config = LevanterAdamConfig(learning_rate=lr)
    return optax.adamw(config.lr_scheduler(100), weight_decay=config.weight_decay)


class BigVisionTrainer:
    """big_vision / a trainer template: ``self.lr_fn`` given as the schedule (a bound method)."""

    def __init__(self, lr: float):
        self.config = ml_collections.ConfigDict(
            {"lr": lr, "schedule": {"warmup_steps": 2, "decay_type": "linear"}}
        )
        self.total_steps = 50

    def lr_fn(self, step: Any) -> Any:
        warmup = jnp.minimum(1.0, step / self.config.schedule.warmup_steps)
        return self.config.lr * warmup * (1.0 - step / self.total_steps)


def big_vision_method(optax: Any, lr: float) -> Any:
    return optax.sgd(BigVisionTrainer(lr).lr_fn, momentum=0.9, nesterov=True)


class T5xRsqrt:
    """t5x-style schedule as a callable object: ``__call__`` reads ``self``."""

    def __init__(self, base_learning_rate: float, warmup_steps: int):
        self.base_learning_rate = base_learning_rate
        self.warmup_steps = warmup_steps

    def __call__(self, step: Any) -> Any:
        return self.base_learning_rate * jax.lax.rsqrt(
            jnp.maximum(step + 1, self.warmup_steps).astype(jnp.float32)
        )


def t5x_callable(optax: Any, lr: float) -> Any:
    return optax.adafactor(T5xRsqrt(lr, 4), multiply_by_parameter_scale=False)


def flax_partial_config(optax: Any, lr: float) -> Any:
    """flax examples' ``create_learning_rate_fn(config, ...)`` as ``functools.partial(fn, config=cfg)``."""
    config = ml_collections.ConfigDict({"learning_rate": lr, "warmup_epochs": 1, "momentum": 0.9})
    return optax.sgd(
        functools.partial(_flax_schedule, config=config, steps_per_epoch=2), momentum=config.momentum
    )


def _flax_schedule(step: Any, config: Any, steps_per_epoch: int) -> Any:
    warmup = jnp.minimum(1.0, step / (config.warmup_epochs * steps_per_epoch))
    return config.learning_rate * warmup


def scenic_config_get(optax: Any, lr: float) -> Any:
    """scenic lr_schedules (vid2seq, pixel_llm): factors read with ``config.get(name, default)`` and
    ``getattr(config, name)``; ``warmup_alpha`` absent, so its default is used."""
    config = ml_collections.ConfigDict(
        {"base_learning_rate": lr, "warmup_steps": 2, "steps_per_cycle": 20, "t_mul": 1.0}
    )

    def lr_fn(step: Any) -> Any:
        alpha = config.get("warmup_alpha", 0.0)
        warmup = alpha + (1.0 - alpha) * jnp.minimum(1.0, step / getattr(config, "warmup_steps"))  # noqa: B009 - as scenic writes it
        cycle = config.get("steps_per_cycle") * config.get("t_mul", 1.0)
        progress = jnp.maximum(0.0, (step - config.warmup_steps) / cycle)
        return config.get("base_learning_rate", 1e-3) * warmup * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))

    return optax.adamw(lr_fn, weight_decay=1e-4)


def octo_dict_get(optax: Any, lr: float) -> Any:
    """octo create_lr_schedule: its kwargs dict read with ``.get`` (``kwargs.get('warmup_steps', 0)``)."""
    kwargs = {"peak_value": lr, "warmup_steps": 2}

    def schedule(step: Any) -> Any:
        warmup = jnp.minimum(1.0, step / max(kwargs.get("warmup_steps", 0), 1))
        return kwargs.get("peak_value", 1e-3) * warmup * kwargs.get("decay", 1.0)

    return optax.adam(schedule)


def hydra_config_get(optax: Any, lr: float) -> Any:
    """A Hydra program's schedule reading its ``DictConfig`` with ``cfg.optim.get('lr', 1e-3)``."""
    cfg = omegaconf.OmegaConf.create({"optim": {"lr": lr, "warmup": 2}})

    def schedule(step: Any) -> Any:
        return cfg.optim.get("lr", 1e-3) * jnp.minimum(1.0, (step + 1) / cfg.optim.get("warmup", 1))

    return optax.sgd(schedule, momentum=0.9)


def pydantic_settings(optax: Any, lr: float) -> Any:
    """MaxText-style settings as a pydantic ``BaseModel`` (its fields read by the schedule)."""
    settings = _Settings(learning_rate=lr)

    def schedule(step: Any) -> Any:
        warmup = jnp.minimum(1.0, step / settings.warmup_steps)
        return settings.learning_rate * warmup * settings.decay_factor ** (step / 10.0)

    return optax.adamw(schedule, weight_decay=settings.weight_decay)


def equinox_module(optax: Any, lr: float) -> Any:
    """An equinox ``Module`` of hyperparameters as the schedule (``__call__`` reads ``self``), one
    of its fields ``eqx.field(static=True)``."""
    return optax.adam(_equinox_schedule()(learning_rate=lr))


class _Trainer:
    """A trainer whose schedule is ``functools.partial(self.lr_fn, ...)`` (a partial of a bound
    method reading ``self.base_lr``), as trainers of t5x and flax's examples hand it over."""

    def __init__(self, lr: float):
        self.base_lr = lr

    def lr_fn(self, step: Any, decay_every: int, factor: float) -> Any:
        return self.base_lr * factor ** (step // decay_every)

    def optimizer(self, optax: Any) -> Any:
        return optax.sgd(functools.partial(self.lr_fn, decay_every=2, factor=0.5), momentum=0.9)


def partial_of_bound_method(optax: Any, lr: float) -> Any:
    return _Trainer(lr).optimizer(optax)


def multistep_lists(optax: Any, lr: float) -> Any:
    """A step schedule from Python lists (``rates[0]``, ``zip(boundaries, rates[1:])``), as JAX
    ports of PyTorch's MultiStepLR write it (the lists held by the closure, iterated)."""
    boundaries = [2, 4]
    rates = [lr, lr / 10, lr / 100]

    def schedule(step: Any) -> Any:
        value = jnp.asarray(rates[0])
        for boundary, rate in zip(boundaries, rates[1:]):
            value = jnp.where(step >= boundary, rate, value)
        return value

    return optax.adam(schedule)


# cleanrl's scripts: ``args`` made at module level, read by a module-level schedule.
ARGS = argparse.Namespace(learning_rate=2.5e-4, num_iterations=50, num_minibatches=4, update_epochs=4)


def linear_schedule(count: Any) -> Any:
    frac = 1.0 - (count // (ARGS.num_minibatches * ARGS.update_epochs)) / ARGS.num_iterations
    return ARGS.learning_rate * frac


def cleanrl_module_level(optax: Any, lr: float) -> Any:
    """cleanrl ppo: ``args`` a module global (``args = tyro.cli(Args)``), the schedule at module level."""
    global ARGS
    ARGS = argparse.Namespace(learning_rate=lr, num_iterations=50, num_minibatches=4, update_epochs=4)
    return optax.chain(
        optax.clip_by_global_norm(0.5),
        optax.inject_hyperparams(optax.adam)(learning_rate=linear_schedule, eps=1e-5),
    )


BUILDERS = {
    "cleanrl_ppo": cleanrl_ppo,
    "ferminet_adam": ferminet_adam,
    "ferminet_lamb": ferminet_lamb,
    "scenic_compound": scenic_compound,
    "scenic_layerwise": scenic_layerwise,
    "learned_optimization_pwl": learned_optimization_pwl,
    "mava_omegaconf": mava_omegaconf,
    "hydra_interpolation": hydra_interpolation,
    "multinerf_partial": multinerf_partial,
    "octo_kwargs": octo_kwargs,
    "nanodo_rsqrt": nanodo_rsqrt,
    "levanter_dataclass": levanter_dataclass,
    "big_vision_method": big_vision_method,
    "t5x_callable": t5x_callable,
    "flax_partial_config": flax_partial_config,
    "scenic_config_get": scenic_config_get,
    "octo_dict_get": octo_dict_get,
    "hydra_config_get": hydra_config_get,
    "pydantic_settings": pydantic_settings,
    "equinox_module": equinox_module,
    "partial_of_bound_method": partial_of_bound_method,
    "multistep_lists": multistep_lists,
    "cleanrl_module_level": cleanrl_module_level,
}
# The default run: one of each kind of config (the rest in the exhaustive sets).
SLICE = {
    "cleanrl_ppo",
    "ferminet_adam",
    "mava_omegaconf",
    "multinerf_partial",
    "octo_kwargs",
    "big_vision_method",
    "learned_optimization_pwl",
}


def _steps(tx: Any, steps: int = 3) -> Any:
    params, state = PARAMS, tx.init(PARAMS)
    for _ in range(steps):
        updates, state = tx.update(GRADS, state, params)
        params = plain.apply_updates(params, updates)
    return params, state


@pytest.mark.parametrize(
    "builder", sliced([(b,) for b in BUILDERS.values()], list(BUILDERS), lambda i: i in SLICE)
)
def test_a_sweep_through_the_program_s_config_compiles_once(builder: Any) -> None:
    traces: list[int] = []

    @jax.jit
    def step(tx: Any, params: Any) -> Any:
        traces.append(1)
        updates, state = tx.update(GRADS, tx.init(params), params)
        return plain.apply_updates(params, updates), state

    for lr in RATES:
        tx, expected = builder(dropin, lr), builder(plain, lr)
        step(tx, PARAMS)
        # Plain optax's numbers, bit for bit eagerly, and its state layout.
        chex.assert_trees_all_equal(_steps(tx), _steps(expected))
        assert jax.tree_util.tree_structure(tx.init(PARAMS)) == jax.tree_util.tree_structure(
            expected.init(PARAMS)
        )
    assert len(traces) == 1


def test_the_numbers_read_are_leaves_named_by_their_paths() -> None:
    tx = ferminet_lamb(dropin, 1e-3)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
    assert ".learning_rate.cfg.optim.lr.rate" in paths and ".learning_rate.cfg.optim.lr.delay" in paths
    assert float(tx.learning_rate.hyperparams["cfg.optim.lr.rate"]) == np.float32(1e-3)
    assert octo_kwargs(dropin, 1e-3).learning_rate.dynamic_argnames == (
        "kwargs['peak_value']",
        "kwargs['warmup_steps']",
    )
    assert big_vision_method(dropin, 1e-3).learning_rate.dynamic_argnames == (
        "self.config.lr",
        "self.config.schedule.warmup_steps",
        "self.total_steps",
    )


def test_vmap_over_a_grid_and_grad_through_the_config_s_rate() -> None:
    batch = opx.stack([octo_kwargs(dropin, lr) for lr in RATES])

    def loss_after(tx: Any) -> Any:
        params, _ = _steps(tx, 3)
        return jnp.sum(params["kernel"] ** 2)

    losses = jax.jit(jax.vmap(loss_after))(batch)
    for lr, loss in zip(RATES, losses):
        chex.assert_trees_all_close(loss, loss_after(octo_kwargs(plain, lr)), rtol=1e-6)

    tx = octo_kwargs(dropin, 1e-3)

    def loss_of_rate(rate: Any) -> Any:
        schedule = tx.learning_rate.replace(**{"kwargs['peak_value']": rate})
        return loss_after(tx.replace(learning_rate=schedule))

    grad = jax.grad(loss_of_rate)(jnp.float32(1e-3))
    eps = 1e-4
    numeric = (loss_of_rate(jnp.float32(1e-3 + eps)) - loss_of_rate(jnp.float32(1e-3 - eps))) / (2 * eps)
    assert float(grad) != 0.0
    chex.assert_trees_all_close(grad, numeric, rtol=2e-2)


def test_a_number_needed_as_a_python_value_is_static_and_a_compared_one_guarded() -> None:
    def stepped(optax: Any, lr: float, pieces: int = 3) -> Any:
        config = ml_collections.ConfigDict({"lr": lr, "pieces": pieces, "warmup": 2})

        def schedule(step: Any) -> Any:
            value = config.lr * jnp.ones(())
            if config.warmup > 0:
                value = value * jnp.minimum(1.0, step / config.warmup)
            for i in range(config.pieces):
                value = jnp.where(step > 2 * (i + 1), value / 2.0, value)
            return value

        return optax.sgd(schedule)

    tx = stepped(dropin, 0.1)
    assert "config.pieces" in tx.learning_rate.detected_static_argnames
    assert "config.lr" in tx.learning_rate.dynamic_argnames
    chex.assert_trees_all_equal(_steps(tx, 8), _steps(stepped(plain, 0.1), 8))
    assert jax.tree_util.tree_structure(stepped(dropin, 0.2)) == jax.tree_util.tree_structure(tx)
    assert jax.tree_util.tree_structure(stepped(dropin, 0.1, 4)) != jax.tree_util.tree_structure(tx)


def test_a_config_changed_after_the_build_is_an_error_naming_it() -> None:
    def build(config: Any) -> Any:
        return dropin.adam(lambda step: config.lr * jnp.minimum(1.0, step / config.warmup))

    config = ml_collections.ConfigDict({"lr": 0.1, "warmup": 2})
    tx = build(config)
    state = tx.init(PARAMS)
    tx.update(GRADS, state, PARAMS)
    config.lr = 0.2
    with pytest.raises(
        ValueError, match=r"config\.lr = 0\.1 when the optimizer was made, and it is now 0\.2"
    ):
        tx.update(GRADS, state, PARAMS)
    chex.assert_trees_all_equal(
        _steps(build(config)), _steps(plain.adam(lambda s: 0.2 * jnp.minimum(1.0, s / 2)))
    )


class _Magic:
    """A config whose ``__getattr__`` computes what it gives: the mechanism does not replace it."""

    def __init__(self, **values: Any):
        self._values = values

    def __getattr__(self, name: str) -> Any:
        return self._values[name] * 1.0


def test_what_cannot_be_read_safely_is_static_and_a_mask_is_compared_by_what_it_reads() -> None:
    _what_cannot_be_read_safely_keeps_the_object_static_and_the_numbers_right()
    _two_configs_differing_only_where_read_are_distinct_static_values()


def _what_cannot_be_read_safely_keeps_the_object_static_and_the_numbers_right() -> None:
    def build(optax: Any, lr: float) -> Any:
        config = _Magic(lr=lr)
        return optax.sgd(lambda step: config.lr / (1.0 + step))

    with pytest.warns(
        UserWarning,
        match=r"'learning_rate', the function .*build.*config: _Magic\.__getattr__\('lr'\) computes its "
        r"value .* compared by identity \(_Magic\)",
    ):
        a = build(dropin, 0.1)
    # Another rate through the same code: a recompilation, named (issue 48), once per code location.
    with pytest.warns(
        UserWarning, match=r"only by a number it holds static \(config\._values\['lr'\] = 0\.1, now 0\.2\)"
    ):
        b = build(dropin, 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(dropin, 0.3)
    assert "learning_rate" in a.static_argnames
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)  # whole objects, by identity
    chex.assert_trees_all_equal(_steps(a), _steps(build(plain, 0.1)))


def test_reading_code_fails_closed_on_an_instruction_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython 3.14 loads most locals with LOAD_FAST_BORROW: a reader that skipped
    # it would miss reads of self, and two configs differing there would compare equal.
    def method(self: Any) -> Any:
        return self.lr * 2

    assert _lookups.paths_read(method.__code__, "self") == ((("attr", "lr"),),)
    real = dis.get_instructions

    def renamed(code: Any) -> Any:
        for i in real(code):
            yield (
                i._replace(opname="LOAD_FAST_BORROW")
                if i.opname in ("LOAD_FAST", "LOAD_FAST_LOAD_FAST")
                else i
            )

    monkeypatch.setattr(_bytecode.dis, "get_instructions", renamed)
    monkeypatch.setattr(_bytecode, "_NAMES_A_VARIABLE", _bytecode._NAMES_A_VARIABLE | {"LOAD_FAST_BORROW"})
    _lookups.paths_read.cache_clear()
    try:
        assert _lookups.paths_read(method.__code__, "self") is None
    finally:
        _lookups.paths_read.cache_clear()


def _two_configs_differing_only_where_read_are_distinct_static_values() -> None:
    # A mask (not a schedule) stays static, compared by the values it reads.
    def masked(threshold: int, name: str) -> Any:
        config = types.SimpleNamespace(threshold=threshold, name=name)
        return dropin.adamw(0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= config.threshold, p))

    assert jax.tree_util.tree_structure(masked(2, "a")) == jax.tree_util.tree_structure(masked(2, "b"))
    assert jax.tree_util.tree_structure(masked(2, "a")) != jax.tree_util.tree_structure(masked(1, "a"))


# --------------------------------------------------------------------------
# The forms read through a config method, a model, a module or a list: each number a leaf, named
# by its path (what ``opx.explain`` and ``tree_flatten_with_path`` say), absent keys included.


# Each form: its builder, and the leaves of its schedule (the paths read).
FORMS = [
    (scenic_config_get, ["config['base_learning_rate']", "config['steps_per_cycle']", "config['t_mul']",
                         "config.warmup_steps"]),
    (octo_dict_get, ["kwargs['peak_value']", "kwargs['warmup_steps']"]),
    (hydra_config_get, ["cfg.optim['lr']", "cfg.optim['warmup']"]),
    (pydantic_settings, ["settings.decay_factor", "settings.learning_rate", "settings.warmup_steps"]),
    (equinox_module, ["self.learning_rate"]),  # warmup_steps: eqx.field(static=True), static
    (partial_of_bound_method, ["decay_every", "factor", "self.base_lr"]),
    (multistep_lists, ["boundaries[0]", "boundaries[1]", "rates[0]", "rates[1]", "rates[2]"]),
]  # fmt: skip


def test_each_form_s_numbers_are_leaves_named_by_their_paths_and_a_config_changed_is_refused() -> None:
    # One test of the default run (its budget): the forms' leaves, a key that appears, and the
    # forms of a config changed after the build (issue 43), each a function below.
    for builder, leaves in FORMS:
        b, a = builder(dropin, 3e-3), builder(dropin, 1e-3)
        found = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(a)[0]]
        assert sorted(a.learning_rate.dynamic_argnames) == sorted(leaves), builder.__name__
        assert all(f".learning_rate.{n}" in found for n in leaves), found
        assert opx.explain(a, b), str(opx.explain(a, b))  # one compilation
    # cleanrl's module-level ``args``: the schedule is inject_hyperparams' rate.
    schedule = cleanrl_module_level(dropin, 1e-3).args[1].learning_rate
    assert set(schedule.dynamic_argnames) == {
        "ARGS.learning_rate",
        "ARGS.num_iterations",
        "ARGS.num_minibatches",
        "ARGS.update_epochs",
    }
    _a_key_read_with_get_that_appears_is_another_configuration_named_by_explain()
    _a_config_changed_after_the_build_is_refused_under_jit_as_eagerly()


def _a_key_read_with_get_that_appears_is_another_configuration_named_by_explain() -> None:
    def build(config: Any) -> Any:
        return dropin.adam(lambda step: config.get("lr", 1e-3) * config.get("t_mul", 1.0) / (1.0 + step))

    without = build({"lr": 0.1})
    with_it = build({"lr": 0.1, "t_mul": 2.0})
    assert without.learning_rate.dynamic_argnames == ("config['lr']",)
    report = opx.explain(without, with_it)
    assert not report and "learning_rate" in str(report), str(report)
    chex.assert_trees_all_equal(_steps(without), _steps(plain.adam(lambda s: 0.1 * 1.0 / (1.0 + s))))
    chex.assert_trees_all_equal(_steps(with_it), _steps(plain.adam(lambda s: 0.1 * 2.0 / (1.0 + s))))


@exhaustive
def test_ferminet_s_exponent_is_static_by_value_where_xla_specializes_it_and_the_rest_leaves() -> None:
    # decay 0.5: XLA specializes x ** 0.5 (a square root) for plain optax's constant; as a leaf
    # it would compute another number, so that one read is static, compared by value.
    def ferminet(optax: Any, lr: float, decay: float) -> Any:
        cfg = ml_collections.ConfigDict({"optim": {"lr": {"rate": lr, "decay": decay, "delay": 10.0}}})

        def learning_rate_schedule(t_: Any) -> Any:
            return cfg.optim.lr.rate * jnp.power(1.0 / (1.0 + t_ / cfg.optim.lr.delay), cfg.optim.lr.decay)

        return optax.adam(learning_rate_schedule)

    tx = ferminet(dropin, 1e-3, 0.5)
    schedule = tx.learning_rate
    assert schedule.static_argnames == ("cfg.optim.lr.decay",)
    assert schedule.dynamic_argnames == ("cfg.optim.lr.delay", "cfg.optim.lr.rate")
    for lr in RATES:
        chex.assert_trees_all_equal(_steps(ferminet(dropin, lr, 0.5)), _steps(ferminet(plain, lr, 0.5)))
    assert jax.tree_util.tree_structure(ferminet(dropin, 2e-2, 0.5)) == jax.tree_util.tree_structure(tx)
    report = opx.explain(tx, ferminet(dropin, 1e-3, 0.25))
    assert not report and "cfg.optim.lr.decay" in str(report), str(report)


@exhaustive
def test_a_module_level_schedule_reads_its_module_s_config_through_a_namespace_of_its_own() -> None:
    tx = cleanrl_module_level(dropin, 1e-3)
    module_args = ARGS
    schedule = tx.args[1].learning_rate
    rebuilt = schedule.factory(**schedule.hyperparams)  # the function, over these values
    assert rebuilt.__globals__ is not globals() and rebuilt.__globals__["ARGS"] is not module_args
    np.testing.assert_allclose(float(rebuilt(32)), linear_schedule(32), rtol=1e-6)
    assert linear_schedule(32) != linear_schedule(0)
    assert globals()["ARGS"] is module_args  # the module's own is untouched
    chex.assert_trees_all_equal(_steps(tx), _steps(cleanrl_module_level(plain, 1e-3)))


_HELPER_RATE = 0.1


def _reads_the_rate() -> float:
    return _HELPER_RATE


def _schedule_with_a_helper(step: Any) -> Any:
    return _HELPER_RATE * _reads_the_rate() / (1.0 + step)


@exhaustive
def test_a_module_level_schedule_whose_helper_reads_the_same_global_stays_static_by_value() -> None:
    # The helper reads the module's own global: a rebuilt schedule could not give it the leaf.
    global _HELPER_RATE
    tx = dropin.adam(_schedule_with_a_helper)
    assert "learning_rate" in tx.static_argnames
    _HELPER_RATE = 0.2
    try:
        other = dropin.adam(_schedule_with_a_helper)
        # Compared by the values it reads of the module: another value is another program.
        assert jax.tree_util.tree_structure(other) != jax.tree_util.tree_structure(tx)
        chex.assert_trees_all_equal(_steps(other), _steps(plain.adam(_schedule_with_a_helper)))
    finally:
        _HELPER_RATE = 0.1


@exhaustive
def test_a_closure_whose_module_helper_reads_a_module_config_compiles_per_value_and_checks_it() -> None:
    # The scale is a leaf; what the helper reads of its module is a constant of each trace: part
    # of the configuration (another value, another compilation) and checked as the scale is.
    global _HELPER_RATE

    def build(optax: Any, scale: float) -> Any:
        return optax.adam(lambda step: scale * _reads_the_rate() / (1.0 + step))

    traces: list[int] = []

    def run(tx: Any, params: Any) -> Any:
        traces.append(1)
        updates, _ = tx.update(GRADS, tx.init(params), params)
        return plain.apply_updates(params, updates)

    step = jax.jit(run)

    def expected(scale: float) -> Any:  # plain optax: the optimizer closed over, traced anew
        return jax.jit(functools.partial(run, build(plain, scale)))(PARAMS)

    def same(got: Any, want: Any) -> None:  # under jit: XLA's rewrites of plain's constants aside
        chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-8)

    try:
        first = build(dropin, 1.0)
        assert first.learning_rate.dynamic_argnames == ("scale",)
        for scale in (1.0, 2.0):
            same(step(build(dropin, scale), PARAMS), expected(scale))
        _HELPER_RATE = 0.2
        with pytest.raises(ValueError, match=r"_reads_the_rate reads _HELPER_RATE = 0\.1 .* now 0\.2"):
            step(first, PARAMS)
        for scale in (1.0, 2.0):
            same(step(build(dropin, scale), PARAMS), expected(scale))
        assert len(traces) == 2 + 4  # ours: once per value of the module's rate; plain's four
        chex.assert_trees_all_equal(_steps(build(dropin, 2.0)), _steps(build(plain, 2.0)))  # eagerly
    finally:
        _HELPER_RATE = 0.1


# --------------------------------------------------------------------------
# A config changed after the build: refused under jit as eagerly, never a silent old value.


def _changed_list() -> tuple[Any, Any]:
    rates = [0.1, 0.01]
    tx = dropin.adam(lambda step: jnp.where(jnp.asarray(step) < 2, rates[0], rates[1]) * jnp.ones(()))

    def change() -> None:
        rates[0] = 0.5

    return tx, change


def _changed_omegaconf_attribute() -> tuple[Any, Any]:
    cfg = omegaconf.OmegaConf.create({"optimizer": {"lr": 0.1, "warmup": 2}})
    tx = mava_like(cfg)

    def change() -> None:
        cfg.optimizer.lr = 0.5

    return tx, change


def _changed_omegaconf_update() -> tuple[Any, Any]:
    cfg = omegaconf.OmegaConf.create({"optimizer": {"lr": 0.1, "warmup": 2}})
    tx = mava_like(cfg)

    def change() -> None:
        omegaconf.OmegaConf.update(cfg, "optimizer.lr", 0.5)

    return tx, change


def mava_like(cfg: Any) -> Any:
    return dropin.adam(lambda step: cfg.optimizer.lr * jnp.minimum(1.0, (step + 1) / cfg.optimizer.warmup))


def _changed_field_reference() -> tuple[Any, Any]:
    config = ml_collections.ConfigDict()
    config.lr = 0.1
    config.end_lr = config.get_ref("lr") * 0.1
    tx = dropin.adam(lambda step: config.end_lr + (config.lr - config.end_lr) / (1.0 + step))

    def change() -> None:
        config.lr = 0.5  # end_lr follows: FieldReference

    return tx, change


@dataclasses.dataclass
class _Args:
    """An argparse-style dataclass (tyro, simple_parsing): its fields assigned after parsing."""

    learning_rate: float = 0.1
    num_iterations: int = 50


def _changed_dataclass_field() -> tuple[Any, Any]:
    args = _Args()
    tx = dropin.adam(lambda count: args.learning_rate * (1.0 - count / args.num_iterations))

    def change() -> None:
        args.learning_rate = 0.5

    return tx, change


def _changed_schedule_object() -> tuple[Any, Any]:
    schedule = T5xRsqrt(0.1, 4)
    tx = dropin.adam(schedule)

    def change() -> None:
        schedule.base_learning_rate = 0.5

    return tx, change


CHANGES = {
    "list in place": (_changed_list, r"rates\[0\] = 0\.1 .* now 0\.5"),
    "OmegaConf attribute": (_changed_omegaconf_attribute, r"cfg\.optimizer\.lr = 0\.1 .* now 0\.5"),
    "OmegaConf.update": (_changed_omegaconf_update, r"cfg\.optimizer\.lr = 0\.1 .* now 0\.5"),
    "FieldReference": (_changed_field_reference, r"config\.(end_)?lr = 0\.(0)?1\d* .* now 0\.0?5"),
    "dataclass field": (_changed_dataclass_field, r"args\.learning_rate = 0\.1 .* now 0\.5"),
    "schedule object": (_changed_schedule_object, r"self\.base_learning_rate = 0\.1 .* now 0\.5"),
}


@jax.jit
def _jitted_step(tx: Any, params: Any) -> Any:
    updates, state = tx.update(GRADS, tx.init(params), params)
    return plain.apply_updates(params, updates), state


def _a_config_changed_after_the_build_is_refused_under_jit_as_eagerly() -> None:
    for form, (make, message) in CHANGES.items():
        tx, change = make()
        change()  # after the build, before the first jitted call
        with pytest.raises(ValueError, match=message) as under_jit:
            _jitted_step(tx, PARAMS)
        with pytest.raises(ValueError) as eagerly:
            tx.init(PARAMS)
        assert str(under_jit.value) == str(eagerly.value), form  # the one message, naming the value
    # A change between two jitted steps: the second is refused (plain optax would keep the
    # value it traced with, silently: see the sweeps guide).
    tx, change = _changed_dataclass_field()
    params, _ = _jitted_step(tx, PARAMS)
    change()
    with pytest.raises(ValueError, match=r"args\.learning_rate = 0\.1 when the optimizer was made"):
        _jitted_step(tx, params)
    _what_jax_rebuilds_holds_its_leaves_and_no_config()


def _what_jax_rebuilds_holds_its_leaves_and_no_config() -> None:
    tx, change = _changed_dataclass_field()
    rebuilt = jax.tree_util.tree_map(lambda x: x, tx)  # as a jitted function returns it
    assert jax.tree_util.tree_structure(rebuilt) == jax.tree_util.tree_structure(tx)
    change()
    _jitted_step(rebuilt, PARAMS)  # its values are its own: nothing to read again
    with pytest.raises(ValueError, match=r"args\.learning_rate"):
        _jitted_step(tx, PARAMS)
