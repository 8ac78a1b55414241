"""Configs of any kind: what a schedule reads decides, not the config's class (issue 48).

Research code holds its numbers in many kinds of config: dicts with attribute
access (easydict, addict, python-box, munch, dotmap, the ``AttrDict(dict)``
idiom), immutable mappings (immutabledict, frozendict), and classes of the
program's own whose ``__getattr__`` or ``__getitem__`` reads a dict of fields.
A look-up of the class's own code is replaced where it is proved to give the
object the config holds under that name, the same when read twice, leaving
the config as it was; the check reads it again at every flatten and eager
build. What cannot be proved stays static, with a warning naming the look-up
and why; a second optimizer that differs from one the same code built only by
a number held static warns, naming the number and both values, and
``opx.explain`` says the same.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax as plain
import pytest

import optax_pytree as opx
import optax_pytree.optax as dropin

easydict = pytest.importorskip("easydict", reason="a test extra: easydict's EasyDict")
addict = pytest.importorskip("addict", reason="a test extra: addict's Dict")
box = pytest.importorskip("box", reason="a test extra: python-box's Box")
munch = pytest.importorskip("munch", reason="a test extra: munch's Munch")
dotmap = pytest.importorskip("dotmap", reason="a test extra: dotmap's DotMap")
immutabledict = pytest.importorskip("immutabledict", reason="a test extra: immutabledict")
frozendict = pytest.importorskip("frozendict", reason="a test extra: frozendict")
eqx = pytest.importorskip("equinox", reason="a test extra: modules of equinox")

PARAMS = {"kernel": jnp.linspace(-1.0, 1.0, 6).reshape(3, 2), "bias": jnp.array([0.1, -0.2])}
GRADS = jax.tree_util.tree_map(lambda x: 0.3 * x + 0.05, PARAMS)
RATES = (1e-3, 3e-3, 2e-2)


def _steps(tx: Any, steps: int = 2) -> Any:
    params, state = PARAMS, tx.init(PARAMS)
    for _ in range(steps):
        updates, state = tx.update(GRADS, state, params)
        params = plain.apply_updates(params, updates)
    return params, state


def _counted() -> tuple[list[int], Any]:
    traces: list[int] = []

    def run(tx: Any, params: Any) -> Any:
        traces.append(1)
        updates, state = tx.update(GRADS, tx.init(params), params)
        return plain.apply_updates(params, updates), state

    return traces, run


# --------------------------------------------------------------------------
# The kinds: a program's own classes, and the packages'.


class AttrDict(dict):  # type: ignore[type-arg]
    """The idiom of a great many research repositories."""

    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__  # pyright: ignore[reportAssignmentType]


class Fields:
    """A program's own config: ``__getattr__`` and ``__getitem__`` over a dict of fields, ``__eq__``
    by fields, unhashable."""

    def __init__(self, **fields: Any):
        self._fields = dict(fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_fields":
            object.__setattr__(self, name, value)
        else:
            self._fields[name] = value

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._fields[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        return self._fields.get(key, default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other._fields == self._fields

    __hash__ = None  # pyright: ignore[reportAssignmentType]


class Settings(Mapping[str, Any]):
    """A ``Mapping`` that is not a dict, with properties that return what it stores."""

    def __init__(self, **items: Any):
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def lr(self) -> Any:
        return self._items["lr"]

    @property
    def warmup(self) -> Any:
        return self._items["warmup"]


def _set_attr(cfg: Any) -> None:
    cfg.lr = 0.5


def _set_item(cfg: Any) -> None:
    cfg["lr"] = 0.5


def _set_stored(cfg: Any) -> None:
    cfg._items["lr"] = 0.5


# name -> (make a config from a dict, read by attribute, how a program changes it (None: immutable))
KINDS: dict[str, tuple[Any, bool, Any]] = {
    "EasyDict": (easydict.EasyDict, True, _set_attr),
    "addict.Dict": (addict.Dict, True, _set_attr),
    "Box": (box.Box, True, _set_attr),
    "Munch": (munch.Munch, True, _set_item),
    "DotMap": (dotmap.DotMap, True, _set_attr),
    "AttrDict": (AttrDict, True, _set_attr),
    "Fields (attributes)": (lambda d: Fields(**d), True, _set_attr),
    "Fields (items)": (lambda d: Fields(**d), False, _set_item),
    "Settings (properties)": (lambda d: Settings(**d), True, _set_stored),
    "Settings (items)": (lambda d: Settings(**d), False, _set_stored),
    "immutabledict": (immutabledict.immutabledict, False, None),
    "frozendict": (frozendict.frozendict, False, None),
    "EasyDict (items)": (easydict.EasyDict, False, _set_item),
    "Munch (items)": (munch.Munch, False, _set_attr),
}
if getattr(frozendict, "c_ext", False):
    # Its C implementation (Python 3.10's wheels): a mapping whose get is C code, which the
    # mechanism cannot read, so it is not proved and stays static with the warning (safe); the
    # pure-Python one (a dict subclass) is proved.
    del KINDS["frozendict"]


def _by_attribute(optax: Any, cfg: Any) -> Any:
    return optax.adam(lambda t: cfg.lr * jnp.minimum(1.0, (t + 1) / cfg.warmup))


def _by_item(optax: Any, cfg: Any) -> Any:
    # scenic's forms: an item, ``.get`` of a key absent (its default), of a key present.
    return optax.adam(
        lambda t: (
            cfg["lr"] * (1.0 - cfg.get("warmup_alpha", 0.0)) * jnp.minimum(1.0, (t + 1) / cfg.get("warmup"))
        )
    )


def _a_schedule_over_a_config_of_any_kind_compiles_once_with_plain_optax_s_numbers() -> None:
    tx: Any = None
    cfg: Any = None
    for kind, (make, attribute, change) in KINDS.items():
        build = _by_attribute if attribute else _by_item
        traces, run = _counted()
        step = jax.jit(run)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: nothing is static
            for lr in RATES:
                cfg = make({"lr": lr, "warmup": 2})
                tx, expected = build(dropin, cfg), build(plain, cfg)
                got = step(tx, PARAMS)
                if lr == RATES[0]:  # under jit: plain optax's own program, bit for bit
                    chex.assert_trees_all_equal(got, jax.jit(functools.partial(run, expected))(PARAMS))
                    traces.pop()
                chex.assert_trees_all_equal(_steps(tx), _steps(expected))  # eagerly
        assert len(traces) == 1, kind
        names = sorted(tx.learning_rate.dynamic_argnames)
        if kind == "Settings (properties)":  # a property's code runs on the values it reads
            assert names == ["cfg._items['lr']", "cfg._items['warmup']"]
        else:
            assert names == (["cfg.lr", "cfg.warmup"] if attribute else ["cfg['lr']", "cfg['warmup']"]), kind
        if change is None:
            continue
        # Changed after the optimizer is made: refused under jit as eagerly, naming the value.
        change(cfg)
        read = r"read cfg(\.lr|\['lr'\]|\._items\['lr'\]) = 0\.02"
        message = read + r" when the optimizer was made, and it is now 0\.5"
        with pytest.raises(ValueError, match=message) as under_jit:
            step(tx, PARAMS)
        with pytest.raises(ValueError) as eagerly:
            tx.init(PARAMS)
        assert str(under_jit.value) == str(eagerly.value), kind


# --------------------------------------------------------------------------
# What cannot be proved: static, with a warning naming the look-up and why.


class Computes:
    def __init__(self, **fields: float):
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        return self._fields[name] * 1.0  # a new number: not what it holds


class Counts:
    def __init__(self, **fields: float):
        self._fields = fields
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        self.__dict__["reads"] += 1
        return self._fields[name]


class Raises:
    def __init__(self, **fields: float):
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("not now")


_TICKS = itertools.count()


class Drifts:
    def __init__(self, **fields: float):
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        return [0.1, 0.2][next(_TICKS) % 2]  # another value each time it is read


class PropertyOfCode(Fields):
    """A ``__getattr__`` over fields, and a property that computes."""

    @property
    def lr(self) -> Any:
        return self._fields["base"] * 2.0


# Each its own code location (a warning is given once per code location).
UNPROVED = {
    Computes: (lambda cfg: lambda t: cfg.lr / (1.0 + t), r"Computes\.__getattr__\('lr'\) computes its value"),
    Counts: (lambda cfg: lambda t: cfg.lr / (1.0 + t), r"Counts\.__getattr__\('lr'\) changes the object"),
    Raises: (lambda cfg: lambda t: cfg.lr / (1.0 + t), r"Raises\.__getattr__\('lr'\) raises RuntimeError"),
    Drifts: (
        lambda cfg: lambda t: cfg.lr / (1.0 + t),
        r"Drifts\.__getattr__\('lr'\) gives another value each",
    ),
    PropertyOfCode: (
        lambda cfg: lambda t: cfg.lr / (1.0 + t),
        r"the property PropertyOfCode\.lr computes its value",
    ),
}


def _a_look_up_not_proved_stays_static_with_a_warning_naming_it_and_a_recompilation_is_never_silent() -> None:
    for cls, (schedule_of, reason) in UNPROVED.items():
        with pytest.warns(UserWarning, match=rf"argument 'learning_rate', .* \(cfg: {reason}") as caught:
            a = dropin.sgd(schedule_of(cls(lr=0.1, base=0.05)))
        assert "learning_rate" in a.static_argnames, cls
        if cls is not Raises and cls is not Drifts:  # those two raise or drift in plain optax too
            chex.assert_trees_all_equal(_steps(a), _steps(plain.sgd(schedule_of(cls(lr=0.1, base=0.05)))))
        assert len(caught) == 1, [str(w.message) for w in caught]
    # Another rate through the same code: the warning names the number and both values, once per
    # code location; explain says the same; a jitted step compiles twice, as it says.
    schedule_of = UNPROVED[Computes][0]
    traces, run = _counted()
    step = jax.jit(run)
    a = dropin.sgd(schedule_of(Computes(lr=0.1)))
    with pytest.warns(
        UserWarning, match=r"only by a number it holds static \(cfg\._fields\['lr'\] = 0\.1, now 0\.2\)"
    ):
        b = dropin.sgd(schedule_of(Computes(lr=0.2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dropin.sgd(schedule_of(Computes(lr=0.3)))
    report = str(opx.explain(a, b))
    assert "sgd.learning_rate" in report and "cfg._fields['lr'] = 0.1 vs 0.2" in report, report
    step(a, PARAMS)
    step(b, PARAMS)
    assert len(traces) == 2

    # A static function that is no schedule (a mask) and reads a number of the config: the same.
    def masked(threshold: int) -> Any:
        config = Fields(threshold=threshold)
        return dropin.adamw(0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= config.threshold, p))

    first = masked(2)
    with pytest.warns(UserWarning, match=r"argument 'mask', .* \(config\.threshold = 2, now 1\)"):
        second = masked(1)
    report = str(opx.explain(first, second))
    assert "adamw.mask" in report and "config.threshold = 2 vs 1" in report, report

    # A schedule's number it needs as a Python value (a range): static, and named when it differs.
    def stepped(pieces: int) -> Any:
        config = Fields(lr=0.1, pieces=pieces)

        def schedule(step: Any) -> Any:
            value = config.lr * jnp.ones(())
            for i in range(config.pieces):
                value = jnp.where(step > 2 * (i + 1), value / 2.0, value)
            return value

        return dropin.sgd(schedule)

    three = stepped(3)
    assert three.learning_rate.static_argnames == ("config.pieces",)
    with pytest.warns(UserWarning, match=r"stepped.<locals>.schedule .* \(config\.pieces = 3, now 4\)"):
        four = stepped(4)
    assert "config.pieces" in str(opx.explain(three, four))


# --------------------------------------------------------------------------
# The two forms left from issue 43.


def _a_static_function_s_config_is_checked_and_an_equinox_static_field_is_static() -> None:
    config = Fields(threshold=2)
    tx = dropin.adamw(0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= config.threshold, p))
    _, run = _counted()
    step = jax.jit(run)
    step(tx, PARAMS)
    # What JAX rebuilds has the same treedef (and reads no config).
    assert jax.tree_util.tree_structure(jax.tree.map(lambda x: x, tx)) == jax.tree_util.tree_structure(tx)
    config.threshold = 1  # after the build: the compiled program masks by 2
    message = r"the static function .* of argument 'mask' read config\.threshold = 2 .* now 1"
    with pytest.raises(ValueError, match=message) as under_jit:
        step(tx, PARAMS)
    with pytest.raises(ValueError) as eagerly:
        tx.init(PARAMS)
    assert str(under_jit.value) == str(eagerly.value)

    class Schedule(eqx.Module):
        learning_rate: float
        warmup_steps: int = eqx.field(static=True, default=2)

        def __call__(self, step: Any) -> Any:
            return self.learning_rate * jnp.minimum(1.0, (step + 1) / self.warmup_steps)

    schedule = dropin.adam(Schedule(learning_rate=0.1)).learning_rate
    assert schedule.dynamic_argnames == ("self.learning_rate",)
    assert schedule.static_argnames == ("self.warmup_steps",)
    same = jax.tree_util.tree_structure(dropin.adam(Schedule(learning_rate=0.2)))
    assert same == jax.tree_util.tree_structure(dropin.adam(Schedule(learning_rate=0.1)))
    other = jax.tree_util.tree_structure(dropin.adam(Schedule(learning_rate=0.1, warmup_steps=3)))
    assert other != same
    chex.assert_trees_all_equal(
        _steps(dropin.adam(Schedule(learning_rate=0.1, warmup_steps=3))),
        _steps(plain.adam(Schedule(learning_rate=0.1, warmup_steps=3))),
    )


# --------------------------------------------------------------------------
# Public programs, re-expressed with a config class of the program's own.


def ferminet(optax: Any, lr: float) -> Any:
    """ferminet train.py's ``learning_rate_schedule`` over ``cfg.optim.lr`` (an ``AttrDict`` here)."""
    cfg = AttrDict(optim=AttrDict(lr=AttrDict(rate=lr, decay=1.0, delay=10.0)))

    def learning_rate_schedule(t_: Any) -> Any:
        return cfg.optim.lr.rate * jnp.power((1.0 / (1.0 + (t_ / cfg.optim.lr.delay))), cfg.optim.lr.decay)

    return optax.lamb(learning_rate_schedule, eps=1e-7)


def scenic(optax: Any, lr: float) -> Any:
    """scenic lr_schedules' compound schedule: ``config['base_learning_rate']``,
    ``config.get('warmup_alpha', 0)`` and a ``'*'``-separated string of factors (a ``Fields``)."""
    config = Fields(factors="constant * linear_warmup * cosine_decay", base_learning_rate=lr, warmup_steps=2)
    config.steps_per_cycle = 20

    def lr_fn(step: Any) -> Any:
        ratio = 1.0
        for name in [n.strip() for n in config["factors"].split("*")]:
            if name == "constant":
                ratio *= config["base_learning_rate"]
            elif name == "linear_warmup":
                alpha = config.get("warmup_alpha", 0)
                ratio *= alpha + (1.0 - alpha) * jnp.minimum(1.0, step / config["warmup_steps"])
            elif name == "cosine_decay":
                progress = jnp.maximum(0.0, (step - config["warmup_steps"]) / config["steps_per_cycle"])
                ratio *= jnp.maximum(0.0, 0.5 * (1.0 + jnp.cos(jnp.pi * (progress % 1.0))))
        return jnp.asarray(ratio, dtype=jnp.float32)

    return optax.adamw(lr_fn, weight_decay=1e-4)


def _public_programs_with_a_config_class_of_their_own_compile_once() -> None:
    for builder in (ferminet, scenic):
        traces, run = _counted()
        step = jax.jit(run)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for lr in RATES:
                tx = builder(dropin, lr)
                step(tx, PARAMS)
                chex.assert_trees_all_equal(_steps(tx), _steps(builder(plain, lr)))
        assert len(traces) == 1, builder.__name__
    assert ferminet(dropin, 1e-3).learning_rate.dynamic_argnames == (
        "cfg.optim.lr.decay",
        "cfg.optim.lr.delay",
        "cfg.optim.lr.rate",
    )
    assert set(scenic(dropin, 1e-3).learning_rate.dynamic_argnames) == {
        "config['base_learning_rate']",
        "config['steps_per_cycle']",
        "config['warmup_steps']",
    }


def _a_number_the_factory_needs_as_a_python_value_warns_when_another_is_given() -> None:
    # Not a config: a top-level argument the probe found static (lbfgs allocates memory_size
    # rows). Another value from the same line is another compilation: said, once per line.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size in (3, 4, 5):
            tx = opx.wrap(plain.lbfgs, memory_size=size)
    texts = [str(w.message) for w in caught if "memory_size" in str(w.message)]
    assert len(texts) == 1, texts
    assert "argument 'memory_size' is static" in texts[0]
    assert "(memory_size = 3, now 4): each value is a new compilation" in texts[0]
    assert "memory_size" in tx.static_argnames


def test_configs_of_any_kind_compile_once_and_what_cannot_is_static_named_and_checked() -> None:
    # One test of the default run (its budget), each part a function above.
    _a_number_the_factory_needs_as_a_python_value_warns_when_another_is_given()
    _a_schedule_over_a_config_of_any_kind_compiles_once_with_plain_optax_s_numbers()
    _public_programs_with_a_config_class_of_their_own_compile_once()
    _a_look_up_not_proved_stays_static_with_a_warning_naming_it_and_a_recompilation_is_never_silent()
    _a_static_function_s_config_is_checked_and_an_equinox_static_field_is_static()
