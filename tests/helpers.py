"""Shared test helpers: comparisons, a tiny problem, the catalogue under test."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optax_pytree as opx
from optax_pytree import _catalog


def version(module: Any) -> tuple[int, ...]:
    """``module.__version__`` as numbers, to compare: ``version(optax) < (0, 2, 8)``."""
    return tuple(int(part) for part in module.__version__.split(".")[:3] if part.isdigit())


# Bit for bit with plain optax *under jit* depends on how XLA compiles plain
# optax's constants (FMA contraction, reassociation); the wrapped object
# reproduces XLA's rewrites as the jaxlib of the project's main environment
# (0.10) does them, where the tests check it to the last bit. With another
# jaxlib (the newest and the floor stages of CI) those checks are to float32
# round-off instead; eager results are checked bit for bit everywhere.
# Which multiply-adds XLA contracts into FMAs also depends on the CPU's
# instruction set, so the listed exceptions (test_catalogue.py's
# NOT_BIT_FOR_BIT_UNDER_JIT, the composition matrix's MultiSteps pairs) are
# those seen on the CPUs CI has run on, each proven bit for bit with
# NO_XLA_CONSTANT_REWRITES.
# The backend the tests run on: what XLA does with constants differs by backend
# (optax_pytree/_backends.py), so do the lists of exceptions, measured on each.
BACKEND = jax.default_backend()
BIT_FOR_BIT_UNDER_JIT = version(jax)[:2] == (0, 10) and BACKEND in ("cpu", "tpu")

# XLA flags under which XLA rewrites nothing around constants: no FMA (the
# SSE4.2 instruction set has none) and no algebraic simplifier. A listed
# exception must be bit for bit under them (the proof that it is only that).
NO_XLA_CONSTANT_REWRITES = "--xla_cpu_max_isa=SSE4_2 --xla_disable_hlo_passes=algsimp"


def assert_jit_bit_for_bit(got: Any, expected: Any) -> None:
    """Bit for bit where :data:`BIT_FOR_BIT_UNDER_JIT`, else to float32 round-off."""
    import chex

    if BIT_FOR_BIT_UNDER_JIT:
        chex.assert_trees_all_equal(got, expected)
    else:
        assert_tree_allclose(got, expected, rtol=1e-5, atol=1e-7)


def assert_tree_allclose(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    sa, sb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
    assert sa == sb, f"structures differ:\n{sa}\n{sb}"
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b)):
        if jnp.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        x, y = np.asarray(x), np.asarray(y)
        where = jax.tree_util.keystr(path)
        assert x.shape == y.shape, f"{where}: shapes {x.shape} != {y.shape}"
        if np.issubdtype(x.dtype, np.inexact):
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(x, y, err_msg=where)


# A small least-squares problem: a 2-D and a 1-D parameter, so that shape
# dependent code paths (factored second moments, matrix orthogonalization) run.
TARGET = {
    "b": jnp.array([0.5, -1.0, 2.0]),
    "w": jnp.arange(12.0).reshape(4, 3) / 10.0,
    # A wide matrix and a bias of 4, for the factories whose numbers depend on those shapes.
    "v": jnp.arange(12.0).reshape(3, 4) / -8.0,
    "c": jnp.array([1.5, 0.25, -0.75, 0.1]),
}
PARAMS = {"b": jnp.array([0.1, 0.2, -0.3]), "w": jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)}


def loss(params: dict[str, jax.Array]) -> jax.Array:
    terms = [jnp.sum((p - TARGET[k]) ** 2 * (1.0 + TARGET[k] ** 2)) for k, p in params.items()]
    return sum(terms, jnp.zeros(()))


def run_steps(
    tx: Any,
    params: Any,
    steps: int = 5,
    extra: str = "linesearch",
    per_example: bool = False,
    fast: bool = False,
    apply: bool = True,
    scan: bool = True,
) -> tuple[Any, Any, Any]:
    """``steps`` optimizer steps; returns (params, state, last updates).

    ``extra`` passes the extra arguments of line searches and Polyak steps
    ("linesearch"), of Hessian estimators ("obj_fn"), or none ("");
    ``per_example`` gives gradients a batch axis of two examples
    (differential privacy); ``fast`` differentiates w.r.t. ``params.fast``
    (lookahead); ``apply=False`` keeps the parameters (a transformation whose
    updates are a measurement); ``scan=False`` unrolls (a state whose
    structure changes after the first step).
    """
    tx = optax.with_extra_args_support(tx)
    state = tx.init(params)

    def body(carry: Any, _: Any) -> Any:
        p, s, _ = carry
        grad, kwargs = _gradient(p, extra, per_example, fast)
        updates, s = tx.update(grad, s, p, **kwargs)
        return (optax.apply_updates(p, updates) if apply else p, s, updates), None

    _, _, updates0 = jax.eval_shape(lambda: body((params, state, None), None)[0])
    carry = (params, state, jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), updates0))
    if scan:
        carry, _ = jax.lax.scan(body, carry, None, length=steps)
    else:
        for _ in range(steps):
            carry, _ = body(carry, None)
    return carry


def _gradient(params: Any, extra: str, per_example: bool, fast: bool) -> tuple[Any, dict[str, Any]]:
    """The gradient of :func:`loss` and the extra update arguments (see :func:`run_steps`)."""
    value, grad = jax.value_and_grad(loss)(params.fast if fast else params)
    if per_example:
        grad = jax.tree_util.tree_map(lambda g: jnp.stack([g, 0.5 * g]), grad)
    kwargs: dict[str, Any] = {
        "linesearch": {"value": value, "grad": grad, "value_fn": loss},
        "obj_fn": {"obj_fn": loss},
        "": {},
    }[extra]
    return grad, kwargs


def one_step(
    tx: Any,
    params: Any,
    state: Any,
    extra: str = "linesearch",
    per_example: bool = False,
    fast: bool = False,
    apply: bool = True,
) -> tuple[Any, Any]:
    """One optimizer step on :func:`loss`, as :func:`run_steps` takes them: (params, state)."""
    grad, kwargs = _gradient(params, extra, per_example, fast)
    updates, state = optax.with_extra_args_support(tx).update(grad, state, params, **kwargs)
    return (optax.apply_updates(params, updates) if apply else params), state


def training_loop(
    tx: Any, params: Any, steps: int = 3, jit: bool = True, jitted: Any = None, **options: Any
) -> Any:
    """``steps`` steps as a training loop takes them: the state initialized outside, each step
    one call of a (jitted) function of the parameters and the state.

    A wrapped ``tx`` is an argument of the step; a plain one is closed over
    (its hyperparameters are constants of the program, as in any optax
    training loop). ``jitted``: the jitted step ``(tx, params, state)`` to
    use for a wrapped ``tx`` (a test that calls it again with other values,
    counting its traces). Returns the final (params, state).
    """
    state = tx.init(params)
    wrapped = opx.PyTreeTransformation in type(tx).__mro__
    options.pop("scan", None)  # a loop of separate calls: unrolled already

    def step(tx: Any, params: Any, state: Any) -> Any:
        return one_step(tx, params, state, **options)

    if wrapped:
        run = (jitted or jax.jit(step)) if jit else step
        for _ in range(steps):
            params, state = run(tx, params, state)
    else:
        closed = jax.jit(lambda p, s: step(tx, p, s)) if jit else (lambda p, s: step(tx, p, s))
        for _ in range(steps):
            params, state = closed(params, state)
    return params, state


def counting_jit(fn: Any, jit: Any = jax.jit) -> tuple[Any, list[int]]:
    """``jit(fn)`` and a one-element list counting its traces.

    ``jit`` is any jit-like transformation: ``jax.jit``, ``eqx.filter_jit``,
    ``nnx.jit`` (which sees the modules passed through ``*args``).
    """
    traces = [0]

    def counted(*args: Any) -> Any:
        traces[0] += 1
        return fn(*args)

    return jit(counted), traces


def apply_gradients(opt: Any, params: Any) -> Any:
    """One step of a stateful wrapped optimizer on :func:`loss`."""
    return opt.apply_gradients(jax.grad(loss)(params), params)


_TESTS = os.path.dirname(os.path.abspath(__file__))


def run_with_8_host_devices(script: str) -> str:
    """Runs ``script`` in a new Python with 8 CPU devices; returns its stdout.

    JAX reads ``XLA_FLAGS`` when it makes its backend, so eight host devices
    need a new process (forked from a server of that environment:
    :func:`run_in_warm_python`). The tests' folder is on its path.
    """
    return run_in_warm_python(
        script, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )


@contextlib.contextmanager
def one_distributed_job_at_a_time() -> Iterator[None]:
    """Holds a machine-wide lock while a local ``jax.distributed`` job runs.

    Two jobs at once (two pytest workers, or two CI stages side by side) can
    meet in one coordinator: one was seen to fail in gloo's store ("Config
    key ... already exists"). Each job takes this lock (a file in the temp
    folder, ``fcntl.flock``), so they run one after another.
    """
    import fcntl
    import tempfile

    with open(os.path.join(tempfile.gettempdir(), "optax_pytree_distributed_job.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_in_warm_python(script: str, timeout: int = 300, **env_vars: str) -> str:
    """:func:`run_in_fresh_python`, in a process forked from a server that imported jax
    and optax already (``tests/warm_python.py``): for what a new process shows
    (a JAX backend of its own, compilations from nothing), not its first imports."""
    import warm_python

    env = child_environment(**env_vars)
    result = warm_python.run(["-c", textwrap.dedent(script)], env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return result.stdout


def child_environment(**env_vars: str) -> dict[str, str]:
    """The environment of a child process of the tests: this one's, the tests' folder on its path,
    JAX on the CPU (``warm_python.on_the_cpu``: the parent may hold a TPU), ``env_vars`` added."""
    import warm_python

    return {**warm_python.on_the_cpu(os.environ), "PYTHONPATH": _with_tests_on_path(), **env_vars}


def sockets_available() -> bool:
    """Whether this machine lets a process open a TCP socket on the loopback (``jax.distributed``'s
    coordinator, a PostgreSQL server need one; a sandboxed accelerator machine may refuse it)."""
    import socket

    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
        return True
    except OSError:
        return False


def _with_tests_on_path() -> str:
    return os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")])


def run_in_fresh_python(script: str, timeout: int = 300, **env_vars: str) -> str:
    """Runs ``script`` in a new Python process (``env_vars`` added); returns its stdout.

    For what one process can show only once (first imports, JAX flags). The
    tests' folder is on its path (``from helpers import ...``).
    """
    env = child_environment(**env_vars)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return result.stdout


def raw_adam(learning_rates: Any, params: Any = PARAMS, loss_fn: Any = loss) -> Any:
    """The parameters after one raw ``optax.adam`` step at each learning rate in turn.

    Adam's state does not depend on the learning rate, so each step can use a
    new ``optax.adam(lr)``: the reference for a wrapped optimizer whose
    learning rate is replaced between steps.
    """
    state = optax.adam(0.1).init(params)
    for lr in learning_rates:
        updates, state = optax.adam(lr).update(jax.grad(loss_fn)(params), state, params)
        params = optax.apply_updates(params, updates)
    return params


# The steps at which schedules are compared with optax's.
SCHEDULE_STEPS = jnp.array([0, 1, 3, 7, 20, 150])


def needs_params_x(n: int) -> optax.GradientTransformation:
    """Needs ``params["x"]``, which the probe's stand-in parameters lack, so the
    probe cannot decide ``n``; the state has shape ``(n,)``: ``n`` must be static.
    """

    def init(params: Any) -> Any:
        return params["x"].sum() + jnp.zeros((n,))  # the KeyError first, where "x" is missing

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        del params
        return updates, state

    return optax.GradientTransformation(init, update)


def raw(factory: Any, *args: Any, **kwargs: Any) -> Any:
    return factory(*args, **kwargs)


def wrapped(factory: Any, *args: Any, **kwargs: Any) -> Any:
    return opx.wrap(factory, *args, **kwargs)


# ---------------------------------------------------------------------------
# The catalogue: every factory of optax, optax.contrib and optax.schedules,
# enumerated from optax at test time. Required arguments are filled by name
# from FILL; CALLS overrides where a factory needs a particular combination.
# ``w`` builds a child: raw optax for the reference, wrapped for the test.


def _every_other_step(count: Any) -> Any:
    return count % 2 == 0


def _mean_measure(updates: Any, params: Any = None) -> Any:
    del params
    return jnp.mean(jnp.stack([jnp.mean(x) for x in jax.tree_util.tree_leaves(updates)]))


def _halve(updates: Any, params: Any = None) -> Any:
    del params
    return jax.tree_util.tree_map(lambda g: 0.5 * g, updates)


FILL: dict[str, Any] = {
    "learning_rate": 0.05,
    "clipping": 0.1,
    "eta": 0.01,
    "gamma": 0.55,
    "max_consecutive_errors": 3,
    "max_delta": 0.5,
    "threshold": 1.0,
    "max_norm": 1.0,
    "should_transform_fn": _every_other_step,
    "value": 0.5,
    "init_value": 1.0,
    "end_value": 0.1,
    "decay_steps": 100,
    "transition_steps": 10,
    "peak_value": 2.0,
    "warmup_steps": 5,
    "decay_rate": 0.5,
    "l2_norm_clip": 1.0,
    "noise_multiplier": 0.1,
    "seed": 0,
    "decay": 0.9,
    "sync_period": 2,
    "slow_step_size": 0.5,
    "mask": {"b": False, "w": True},
    "measure": _mean_measure,
    "param_labels": {"b": "slow", "w": "fast"},
    "interpolate_type": "linear",
    "power": 2.0,
    "step_size": 0.5,
    "max_backtracking_steps": 5,
    "max_linesearch_steps": 5,
    "f": _halve,
    "every_k_schedule": 2,
    "cosine_kwargs": [{"init_value": 1.0, "peak_value": 2.0, "decay_steps": 20, "warmup_steps": 5}],
    "boundaries": [5],
    "freeze_mask": {"b": True, "w": False},
    "measure_name": "mean_update",
}

# Arguments that are transformations or schedules, built with ``w``.
CHILD_FILL: dict[str, Any] = {
    "inner": lambda w: w(optax.sgd, 0.1),
    "opt": lambda w: w(optax.sgd, 0.1),
    "fast_optimizer": lambda w: w(optax.sgd, 0.1),
    "base_optimizer": lambda w: w(optax.sgd, 0.1),
    "optimizer": lambda w: w(optax.sgd, 0.1),
    "tx": lambda w: w(optax.sgd, 0.1),
    "adv_optimizer": lambda w: w(optax.sgd, 0.01),
    "step_size_fn": lambda w: w(optax.linear_schedule, 1.0, 0.1, 10),
    "transforms": lambda w: {"fast": w(optax.adam, 0.05), "slow": w(optax.sgd, 0.01)},
    "schedules": lambda w: [w(optax.linear_schedule, 1.0, 0.5, 5), w(optax.constant_schedule, 0.5)],
}

CALLS: dict[str, Any] = {
    "optax.chain": lambda f, w: w(f, w(optax.clip_by_global_norm, 1.0), w(optax.adam, 0.05)),
    "optax.named_chain": lambda f, w: w(f, ("clip", w(optax.clip, 0.5)), ("opt", w(optax.adam, 0.05))),
    "optax.freeze": lambda f, w: w(f, {"b": True, "w": False}),
    "optax.monitor": lambda f, w: w(
        f, {"norm": optax.tree.norm, "mean": w(optax.measure_with_ema, _mean_measure, 0.9)}
    ),
}

if hasattr(optax.contrib, "MuonDimensionNumbers"):  # optax>=0.2.6; before, every leaf is one 2-D matrix
    # Its default (no dimension numbers) fits a single array only.
    CALLS["optax.contrib.scale_by_muon"] = lambda f, w: w(
        f, weight_dimension_numbers={"w": optax.contrib.MuonDimensionNumbers(0, 1)}
    )

# How to drive a factory whose update needs something particular.
RUN_OPTIONS: dict[str, dict[str, Any]] = {
    "optax.lookahead": {"fast": True},
    "optax.measure_with_ema": {"apply": False},  # its updates are the measurement
    "optax.monitor": {"scan": False},  # its state gains entries at the first update
    "optax.contrib.sam": {"extra": ""},  # its update takes grad_fn only
    "optax.contrib.hutchinson_estimator_diag_hessian": {"extra": "obj_fn"},
    "optax.contrib.sophia": {"extra": "obj_fn"},
    "optax.contrib.differentially_private_aggregate": {"per_example": True},
    "optax.contrib.dpsgd": {"per_example": True},
}

# Parameters other than PARAMS, where a factory needs a structure of its own.
# An independent check on a TPU (2026-12-06) found adafactor a unit off in 1 of 4 elements of a
# bias, and muon in 2 of 12 of a 3x4 matrix, where these parameters (a bias of 3, a 4x3 matrix)
# were equal: those shapes too.
_WIDE = {**PARAMS, "v": jnp.linspace(1.0, -0.5, 12).reshape(3, 4), "c": jnp.array([0.3, -0.1, 0.2, 0.4])}
PARAMS_FOR: dict[str, Any] = {
    "optax.lookahead": lambda: optax.LookaheadParams.init_synced(PARAMS),
    "optax.contrib.scale_by_muon": lambda: {"w": PARAMS["w"]},  # 2-D only; muon() routes the rest
    "optax.contrib.muon": lambda: _WIDE,
    "optax.adafactor": lambda: _WIDE,
    "optax.scale_by_factored_rms": lambda: _WIDE,
}

SKIP: dict[str, str] = {}


def catalogue() -> list[tuple[str, Any, str]]:
    return _catalog.factories()


# ---------------------------------------------------------------------------
# The default run's slice of a large set (see the root conftest.py): what is
# outside it is marked ``exhaustive`` and runs in CI (pytest --exhaustive).

exhaustive = pytest.mark.exhaustive


def family(factory: Any) -> str:
    """The optax module that defines a factory: its family (``optax._src.alias``,
    ``optax.contrib._muon``, ``optax.schedules._schedule``, ...)."""
    import functools

    while isinstance(factory, functools.partial):  # optax.nadam = partial(adam, nesterov=True)
        factory = factory.func
    return factory.__module__


# Where a family's first name (in sorted order) is not the one to take: the
# commonest optimizers, and the schedules whose arguments are guarded,
# detected static or specialized by XLA. lbfgs, the slowest of the catalogue
# (20 s), runs in the exhaustive set; test_wrap.py detects its memory_size.
SLICE_PREFERRED = frozenset(
    (
        "optax.adam",
        "optax.adamw",
        "optax.adafactor",
        "optax.sgd",
        "optax.scale_by_adam",
        "optax.scale_by_schedule",
        "optax.MultiSteps",
        "optax.chain",
        "optax.multi_transform",
        "optax.clip_by_global_norm",
        "optax.warmup_cosine_decay_schedule",
        "optax.cosine_onecycle_schedule",
        "optax.polynomial_schedule",
        "optax.exponential_decay",
        "optax.contrib.muon",
        "optax.contrib.schedule_free_adamw",
    )
)


# The drop-in's slice: the drop-in builds what opx.wrap builds (checked for
# every factory with --exhaustive); one of each kind of factory by default.
DROPIN_SLICE = frozenset(
    (
        "optax.adam",
        "optax.adamw",
        "optax.scale_by_adam",
        "optax.chain",
        "optax.MultiSteps",
        "optax.contrib.muon",
        "optax.contrib.reduce_on_plateau",
        "optax.warmup_cosine_decay_schedule",
        "optax.join_schedules",
    )
)


def catalogue_slice(entries: list[tuple[str, Any, str]]) -> set[str]:
    """The default run's names of the catalogue: every family once (its preferred
    names, else its first), so each optax module's factories are exercised."""
    families: dict[str, list[str]] = {}
    for name, factory, _ in entries:
        families.setdefault(family(factory), []).append(name)
    chosen: set[str] = set()
    for names in families.values():
        preferred = [n for n in names if n in SLICE_PREFERRED]
        chosen.update(preferred or [sorted(names)[0]])
    return chosen


def sliced(cases: list[tuple[Any, ...]], ids: list[str], in_slice: Any) -> list[Any]:
    """``pytest.param`` of each case, marked ``exhaustive`` unless ``in_slice(id)``."""
    return [
        pytest.param(*case, id=i, marks=() if in_slice(i) else (exhaustive,)) for case, i in zip(cases, ids)
    ]


def call(name: str, factory: Any, w: Any) -> Any:
    """The factory called with the catalogue's arguments, children built with ``w``."""
    if name in CALLS:
        return CALLS[name](factory, w)
    import inspect

    kwargs = {}
    for p in inspect.signature(factory).parameters.values():
        if p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in CHILD_FILL:
            kwargs[p.name] = CHILD_FILL[p.name](w)
        elif p.name in FILL:
            kwargs[p.name] = FILL[p.name]
        else:
            raise KeyError(f"no catalogue value for {name}({p.name}=...): add it to FILL")
    return w(factory, **kwargs)


def first_float_leaf(tree: Any) -> tuple[Any, Any] | None:
    """(path, value) of the first floating leaf, the hyperparameter to vary."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating):
            return path, leaf
    return None


def scale_leaf(tree: Any, path: Any, factor: float) -> Any:
    return jax.tree_util.tree_map_with_path(lambda p, x: x * factor if p == path else x, tree)


def _optax_skips_a_zero_weight_decay() -> bool:
    """Whether this optax's ``add_decayed_weights`` skips its term for the Python ``0.0`` (its
    update then computes nothing: newer optax; 0.2.5, the floor, computes ``g + 0.0 * p``)."""
    tx = optax.add_decayed_weights(0.0)
    p = jnp.ones(2)
    return not jax.make_jaxpr(lambda g: tx.update(g, tx.init(p), p)[0])(p).eqns


# A zero weight decay is static at zero only where optax skips its term (tests/test_zero.py).
OPTAX_SKIPS_A_ZERO_WEIGHT_DECAY = _optax_skips_a_zero_weight_decay()


def scan_steps(tx: Any, params: Any, length: int = 3) -> Any:
    """``length`` updates of ``tx`` in a ``lax.scan`` (the gradient ``sin(3 p)``), its state made
    from ``params``: the parameters after them."""

    def body(carry: Any, _: Any) -> Any:
        params, state = carry
        updates, state = tx.update(jax.tree.map(lambda p: jnp.sin(3 * p), params), state, params)
        return (optax.apply_updates(params, updates), state), None

    return jax.lax.scan(body, (params, tx.init(params)), None, length=length)[0][0]
