"""Section 9: rebuild (see ``run.py``).

A sweep rebuilds its optimizer for every value: ``wrap`` called again with a
new value of the swept rate for a configuration already seen (cached),
``replace`` of one argument, and a user's own builder written with the
drop-in. Each is timed against the same rebuild with
``optax.inject_hyperparams`` and with plain optax, all rows interleaved in one
run. The first wrap of a factory (caches cleared) is timed apart, with the
share of each step of the pipeline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import optax

import optax_pytree as opx
import optax_pytree.optax as dropin
from _common import Log, Settings, interleaved, micro_clock, ratios, rotated, summary
from _report import Target, check, fmt, on_median, section, table, us
from optax_pytree import _bind, _caches, _detect, _disk, _pipeline, _verify

TITLE = "rebuild"
SECTION = 9

WARMUP, DECAY = 100, 10_000
SCHEDULE = "warmup-cosine"
LR0 = 1e-3  # the rate of the object that replace() is called on
WEIGHT_DECAY = 0.1

# The LLM-style parameter tree: 12 named groups, each a matrix and a vector.
GROUPS = ("embed", *(f"layer_{i}" for i in range(10)), "head")
LION_GROUPS = ("embed", "head")  # label "lion"; the layer blocks are "adamw"
LLM_PARAMS = {g: {"w": jnp.ones((8, 8)), "b": jnp.zeros(8)} for g in GROUPS}
SMALL_PARAMS = {"w": jnp.ones(3)}  # adam's init, as in section 4


# --------------------------------------------------------------------------
# What is rebuilt.


def _wrap_schedule(peak: float) -> Any:
    return opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, peak, WARMUP, DECAY)


def _raw_schedule(peak: float) -> Any:
    return optax.warmup_cosine_decay_schedule(0.0, peak, WARMUP, DECAY)


def make_optimizer(ox: ModuleType, lr: float, mask: Any = None, labels: Any = None) -> Any:
    """The user's builder of the LLM-style composition, written against ``ox``.

    ``ox`` is the drop-in (``import optax_pytree.optax as optax``) or optax
    itself. Without ``mask`` and ``labels`` the builder makes them afresh on
    every call (lambdas defined here, as programs write them); given, they
    are the same objects on every call (hoisted out of the builder).
    """
    mask = (lambda p: jax.tree.map(lambda x: x.ndim > 1, p)) if mask is None else mask
    labels = (lambda p: {k: "lion" if k in LION_GROUPS else "adamw" for k in p}) if labels is None else labels
    return ox.multi_transform(
        {
            "adamw": ox.chain(
                ox.clip_by_global_norm(1.0),
                ox.adamw(
                    ox.warmup_cosine_decay_schedule(0, lr, WARMUP, DECAY),
                    weight_decay=WEIGHT_DECAY,
                    mask=mask,
                ),
            ),
            "lion": ox.chain(ox.clip_by_global_norm(1.0), ox.lion(lr / 3)),
        },
        labels,
    )


def make_optimizer_config(ox: ModuleType, config: Any) -> Any:
    """The same builder, its schedule a closure over the program's config (an ml_collections
    ``ConfigDict``, as scenic and flax's examples write it), made afresh on every call."""

    def lr_fn(step: Any) -> Any:
        warmup = jnp.minimum(1.0, step / config.schedule.warmup_steps)
        progress = jnp.clip((step - config.schedule.warmup_steps) / config.schedule.decay_steps, 0.0, 1.0)
        return config.lr * warmup * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))

    mask = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)  # noqa: E731 - as the user's builder writes it
    labels = lambda p: {k: "lion" if k in LION_GROUPS else "adamw" for k in p}  # noqa: E731
    return ox.multi_transform(
        {
            "adamw": ox.chain(
                ox.clip_by_global_norm(1.0), ox.adamw(lr_fn, weight_decay=config.weight_decay, mask=mask)
            ),
            "lion": ox.chain(ox.clip_by_global_norm(1.0), ox.lion(config.lr / 3)),
        },
        labels,
    )


def _config(lr: float) -> Any:
    """The program's config for one value of the sweep (a new object each time, as a sweep makes it)."""
    import ml_collections

    return ml_collections.ConfigDict(
        {"lr": lr, "weight_decay": WEIGHT_DECAY, "schedule": {"warmup_steps": WARMUP, "decay_steps": DECAY}}
    )


def make_optimizer_inject(lr: float) -> Any:
    """The same composition built with ``optax.inject_hyperparams`` (the mask a static argument)."""
    mask = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)  # noqa: E731 - as the user's builder writes it
    labels = lambda p: {k: "lion" if k in LION_GROUPS else "adamw" for k in p}  # noqa: E731
    return optax.multi_transform(
        {
            "adamw": optax.chain(
                optax.clip_by_global_norm(1.0),
                optax.inject_hyperparams(optax.adamw, static_args=("mask",))(
                    learning_rate=optax.warmup_cosine_decay_schedule(0, lr, WARMUP, DECAY),
                    weight_decay=WEIGHT_DECAY,
                    mask=mask,
                ),
            ),
            "lion": optax.chain(
                optax.clip_by_global_norm(1.0), optax.inject_hyperparams(optax.lion)(learning_rate=lr / 3)
            ),
        },
        labels,
    )


def hoisted_mask(p: Any) -> Any:
    return jax.tree.map(lambda x: x.ndim > 1, p)


def hoisted_labels(p: Any) -> Any:
    return {k: "lion" if k in LION_GROUPS else "adamw" for k in p}


# --------------------------------------------------------------------------
# The rows: every row of every table is timed in one interleaved run.


@dataclasses.dataclass(frozen=True)
class Row:
    call: Callable[[], Any]
    refs: dict[str, str] = dataclasses.field(default_factory=dict)  # role -> the row it is compared with
    # (role, limit): the ratio to refs[role] at most limit; role "time": seconds.
    limits: tuple[tuple[str, float], ...] = ()
    waits: bool = False  # its result is waited for (leaves, optimizer state); else pure Python work


@dataclasses.dataclass(frozen=True)
class Table:
    key: str
    note: str
    roles: dict[str, str]  # role -> its column ("ratio to ...")
    rows: dict[str, Row]


# Row names (unique across the tables: one interleaved run).
WRAP_ADAM = "opx.wrap(adam, lr)"
INJECT_ADAM = "inject_hyperparams(adam)(lr)"
OPTAX_ADAM = "optax.adam(lr)"
WRAP_ADAMW = f"opx.wrap(adamw, lr=opx.wrap({SCHEDULE}))"
INJECT_ADAMW = f"inject_hyperparams(adamw)(lr={SCHEDULE})"
OPTAX_ADAMW = f"optax.adamw({SCHEDULE})"
WRAP_CHAIN = "opx.wrap(chain, opx.wrap(clip), opx.wrap(adamw, lr))"
DROPIN_CHAIN = "drop-in chain(clip, adamw(lr))"
INJECT_CHAIN = "chain(clip, inject_hyperparams(adamw)(lr))"
OPTAX_CHAIN = "optax.chain(clip, adamw(lr))"
REPLACE = f"replace(weight_decay) of {WRAP_ADAMW}"
INJECT_REPLACE = f"inject_hyperparams(adamw)(lr={SCHEDULE}, weight_decay)"
OPTAX_REPLACE = f"optax.adamw({SCHEDULE}, weight_decay)"
LLM_FRESH = "make_optimizer(lr), drop-in, fresh lambdas"
LLM_HOISTED = "make_optimizer(lr), drop-in, hoisted mask/labels"
LLM_INJECT = "make_optimizer(lr), inject_hyperparams"
LLM_OPTAX = "make_optimizer(lr), plain optax"
LLM_CONFIG = "make_optimizer(config), drop-in, schedule a closure over a ConfigDict"
LLM_CONFIG_OPTAX = "make_optimizer(config), plain optax"
CONFIG_COST = 1.2  # a fresh config closure against the same composition's rebuild with the rate given
USE = " + first use"
INIT = " + init"

WARMUP_CALLS = 3  # of each row, before the timed run
SAME_COST = 1.1  # fresh lambdas against hoisted ones: the same cost, within 10%


def _tables(lrs: Iterator[float], wds: Iterator[float], replaced: Any) -> list[Table]:
    ia, ix = "inject", "optax"
    # The program makes its config for each value; that is its own cost (the same with plain
    # optax), so the configs are made before the timing: each call a config it has not seen.
    configs = itertools.cycle([_config(lr) for lr in itertools.islice(lrs, 2000)])
    return [
        Table(
            "rebuild",
            "Rebuild of a cached configuration: a new value of the swept rate (of `weight_decay` for "
            "`replace`), the configuration already seen. Not waited for (pure Python work; waiting would "
            "flatten the object and so make its leaves).",
            {ia: "inject_hyperparams", ix: "plain optax"},
            {
                WRAP_ADAM: Row(
                    lambda: opx.wrap(optax.adam, learning_rate=next(lrs)),
                    {ia: INJECT_ADAM, ix: OPTAX_ADAM},
                    ((ia, 0.5),),
                ),
                INJECT_ADAM: Row(
                    lambda: optax.inject_hyperparams(optax.adam)(learning_rate=next(lrs)), {ix: OPTAX_ADAM}
                ),
                OPTAX_ADAM: Row(lambda: optax.adam(next(lrs))),
                WRAP_ADAMW: Row(
                    lambda: opx.wrap(optax.adamw, learning_rate=_wrap_schedule(next(lrs))),
                    {ia: INJECT_ADAMW, ix: OPTAX_ADAMW},
                    ((ia, 1.0),),
                ),
                INJECT_ADAMW: Row(
                    lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=_raw_schedule(next(lrs))),
                    {ix: OPTAX_ADAMW},
                ),
                OPTAX_ADAMW: Row(lambda: optax.adamw(_raw_schedule(next(lrs)))),
                WRAP_CHAIN: Row(
                    lambda: opx.wrap(
                        optax.chain,
                        opx.wrap(optax.clip_by_global_norm, 1.0),
                        opx.wrap(optax.adamw, learning_rate=next(lrs)),
                    ),
                    {ia: INJECT_CHAIN, ix: OPTAX_CHAIN},
                    ((ia, 1.0),),
                ),
                DROPIN_CHAIN: Row(
                    lambda: dropin.chain(dropin.clip_by_global_norm(1.0), dropin.adamw(next(lrs))),
                    {ia: INJECT_CHAIN, ix: OPTAX_CHAIN},
                    ((ia, 1.0),),
                ),
                INJECT_CHAIN: Row(
                    lambda: optax.chain(
                        optax.clip_by_global_norm(1.0),
                        optax.inject_hyperparams(optax.adamw)(learning_rate=next(lrs)),
                    ),
                    {ix: OPTAX_CHAIN},
                ),
                OPTAX_CHAIN: Row(lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(next(lrs)))),
                REPLACE: Row(
                    lambda: replaced.replace(weight_decay=next(wds)),
                    {ia: INJECT_REPLACE, ix: OPTAX_REPLACE},
                    ((ia, 1.0),),
                ),
                INJECT_REPLACE: Row(
                    lambda: optax.inject_hyperparams(optax.adamw)(
                        learning_rate=_raw_schedule(LR0), weight_decay=next(wds)
                    ),
                    {ix: OPTAX_REPLACE},
                ),
                OPTAX_REPLACE: Row(lambda: optax.adamw(_raw_schedule(LR0), weight_decay=next(wds))),
            },
        ),
        Table(
            "llm",
            "LLM-style composition rebuilt through the user's builder `make_optimizer(lr)`, written with "
            "the drop-in: `multi_transform` over a tree of 12 named groups (embed, 10 layer blocks, "
            f'head) with a label function (a lambda) giving two labels; "adamw": `chain(clip_by_global_'
            f"norm(1.0), adamw({SCHEDULE}(0, lr, {WARMUP}, {DECAY:_}), weight_decay={WEIGHT_DECAY}, "
            'mask=<lambda: ndim > 1>))`, "lion": `chain(clip_by_global_norm(1.0), lion(lr / 3))`. '
            "Fresh lambdas: mask and label function made inside the builder on every call; hoisted: "
            "the same builder given the same two objects every call. inject_hyperparams: the same "
            'composition with `inject_hyperparams(adamw, static_args=("mask",))` and '
            "`inject_hyperparams(lion)`. Config closure: the same composition, its schedule a "
            "warmup-cosine closure reading `config.lr` and `config.schedule.*` of an ml_collections "
            "`ConfigDict`, one per value (made before the timing: a program makes its config "
            "whichever optimizer it builds). Not waited for.",
            {
                "hoisted": "hoisted mask/labels",
                "numbers": "the rate given to the drop-in's schedule",
                ia: "inject_hyperparams",
                ix: "plain optax",
            },
            {
                LLM_FRESH: Row(
                    lambda: make_optimizer(dropin, next(lrs)),
                    {"hoisted": LLM_HOISTED, ia: LLM_INJECT, ix: LLM_OPTAX},
                    (("time", 0.5e-3), ("hoisted", SAME_COST)),
                ),
                LLM_HOISTED: Row(
                    lambda: make_optimizer(dropin, next(lrs), hoisted_mask, hoisted_labels),
                    {ia: LLM_INJECT, ix: LLM_OPTAX},
                ),
                LLM_INJECT: Row(lambda: make_optimizer_inject(next(lrs)), {ix: LLM_OPTAX}),
                LLM_OPTAX: Row(lambda: make_optimizer(optax, next(lrs))),
                LLM_CONFIG: Row(
                    lambda: make_optimizer_config(dropin, next(configs)),
                    {"numbers": LLM_FRESH, ix: LLM_CONFIG_OPTAX},
                    (("numbers", CONFIG_COST),),
                ),
                LLM_CONFIG_OPTAX: Row(lambda: make_optimizer_config(optax, next(configs))),
            },
        ),
        Table(
            "first_use",
            "Rebuild + first use, conversion included: the wrapped object rebuilt, then its leaves read "
            "(`jax.tree_util.tree_leaves(tx)`, waited for: leaves made from Python numbers are made at "
            "their first use), against inject_hyperparams and plain optax rebuilt, then `init(params)` "
            '(waited for: inject_hyperparams makes its arrays at init). params: adam `{"w": ones(3)}` '
            "(as in section 4), the LLM-style composition its 12 groups of an 8x8 matrix and a vector.",
            {ia: "inject_hyperparams + init", ix: "plain optax + init"},
            {
                WRAP_ADAM + USE: Row(
                    lambda: jax.tree_util.tree_leaves(opx.wrap(optax.adam, learning_rate=next(lrs))),
                    {ia: INJECT_ADAM + INIT, ix: OPTAX_ADAM + INIT},
                    waits=True,
                ),
                INJECT_ADAM + INIT: Row(
                    lambda: optax.inject_hyperparams(optax.adam)(learning_rate=next(lrs)).init(SMALL_PARAMS),
                    {ix: OPTAX_ADAM + INIT},
                    waits=True,
                ),
                OPTAX_ADAM + INIT: Row(lambda: optax.adam(next(lrs)).init(SMALL_PARAMS), waits=True),
                LLM_FRESH + USE: Row(
                    lambda: jax.tree_util.tree_leaves(make_optimizer(dropin, next(lrs))),
                    {ia: LLM_INJECT + INIT, ix: LLM_OPTAX + INIT},
                    waits=True,
                ),
                LLM_INJECT + INIT: Row(
                    lambda: make_optimizer_inject(next(lrs)).init(LLM_PARAMS),
                    {ix: LLM_OPTAX + INIT},
                    waits=True,
                ),
                LLM_OPTAX + INIT: Row(lambda: make_optimizer(optax, next(lrs)).init(LLM_PARAMS), waits=True),
            },
        ),
    ]


def _same_treedefs() -> dict[str, bool]:
    """Each wrapped rebuild is a cached configuration: two rates give one treedef."""

    def same(build: Callable[[float], Any]) -> bool:
        a, b = build(1e-3), build(2e-3)
        return jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)

    replaced = opx.wrap(optax.adamw, learning_rate=_wrap_schedule(LR0))
    return {
        WRAP_ADAM: same(lambda lr: opx.wrap(optax.adam, learning_rate=lr)),
        LLM_CONFIG: same(lambda lr: make_optimizer_config(dropin, _config(lr))),
        WRAP_ADAMW: same(lambda lr: opx.wrap(optax.adamw, learning_rate=_wrap_schedule(lr))),
        WRAP_CHAIN: same(
            lambda lr: opx.wrap(
                optax.chain, opx.wrap(optax.clip_by_global_norm, 1.0), opx.wrap(optax.adamw, learning_rate=lr)
            )
        ),
        DROPIN_CHAIN: same(lambda lr: dropin.chain(dropin.clip_by_global_norm(1.0), dropin.adamw(lr))),
        REPLACE: same(lambda wd: replaced.replace(weight_decay=wd)),
        LLM_FRESH: same(lambda lr: make_optimizer(dropin, lr)),
        LLM_HOISTED: same(lambda lr: make_optimizer(dropin, lr, hoisted_mask, hoisted_labels)),
    }


# --------------------------------------------------------------------------
# The first wrap, step by step.

STEPS: tuple[str, ...] = ("bind", "classify", "detect", "verify")
REST = "build/conversion (rest)"
STEP_TEXT = {
    "bind": "`_bind.factory_info` and `FactoryInfo.bind` (signature, binding)",
    "classify": "`_classify.classify`",
    "detect": "`_detect.analyse` (the probe)",
    "verify": "`_verify.compare` (the verification's comparison)",
}

FIRST_ADAM = "opx.wrap(adam, lr)"
FIRST_LLM = "make_optimizer(lr), drop-in"
# The first wrap in a process (caches cleared): analysed there (nothing on
# disk: a first run), or read from the analyses an earlier process kept
# (``optax_pytree._disk``: every later run of the program). The targets are
# for the second.
COLD, DISK = "nothing on disk", "analyses on disk"
FIRST_LIMITS = {FIRST_ADAM: 10e-3, FIRST_LLM: 40e-3}


class StepTimer:
    """Seconds spent in each step, exclusive: a timed call inside another is its own step's.

    On ``micro_clock()``: process CPU time where it means something, else wall time.
    """

    def __init__(self) -> None:
        self.clock = micro_clock()
        self.totals: dict[str, float] = dict.fromkeys(STEPS, 0.0)
        self._inner: list[list[float]] = []  # per open timed call: seconds of timed calls inside it

    def reset(self) -> None:
        self.totals = dict.fromkeys(STEPS, 0.0)
        self._inner.clear()

    def timed(self, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            inner = [0.0]
            self._inner.append(inner)
            t0 = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = self.clock() - t0
                self._inner.pop()
                self.totals[step] += elapsed - inner[0]
                if self._inner:
                    self._inner[-1][0] += elapsed

        return timed


# Where each step is looked up: _pipeline imports classify by name, _verify
# calls compare as a global of its own, _detect.analyse and _bind.factory_info
# are called through their modules, FactoryInfo.bind as a method.
PLACES: tuple[tuple[str, Any, str], ...] = (
    ("bind", _bind, "factory_info"),
    ("bind", _bind.FactoryInfo, "bind"),
    ("classify", _pipeline, "classify"),
    ("detect", _detect, "analyse"),
    ("verify", _verify, "compare"),
)


@contextlib.contextmanager
def timed_steps(timer: StepTimer) -> Iterator[list[str]]:
    """Each step's functions wrapped with ``timer``'s, restored on exit; yields those not found."""
    saved: list[tuple[Any, str, Any]] = []
    missing: list[str] = []
    try:
        for step, owner, name in PLACES:
            original = vars(owner).get(name)
            if not callable(original):
                missing.append(f"{owner.__name__}.{name}")
                continue
            saved.append((owner, name, original))
            setattr(owner, name, timer.timed(step, original))
        yield missing
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


@contextlib.contextmanager
def _analyses_on_disk(mode: str) -> Iterator[None]:
    """The disk cache off (``COLD``), or in a new folder (``DISK``: its first wrap writes it)."""
    saved = os.environ.get(CACHE_ENV)
    with tempfile.TemporaryDirectory(prefix="optax_pytree_analyses_") as folder:
        os.environ[CACHE_ENV] = "0" if mode == COLD else folder
        try:
            yield
        finally:
            if saved is None:
                del os.environ[CACHE_ENV]
            else:
                os.environ[CACHE_ENV] = saved


CACHE_ENV = "OPTAX_PYTREE_ANALYSIS_CACHE"


def _first_name(name: str, mode: str) -> str:
    return f"{name}, {mode}"


def _first_wraps(s: Settings, lrs: Iterator[float]) -> dict[str, Any]:
    makers: dict[str, Callable[[float], Any]] = {
        FIRST_ADAM: lambda lr: opx.wrap(optax.adam, learning_rate=lr),
        FIRST_LLM: lambda lr: make_optimizer(dropin, lr),
    }
    keys = ("total", *STEPS, REST, "first_use")
    names = [_first_name(m, mode) for mode in (COLD, DISK) for m in makers]
    samples: dict[str, dict[str, list[float]]] = {n: {k: [] for k in keys} for n in names}
    timer = StepTimer()
    for mode in (COLD, DISK):
        with _analyses_on_disk(mode), timed_steps(timer) as missing:
            _first_samples(s, lrs, makers, mode, timer, samples)
    result: dict[str, Any] = {"missing": missing}
    for name, out in samples.items():
        result[name] = {
            **{k: summary(v) for k, v in out.items()},
            "shares": {k: summary(ratios(out[k], out["total"])) for k in (*STEPS, REST)},
        }
    return result


def _first_samples(
    s: Settings,
    lrs: Iterator[float],
    makers: dict[str, Callable[[float], Any]],
    mode: str,
    timer: StepTimer,
    samples: dict[str, dict[str, list[float]]],
) -> None:
    """Round 0 is a warm-up, not kept: what clear_caches() does not forget (jax's compiled
    converters, imports) is paid once per process; with ``DISK``, it writes the analyses."""
    for i in range(s.first_wrap_samples + 1):
        for name in rotated(list(makers), i):
            _caches.clear_caches()
            _disk.forget_modules()  # as a new process: the loaded modules read again
            lr = next(lrs)
            timer.reset()
            clock = timer.clock
            t0 = clock()
            tx = makers[name](lr)
            total = clock() - t0
            steps = dict(timer.totals)
            t1 = clock()
            jax.block_until_ready(jax.tree_util.tree_leaves(tx))
            use = clock() - t1
            if i == 0:
                continue
            out = samples[_first_name(name, mode)]
            out["total"].append(total)
            for k in STEPS:
                out[k].append(steps[k])
            out[REST].append(total - sum(steps.values()))
            out["first_use"].append(use)


# --------------------------------------------------------------------------
# The section.


def _values(lo: float, hi: float) -> Iterator[float]:
    """A new value on every call, as a sweep gives (none repeats), spread log-uniformly in [lo, hi)."""
    golden = (5**0.5 - 1) / 2
    return (lo * (hi / lo) ** ((k * golden) % 1.0) for k in itertools.count())


def run(s: Settings, log: Log) -> dict[str, Any]:
    lrs, wds = _values(1e-4, 1e-2), _values(1e-4, 1e-1)
    checks = _same_treedefs()
    for name, ok in checks.items():
        if not ok:
            log(f"  WARNING: {name} gives another treedef for another rate: not a cached configuration")
    first = _first_wraps(s, lrs)
    if first["missing"]:
        log(f"  not found (their time counts in the rest): {', '.join(first['missing'])}")
    for mode in (COLD, DISK):
        for name in (FIRST_ADAM, FIRST_LLM):
            log(f"  first wrap, {name}, {mode}: {fmt(first[_first_name(name, mode)]['total'], 2, 1e3)} ms")

    replaced = opx.wrap(optax.adamw, learning_rate=_wrap_schedule(LR0))
    jax.block_until_ready(jax.tree_util.tree_leaves(replaced))  # its own leaves made once, before timing
    tables = _tables(lrs, wds, replaced)
    rows = {name: row for t in tables for name, row in t.rows.items()}
    # Warm-up: each configuration's first wrap (its analysis) and jax's first
    # dispatch of each call are paid here, not in the calibration of the
    # number of calls per sample (which does not call pure functions first).
    for row in rows.values():
        for _ in range(WARMUP_CALLS):
            result = row.call()
            if row.waits:
                jax.block_until_ready(result)
    pure = [name for name, row in rows.items() if not row.waits]
    t = interleaved({k: r.call for k, r in rows.items()}, s.micro_repeats, s.micro_seconds, pure=pure)
    out_tables = []
    for tab in tables:
        out_rows: dict[str, Any] = {}
        for name, row in tab.rows.items():
            out_rows[name] = {
                "s": summary(t[name]),
                "refs": dict(row.refs),
                "ratios": {role: summary(ratios(t[name], t[ref])) for role, ref in row.refs.items()},
                "limits": [list(lim) for lim in row.limits],
            }
            log(f"  {name}: {us(out_rows[name]['s'])} us")
        out_tables.append({"key": tab.key, "note": tab.note, "roles": tab.roles, "rows": out_rows})
    return {"tables": out_tables, "first_wrap": first, "same_treedef": checks}


def _limit_text(role: str, limit: float) -> str:
    return f"<= {limit * 1e6:.0f} us" if role == "time" else f"<= {limit:g}"


def _measured(row: dict[str, Any], role: str) -> dict[str, Any]:
    return row["s"] if role == "time" else row["ratios"][role]


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    for tab in r["tables"]:
        for name, row in tab["rows"].items():
            for role, limit in row["limits"]:
                stat = _measured(row, role)
                if role == "time":
                    out.append(
                        Target(
                            SECTION,
                            f"rebuild, {name}",
                            f"{us(stat)} us",
                            _limit_text(role, limit),
                            check(stat["median"] <= limit),
                        )
                    )
                else:
                    what = f"rebuild, {name} / {row['refs'][role]}"
                    out.append(on_median(SECTION, what, stat, _limit_text(role, limit), limit, digits=2))
    for name, limit in FIRST_LIMITS.items():
        total = r["first_wrap"][_first_name(name, DISK)]["total"]
        out.append(
            Target(
                SECTION,
                f"first wrap (caches cleared), {_first_name(name, DISK)}",
                f"{fmt(total, 2, 1e3)} ms",
                f"<= {limit * 1e3:g} ms",
                check(total["median"] <= limit),
            )
        )
    return out


def _target_cell(row: dict[str, Any]) -> str:
    cells = []
    for role, limit in row["limits"]:
        ok = _measured(row, role)["median"] <= limit
        what = "time" if role == "time" else f"ratio to {role}"
        cells.append(f"{what} {_limit_text(role, limit)} {'✓' if ok else '✗'}")
    return "; ".join(cells)


def _rows_table(tab: dict[str, Any]) -> list[str]:
    roles = tab["roles"]
    header = " | ".join(["call", "time (us)", *(f"ratio to {label}" for label in roles.values()), "target"])
    return table(
        header,
        [
            [
                name,
                us(row["s"]),
                *(fmt(row["ratios"][role], 2) if role in row["ratios"] else "" for role in roles),
                _target_cell(row),
            ]
            for name, row in tab["rows"].items()
        ],
    )


def _first_table(first: dict[str, Any]) -> list[str]:
    missing = set(first["missing"])
    found = {step for step, owner, name in PLACES if f"{owner.__name__}.{name}" not in missing}
    absent = set(STEPS) - found  # none of a step's functions found: not timed at all

    def step_cell(res: dict[str, Any], k: str) -> str:
        if k in absent:
            return "n/a"
        return f"{res[k]['median'] * 1e3:.2f} ({res['shares'][k]['median']:.1%})"

    rows = []
    for mode in (COLD, DISK):
        for name in (FIRST_ADAM, FIRST_LLM):
            res = first[_first_name(name, mode)]
            target = ""
            if mode == DISK:
                ok = res["total"]["median"] <= FIRST_LIMITS[name]
                target = f"<= {FIRST_LIMITS[name] * 1e3:g} ms {'✓' if ok else '✗'}"
            rows.append(
                [
                    _first_name(name, mode),
                    fmt(res["total"], 2, 1e3),
                    *(step_cell(res, k) for k in (*STEPS, REST)),
                    fmt(res["first_use"], 2, 1e3),
                    target,
                ]
            )
    return table(
        "call | first wrap (ms) | "
        + " | ".join(f"{k} (ms, share)" for k in (*STEPS, REST))
        + " | then first use (ms) | target",
        rows,
    )


def markdown(r: dict[str, Any]) -> list[str]:
    parts: list[str | list[str]] = []
    for tab in r["tables"]:
        parts += [tab["note"], _rows_table(tab)]
    bad = [name for name, ok in r["same_treedef"].items() if not ok]
    parts.append(
        "Every wrapped rebuild gives the treedef of the previous one (a cached configuration)."
        if not bad
        else f"NOT a cached configuration (another treedef for another rate): {', '.join(bad)}."
    )
    first = r["first_wrap"]
    steps = "; ".join(f"{k}: {v}" for k, v in STEP_TEXT.items())
    parts += [
        "First wrap: `optax_pytree._caches.clear_caches()` before each sample (one warm-up round not "
        "kept), the two interleaved; with nothing on disk (the analyses kept on disk turned off: a "
        "program's first run), then with the analyses an earlier process kept in a new folder "
        "(`OPTAX_PYTREE_ANALYSIS_CACHE`, written by the warm-up round: every later run of the same "
        "program with the same code reads them, see `optax_pytree/_disk.py`); what a new process pays "
        "once (its imports, the digest of its loaded modules' files) is in the warm-up. "
        "Each step's functions are wrapped with a timer where the pipeline "
        f"looks them up ({steps}); a step's time excludes the timed steps inside it, the rest (the "
        "factory's own call, the spec, the host values, the object) is the first wrap less the steps. "
        "Steps: median ms (on the clock of the micro-benchmarks, named at the top) and median share of "
        "the first wrap. Then first use: "
        "`jax.tree_util.tree_leaves(tx)`, waited for (the conversion of its numbers)."
        + (f" Not found, counted in the rest: {', '.join(first['missing'])}." if first["missing"] else ""),
        _first_table(first),
        "Why the first wrap of adam with nothing on disk is over 10 ms: it traces adam's `init` and "
        "`update` three times, "
        "each a few milliseconds of JAX tracing (about 500 operations): once in the probe (stand-ins "
        "for every numeric argument, recording comparisons and the Python arithmetic that reaches "
        "JAX), and twice in the verification (the wrapped build with its leaves traced, and the "
        "factory with the Python values), whose jaxprs are then evaluated with NumPy and compared bit "
        "for bit. That verification is the never-silently-wrong guarantee; it runs once per "
        "configuration and branch, and every later wrap costs microseconds. With the analyses on disk "
        "a later process reads what the first one found (the digest of the configuration and of the "
        "code's files, a file read) instead of tracing.",
    ]
    return section("## 9. Rebuild", *parts)
