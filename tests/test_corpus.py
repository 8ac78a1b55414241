"""Real optimizer configurations of public JAX projects through the drop-in (tests/corpus.py).

``import optax_pytree.optax as optax`` promises that changing the import
breaks nothing and changes no number. Each configuration of the corpus is
built as its source builds it, once with plain optax and once with the
drop-in, and:

1. under ``jax.jit``, the drop-in optimizer an ordinary argument of the
   jitted step (its state passed in, as a training loop does), three steps
   equal plain optax closed over in a jitted step, to float32 round-off;
2. eagerly, three steps are bit for bit plain optax's (parameters and state);
3. a sweep of three rates through one jitted step, the optimizer built anew
   by the configuration's builder for each rate (as a user's
   ``make_optimizer(config)`` per trial), traces the step once for the
   configuration and gives plain optax's numbers for every rate;
4. building it in a fresh process prints, logs and warns nothing that plain
   optax does not (the library's probing is invisible).

A failure names the configuration (the test id), the check, and what broke.
"""

from __future__ import annotations

import collections
import functools
import json
from typing import Any, cast

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax as plain
import pytest
from corpus import CORPUS, Config
from helpers import assert_tree_allclose, run_in_warm_python, sliced, version

import optax_pytree.optax as dropin

STEPS = 3


def repository(cfg: Config) -> str:
    return cfg.source.split(":", 1)[0]


# The default run: each source repository's first configuration; the rest with --exhaustive.
SLICE = {next(c.name for c in CORPUS if repository(c) == r) for r in dict.fromkeys(map(repository, CORPUS))}
CONFIGS = sliced([(cfg,) for cfg in CORPUS], [cfg.name for cfg in CORPUS], SLICE.__contains__)


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40
    assert len({cfg.name for cfg in CORPUS}) == len(CORPUS), "duplicate ids"
    assert len(SLICE) == len({repository(cfg) for cfg in CORPUS}) >= 10


# ---------------------------------------------------------------------------
# A tiny problem over any parameter tree.


def loss(params: Any) -> jax.Array:
    """A small nonlinear loss of every leaf; the parameters' elements all differ, so every
    element (and every masked or labelled group) gets a gradient of its own."""
    total = jnp.zeros(())
    for p in jax.tree_util.tree_leaves(params):
        total = total + jnp.sum((p - 0.3) ** 2 + 0.1 * jnp.sin(3.0 * p))
    return total


# The gradient and the parameter update are not under test: compiled (once per parameter
# structure), so that an eager step runs only the optimizer op by op.
value_and_grad = jax.jit(jax.value_and_grad(loss))
apply_updates = jax.jit(plain.apply_updates)


def step(tx: Any, params: Any, state: Any, extra: str, lookahead: bool) -> tuple[Any, Any]:
    """One training step: the gradient of :func:`loss`, the optimizer's update, the new parameters."""
    value, grads = value_and_grad(params.fast if lookahead else params)
    kwargs = {"value": value} if extra == "value" else {}
    updates, state = tx.update(grads, state, params, **kwargs)
    return apply_updates(params, updates), state


def train(tx: Any, params: Any, extra: str, lookahead: bool) -> tuple[Any, Any]:
    """:data:`STEPS` eager steps from ``tx.init``: (params, state)."""
    state = tx.init(params)
    for _ in range(STEPS):
        params, state = step(tx, params, state, extra, lookahead)
    return params, state


# The traces of :func:`jitted_step`, and the drop-in optimizers given to it, by configuration.
TRACES: collections.Counter[str] = collections.Counter()
BUILDS: collections.Counter[str] = collections.Counter()


@functools.partial(jax.jit, static_argnames=("name", "extra", "lookahead"))
def jitted_step(tx: Any, params: Any, state: Any, name: str, extra: str, lookahead: bool) -> tuple[Any, Any]:
    """One step, the drop-in optimizer an ordinary argument: one jitted function for every
    configuration and every rate (the jit test and the sweep share its compilations)."""
    TRACES[name] += 1
    return step(tx, params, state, extra, lookahead)


def options(cfg: Config) -> dict[str, Any]:
    return {"extra": cfg.extra, "lookahead": cfg.lookahead}


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def _available(cfg: Config) -> None:
    """Skips, saying why, a configuration whose source needs a newer optax than this one."""
    if cfg.needs:
        found: Any = plain
        for part in cfg.needs.split("."):
            found = getattr(found, part, None)
        if found is None:
            pytest.skip(f"optax {plain.__version__} has no optax.{cfg.needs} (the source uses it)")


def build(cfg: Config, optax: Any, rate: float) -> Any:
    """``cfg.make(optax, rate)``; a failure through the drop-in says so."""
    _available(cfg)
    try:
        return cfg.make(optax, rate)
    except Exception as error:
        raise AssertionError(
            f"{cfg.name}: building the optimizer through {optax.__name__} raised {first_line(error)}"
        ) from error


# ---------------------------------------------------------------------------
# 1. Under jit, the drop-in optimizer an argument: plain optax's numbers.


@pytest.mark.parametrize("cfg", CONFIGS)
def test_jit_argument_matches_plain_optax(cfg: Config) -> None:
    # Plain optax as its users jit it: closed over by the jitted step, its state passed in.
    plain_tx = build(cfg, plain, cfg.rates[0])
    plain_step = jax.jit(lambda params, state: step(plain_tx, params, state, **options(cfg)))
    expected = cfg.params, plain_tx.init(cfg.params)
    for _ in range(STEPS):
        expected = plain_step(*expected)
    tx = build(cfg, dropin, cfg.rates[0])
    BUILDS[cfg.name] += 1
    try:
        got = cfg.params, tx.init(cfg.params)
        for _ in range(STEPS):
            got = jitted_step(tx, *got, name=cfg.name, **options(cfg))
    except Exception as error:
        raise AssertionError(
            f"{cfg.name} [jit equality]: jax.jit with the drop-in optimizer as an argument raised "
            f"{first_line(error)}"
        ) from error
    try:
        assert_tree_allclose(got, expected, rtol=1e-5, atol=1e-6)
    except AssertionError as error:
        raise AssertionError(
            f"{cfg.name} [jit equality]: (params, state) after {STEPS} jitted steps differ from plain "
            f"optax's: {error}"
        ) from error


# ---------------------------------------------------------------------------
# 2. Eagerly: bit for bit.


@pytest.mark.parametrize("cfg", CONFIGS)
def test_eager_bit_for_bit(cfg: Config) -> None:
    expected = train(build(cfg, plain, cfg.rates[0]), cfg.params, **options(cfg))
    tx = build(cfg, dropin, cfg.rates[0])
    try:
        got = train(tx, cfg.params, **options(cfg))
    except Exception as error:
        raise AssertionError(
            f"{cfg.name} [eager bit for bit]: {STEPS} eager steps with the drop-in optimizer raised "
            f"{first_line(error)}"
        ) from error
    try:
        chex.assert_trees_all_equal(got, expected, strict=True)
    except AssertionError as error:
        raise AssertionError(
            f"{cfg.name} [eager bit for bit]: (params, state) after {STEPS} eager steps are not plain "
            f"optax's bit for bit: {error}"
        ) from error


# ---------------------------------------------------------------------------
# 3. A sweep through the configuration's builder: one trace, plain optax's numbers.


@pytest.mark.parametrize("cfg", CONFIGS)
def test_sweep_traces_once(cfg: Config) -> None:
    # The first rate may trace the step (or the jit test did already, with the same
    # configuration); the other rates must not. Every rate gives plain optax's numbers
    # (one trace with a stale constant would be a silent wrong result).
    problems = []
    before = TRACES[cfg.name]
    after_first = before
    for i, rate in enumerate(cfg.rates):
        tx = build(cfg, dropin, rate)
        BUILDS[cfg.name] += 1
        try:
            got = jitted_step(tx, cfg.params, tx.init(cfg.params), name=cfg.name, **options(cfg))
        except Exception as error:
            raise AssertionError(
                f"{cfg.name} [one trace]: the jitted step with the drop-in optimizer (rate {rate}) as an "
                f"argument raised {first_line(error)}"
            ) from error
        if i == 0:
            after_first = TRACES[cfg.name]
        plain_tx = build(cfg, plain, rate)
        expected = step(plain_tx, cfg.params, plain_tx.init(cfg.params), **options(cfg))
        try:
            assert_tree_allclose(got, expected, rtol=1e-5, atol=1e-6)
        except AssertionError as error:
            problems.append(f"rate {rate}: the step's (params, state) differ from plain optax's: {error}")
    assert not problems, f"{cfg.name} [one trace]: " + "\n".join(problems)
    if cfg.one_trace_from and version(plain) < cfg.one_trace_from:
        pytest.skip(
            f"optax {plain.__version__} needs the swept rate as a Python value (one trace from optax "
            f"{'.'.join(map(str, cfg.one_trace_from))}); the numbers were checked"
        )
    traces = TRACES[cfg.name] - before
    if after_first - before > 1 or TRACES[cfg.name] != after_first:
        why = f" ({cfg.note})" if cfg.note else ""
        raise AssertionError(
            f"{cfg.name} [one trace]: the jitted step was traced {traces} times for the optimizers the "
            f"builder made for rates {cfg.rates}, at most once for the first and never again{why}"
        )


# ---------------------------------------------------------------------------
# 4. Nothing printed, logged or warned that plain optax does not.
#
# The library probes a factory the first time it wraps it, and caches what it
# learns: only a new process shows what a user sees. One new Python (forked
# from a server that imported jax and optax and wrapped nothing:
# tests/warm_python.py) builds each configuration of the run (and
# initializes its state) with plain optax, then with
# the drop-in, capturing what each prints on the process's stdout and stderr
# (logging included) and the warnings; each test reads its configuration's.

QUIET_SCRIPT = """
import contextlib, json, os, sys, tempfile, warnings
import jax, jax.numpy as jnp
import optax as plain
import optax_pytree.optax as dropin
from corpus import CORPUS

jax.block_until_ready(jnp.ones(2) + 1)  # the backend's own first messages, before any capture


@contextlib.contextmanager
def captured(into):
    with tempfile.TemporaryFile() as f, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.stdout.flush(); sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(f.fileno(), 1); os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
            os.close(saved[0]); os.close(saved[1])
            f.seek(0)
            into["printed"] = f.read().decode(errors="replace").splitlines()
            into["warned"] = [f"{w.category.__name__}: {w.message}" for w in caught]


report = {}
for cfg in [cfg for cfg in CORPUS if cfg.name in NAMES]:
    report[cfg.name] = {"plain": {}, "dropin": {}}
    for name, optax in (("plain", plain), ("dropin", dropin)):
        with captured(report[cfg.name][name]):
            try:
                cfg.make(optax, cfg.rates[0]).init(cfg.params)
            except Exception as error:
                print(f"raised {type(error).__name__}: {error}")
print("REPORT" + json.dumps(report))
"""


@pytest.fixture(scope="module")
def quiet_report(request: pytest.FixtureRequest) -> dict[str, Any]:
    # The configurations of this run's quiet tests (the default run's slice, or all).
    names = {
        cast(Config, item.callspec.params["cfg"]).name
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_as_quiet_as_plain_optax"
    }
    stdout = run_in_warm_python(f"NAMES = {sorted(names)!r}\n" + QUIET_SCRIPT, timeout=600)
    return json.loads(stdout.split("REPORT", 1)[1])


@pytest.mark.parametrize("cfg", CONFIGS)
def test_as_quiet_as_plain_optax(cfg: Config, quiet_report: dict[str, Any]) -> None:
    _available(cfg)
    seen = quiet_report[cfg.name]
    extra = list(seen["dropin"]["printed"])
    for line in seen["plain"]["printed"]:
        if line in extra:
            extra.remove(line)
    assert not extra, (
        f"{cfg.name} [quiet]: building the optimizer through the drop-in (in a fresh process) printed "
        f"{extra!r}, which plain optax does not"
    )
    assert seen["dropin"]["warned"] == seen["plain"]["warned"], (
        f"{cfg.name} [quiet]: the drop-in warned {seen['dropin']['warned']!r}; plain optax warned "
        f"{seen['plain']['warned']!r}"
    )


# The rates are distinct, and the parameters small float32 arrays (a sanity check of the corpus).
@pytest.mark.parametrize("cfg", CONFIGS)
def test_corpus_entry(cfg: Config) -> None:
    assert len(set(cfg.rates)) == 3, cfg.rates
    for leaf in jax.tree_util.tree_leaves(cfg.params):
        assert np.asarray(leaf).dtype == np.float32 and np.size(leaf) <= 1024, (cfg.name, np.shape(leaf))
