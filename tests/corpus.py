"""A corpus of real optimizer configurations from public JAX projects (tests/test_corpus.py).

Each entry re-expresses, in a few lines of our own, how a public project
builds its optax optimizer: the same factories, combinators, schedules,
masks (lambdas, closures, mask trees), label functions, user-written
transformations and ``inject_hyperparams``, in the same arrangement. A builder
``make(optax, rate)`` takes the optax *module* (plain ``optax`` or the drop-in
``optax_pytree.optax``) and the learning rate or peak rate being swept, and
builds the optimizer anew on each call, as a user's ``make_optimizer(config)``
called per trial does. Each entry has a parameter tree named as the source's
model names its parameters, with a few elements per array, so that masks and
label functions act as they do in the source (no weight decay on biases and
norm scales, frozen towers, ...).

Step counts (warmup, decay, accumulation, sync periods) are scaled down from
the sources' configurations so that three steps cross their boundaries; the
structure is the source's. Every entry names its source: repository, file and
function.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax as plain_optax  # the parameter structure of lookahead only

Params = Any
Builder = Callable[[Any, float], Any]


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration: ``make(optax, rate)`` and the parameters it trains."""

    name: str  # the test id
    source: str  # repository: path (function)
    make: Builder
    params: Params
    rates: tuple[float, float, float]  # the sweep; the first is the one checked for equality
    extra: str = ""  # "value": update(..., value=loss) (reduce_on_plateau)
    lookahead: bool = False  # params are optax.LookaheadParams; gradients are the fast ones'
    note: str = ""  # what a reader should know when a check fails
    # Where the source needs a newer optax than the oldest supported (0.2.5):
    # a name it uses ("contrib.MuonDimensionNumbers"), and the optax from which
    # the swept rate can be a leaf at all (older ones need it as a Python value).
    needs: str = ""
    one_trace_from: tuple[int, ...] = ()


# ---------------------------------------------------------------------------
# Parameter trees: nested dicts of shapes, turned into small float32 arrays
# with distinct values (so that every leaf has its own gradient).


def arrays(spec: Any) -> Any:
    """Nested dicts of shapes (tuples) -> the same dicts of deterministic float32 arrays."""
    counter = iter(range(10_000))

    def build(node: Any) -> Any:
        if isinstance(node, tuple):
            k = next(counter)
            n = math.prod(node)
            values = 0.4 * np.sin(0.9 * np.arange(n) + 1.3 * k) + 0.05 * (k % 3)
            return jnp.asarray(values.reshape(node), dtype=jnp.float32)
        return {key: build(child) for key, child in node.items()}

    return build(spec)


def dense(*shape: int) -> dict[str, tuple[int, ...]]:
    """A flax linen Dense/Conv: kernel and bias."""
    return {"kernel": shape, "bias": (shape[-1],)}


def norm(n: int, scale: str = "scale", bias: str = "bias") -> dict[str, tuple[int, ...]]:
    return {scale: (n,), bias: (n,)}


# ---------------------------------------------------------------------------
# Small re-expressions of the sources' tree utilities.


def flatten_dict(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """flax.traverse_util.flatten_dict: {path tuple: leaf}."""
    flat: dict[tuple[str, ...], Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten_dict(value, (*prefix, key)))
        else:
            flat[(*prefix, key)] = value
    return flat


def unflatten_dict(flat: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    """flax.traverse_util.unflatten_dict."""
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def path_aware_map(f: Callable[[tuple[str, ...], Any], Any], tree: dict[str, Any]) -> dict[str, Any]:
    """flax.traverse_util.path_aware_map."""
    return unflatten_dict({path: f(path, leaf) for path, leaf in flatten_dict(tree).items()})


def named_tree_map(f: Callable[[str, Any], Any], tree: Any, sep: str = "/") -> Any:
    """EasyLM's jax_utils.named_tree_map / big_vision's u.tree_map_with_names: f(name, leaf)."""

    def name(path: Any) -> str:
        return sep.join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)

    return jax.tree_util.tree_map_with_path(lambda path, x: f(name(path), x), tree)


# ===========================================================================
# google/flax: examples/


def flax_imagenet(optax: Any, rate: float) -> Any:
    # google/flax: examples/imagenet/train.py (create_learning_rate_fn, create_train_state).
    # config.warmup_epochs and num_epochs are floats in configs/default.py: float step counts.
    steps_per_epoch, warmup_epochs, num_epochs = 2, 1.0, 3.0
    warmup_fn = optax.linear_schedule(
        init_value=0.0, end_value=rate, transition_steps=warmup_epochs * steps_per_epoch
    )
    cosine_epochs = max(num_epochs - warmup_epochs, 1)
    cosine_fn = optax.cosine_decay_schedule(init_value=rate, decay_steps=cosine_epochs * steps_per_epoch)
    schedule_fn = optax.join_schedules(
        schedules=[warmup_fn, cosine_fn], boundaries=[warmup_epochs * steps_per_epoch]
    )
    return optax.sgd(learning_rate=schedule_fn, momentum=0.9, nesterov=True)


RESNET = arrays(
    {
        "conv_init": {"kernel": (1, 1, 2, 3)},
        "bn_init": norm(3),
        "ResNetBlock_0": {"Conv_0": {"kernel": (1, 1, 2, 3)}},
        "Dense_0": dense(2, 3),
    }
)


def _rsqrt_schedule(init_value: float, shift: int) -> Callable[[Any], Any]:
    # google/flax: examples/wmt/train.py (rsqrt_schedule): a closure of the rate.
    def schedule(count: Any) -> Any:
        return init_value * (count + shift) ** -0.5 * shift**0.5

    return schedule


def flax_wmt(optax: Any, rate: float) -> Any:
    # google/flax: examples/wmt/train.py (create_learning_rate_schedule, main's TrainState.create);
    # configs/default.py: weight_decay = 0.0.
    warmup_steps = 2
    learning_rate_fn = optax.join_schedules(
        [
            optax.linear_schedule(init_value=0, end_value=rate, transition_steps=warmup_steps),
            _rsqrt_schedule(init_value=rate, shift=warmup_steps),
        ],
        boundaries=[warmup_steps],
    )
    return optax.adamw(learning_rate=learning_rate_fn, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.0)


TRANSFORMER = arrays(
    {
        "shared_embedding": {"embedding": (2, 3)},
        "encoder": {"encoderblock_0": {"LayerNorm_0": norm(3), "MlpBlock_0": {"Dense_0": dense(2, 3)}}},
        "decoder": {"logitdense": {"kernel": (2, 3)}},
    }
)


def flax_nlp_seq_scheduler(
    factors: str = "constant * linear_warmup * rsqrt_decay",
    base_learning_rate: float = 0.5,
    warmup_steps: int = 8000,
) -> Callable[[Any], Any]:
    # google/flax: examples/nlp_seq/train.py (create_learning_rate_scheduler), the factors used.
    names = [n.strip() for n in factors.split("*")]

    def step_fn(step: Any) -> Any:
        ret = 1.0
        for name in names:
            if name == "constant":
                ret *= base_learning_rate
            elif name == "linear_warmup":
                ret *= jnp.minimum(1.0, step / warmup_steps)
            elif name == "rsqrt_decay":
                ret /= jnp.sqrt(jnp.maximum(step, warmup_steps))
            else:
                raise ValueError(f"Unknown factor {name}.")
        return jnp.asarray(ret, dtype=jnp.float32)

    return step_fn


def flax_nlp_seq(optax: Any, rate: float) -> Any:
    # google/flax: examples/nlp_seq/train.py (main): adamw over a user-written schedule.
    learning_rate_fn = flax_nlp_seq_scheduler(base_learning_rate=rate, warmup_steps=2)
    return optax.adamw(learning_rate_fn, b1=0.9, b2=0.98, eps=1e-9, weight_decay=1e-1)


def flax_ogbg_molpcba(optax: Any, rate: float) -> Any:
    # google/flax: examples/ogbg_molpcba/train.py (create_optimizer), config.optimizer = 'adam'.
    return optax.adam(learning_rate=rate)


GRAPH_NET = arrays({"MLP_0": {"Dense_0": dense(2, 3), "LayerNorm_0": norm(3)}})


def flax_mnist(optax: Any, rate: float) -> Any:
    # google/flax: examples/mnist/train.py (nnx.Optimizer(model, optax.sgd(learning_rate, momentum))).
    return optax.sgd(rate, 0.9)


CNN = arrays({"conv1": dense(1, 1, 2, 3), "linear1": dense(2, 3)})


def flax_ppo(optax: Any, rate: float) -> Any:
    # google/flax: examples/ppo/ppo_lib.py (create_train_state), decaying_lr_and_clip_param = True.
    lr = optax.linear_schedule(init_value=rate, end_value=0.0, transition_steps=5)
    return optax.adam(lr)


ACTOR_CRITIC = arrays({"hidden": dense(2, 3), "logits": dense(2, 3)})


def flax_sst2(optax: Any, rate: float) -> Any:
    # google/flax: examples/sst2/train.py (create_train_state); configs/default.py values.
    return optax.chain(
        optax.sgd(learning_rate=rate, momentum=0.9),
        optax.add_decayed_weights(weight_decay=3e-6),
    )


LSTM_CLASSIFIER = arrays(
    {
        "embedder": {"embedding": (2, 3)},
        "encoder": {"lstm": {"ii": {"kernel": (2, 3)}}},
        "classifier": {"output": dense(2, 3)},
    }
)


TRANSFER = arrays(
    {
        "backbone": {"Conv_0": dense(1, 1, 2, 3), "LayerNorm_0": norm(3)},
        "head": dense(2, 3),
    }
)


def flax_transfer_learning(optax: Any, rate: float) -> Any:
    # google/flax: docs/guides/training_techniques/transfer_learning.md (optax.multi_transform):
    # labels from traverse_util.path_aware_map, the backbone frozen with set_to_zero.
    partition_optimizers = {"trainable": optax.adam(rate), "frozen": optax.set_to_zero()}
    param_partitions = path_aware_map(
        lambda path, v: "frozen" if "backbone" in path else "trainable", TRANSFER
    )
    return optax.multi_transform(partition_optimizers, param_partitions)


MLP_PARAMS = arrays({"Dense_0": dense(2, 3), "Dense_1": dense(2, 3)})


def flax_guide_masked_scales(optax: Any, rate: float) -> Any:
    # google/flax: docs/guides/converting_and_upgrading/optax_update_guide.rst
    # ("Multiple Optimizers / Updating a Subset of Parameters"): masks from a traversal.
    momentum = 0.9
    # kernels = ModelParamTraversal(lambda p, _: 'kernel' in p); kernels.update(lambda _: True, all_false)
    all_false = jax.tree_util.tree_map(lambda _: False, MLP_PARAMS)
    kernels_mask = path_aware_map(lambda p, v: True if "kernel" in p else v, all_false)
    biases_mask = path_aware_map(lambda p, v: True if "bias" in p else v, all_false)
    return optax.chain(
        optax.trace(decay=momentum),
        optax.masked(optax.scale(-rate), kernels_mask),
        optax.masked(optax.scale(-rate * 0.1), biases_mask),
    )


def flax_guide_weight_decay(optax: Any, rate: float) -> Any:
    # google/flax: docs/guides/converting_and_upgrading/optax_update_guide.rst ("Weight Decay").
    weight_decay = 1e-4
    return optax.chain(
        optax.scale_by_adam(),
        optax.add_decayed_weights(weight_decay),
        optax.scale(-rate),
    )


# ===========================================================================
# google-research/big_vision: big_vision/optax.py (make), utils.py
# (create_learning_rate_schedule, make_mask_trees), configs/*.py.


def _bv_schedule(
    total_steps: int,
    base: float = 1.0,
    decay_type: str = "stair",
    warmup_steps: int = 0,
    cooldown_steps: int = 0,
    **kw: Any,
) -> Callable[[Any], Any]:
    # big_vision/utils.py (create_learning_rate_schedule), steps given in steps: a closure.
    def step_fn(step: Any) -> Any:
        lr = base
        progress = (step - warmup_steps) / float(total_steps - warmup_steps)
        progress = jnp.clip(progress, 0.0, 1.0)
        if decay_type in ("linear", "polynomial"):
            zero = kw.get("end", kw.get("linear_end", 0))
            lr = zero + (lr - zero) * (1.0 - progress) ** kw.get("power", 1)
        elif decay_type == "cosine":
            lr = lr * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        elif decay_type == "rsqrt":
            t, shift = kw.get("timescale", 10_000), kw.get("shift", 0)
            lr = jnp.where(
                warmup_steps <= step,
                lr / jnp.sqrt(1 + (step + shift - warmup_steps) / t),
                lr / jnp.sqrt(1 + shift / t),
            )
        else:
            raise ValueError(f"Unknown lr type {decay_type}")
        if warmup_steps:
            lr = lr * jnp.minimum(1.0, step / warmup_steps)
        if cooldown_steps:
            lr = lr * jnp.minimum(1.0, (total_steps - step) / cooldown_steps)
        return jnp.asarray(lr, dtype=jnp.float32)

    return step_fn


def _bv_mask_trees(params: Params, patterns_values: Any) -> tuple[list[Any], tuple[Any, ...]]:
    # big_vision/optax.py (_make_mask_trees) over utils.py (make_mask_trees): one tree of
    # numpy bools per pattern, the first full match wins.
    patterns, values = zip(*patterns_values)
    compiled = [re.compile(p) for p in patterns]

    def matchfirst(name: str, _: Any) -> Any:
        matches: list[bool] = []
        for pattern in compiled:
            matches.append(not any(matches) and bool(pattern.fullmatch(name)))
        return np.array(matches)

    multimask = named_tree_map(matchfirst, params)
    masks = [jax.tree_util.tree_map(lambda m, i=i: m[i], multimask) for i in range(len(patterns))]
    return masks, values


def _bv_split_frozen(masks: Any, scheds: Any) -> tuple[Any, Any, Any]:
    # big_vision/optax.py (_split_frozen): a schedule of None freezes.
    all_false = jax.tree_util.tree_map(lambda *bools: not any(bools), *masks)
    frozen_masks = [mask for mask, sched in zip(masks, scheds) if sched is None]
    frozen_mask = jax.tree_util.tree_map(lambda *bools: any(bools), *frozen_masks, all_false)
    masks, scheds = zip(*((m, s) for m, s in zip(masks, scheds) if s is not None))
    return frozen_mask, masks, scheds


def _bv_scale_by_adafactor(
    optax: Any,
    min_dim_size_to_factor: int = 32,
    decay_rate: float = 0.8,
    decay_offset: int = 0,
    beta2_cap: float = 0.999,
    clipping_threshold: float | None = None,
    momentum: float = 0.9,
    dtype_momentum: Any = jnp.bfloat16,
    eps: float = 1e-30,
) -> Any:
    # big_vision/optax.py (scale_by_adafactor, registered as "big_vision.scale_by_adafactor").
    def _decay_rate_pow(i: Any, exponent: Any) -> Any:
        t = jnp.array(i, jnp.float32) + 1.0
        return jnp.minimum(beta2_cap, 1.0 - t ** (-exponent))

    scale_by_rms = optax.scale_by_factored_rms(
        factored=True,
        decay_rate=decay_rate,
        step_offset=decay_offset,
        min_dim_size_to_factor=min_dim_size_to_factor,
        epsilon=eps,
        decay_rate_fn=_decay_rate_pow,
    )
    clip = optax.clip_by_block_rms(clipping_threshold) if clipping_threshold else optax.identity()
    mom = (
        optax.ema(momentum, debias=False, accumulator_dtype=dtype_momentum) if momentum else optax.identity()
    )
    return optax.chain(scale_by_rms, clip, mom)


def _bv_momentum_hp(
    optax: Any, momentum: float = 0.9, dtype: Any = jnp.bfloat16, nesterov: bool = False
) -> Any:
    # big_vision/optax.py (momentum_hp, registered as "big_vision.momentum_hp").
    return optax.trace(decay=momentum, accumulator_dtype=dtype, nesterov=nesterov)


def bv_make(optax: Any, config: dict[str, Any], params: Params, total_steps: int) -> Any:
    # google-research/big_vision: big_vision/optax.py (make), as written; the
    # optax.big_vision.* names are looked up here instead of on the optax module.
    schedule = config.get("schedule", {})
    if not isinstance(schedule, (tuple, list)):
        schedule = [(".*", schedule)]
    masks, scheds = _bv_mask_trees(params, schedule)
    frozen_mask, masks, scheds = _bv_split_frozen(masks, scheds)
    not_frozen_mask = jax.tree_util.tree_map(operator.not_, frozen_mask)

    def create_schedule(mult: float = 1.0, **kw: Any) -> Callable[[Any], Any]:
        assert "base" not in kw, kw
        return _bv_schedule(total_steps=total_steps, base=mult, **kw)

    schedule_fns = [create_schedule(**sched) for sched in scheds]
    schedule_txs = [
        optax.masked(optax.scale_by_schedule(schedule_fn), mask)
        for schedule_fn, mask in zip(schedule_fns, masks)
    ] + [optax.masked(optax.set_to_zero(), frozen_mask)]

    grad_clip_norm_tx = (
        optax.masked(optax.clip_by_global_norm(config["grad_clip_norm"]), not_frozen_mask)
        if config.get("grad_clip_norm")
        else optax.identity()
    )
    name = config["optax_name"]
    if name.startswith("big_vision."):
        tx_func = {"scale_by_adafactor": _bv_scale_by_adafactor, "momentum_hp": _bv_momentum_hp}[
            name.split(".", 1)[1]
        ]
        tx_func = functools.partial(tx_func, optax)
    else:
        tx_func = operator.attrgetter(name)(optax)
    opt_txs = [optax.masked(tx_func(**config.get("optax", {})), not_frozen_mask)]

    lr_mult_txs = [optax.scale(config["lr"])]
    if config.get("lr_mults"):
        masks, mults = _bv_mask_trees(params, config["lr_mults"])
        lr_mult_txs += [optax.masked(optax.scale(mult), mask) for mult, mask in zip(mults, masks)]

    if config.get("wd"):
        wd_mults = config.get("wd_mults", [(".*/kernel$", 1.0)])
        masks, mults = _bv_mask_trees(params, wd_mults)
        weight_decay_txs = [
            optax.add_decayed_weights(config["wd"] * mult, mask) for mult, mask in zip(mults, masks)
        ]
    else:
        weight_decay_txs = []

    return optax.chain(
        grad_clip_norm_tx, *opt_txs, *lr_mult_txs, *weight_decay_txs, *schedule_txs, optax.scale(-1.0)
    )


VIT = arrays(
    {
        "embedding": dense(1, 1, 2, 3),
        "cls": (1, 1, 3),
        "Transformer": {
            "encoderblock_0": {"LayerNorm_0": {"scale": (3,)}, "MlpBlock_0": {"Dense_0": {"kernel": (2, 3)}}},
        },
        "head": dense(2, 3),
    }
)


def bv_vit_i1k(optax: Any, rate: float) -> Any:
    # google-research/big_vision: big_vision/configs/vit_i1k.py (get_config), through make().
    config = {
        "grad_clip_norm": 1.0,
        "optax_name": "scale_by_adam",
        "optax": {"mu_dtype": "bfloat16"},
        "lr": rate,
        "wd": 0.0001,
        "schedule": {"warmup_steps": 2, "decay_type": "cosine"},
    }
    return bv_make(optax, config, VIT, total_steps=10)


BIT = arrays(
    {
        "root_block": {"conv_root": {"kernel": (1, 1, 2, 3)}},
        "block1": {"unit01": {"gn1": norm(3)}},
        "head": dense(2, 3),
    }
)


def bv_bit_i1k(optax: Any, rate: float) -> Any:
    # google-research/big_vision: big_vision/configs/bit_i1k.py (get_config), through make():
    # "big_vision.momentum_hp" (trace with a bfloat16 accumulator), lr and wd by batch size.
    batch_size = 512
    config = {
        "optax_name": "big_vision.momentum_hp",
        "grad_clip_norm": 1.0,
        "wd": (1e-4 / 256) * batch_size,
        "lr": rate,  # (0.1 / 256) * batch_size in the source
        "schedule": {"decay_type": "cosine", "warmup_steps": 2},
    }
    return bv_make(optax, config, BIT, total_steps=10)


LIT = arrays(
    {
        "img": {"embedding": {"kernel": (1, 1, 2, 3)}, "head": {"kernel": (2, 3)}},
        "txt": {
            "Embed_0": {"embedding": (2, 3)},
            "encoder_norm": {"scale": (3,)},
            "head": {"kernel": (2, 3)},
        },
        "t": (1,),
        "b": (1,),
    }
)


def bv_siglip_lit(optax: Any, rate: float) -> Any:
    # google-research/big_vision: big_vision/configs/proj/image_text/siglip_lit_coco.py
    # (get_config, a text tower other than "base"): the image tower frozen by a None schedule.
    config = {
        "optax_name": "big_vision.scale_by_adafactor",
        "lr": rate,
        "wd": 0.01,
        "schedule": [
            ("img/.*", None),  # Freezes image tower.
            (".*", {"decay_type": "cosine", "warmup_steps": 2}),
        ],
        "grad_clip_norm": 1.0,
    }
    return bv_make(optax, config, LIT, total_steps=10)


VIT_G = arrays(
    {
        "embedding": {"kernel": (1, 1, 2, 32)},
        # 32 x 32: Adafactor's second moment is factored (min_dim_size_to_factor=32).
        "Transformer": {"encoderblock_0": {"MlpBlock_0": {"Dense_0": dense(32, 32)}}},
        "head": {"kernel": (32, 2)},
    }
)


def bv_vit_g(optax: Any, rate: float) -> Any:
    # google-research/big_vision: big_vision/configs/proj/scaling_laws/train_vit_g.py (get_config):
    # adafactor, weight decay multipliers by regex, rsqrt schedule with warmup and cooldown.
    config = {
        "optax_name": "big_vision.scale_by_adafactor",
        "grad_clip_norm": 1.0,
        "lr": rate,
        "wd": 0.03 * 8e-4,
        "wd_mults": [(".*head/kernel", 100.0), (".*/kernel", 1.0)],
        "schedule": {"decay_type": "rsqrt", "timescale": 4, "warmup_steps": 2, "cooldown_steps": 3},
    }
    return bv_make(optax, config, VIT_G, total_steps=10)


# ===========================================================================
# stanford-crfm/levanter: src/levanter/optim/config.py (OptimizerConfig, AdamConfig, LionConfig).


class Embedding(eqx.Module):
    weight: jax.Array


class Linear(eqx.Module):
    weight: jax.Array
    bias: jax.Array


class LayerNorm(eqx.Module):
    weight: jax.Array
    bias: jax.Array


class Block(eqx.Module):
    ln_1: LayerNorm
    attn: Linear
    mlp: Linear


class Gpt2(eqx.Module):
    token_embeddings: Embedding
    block: Block
    ln_f: LayerNorm


def _gpt2() -> Gpt2:
    a = arrays(
        {
            "wte": (2, 3),
            "ln_1": norm(3, "weight"),
            "attn": {"weight": (2, 3), "bias": (3,)},
            "mlp": {"weight": (2, 3), "bias": (3,)},
            "ln_f": norm(3, "weight"),
        }
    )
    return Gpt2(
        Embedding(a["wte"]),
        Block(LayerNorm(**a["ln_1"]), Linear(**a["attn"]), Linear(**a["mlp"])),
        LayerNorm(**a["ln_f"]),
    )


GPT2_EQX = _gpt2()


@dataclasses.dataclass
class LevanterOptimizerConfig:
    """OptimizerConfig's fields and its lr_scheduler / build_weight_decay_mask (no haps)."""

    learning_rate: float = 6e-4
    weight_decay: float = 0.1
    min_lr_ratio: float = 0.1
    warmup: float = 0.01
    stable: float = 0.0
    cooldown: float = 0.0
    lr_schedule: str = "cosine"
    beta1: float = 0.9
    beta2: float = 0.95
    epsilon: float = 1e-8
    max_grad_norm: float | None = 1.0

    def build_weight_decay_mask(self) -> Callable[[Any], Any]:
        # The "reasonable default" (no weight_decay_modules): no decay on LayerNorm, RMSNorm,
        # Embedding and biases, judged on the path from the root and on ClassName.field.
        def reasonable_default(path: str) -> bool | None:
            if "LayerNorm" in path or "RMSNorm" in path or "Embedding" in path:
                return False
            if path.endswith("bias"):
                return False
            return None

        def is_leaf(x: Any) -> bool:
            return eqx.is_array(x) or isinstance(x, eqx.Module)

        def _apply_on(x: Any, from_root_key_path: str, from_class_keypath: str | None) -> Any:
            if isinstance(x, eqx.Module):
                return jax.tree_util.tree_map_with_path(
                    lambda p, y: _apply_on(
                        y,
                        f"{from_root_key_path}.{p[0].name}" if from_root_key_path else p[0].name,
                        f"{type(x).__name__}.{p[0].name}",
                    ),
                    x,
                    is_leaf=lambda y: x is not y and is_leaf(y),
                )
            should_decay = None
            for key_path in [from_root_key_path, from_class_keypath]:
                if key_path is None:
                    continue
                if not should_decay:
                    should_decay = reasonable_default(key_path)
                if should_decay:
                    break
            return True if should_decay is None else should_decay

        def mask_fn(model: Any) -> Any:
            return _apply_on(model, "", None)

        return mask_fn

    def lr_scheduler(self, optax: Any, num_train_steps: int) -> Any:
        warmup_steps = _convert_ratio_or_steps(self.warmup, num_train_steps)
        stable_steps = _convert_ratio_or_steps(self.stable, num_train_steps)
        cooldown_steps = _convert_ratio_or_steps(self.cooldown, num_train_steps)
        lr_decay_steps = num_train_steps - warmup_steps - stable_steps - cooldown_steps
        min_lr = self.learning_rate * self.min_lr_ratio

        match self.lr_schedule:
            case "constant":
                schedule = optax.constant_schedule(self.learning_rate)
            case "cosine":
                schedule = optax.cosine_decay_schedule(self.learning_rate, lr_decay_steps, self.min_lr_ratio)
            case "linear":
                schedule = optax.linear_schedule(self.learning_rate, min_lr, lr_decay_steps)
            case _:
                raise ValueError(f"Unknown lr_schedule: {self.lr_schedule}")

        schedules, boundaries = [], []
        if warmup_steps != 0:
            schedules.append(optax.linear_schedule(0.0, self.learning_rate, warmup_steps))
            boundaries.append(warmup_steps)
        if stable_steps != 0:
            schedules.append(optax.constant_schedule(self.learning_rate))
            boundaries.append(warmup_steps + stable_steps)
        schedules.append(schedule)
        if cooldown_steps != 0:
            final_main_lr = schedule(lr_decay_steps)  # evaluated when built: a concrete array
            schedules.append(optax.linear_schedule(final_main_lr, min_lr, cooldown_steps))
            boundaries.append(num_train_steps - cooldown_steps)
        if len(schedules) > 1:
            schedule = optax.join_schedules(schedules, boundaries)
        return schedule


def _convert_ratio_or_steps(ratio_or_steps: float, num_train_steps: int) -> int:
    if ratio_or_steps < 1.0:
        return int(ratio_or_steps * num_train_steps)
    return int(ratio_or_steps)


@dataclasses.dataclass
class LevanterAdamConfig(LevanterOptimizerConfig):
    def build(self, optax: Any, num_train_steps: int) -> Any:
        # AdamConfig.build: "indirection makes it work with optax.inject_hyperparams so we can
        # log the learning rate".
        def _optimizer(learning_rate: Any) -> Any:
            components = []
            if self.max_grad_norm:
                components.append(optax.clip_by_global_norm(self.max_grad_norm))
            components.append(optax.scale_by_adam(self.beta1, self.beta2, self.epsilon))
            if self.weight_decay > 0:
                components.append(
                    optax.add_decayed_weights(self.weight_decay, self.build_weight_decay_mask())
                )
            components.append(optax.scale(-learning_rate))
            return optax.chain(*components)

        return optax.inject_hyperparams(_optimizer)(learning_rate=self.lr_scheduler(optax, num_train_steps))


@dataclasses.dataclass
class LevanterLionConfig(LevanterOptimizerConfig):
    def build(self, optax: Any, num_train_steps: int) -> Any:
        # LionConfig.build: as AdamConfig's, with scale_by_lion.
        def _optimizer(learning_rate: Any) -> Any:
            components = []
            if self.max_grad_norm:
                components.append(optax.clip_by_global_norm(self.max_grad_norm))
            components.append(optax.scale_by_lion(self.beta1, self.beta2))
            if self.weight_decay > 0:
                components.append(
                    optax.add_decayed_weights(self.weight_decay, self.build_weight_decay_mask())
                )
            components.append(optax.scale(-learning_rate))
            return optax.chain(*components)

        return optax.inject_hyperparams(_optimizer)(learning_rate=self.lr_scheduler(optax, num_train_steps))


def levanter_adam(optax: Any, rate: float) -> Any:
    # stanford-crfm/levanter: src/levanter/optim/config.py (AdamConfig.build): warmup + cosine.
    return LevanterAdamConfig(learning_rate=rate, warmup=0.2).build(optax, num_train_steps=10)


def levanter_lion(optax: Any, rate: float) -> Any:
    # stanford-crfm/levanter: src/levanter/optim/config.py (LionConfig.build), weight decay set.
    return LevanterLionConfig(learning_rate=rate, warmup=0.2, beta2=0.99).build(optax, num_train_steps=10)


def levanter_adam_wsd(optax: Any, rate: float) -> Any:
    # stanford-crfm/levanter: src/levanter/optim/config.py (OptimizerConfig.lr_scheduler):
    # warmup, stable, linear decay and a cooldown from the decay's final value (a concrete array).
    config = LevanterAdamConfig(
        learning_rate=rate, warmup=1.0, stable=1.0, cooldown=1.0, lr_schedule="linear"
    )
    return config.build(optax, num_train_steps=5)


# ===========================================================================
# young-geng/EasyLM: EasyLM/optimizers.py (OptimizerFactory, AdamWOptimizerFactory,
# optax_add_scheduled_weight_decay), EasyLM/jax_utils.py (get_weight_decay_mask).


def _easylm_weight_decay_mask(exclusions: tuple[str, ...]) -> Callable[[Any], Any]:
    # EasyLM/jax_utils.py (get_weight_decay_mask): a closure over the exclusion rules.
    def decay(name: str, _: Any) -> bool:
        return all(re.search(rule, name) is None for rule in exclusions)

    def weight_decay_mask(params: Any) -> Any:
        return named_tree_map(decay, params, sep="/")

    return weight_decay_mask


class ScheduledWeightDecayState(NamedTuple):
    """EasyLM's OptaxScheduledWeightDecayState (``count`` shadows tuple.count, as there)."""

    count: jax.Array  # pyright: ignore[reportIncompatibleMethodOverride]


def _easylm_scheduled_weight_decay(optax: Any, schedule_fn: Callable[[Any], Any], mask: Any = None) -> Any:
    # EasyLM/optimizers.py (optax_add_scheduled_weight_decay): a user-written transformation.
    def init_fn(params: Any) -> Any:
        del params
        return ScheduledWeightDecayState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates: Any, state: Any, params: Any) -> Any:
        if params is None:
            raise ValueError("Params cannot be None for weight decay!")
        weight_decay = schedule_fn(state.count)
        updates = jax.tree_util.tree_map(lambda g, p: g + weight_decay * p, updates, params)
        return updates, ScheduledWeightDecayState(count=optax.safe_int32_increment(state.count))

    if mask is not None:
        return optax.masked(optax.GradientTransformation(init_fn, update_fn), mask)
    return optax.GradientTransformation(init_fn, update_fn)


def easylm_adamw(
    optax: Any, rate: float, accumulate_gradient_steps: int = 1, multiply_by_parameter_scale: bool = False
) -> Any:
    # young-geng/EasyLM: EasyLM/optimizers.py (OptimizerFactory.get_optimizer,
    # AdamWOptimizerFactory.get_optimizer); the mask of EasyLM/models/llama/llama_train.py:
    # get_weight_decay_mask(LLaMAConfig.get_weight_decay_exclusions()), exclusions tuple().
    weight_decay_mask = _easylm_weight_decay_mask(())
    weight_decay = 1e-4
    learning_rate_schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=rate, warmup_steps=2, decay_steps=10, end_value=0.001
    )
    if multiply_by_parameter_scale:
        optimizer = optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adafactor(
                learning_rate=learning_rate_schedule,
                multiply_by_parameter_scale=True,
                momentum=0.9,
                decay_rate=0.95,
                factored=False,
                clipping_threshold=None,
                dtype_momentum=jnp.float32,
            ),
            _easylm_scheduled_weight_decay(
                optax, lambda step: -learning_rate_schedule(step) * weight_decay, weight_decay_mask
            ),
        )
    else:
        optimizer = optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adamw(
                learning_rate=learning_rate_schedule,
                weight_decay=weight_decay,
                b1=0.9,
                b2=0.95,
                mask=weight_decay_mask,
                mu_dtype=jnp.float32,
            ),
        )
    if accumulate_gradient_steps > 1:
        optimizer = optax.MultiSteps(optimizer, accumulate_gradient_steps)
    return optimizer


LLAMA = arrays(
    {
        "params": {
            "transformer": {
                "wte": {"embedding": (2, 3)},
                "h": {"0": {"attention": {"wq": {"kernel": (2, 3)}}, "attention_norm": {"kernel": (3,)}}},
                "ln_f": {"kernel": (3,)},
            },
            "lm_head": {"kernel": (2, 3)},
        }
    }
)


# ===========================================================================
# AI-Hypercomputer/maxtext: MaxText/optimizers.py (get_optimizer),
# MaxText/maxtext_utils.py (create_learning_rate_schedule); MaxText/configs/base.yml values.


def maxtext_schedule(
    optax: Any,
    learning_rate: float,
    cosine_learning_rate_final_fraction: float = 0.1,
    warmup_steps_fraction: float = 0.1,
    learning_rate_schedule_steps: int = 20,
    steps: int = 25,
) -> Any:
    # MaxText/maxtext_utils.py (create_learning_rate_schedule): warmup, a user-written cosine
    # closure of the rate, then zero.
    def make_cos_schedule(init_lr: float, final_lr: float, len_steps: int) -> Callable[[Any], Any]:
        def schedule(step: Any) -> Any:
            pct = step / len_steps
            a = 0.5 * (jnp.cos(jnp.pi * pct) + 1)
            return init_lr * a + final_lr * (1 - a)

        return schedule

    lr = learning_rate
    cos_final_lr = lr * cosine_learning_rate_final_fraction
    warmup_steps = int(learning_rate_schedule_steps * warmup_steps_fraction)
    cos_steps = learning_rate_schedule_steps - warmup_steps
    constant_zero_steps = steps - learning_rate_schedule_steps
    warmup_schedule = optax.linear_schedule(init_value=0.0, end_value=lr, transition_steps=warmup_steps)
    cos_schedule = make_cos_schedule(lr, cos_final_lr, cos_steps)
    constant_schedule = optax.constant_schedule(0.0)
    pieces = [warmup_schedule, cos_schedule]
    boundaries = [warmup_steps, warmup_steps + cos_steps]
    if constant_zero_steps > 0:
        pieces.append(constant_schedule)
        boundaries.append(warmup_steps + cos_steps + constant_zero_steps)
    return optax.join_schedules(pieces, boundaries)


def maxtext_adamw(optax: Any, rate: float) -> Any:
    # AI-Hypercomputer/maxtext: MaxText/optimizers.py (get_optimizer, opt_type "adamw").
    return optax.adamw(
        maxtext_schedule(optax, rate), b1=0.9, b2=0.95, eps=1e-8, eps_root=0.0, weight_decay=0.1
    )


MAXTEXT = arrays(
    {
        "params": {
            "decoder": {
                "decoder_norm": {"scale": (3,)},
                "layers": {
                    "pre_self_attention_layer_norm": {"scale": (3,)},
                    "mlp": {"wi_0": {"kernel": (2, 3)}},
                },
                "logits_dense": {"kernel": (2, 3)},
            },
            "token_embedder": {"embedding": (2, 3)},
        }
    }
)


# ===========================================================================
# huggingface/transformers: examples/flax/*.


def _hf_linear_warmup_decay(optax: Any, learning_rate: float, warmup_steps: int, num_train_steps: int) -> Any:
    # create_learning_rate_fn / main's schedule in the flax examples: linear warmup, linear decay.
    warmup_fn = optax.linear_schedule(init_value=0.0, end_value=learning_rate, transition_steps=warmup_steps)
    decay_fn = optax.linear_schedule(
        init_value=learning_rate, end_value=0, transition_steps=num_train_steps - warmup_steps
    )
    return optax.join_schedules(schedules=[warmup_fn, decay_fn], boundaries=[warmup_steps])


def _hf_decay_mask_fn_candidates(layer_norm_candidates: list[str]) -> Callable[[Any], Any]:
    # The decay_mask_fn of run_mlm_flax.py / run_summarization_flax.py: no decay on biases
    # nor on the parameters of layers whose path names a layer norm.
    def decay_mask_fn(params: Any) -> Any:
        flat_params = flatten_dict(params)
        layer_norm_named_params = {
            layer[-2:]
            for layer_norm_name in layer_norm_candidates
            for layer in flat_params
            if layer_norm_name in "".join(layer).lower()
        }
        flat_mask = {
            path: (path[-1] != "bias" and path[-2:] not in layer_norm_named_params) for path in flat_params
        }
        return unflatten_dict(flat_mask)

    return decay_mask_fn


ROBERTA = arrays(
    {
        "roberta": {
            "embeddings": {"word_embeddings": {"embedding": (2, 3)}, "LayerNorm": norm(3)},
            "encoder": {"layer": {"0": {"attention": {"self": {"query": dense(2, 3)}}}}},
        },
        "lm_head": {"layer_norm": norm(3), "bias": (3,)},
    }
)


def hf_mlm_adamw(optax: Any, rate: float) -> Any:
    # huggingface/transformers: examples/flax/language-modeling/run_mlm_flax.py (main): adamw,
    # decay_mask_fn with layer_norm_candidates; TrainingArguments betas/eps, weight_decay=0.01.
    schedule = _hf_linear_warmup_decay(optax, rate, warmup_steps=2, num_train_steps=10)
    decay_mask_fn = _hf_decay_mask_fn_candidates(["layernorm", "layer_norm", "ln"])
    return optax.adamw(
        learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, mask=decay_mask_fn
    )


def hf_mlm_adafactor(optax: Any, rate: float) -> Any:
    # huggingface/transformers: examples/flax/language-modeling/run_mlm_flax.py (main),
    # training_args.adafactor: "We use the default parameters here to initialize adafactor".
    schedule = _hf_linear_warmup_decay(optax, rate, warmup_steps=2, num_train_steps=10)
    return optax.adafactor(learning_rate=schedule)


def hf_glue(optax: Any, rate: float) -> Any:
    # huggingface/transformers: examples/flax/text-classification/run_flax_glue.py
    # (create_learning_rate_fn, create_train_state): ("LayerNorm", "scale") excluded.
    def decay_mask_fn(params: Any) -> Any:
        flat_params = flatten_dict(params)
        flat_mask = {
            path: (path[-1] != "bias" and path[-2:] != ("LayerNorm", "scale")) for path in flat_params
        }
        return unflatten_dict(flat_mask)

    train_ds_size, train_batch_size, num_train_epochs, num_warmup_steps = 40, 8, 2, 2
    num_train_steps = train_ds_size // train_batch_size * num_train_epochs
    learning_rate_fn = _hf_linear_warmup_decay(optax, rate, num_warmup_steps, num_train_steps)
    return optax.adamw(
        learning_rate=learning_rate_fn, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, mask=decay_mask_fn
    )


GPT2 = arrays(
    {
        "transformer": {
            "wte": {"embedding": (2, 3)},
            "h": {"0": {"ln_1": norm(3), "attn": {"c_attn": dense(2, 3)}}},
            "ln_f": norm(3),
        }
    }
)


def hf_clm(optax: Any, rate: float) -> Any:
    # huggingface/transformers: examples/flax/language-modeling/run_clm_flax.py (main): GPT-2's
    # ln_1/ln_2/ln_f scales excluded from weight decay.
    schedule = _hf_linear_warmup_decay(optax, rate, warmup_steps=2, num_train_steps=10)

    def decay_mask_fn(params: Any) -> Any:
        flat_params = flatten_dict(params)
        flat_mask = {
            path: (
                path[-1] != "bias"
                and path[-2:] not in [("ln_1", "scale"), ("ln_2", "scale"), ("ln_f", "scale")]
            )
            for path in flat_params
        }
        return unflatten_dict(flat_mask)

    return optax.adamw(
        learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, mask=decay_mask_fn
    )


BART = arrays(
    {
        "model": {
            "shared": {"embedding": (2, 3)},
            "encoder": {
                "layers": {
                    "0": {
                        "self_attn": {"q_proj": dense(2, 3)},
                        "self_attn_layer_norm": norm(3),
                        "final_layer_norm": {"scale": (3,)},
                    }
                },
            },
        },
        "final_logits_bias": (1, 3),
    }
)


def hf_summarization(optax: Any, rate: float) -> Any:
    # huggingface/transformers: examples/flax/summarization/run_summarization_flax.py
    # (create_learning_rate_fn, main): BART's layer norms found by name.
    train_ds_size, train_batch_size, num_train_epochs, num_warmup_steps = 40, 8, 2, 2
    num_train_steps = train_ds_size // train_batch_size * num_train_epochs
    schedule = _hf_linear_warmup_decay(optax, rate, num_warmup_steps, num_train_steps)
    decay_mask_fn = _hf_decay_mask_fn_candidates(["layernorm", "layer_norm", "ln"])
    return optax.adamw(
        learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, mask=decay_mask_fn
    )


# ===========================================================================
# huggingface/diffusers: examples/*/ flax training scripts.

UNET = arrays(
    {
        "conv_in": dense(1, 1, 2, 3),
        "time_embedding": {"linear_1": {"kernel": (2, 3)}},
        "down_blocks_0": {"resnets_0": {"norm1": norm(3)}},
    }
)


def diffusers_text_to_image(optax: Any, rate: float) -> Any:
    # huggingface/diffusers: examples/text_to_image/train_text_to_image_flax.py (main).
    constant_scheduler = optax.constant_schedule(rate)
    adamw = optax.adamw(learning_rate=constant_scheduler, b1=0.9, b2=0.999, eps=1e-08, weight_decay=1e-2)
    return optax.chain(optax.clip_by_global_norm(1.0), adamw)


CLIP_TEXT = arrays(
    {
        "text_model": {
            "embeddings": {
                "token_embedding": {"embedding": (2, 3)},
                "position_embedding": {"embedding": (2, 3)},
            },
            "encoder": {
                "layers": {"0": {"self_attn": {"q_proj": {"kernel": (2, 3)}}, "layer_norm1": norm(3)}}
            },
        }
    }
)


def diffusers_textual_inversion(optax: Any, rate: float) -> Any:
    # huggingface/diffusers: examples/textual_inversion/textual_inversion_flax.py (main):
    # a label prefix tree from create_mask and a user-written zero_grads transformation.
    constant_scheduler = optax.constant_schedule(rate)
    optimizer = optax.adamw(learning_rate=constant_scheduler, b1=0.9, b2=0.999, eps=1e-08, weight_decay=1e-2)

    def create_mask(params: Any, label_fn: Callable[[str], bool]) -> Any:
        def _map(params: Any, mask: Any, label_fn: Callable[[str], bool]) -> None:
            for k in params:
                if label_fn(k):
                    mask[k] = "token_embedding"
                elif isinstance(params[k], dict):
                    mask[k] = {}
                    _map(params[k], mask[k], label_fn)
                else:
                    mask[k] = "zero"

        mask: dict[str, Any] = {}
        _map(params, mask, label_fn)
        return mask

    def zero_grads() -> Any:
        # from https://github.com/deepmind/optax/issues/159#issuecomment-896459491
        def init_fn(_: Any) -> Any:
            return ()

        def update_fn(updates: Any, state: Any, params: Any = None) -> Any:
            return jax.tree_util.tree_map(jnp.zeros_like, updates), ()

        return optax.GradientTransformation(init_fn, update_fn)

    return optax.multi_transform(
        {"token_embedding": optimizer, "zero": zero_grads()},
        create_mask(CLIP_TEXT, lambda s: s == "token_embedding"),
    )


# ===========================================================================
# google-deepmind/optax: examples/*.ipynb.


def optax_cifar10_resnet(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/cifar10_resnet.ipynb: one-cycle schedule, PEAK_LR.
    lr_schedule = optax.linear_onecycle_schedule(10, rate)
    return optax.sgd(lr_schedule, momentum=0.9, nesterov=False)


MLP = arrays({"linear1": {"w": (2, 3), "b": (3,)}, "linear2": {"w": (2, 3), "b": (3,)}})


def optax_lookahead_mnist(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/lookahead_mnist.ipynb (SYNC_PERIOD 5 there, 2 here so
    # that the three steps sync once).
    fast_solver = optax.adam(rate)
    return optax.lookahead(fast_solver, 2, 0.1)


def optax_gradient_accumulation(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/gradient_accumulation.ipynb: MultiSteps(sgd, 3).
    optimizer = optax.sgd(rate)
    return optax.MultiSteps(optimizer, every_k_schedule=3)


def optax_gradient_accumulation_piecewise(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/gradient_accumulation.ipynb: a piecewise constant
    # schedule inside MultiSteps (its init_value swept; 1.0 there).
    learning_rate_schedule = optax.piecewise_constant_schedule(
        init_value=rate, boundaries_and_scales={0: 1e-4, 1: 1e-1}
    )
    return optax.MultiSteps(optax.sgd(learning_rate_schedule), every_k_schedule=3)


def optax_reduce_on_plateau(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/contrib/reduce_on_plateau.ipynb (ACCUMULATION_SIZE = 1).
    return optax.chain(
        optax.adam(rate),
        optax.contrib.reduce_on_plateau(patience=5, cooldown=0, factor=0.5, rtol=1e-4, accumulation_size=1),
    )


def optax_flax_example(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/flax_example.ipynb: "Note the learning_rate is not here."
    return optax.chain(optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8), optax.scale(-rate))


MUON_PARAMS = arrays(
    {"layer1": {"w": (2, 3), "b": (3,)}, "layer2": {"w": (2, 3)}, "layer3_conv": {"w": (1, 1, 2, 3)}}
)


def optax_muon(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/contrib/muon.ipynb: dimension numbers per parameter, a
    # 4-D kernel reshaped (reduction axes 0, 1, 2), None for the parameters Adam takes.
    weight_dim_nums = {
        "layer1": {"w": optax.contrib.MuonDimensionNumbers((0,), (1,)), "b": None},
        "layer2": {"w": None},
        "layer3_conv": {"w": optax.contrib.MuonDimensionNumbers(reduction_axis=(0, 1, 2), output_axis=(3,))},
    }
    return optax.contrib.muon(learning_rate=rate, muon_weight_dimension_numbers=weight_dim_nums)


FREEZE_PARAMS = {"param0": jnp.array([10.0, 2.0]), "param1": jnp.array([10.0, -1.0])}


def optax_freeze(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/freezing_parameters.ipynb: `from optax import transforms;
    # freeze = transforms.freeze`.
    mask = {"param0": False, "param1": True}
    return optax.chain(optax.adam(rate), optax.transforms.freeze(mask))


def optax_partition(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/freezing_parameters.ipynb (make_optimizer(mask)).
    mask = {"param0": "adam", "param1": "zero"}
    return optax.partition({"adam": optax.adam(rate), "zero": optax.set_to_zero()}, mask)


def optax_sam(optax: Any, rate: float) -> Any:
    # google-deepmind/optax: examples/contrib/sam.ipynb (sam_mom): SAM over SGD with momentum.
    opt = optax.sgd(rate, momentum=0.9)
    adv_opt = optax.chain(optax.contrib.normalize(), optax.sgd(0.1))
    return optax.contrib.sam(opt, adv_opt, sync_period=2)


# ===========================================================================
# mlcommons/algorithmic-efficiency (AlgoPerf): algorithms/*.

# The first point of algorithms/baselines/external_tuning/tuning_search_space.json.
ALGOPERF_HPARAMS = {
    "one_minus_beta1": 0.02686663061,
    "beta2": 0.9981232922116359,
    "weight_decay": 0.16375311233774334,
    "warmup_factor": 0.1,
}


def _algoperf_cosine_warmup(optax: Any, step_hint: int, learning_rate: float, warmup_steps: int) -> Any:
    # jax_cosine_warmup (algorithms/target_setting_algorithms/cosine_warmup.py and the copies
    # inside the submissions): linear warmup joined to a cosine decay.
    warmup_fn = optax.linear_schedule(init_value=0.0, end_value=learning_rate, transition_steps=warmup_steps)
    cosine_steps = max(step_hint - warmup_steps, 1)
    cosine_fn = optax.cosine_decay_schedule(init_value=learning_rate, decay_steps=cosine_steps)
    return optax.join_schedules(schedules=[warmup_fn, cosine_fn], boundaries=[warmup_steps])


class NadamState(NamedTuple):
    """AlgoPerf's ScaleByAdamState of scale_by_nadam (``count`` shadows tuple.count, as there)."""

    count: jax.Array  # pyright: ignore[reportIncompatibleMethodOverride]
    mu: Any
    nu: Any


def _scale_by_nadam(
    optax: Any,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    debias: bool = True,
) -> Any:
    # algorithms/baselines/external_tuning/jax_nadamw_full_budget.py (scale_by_nadam): user-written.

    def update_moment(updates: Any, moments: Any, decay: float, order: int) -> Any:
        return jax.tree_util.tree_map(lambda g, t: (1 - decay) * (g**order) + decay * t, updates, moments)

    def bias_correction(moment: Any, decay: float, count: Any) -> Any:
        beta = 1 - decay**count
        return jax.tree_util.tree_map(lambda t: t / beta.astype(t.dtype), moment)

    def init_fn(params: Any) -> Any:
        mu = jax.tree_util.tree_map(jnp.zeros_like, params)
        nu = jax.tree_util.tree_map(jnp.zeros_like, params)
        return NadamState(count=jnp.zeros([], jnp.int32), mu=mu, nu=nu)

    def update_fn(updates: Any, state: Any, params: Any = None) -> Any:
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_moment(updates, state.nu, b2, 2)
        count = state.count + jnp.array(1, dtype=jnp.int32)
        mu_hat = update_moment(updates, mu, b1, 1)
        mu_hat = mu_hat if not debias else bias_correction(mu_hat, b1, count)
        nu_hat = nu if not debias else bias_correction(nu, b2, count)
        updates = jax.tree_util.tree_map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return updates, NadamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


def algoperf_nadamw(optax: Any, rate: float) -> Any:
    # mlcommons/algorithmic-efficiency: algorithms/baselines/external_tuning/jax_nadamw_full_budget.py
    # (nadamw, scale_by_learning_rate, init_optimizer_state).
    def scale_by_learning_rate(learning_rate: float | Callable[[Any], Any], flip_sign: bool = True) -> Any:
        m = -1 if flip_sign else 1
        if callable(learning_rate):
            return optax.scale_by_schedule(lambda count: m * learning_rate(count))
        return optax.scale(m * learning_rate)

    h = ALGOPERF_HPARAMS
    step_hint = 20
    lr_schedule_fn = _algoperf_cosine_warmup(optax, step_hint, rate, int(h["warmup_factor"] * step_hint))
    return optax.chain(
        _scale_by_nadam(optax, 1.0 - h["one_minus_beta1"], h["beta2"], 1e-8, 0.0, True),
        optax.add_decayed_weights(h["weight_decay"], None),
        scale_by_learning_rate(lr_schedule_fn),
    )


def algoperf_adamw(optax: Any, rate: float) -> Any:
    # mlcommons/algorithmic-efficiency: algorithms/target_setting_algorithms/jax_adamw.py
    # (init_optimizer_state): step hint int(0.75 * workload.step_hint).
    h = ALGOPERF_HPARAMS
    lr_schedule_fn = _algoperf_cosine_warmup(optax, int(0.75 * 24), rate, warmup_steps=2)
    return optax.adamw(
        learning_rate=lr_schedule_fn,
        b1=1.0 - h["one_minus_beta1"],
        b2=h["beta2"],
        eps=1e-8,
        weight_decay=h["weight_decay"],
    )


def algoperf_momentum(optax: Any, rate: float) -> Any:
    # mlcommons/algorithmic-efficiency: algorithms/target_setting_algorithms/jax_momentum.py
    # (create_lr_schedule_fn, sgd, init_optimizer_state).
    step_hint, warmup_steps, end_factor, decay_steps_factor = 18, 2, 0.01, 0.9
    warmup_fn = optax.linear_schedule(init_value=0.0, end_value=rate, transition_steps=warmup_steps)
    decay_steps = step_hint - warmup_steps
    polynomial_schedule_fn = optax.polynomial_schedule(
        init_value=rate,
        end_value=rate * end_factor,
        power=1,
        transition_steps=int(decay_steps * decay_steps_factor),
    )
    lr_schedule_fn = optax.join_schedules(
        schedules=[warmup_fn, polynomial_schedule_fn], boundaries=[warmup_steps]
    )
    return optax.chain(
        optax.add_decayed_weights(5e-4),
        optax.sgd(learning_rate=lr_schedule_fn, momentum=0.9, nesterov=False),
    )


def algoperf_lamb(optax: Any, rate: float) -> Any:
    # mlcommons/algorithmic-efficiency: algorithms/archived_paper_baselines/lamb/jax/submission.py
    # (init_optimizer_state, its jax_cosine_warmup with warmup_factor).
    h = ALGOPERF_HPARAMS
    step_hint = 20
    lr_schedule_fn = _algoperf_cosine_warmup(optax, step_hint, rate, int(h["warmup_factor"] * step_hint))
    return optax.lamb(
        learning_rate=lr_schedule_fn,
        b1=1 - h["one_minus_beta1"],
        b2=h["beta2"],
        eps=1e-8,
        weight_decay=h["weight_decay"],
    )


def algoperf_mnist(optax: Any, rate: float) -> Any:
    # mlcommons/algorithmic-efficiency: algorithms/development_algorithms/mnist/mnist_jax/submission.py
    # (init_optimizer_state).
    return optax.chain(optax.scale_by_adam(b1=1.0 - 0.1, b2=0.999, eps=1e-8), optax.scale(-rate))


WORKLOAD_RESNET = arrays(
    {
        "Conv_0": {"kernel": (1, 1, 2, 3)},
        "BatchNorm_0": norm(3),
        "Dense_0": dense(2, 3),
    }
)


# ===========================================================================
# danijar/dreamerv3: dreamerv3/agent.py (Agent._make_opt), embodied/jax/opt.py.


def _clip_by_agc(optax: Any, clip: float = 0.3, pmin: float = 1e-3) -> Any:
    # embodied/jax/opt.py (clip_by_agc): adaptive gradient clipping, user-written.
    def init_fn(params: Any) -> Any:
        return ()

    def update_fn(updates: Any, state: Any, params: Any = None) -> Any:
        def fn(param: Any, update: Any) -> Any:
            unorm = jnp.linalg.norm(update.flatten(), 2)
            pnorm = jnp.linalg.norm(param.flatten(), 2)
            upper = clip * jnp.maximum(pmin, pnorm)
            return update * (1 / jnp.maximum(1.0, unorm / upper))

        updates = jax.tree_util.tree_map(fn, params, updates) if clip else updates
        return updates, ()

    return optax.GradientTransformation(init_fn, update_fn)


def _scale_by_rms(optax: Any, beta: float = 0.999, eps: float = 1e-8) -> Any:
    # embodied/jax/opt.py (scale_by_rms).
    def init_fn(params: Any) -> Any:
        nu = jax.tree_util.tree_map(lambda t: jnp.zeros_like(t, jnp.float32), params)
        return (jnp.zeros((), jnp.int32), nu)

    def update_fn(updates: Any, state: Any, params: Any = None) -> Any:
        step, nu = state
        step = optax.safe_int32_increment(step)
        nu = jax.tree_util.tree_map(lambda v, u: beta * v + (1 - beta) * (u * u), nu, updates)
        nu_hat = optax.bias_correction(nu, beta, step)
        updates = jax.tree_util.tree_map(lambda u, v: u / (jnp.sqrt(v) + eps), updates, nu_hat)
        return updates, (step, nu)

    return optax.GradientTransformation(init_fn, update_fn)


def _scale_by_momentum(optax: Any, beta: float = 0.9, nesterov: bool = False) -> Any:
    # embodied/jax/opt.py (scale_by_momentum).
    def init_fn(params: Any) -> Any:
        mu = jax.tree_util.tree_map(lambda t: jnp.zeros_like(t, jnp.float32), params)
        return (jnp.zeros((), jnp.int32), mu)

    def update_fn(updates: Any, state: Any, params: Any = None) -> Any:
        step, mu = state
        step = optax.safe_int32_increment(step)
        mu = optax.update_moment(updates, mu, beta, 1)
        if nesterov:
            mu_hat = optax.bias_correction(optax.update_moment(updates, mu, beta, 1), beta, step)
        else:
            mu_hat = optax.bias_correction(mu, beta, step)
        return mu_hat, (step, mu)

    return optax.GradientTransformation(init_fn, update_fn)


def dreamerv3(
    optax: Any,
    lr: float = 4e-5,
    agc: float = 0.3,
    eps: float = 1e-20,
    beta1: float = 0.9,
    beta2: float = 0.999,
    nesterov: bool = False,
    wd: float = 0.0,
    wdregex: str = r"/kernel$",
    schedule: str = "const",
    warmup: int = 1000,
    anneal: int = 0,
) -> Any:
    # danijar/dreamerv3: dreamerv3/agent.py (Agent._make_opt).
    chain = []
    chain.append(_clip_by_agc(optax, agc))
    chain.append(_scale_by_rms(optax, beta2, eps))
    chain.append(_scale_by_momentum(optax, beta1, nesterov))
    if wd:
        assert not wdregex[0].isnumeric(), wdregex
        pattern = re.compile(wdregex)
        wdmask = lambda params: {k: bool(pattern.search(k)) for k in params}  # noqa: E731
        chain.append(optax.add_decayed_weights(wd, wdmask))
    assert anneal > 0 or schedule == "const"
    if schedule == "const":
        sched = optax.constant_schedule(lr)
    elif schedule == "linear":
        sched = optax.linear_schedule(lr, 0.1 * lr, anneal - warmup)
    elif schedule == "cosine":
        sched = optax.cosine_decay_schedule(lr, anneal - warmup, 0.1 * lr)
    else:
        raise NotImplementedError(schedule)
    if warmup:
        ramp = optax.linear_schedule(0.0, lr, warmup)
        sched = optax.join_schedules([ramp, sched], [warmup])
    chain.append(optax.scale_by_learning_rate(sched))
    return optax.chain(*chain)


# ninjax's flat parameter dict, keyed by module path.
DREAMER = arrays(
    {
        "agent/enc/conv0/kernel": (1, 1, 2, 3),
        "agent/enc/conv0/norm/scale": (3,),
        "agent/dyn/gru/kernel": (2, 3),
        "agent/dyn/gru/bias": (3,),
    }
)


# ===========================================================================
# google-deepmind/dm-haiku: examples/.

HAIKU_TRANSFORMER = arrays(
    {
        "transformer/embed": {"embeddings": (2, 3)},
        "transformer/~/layer_norm": {"scale": (3,), "offset": (3,)},
        "transformer/~/mlp/~/linear_0": {"w": (2, 3), "b": (3,)},
    }
)


def haiku_transformer(optax: Any, rate: float) -> Any:
    # google-deepmind/dm-haiku: examples/transformer/train.py (optimiser): GRAD_CLIP_VALUE = 1.
    return optax.chain(optax.clip_by_global_norm(1), optax.adam(rate, b1=0.9, b2=0.99))


def haiku_impala(optax: Any, rate: float) -> Any:
    # google-deepmind/dm-haiku: examples/impala/run_catch.py (main).
    return optax.rmsprop(rate, decay=0.99, eps=1e-7)


HAIKU_CATCH = arrays(
    {"catch_net/~/linear": {"w": (2, 3), "b": (3,)}, "catch_net/~/policy": {"w": (2, 3), "b": (3,)}}
)


# ===========================================================================
# patrick-kidger/equinox: docs/examples/.


def _eqx_params() -> Any:
    model = eqx.nn.MLP(in_size=2, out_size=1, width_size=3, depth=1, key=jax.random.key(0))
    return eqx.filter(model, eqx.is_inexact_array)


EQX_MLP = _eqx_params()


def equinox_bert(optax: Any, rate: float) -> Any:
    # patrick-kidger/equinox: docs/examples/bert.ipynb: adam, then chained after a clip.
    tx = optax.adam(learning_rate=rate)
    return optax.chain(optax.clip_by_global_norm(1.0), tx)


def equinox_score_based_diffusion(optax: Any, rate: float) -> Any:
    # patrick-kidger/equinox: docs/examples/score_based_diffusion.ipynb (main).
    return optax.adabelief(rate)


# ===========================================================================
# The corpus.

_CLOSURE_OF_RATE = (
    "the swept rate reaches the optimizer only through a user-written closure of the source "
    "(not an optax factory), so the configuration's static part differs per rate"
)
_CONFIG_SELF = (
    "levanter's _optimizer and mask_fn close over the config object `self`, whose learning_rate "
    "differs per rate"
)

_BV_SCHEDULES = (
    "make() builds its schedules as closures (create_learning_rate_schedule's step_fn) anew on each call"
)
_EASYLM_MASK = "get_weight_decay_mask returns a new mask closure on each call"
_HF_MASK = "decay_mask_fn is a function defined anew inside the builder"

CORPUS: list[Config] = [
    # google/flax
    Config(
        "flax-imagenet-sgd-nesterov-warmup-cosine",
        "google/flax: examples/imagenet/train.py (create_learning_rate_fn, create_train_state)",
        flax_imagenet,
        RESNET,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "flax-wmt-adamw-rsqrt-closure",
        "google/flax: examples/wmt/train.py (rsqrt_schedule, create_learning_rate_schedule)",
        flax_wmt,
        TRANSFORMER,
        (2e-3, 4e-3, 1e-3),
        note=_CLOSURE_OF_RATE,
    ),
    Config(
        "flax-nlp_seq-adamw-factor-schedule",
        "google/flax: examples/nlp_seq/train.py (create_learning_rate_scheduler)",
        flax_nlp_seq,
        TRANSFORMER,
        (0.5, 1.0, 0.25),
        note=_CLOSURE_OF_RATE,
    ),
    Config(
        "flax-ogbg_molpcba-adam",
        "google/flax: examples/ogbg_molpcba/train.py (create_optimizer)",
        flax_ogbg_molpcba,
        GRAPH_NET,
        (1e-3, 3e-3, 3e-4),
    ),
    Config(
        "flax-mnist-sgd-momentum",
        "google/flax: examples/mnist/train.py (train_and_evaluate)",
        flax_mnist,
        CNN,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "flax-ppo-adam-linear-decay",
        "google/flax: examples/ppo/ppo_lib.py (create_train_state)",
        flax_ppo,
        ACTOR_CRITIC,
        (2.5e-4, 5e-4, 1e-4),
    ),
    Config(
        "flax-sst2-sgd-add_decayed_weights",
        "google/flax: examples/sst2/train.py (create_train_state)",
        flax_sst2,
        LSTM_CLASSIFIER,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "flax-guide-transfer-multi_transform-frozen",
        "google/flax: docs/guides/training_techniques/transfer_learning.md (optax.multi_transform)",
        flax_transfer_learning,
        TRANSFER,
        (5e-3, 1e-2, 1e-3),
    ),
    Config(
        "flax-guide-masked-kernel-bias-scales",
        "google/flax: docs/guides/converting_and_upgrading/optax_update_guide.rst (Multiple Optimizers)",
        flax_guide_masked_scales,
        MLP_PARAMS,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "flax-guide-scale_by_adam-weight-decay",
        "google/flax: docs/guides/converting_and_upgrading/optax_update_guide.rst (Weight Decay)",
        flax_guide_weight_decay,
        MLP_PARAMS,
        (1e-2, 3e-2, 3e-3),
    ),
    # google-research/big_vision
    Config(
        "big_vision-vit_i1k-scale_by_adam-bf16-wd-mask",
        "google-research/big_vision: big_vision/optax.py (make), big_vision/configs/vit_i1k.py",
        bv_vit_i1k,
        VIT,
        (1e-3, 3e-3, 3e-4),
        note=_BV_SCHEDULES,
    ),
    Config(
        "big_vision-bit_i1k-momentum_hp",
        "google-research/big_vision: big_vision/optax.py (make, momentum_hp), big_vision/configs/bit_i1k.py",
        bv_bit_i1k,
        BIT,
        (0.2, 0.4, 0.1),
        note=_BV_SCHEDULES,
    ),
    Config(
        "big_vision-siglip_lit-frozen-tower-adafactor",
        "google-research/big_vision: "
        "big_vision/optax.py (make, scale_by_adafactor), "
        "big_vision/configs/proj/image_text/siglip_lit_coco.py",
        bv_siglip_lit,
        LIT,
        (1e-3, 3e-3, 3e-4),
        note=_BV_SCHEDULES,
    ),
    Config(
        "big_vision-vit_g-adafactor-wd_mults-rsqrt",
        "google-research/big_vision: big_vision/optax.py "
        "(make, scale_by_adafactor), big_vision/configs/proj/scaling_laws/train_vit_g.py",
        bv_vit_g,
        VIT_G,
        (8e-4, 1.6e-3, 4e-4),
        note=_BV_SCHEDULES,
    ),
    # stanford-crfm/levanter
    Config(
        "levanter-adam-inject_hyperparams-mask",
        "stanford-crfm/levanter: src/levanter/optim/config.py "
        "(AdamConfig.build, OptimizerConfig.lr_scheduler, build_weight_decay_mask)",
        levanter_adam,
        GPT2_EQX,
        (6e-4, 1.2e-3, 3e-4),
        note=_CONFIG_SELF,
    ),
    Config(
        "levanter-lion-inject_hyperparams-mask",
        "stanford-crfm/levanter: src/levanter/optim/config.py (LionConfig.build)",
        levanter_lion,
        GPT2_EQX,
        (1e-4, 2e-4, 5e-5),
        note=_CONFIG_SELF,
    ),
    Config(
        "levanter-adam-warmup-stable-decay-cooldown",
        "stanford-crfm/levanter: "
        "src/levanter/optim/config.py (OptimizerConfig.lr_scheduler with stable and cooldown)",
        levanter_adam_wsd,
        GPT2_EQX,
        (6e-4, 1.2e-3, 3e-4),
        note=_CONFIG_SELF,
    ),
    # young-geng/EasyLM
    Config(
        "easylm-adamw-warmup_cosine-mask",
        "young-geng/EasyLM: EasyLM/optimizers.py "
        "(AdamWOptimizerFactory.get_optimizer), EasyLM/jax_utils.py (get_weight_decay_mask)",
        easylm_adamw,
        LLAMA,
        (1e-2, 2e-2, 5e-3),
        note=_EASYLM_MASK,
    ),
    Config(
        "easylm-adamw-MultiSteps-accumulation",
        "young-geng/EasyLM: EasyLM/optimizers.py "
        "(OptimizerFactory.get_optimizer, accumulate_gradient_steps=2)",
        functools.partial(easylm_adamw, accumulate_gradient_steps=2),
        LLAMA,
        (1e-2, 2e-2, 5e-3),
        note=_EASYLM_MASK,
    ),
    Config(
        "easylm-adafactor-scheduled-weight-decay",
        "young-geng/EasyLM: EasyLM/optimizers.py "
        "(AdamWOptimizerFactory.get_optimizer with multiply_by_parameter_scale, "
        "optax_add_scheduled_weight_decay)",
        functools.partial(easylm_adamw, multiply_by_parameter_scale=True),
        LLAMA,
        (1e-2, 2e-2, 5e-3),
        note=_EASYLM_MASK
        + "; the scheduled weight decay is a user-written transformation over a lambda of the schedule",
    ),
    # AI-Hypercomputer/maxtext
    Config(
        "maxtext-adamw-warmup-cosine-closure",
        "AI-Hypercomputer/maxtext: MaxText/optimizers.py "
        "(get_optimizer), MaxText/maxtext_utils.py (create_learning_rate_schedule)",
        maxtext_adamw,
        MAXTEXT,
        (3e-4, 6e-4, 1.5e-4),
        note=_CLOSURE_OF_RATE,
    ),
    # huggingface/transformers
    Config(
        "hf-run_mlm_flax-adamw-decay_mask_fn",
        "huggingface/transformers: examples/flax/language-modeling/run_mlm_flax.py (main)",
        hf_mlm_adamw,
        ROBERTA,
        (5e-5, 1e-4, 2e-5),
        note=_HF_MASK,
    ),
    Config(
        "hf-run_mlm_flax-adafactor",
        "huggingface/transformers: examples/flax/language-modeling/run_mlm_flax.py (main, --adafactor)",
        hf_mlm_adafactor,
        ROBERTA,
        (5e-3, 1e-2, 2e-3),
    ),
    Config(
        "hf-run_flax_glue-adamw-LayerNorm-scale",
        "huggingface/transformers: "
        "examples/flax/text-classification/run_flax_glue.py (create_train_state, create_learning_rate_fn)",
        hf_glue,
        ROBERTA,
        (2e-5, 5e-5, 1e-5),
        note=_HF_MASK,
    ),
    Config(
        "hf-run_clm_flax-adamw-gpt2-ln-mask",
        "huggingface/transformers: examples/flax/language-modeling/run_clm_flax.py (main)",
        hf_clm,
        GPT2,
        (5e-4, 1e-3, 2e-4),
        note=_HF_MASK,
    ),
    Config(
        "hf-run_summarization_flax-adamw-bart",
        "huggingface/transformers: "
        "examples/flax/summarization/run_summarization_flax.py (create_learning_rate_fn, main)",
        hf_summarization,
        BART,
        (5e-5, 1e-4, 2e-5),
        note=_HF_MASK,
    ),
    # huggingface/diffusers
    Config(
        "diffusers-text_to_image-clip-adamw-constant",
        "huggingface/diffusers: examples/text_to_image/train_text_to_image_flax.py (main)",
        diffusers_text_to_image,
        UNET,
        (1e-4, 2e-4, 5e-5),
    ),
    Config(
        "diffusers-textual_inversion-multi_transform-zero_grads",
        "huggingface/diffusers: "
        "examples/textual_inversion/textual_inversion_flax.py (main: create_mask, zero_grads)",
        diffusers_textual_inversion,
        CLIP_TEXT,
        (1e-4, 2e-4, 5e-5),
        note="zero_grads() makes a new user-written GradientTransformation (new init/update) on each call",
    ),
    # google-deepmind/optax
    Config(
        "optax-cifar10_resnet-sgd-onecycle",
        "google-deepmind/optax: examples/cifar10_resnet.ipynb",
        optax_cifar10_resnet,
        RESNET,
        (0.12, 0.24, 0.06),
        # optax < 0.2.7's piecewise_interpolate_schedule computes its values
        # with NumPy when it is made: peak_value must be a Python value there.
        one_trace_from=(0, 2, 7),
    ),
    Config(
        "optax-lookahead_mnist-adam",
        "google-deepmind/optax: examples/lookahead_mnist.ipynb",
        optax_lookahead_mnist,
        plain_optax.LookaheadParams.init_synced(MLP),
        (2e-3, 4e-3, 1e-3),
        lookahead=True,
    ),
    Config(
        "optax-gradient_accumulation-MultiSteps-sgd",
        "google-deepmind/optax: examples/gradient_accumulation.ipynb",
        optax_gradient_accumulation,
        MLP,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "optax-gradient_accumulation-MultiSteps-piecewise",
        "google-deepmind/optax: examples/gradient_accumulation.ipynb (piecewise_constant_schedule)",
        optax_gradient_accumulation_piecewise,
        MLP,
        (1.0, 2.0, 0.5),
    ),
    Config(
        "optax-contrib-reduce_on_plateau",
        "google-deepmind/optax: examples/contrib/reduce_on_plateau.ipynb",
        optax_reduce_on_plateau,
        MLP,
        (1e-2, 2e-2, 5e-3),
        extra="value",
    ),
    Config(
        "optax-flax_example-scale_by_adam-scale",
        "google-deepmind/optax: examples/flax_example.ipynb",
        optax_flax_example,
        MLP,
        (1e-2, 2e-2, 5e-3),
    ),
    Config(
        "optax-contrib-muon-dimension-numbers",
        "google-deepmind/optax: examples/contrib/muon.ipynb",
        optax_muon,
        MUON_PARAMS,
        (1e-3, 2e-3, 5e-4),
        needs="contrib.MuonDimensionNumbers",
    ),
    Config(
        "optax-freezing-transforms.freeze",
        "google-deepmind/optax: examples/freezing_parameters.ipynb "
        "(optax.chain(optax.adam(0.1), freeze(mask)))",
        optax_freeze,
        FREEZE_PARAMS,
        (0.1, 0.2, 0.05),
        note="optax.transforms is passed through by the drop-in: plain optax's freeze, new on each call",
    ),
    Config(
        "optax-freezing-partition",
        "google-deepmind/optax: examples/freezing_parameters.ipynb (make_optimizer(mask): optax.partition)",
        optax_partition,
        FREEZE_PARAMS,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "optax-contrib-sam-momentum",
        "google-deepmind/optax: examples/contrib/sam.ipynb (sam_mom)",
        optax_sam,
        MLP,
        (1e-2, 2e-2, 5e-3),
    ),
    # mlcommons/algorithmic-efficiency
    Config(
        "algoperf-nadamw-user-transformations",
        "mlcommons/algorithmic-efficiency: "
        "algorithms/baselines/external_tuning/jax_nadamw_full_budget.py (nadamw, scale_by_nadam, "
        "scale_by_learning_rate)",
        algoperf_nadamw,
        WORKLOAD_RESNET,
        (1.3e-3, 2.6e-3, 6.5e-4),
        note=(
            "scale_by_nadam is a user-written transformation made anew, and scale_by_learning_rate wraps "
            "the schedule in a lambda (scale_by_schedule(lambda count: m * learning_rate(count)))"
        ),
    ),
    Config(
        "algoperf-target-adamw-cosine-warmup",
        "mlcommons/algorithmic-efficiency: "
        "algorithms/target_setting_algorithms/jax_adamw.py, cosine_warmup.py (jax_cosine_warmup)",
        algoperf_adamw,
        WORKLOAD_RESNET,
        (1.3e-3, 2.6e-3, 6.5e-4),
    ),
    Config(
        "algoperf-target-momentum-polynomial",
        "mlcommons/algorithmic-efficiency: "
        "algorithms/target_setting_algorithms/jax_momentum.py (create_lr_schedule_fn, sgd)",
        algoperf_momentum,
        WORKLOAD_RESNET,
        (0.1, 0.2, 0.05),
    ),
    Config(
        "algoperf-lamb-cosine-warmup",
        "mlcommons/algorithmic-efficiency: "
        "algorithms/archived_paper_baselines/lamb/jax/submission.py (init_optimizer_state)",
        algoperf_lamb,
        WORKLOAD_RESNET,
        (1.3e-3, 2.6e-3, 6.5e-4),
    ),
    Config(
        "algoperf-mnist-scale_by_adam",
        "mlcommons/algorithmic-efficiency: "
        "algorithms/development_algorithms/mnist/mnist_jax/submission.py (init_optimizer_state)",
        algoperf_mnist,
        CNN,
        (1e-3, 2e-3, 5e-4),
    ),
    # danijar/dreamerv3
    Config(
        "dreamerv3-agc-rms-momentum-warmup",
        "danijar/dreamerv3: dreamerv3/agent.py (_make_opt), "
        "embodied/jax/opt.py (clip_by_agc, scale_by_rms, scale_by_momentum)",
        lambda optax, rate: dreamerv3(optax, lr=rate, warmup=2),
        DREAMER,
        (4e-3, 8e-3, 2e-3),
        note="the chain holds user-written transformations made anew on each call",
    ),
    Config(
        "dreamerv3-wd-regex-mask-cosine",
        "danijar/dreamerv3: dreamerv3/agent.py (_make_opt: wd, wdmask lambda, cosine schedule)",
        lambda optax, rate: dreamerv3(optax, lr=rate, wd=1e-2, schedule="cosine", warmup=2, anneal=10),
        DREAMER,
        (4e-3, 8e-3, 2e-3),
        note="the chain holds user-written transformations and a mask lambda made anew on each call",
    ),
    # google-deepmind/dm-haiku
    Config(
        "haiku-transformer-clip-adam",
        "google-deepmind/dm-haiku: examples/transformer/train.py (optimiser)",
        haiku_transformer,
        HAIKU_TRANSFORMER,
        (3e-4, 6e-4, 1.5e-4),
    ),
    Config(
        "haiku-impala-rmsprop",
        "google-deepmind/dm-haiku: examples/impala/run_catch.py (main)",
        haiku_impala,
        HAIKU_CATCH,
        (5e-3, 1e-2, 2.5e-3),
    ),
    # patrick-kidger/equinox
    Config(
        "equinox-bert-clip-adam",
        "patrick-kidger/equinox: docs/examples/bert.ipynb",
        equinox_bert,
        EQX_MLP,
        (1e-5, 1e-3, 1e-4),
    ),
    Config(
        "equinox-score_based_diffusion-adabelief",
        "patrick-kidger/equinox: docs/examples/score_based_diffusion.ipynb",
        equinox_score_based_diffusion,
        EQX_MLP,
        (3e-4, 6e-4, 1.5e-4),
    ),
]
