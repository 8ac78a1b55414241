"""What each backend's compiler does with constants (``optax_pytree._backends``), checked on the CPU.

The TPU's treatment is measured on a TPU (``benchmarks/constants_probe.py``);
here, on the CPU that CI has: its exact operations against NumPy's correctly
rounded ones (exhaustively where the hyperparameters live), its rule for a
power of a constant base against values recorded on the TPU, its specialized
exponents against the exponents measured there, and the choice of a treatment
where the program is lowered (a CPU-only process traces what it always did).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import re
import types
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_jit_bit_for_bit, version
from jax import lax

import optax_pytree as opx
from optax_pytree import _backends, _caches, _disk, _jaxprs

F32 = np.float32
DATA = pathlib.Path(__file__).parent / "data"


def _bits(x: Any) -> Any:
    return np.asarray(x, F32).view(np.uint32)


# --------------------------------------------------------------------------
# The exact operations, from the device's approximate ones.


@pytest.mark.parametrize(
    "exponent", [-1, 0, *(pytest.param(e, marks=pytest.mark.exhaustive) for e in (-12, -4, 3, 17))]
)
def test_log2_is_correctly_rounded_for_every_float32_of_a_binade(exponent: int) -> None:
    # Every float32 of [2**e, 2**(e+1)): 8,388,608 values (the TPU run checks 11 binades,
    # docs/guide/numerics.md; a run from 2**-24 to 2**24, 402,653,184 values, found none off).
    c = (np.arange(2**23, dtype=np.uint32) | np.uint32((exponent + 127) << 23)).view(F32)
    got = np.asarray(jax.jit(_backends.log2)(c))
    expected = np.log2(c.astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def _random_pairs(n: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))).astype(F32)
    b = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))).astype(F32)
    return a, b


def _with_device_off_by(monkeypatch: pytest.MonkeyPatch, name: str, units: int) -> None:
    """The device's ``lax.<name>`` off by up to ``units`` in the last place (a TPU's division is
    off by one at times, its square root by two): the exact operation must not depend on it."""
    exact = getattr(lax, name)

    def off(*xs: Any) -> Any:
        out = exact(*xs)
        k = (jnp.arange(out.size).reshape(out.shape) % (2 * units + 1)) - units
        return lax.bitcast_convert_type(lax.bitcast_convert_type(out, jnp.int32) + k, jnp.float32)

    fake = types.SimpleNamespace(**{k: getattr(lax, k) for k in dir(lax) if not k.startswith("_")})
    setattr(fake, name, off)
    monkeypatch.setattr(_backends, "lax", fake)


@pytest.mark.parametrize("off_by", [0, 2])
def test_divide_and_reciprocal_are_correctly_rounded(monkeypatch: pytest.MonkeyPatch, off_by: int) -> None:
    a, b = _random_pairs()
    _with_device_off_by(monkeypatch, "div", off_by)
    np.testing.assert_array_equal(_bits(jax.jit(_backends.divide)(a, b)), _bits(a / b))
    np.testing.assert_array_equal(_bits(jax.jit(_backends.reciprocal)(b)), _bits(F32(1) / b))


@pytest.mark.parametrize("off_by", [0, 4])
def test_sqrt_and_rsqrt_are_correctly_rounded(monkeypatch: pytest.MonkeyPatch, off_by: int) -> None:
    x = np.abs(_random_pairs()[0])
    _with_device_off_by(monkeypatch, "sqrt", off_by)
    np.testing.assert_array_equal(_bits(jax.jit(_backends.sqrt)(x)), _bits(np.sqrt(x)))
    np.testing.assert_array_equal(_bits(jax.jit(_backends.rsqrt)(x)), _bits(F32(1) / np.sqrt(x)))


def test_outside_their_range_the_exact_operations_are_the_devices() -> None:
    a = jnp.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-42, 3e38, 1.0], F32)
    b = jnp.array([2.0, 0.0, 2.0, np.inf, 1.0, 3.0, 1e-38, 0.0], F32)
    np.testing.assert_array_equal(_bits(jax.jit(_backends.divide)(a, b)), _bits(jax.jit(lax.div)(a, b)))
    np.testing.assert_array_equal(_bits(jax.jit(_backends.sqrt)(jnp.abs(a))), _bits(jnp.sqrt(jnp.abs(a))))


# --------------------------------------------------------------------------
# A power of a constant base: the rule, against what the TPU computed.


def _recorded() -> list[list[Any]]:
    return json.loads((DATA / "tpu_power_of_constant_base.json").read_text())["rows"]


def test_the_tpus_power_of_a_constant_base_is_a_power_of_two_of_the_folded_logarithm() -> None:
    # Recorded on a TPU: c ** t with c a constant of the program is 2 ** (t * fl(log2 c)), also
    # computed there, and c itself where t == 1; the general power (c an argument) is not.
    rows = _recorded()
    general_differs = 0
    for c, t, constant, power_of_two, general in rows:
        if t == 1.0:
            assert constant == int(_bits(c)), (c, t)
        else:
            assert constant == power_of_two, (c, t)
        general_differs += constant != general
    assert general_differs > len(rows) // 4  # what the rule is for: 111 of 369 here


def test_the_rule_computes_that_expression() -> None:
    # The rule, run on the CPU: the same expression (its power of two the CPU's own), with the
    # logarithm the TPU's program folded: float32(log2(float64(c))).
    rows = _recorded()
    c = np.array([r[0] for r in rows], F32)
    t = np.array([r[1] for r in rows], F32)
    got = jax.jit(_backends.power_of_constant_base)(c, t)
    log = np.log2(c.astype(np.float64)).astype(F32)
    expected = np.where(t == 1, c, np.asarray(jax.jit(lambda z: lax.pow(F32(2.0), z))(t * log)))
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    # An integer exponent (adam's step count) is converted as the power's lowering does.
    counts = np.arange(1, 40, dtype=np.int32)
    np.testing.assert_array_equal(
        _bits(jax.jit(_backends.power_of_constant_base)(F32(0.9), counts)),
        _bits(jax.jit(_backends.power_of_constant_base)(F32(0.9), counts.astype(F32))),
    )


def test_the_rule_is_the_general_power_outside_its_range_and_in_its_derivatives() -> None:
    c = jnp.array([0.0, -0.5, np.inf, np.nan, 1e-40, 2.0, 0.9], F32)
    t = jnp.array([-1.0, 3.0, 2.0, 1.0, 0.5, np.inf, -np.inf], F32)
    np.testing.assert_array_equal(
        _bits(jax.jit(_backends.power_of_constant_base)(c, t)), _bits(jax.jit(lax.pow)(c, t))
    )
    # Overflow is an infinity (no inf - inf): 10 ** 100.
    assert float(_backends.power_of_constant_base(F32(10.0), F32(100.0))) == np.inf
    # Its derivatives are the device's general power's (on a TPU 1.2e-6 from 3 * 0.9**2).
    grad = jax.grad(lambda b: _backends.power_of_constant_base(b, F32(3.0)))(F32(0.9))
    np.testing.assert_array_equal(grad, jax.grad(lambda b: lax.pow(b, F32(3.0)))(F32(0.9)))
    np.testing.assert_allclose(grad, 3 * 0.9**2, rtol=2e-6)
    grad = jax.grad(lambda b: _backends.power_of_constant_base(b, F32(3.0), F32(np.log2(0.9))))(F32(0.9))
    np.testing.assert_array_equal(grad, jax.grad(lambda b: lax.pow(b, F32(3.0)))(F32(0.9)))
    assert _backends.power_of_constant_base(jnp.float16(0.9), jnp.float16(3)).dtype == jnp.float16


# --------------------------------------------------------------------------
# Specialized exponents, as measured.

# Measured on a TPU v5e (jax 0.10.2): x ** e with e a constant of the program against e an
# argument, on 250 values of x. These differ (the compiler specializes them) ...
TPU_SPECIALIZED = [
    *range(-13, 14),
    -6.5, -5.5, -4.5, -11 / 3, -3.5, -10 / 3, -3.25, -2.75, -8 / 3, -2.5, -7 / 3, -2.25, -1.75, -5 / 3,
    -1.5, -4 / 3, -1.25, -0.75, -2 / 3, -0.5, -1 / 3, -0.25, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 1.25, 4 / 3,
    1.5, 5 / 3, 1.75, 2.25, 7 / 3, 2.5, 8 / 3, 2.75, 3.25, 10 / 3, 3.5, 11 / 3, 13 / 3, 4.5, 5.5, 6.5,
    7.5, 33.0, 100.0, 1000.0,
]  # fmt: skip
# ... these do not (0 and 1: the same numbers either way).
TPU_NOT_SPECIALIZED = [0.0, 1.0, 0.1, 0.2, 0.3, 0.35, 0.4, 0.6, 0.7, 0.8, -0.8, 1 / 6, 5 / 6, 0.125, 2.2]


def test_the_tpus_specialized_exponents_are_those_measured() -> None:
    for e in TPU_SPECIALIZED:
        if e not in (0, 1):
            assert _backends.specializes_exponent(e, "tpu"), e
    for e in TPU_NOT_SPECIALIZED:
        assert not _backends.specializes_exponent(e, "tpu"), e
    # Where the measurement found none (1e6: not specialized there), static is the safe side.
    assert _backends.specializes_exponent(1e6, "tpu")


def test_the_cpus_specialized_exponents_are_unchanged() -> None:
    candidates = (2.0, 3.0, 0.5, -1.0, 1.0, 4.0, -0.5, 1.5)
    assert [e for e in candidates if _backends.specializes_exponent(e, "cpu")] == [2.0, 3.0, 0.5, -1.0]
    assert _backends.specializes_exponent(np.array([2.0, 3.0]), "cpu")  # a batch: every member
    assert not _backends.specializes_exponent(np.array([2.0, 1.5]), "cpu")


# --------------------------------------------------------------------------
# The treatment is chosen where the program is lowered.


def _adam_steps(tx: Any, steps: int = 6) -> Any:
    """Updates of ``steps`` jitted steps, the state an input: a wrapped ``tx`` an argument, a
    plain one closed over (its hyperparameters constants)."""
    params = {"w": jnp.linspace(-1.0, 1.0, 6)}
    state = tx.init(params)
    wrapped = isinstance(tx, opx.PyTreeTransformation)
    args = (tx,) if wrapped else ()
    plain = tx

    def step(s: Any, p: Any, tx: Any = plain) -> Any:
        return tx.update(jax.tree.map(jnp.sin, p), s, p)

    jitted = jax.jit(step)
    out = []
    for _ in range(steps):
        updates, state = jitted(state, params, *args)
        out.append(updates)
    return out


def test_a_cpu_only_process_traces_what_it_always_did() -> None:
    if _backends.platforms() != ("cpu",):
        pytest.skip(f"this process can lower for {_backends.platforms()}, not the CPU alone")
    assert _backends.step_zero(jnp.int32(0)) is None  # nothing laundered
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    params = {"w": jnp.ones(3)}
    jaxpr = str(jax.make_jaxpr(lambda tx, s, p: tx.update(p, s, p))(tx, tx.init(params), params))
    assert "platform_index" not in jaxpr


def test_with_a_tpu_beside_the_cpu_each_lowers_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # As on a TPU machine (both backends): the TPU's branch is staged, the CPU lowers its own,
    # so the numbers here are what a process with the CPU alone computes, bit for bit, and
    # plain optax's (bit for bit where the suite's JAX promises it: helpers.BIT_FOR_BIT_UNDER_JIT).
    cpu_alone = _adam_steps(opx.wrap(optax.adam, learning_rate=1e-3))
    monkeypatch.setattr(_backends, "platforms", lambda: ("cpu", "tpu"))
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    params = {"w": jnp.ones(3)}
    jaxpr = str(jax.make_jaxpr(lambda tx, s, p: tx.update(p, s, p))(tx, tx.init(params), params))
    assert "platform_index" in jaxpr and "tpu" in jaxpr
    wrapped = _adam_steps(opx.wrap(optax.adam, learning_rate=1e-3))
    chex.assert_trees_all_equal(wrapped, cpu_alone)
    assert_jit_bit_for_bit(wrapped, _adam_steps(optax.adam(1e-3)))


# --------------------------------------------------------------------------
# Where the analyses are kept: an installed package is one beside its wheel's record too.


def test_a_package_installed_into_a_folder_is_installed(tmp_path: pathlib.Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg-1.0.dist-info").mkdir()
    record = "pkg/__init__.py,sha256=x,0\npkg-1.0.dist-info/RECORD,,\n"
    (tmp_path / "pkg-1.0.dist-info" / "RECORD").write_text(record)
    (tmp_path / "script.py").write_text("")
    assert _disk._is_installed(str(tmp_path / "pkg" / "__init__.py"), "pkg")
    assert _disk._is_installed(str(tmp_path / "pkg" / "sub" / "mod.py"), "pkg")
    assert not _disk._is_installed(str(tmp_path / "script.py"), "script")  # the user's program


# --------------------------------------------------------------------------
# Exact at no cost: what the TPU's rewrites compute from the hyperparameters alone is
# computed once, before a loop over steps, not in every step (issue 46).


def _computations(text: str) -> dict[str, list[str]]:
    """An optimized HLO module's computations: name -> its instruction lines."""
    found: dict[str, list[str]] = {}
    name: str | None = None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{\s*$", line)
        if head:
            name, found[head.group(1)] = head.group(1), []
        elif line.startswith("}"):
            name = None
        elif name is not None:
            found[name].append(line)
    return found


def _loop_body_operations(text: str, branches: bool = False) -> list[str]:
    """The opcodes a while loop's body runs in every iteration, fused computations included
    (with ``branches``, its conditionals' branches too: each branch's, not those taken)."""
    computations = _computations(text)
    seen: set[str] = set()
    ops: list[str] = []

    def walk(name: str) -> None:
        if name in seen or name not in computations:
            return
        seen.add(name)
        for line in computations[name]:
            op = re.match(r"^\s*(?:ROOT )?%[\w.\-]+ = (?:\(.*?\)|\S+) ([\w\-]+)\(", line)
            if op:
                ops.append(op.group(1))
            for called in re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", line):
                walk(called)
            if branches and (listed := re.search(r"branch_computations=\{(.*?)\}", line)):
                for called in re.findall(r"%?([\w.\-]+)", listed.group(1)):
                    walk(called)

    for body in re.findall(r"while\(.*?body=%?([\w.\-]+)", text):
        walk(body)
    return ops


def _scan_program(tx: Any, params: Any, argument: bool) -> str:
    def body(carry: Any, _: Any, tx: Any = tx) -> Any:
        p, s = carry
        updates, s = tx.update(jax.tree.map(lambda x: jnp.sin(x) * 0.1, p), s, p)
        return (optax.apply_updates(p, updates), s), None

    if argument:
        fn = lambda tx, p, s: jax.lax.scan(functools.partial(body, tx=tx), (p, s), None, length=10)[0]  # noqa: E731
        return jax.jit(fn).lower(tx, params, tx.init(params)).compile().as_text() or ""
    fn = lambda p, s: jax.lax.scan(body, (p, s), None, length=10)[0]  # noqa: E731
    return jax.jit(fn).lower(params, tx.init(params)).compile().as_text() or ""


def test_the_tpus_exact_scalars_are_computed_before_the_loop_not_in_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CPU compiles the TPU's rewrites (the exact reciprocal, the power of a constant
    # base with its logarithm rounded exactly): the same program the TPU's compiler gets, and
    # the same loop-invariant code motion, without the chip. They once ran in every step of a
    # scan (959 operations in adam's loop body against inject_hyperparams' 151: 13x its time
    # per step at 1,024 parameters on a TPU v5e).
    monkeypatch.setitem(_backends.TABLE, "cpu", _backends.TPU)
    params = {"w": jnp.linspace(-1.0, 1.0, 64), "b": jnp.linspace(0.5, -0.5, 32)}

    def schedule(f: Any) -> Any:
        return f(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000)

    # (the wrapped optimizer, inject_hyperparams', how many more powers a step of the wrapped
    # one computes: the schedule's exponent, a leaf, where inject_hyperparams' is a constant 1.0)
    cases = [
        (lambda f: f(optax.adam, 1e-3), optax.inject_hyperparams(optax.adam)(learning_rate=1e-3), 0),
        (
            lambda f: f(optax.adamw, schedule(f)),
            optax.inject_hyperparams(optax.adamw)(learning_rate=schedule(lambda f, *a: f(*a))),
            1,
        ),
    ]
    for make, injected, more_powers in cases:
        program = _scan_program(make(opx.wrap), params, argument=True)
        wrapped = _loop_body_operations(program)
        reference = _loop_body_operations(_scan_program(injected, params, argument=False))
        # The exact operations' mark: a float's bits read as an integer (their neighbours,
        # the logarithm's exponent and mantissa), none of it in the loop.
        assert "bitcast-convert" not in wrapped
        # What is left per step is the power by the count (plain optax's own, and the
        # general power beside it) and its selects: measured 192 and 285 operations.
        assert len(wrapped) <= 2 * len(reference), (len(wrapped), len(reference))
        # Each power by the count is a conditional whose branches compute one power each:
        # the folded one, or the general one for a base outside the folded power's range (a
        # grid may hold b1=0.0). A step computes the powers inject_hyperparams' computes (the
        # counted operations leave branches out): the wrapped step once computed both of each
        # in the loop, then the folded one there and the general one in a branch (5.66 us a
        # step at 1,024 parameters on a TPU v5e, inject_hyperparams' 5.05).
        assert wrapped.count("conditional") == reference.count("power"), (wrapped, reference)
        assert wrapped.count("power") == more_powers, wrapped
        everything = _loop_body_operations(program, branches=True)
        assert everything.count("power") == 2 * reference.count("power") + more_powers, everything


def test_the_reassociation_is_read_from_any_backends_compiled_text() -> None:
    # Whether XLA multiplies the scalars first in (A * C) * s is read from the compiled text of
    # such a program. A TPU's compiler writes every shape with its layout, so the question once
    # read "no" on the chip, where the answer is yes: the build then left plain optax's order
    # alone (test_exactness_fixes' adafactor and user cases failed there, 2026-12-06).
    tpu = '  %multiply = f32[]{:T(128)S(6)} multiply(%copy, %constant.1), metadata={op_name="mul"}'
    cpu = "  %multiply.1 = f32[] multiply(%s, %constant)"
    vector = "  %multiply = f32[8]{0:T(128)} multiply(%copy-done, %broadcast)"
    assert _backends.multiplies_scalars_first(tpu) and _backends.multiplies_scalars_first(cpu)
    assert not _backends.multiplies_scalars_first(vector)


# --------------------------------------------------------------------------
# On a TPU a scalar of a loop's state that the step's vector work reads costs the step about
# twice what the same scalar computed in the step costs (benchmarks/scalar_probe.py): there,
# what the step reads of the hyperparameters is read through ``x - 0 * count`` (issue 46).


@pytest.fixture
def laundering(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU treated as a backend that launders (the TPU's only difference kept apart)."""
    monkeypatch.setitem(_backends.TABLE, "cpu", dataclasses.replace(_backends.CPU, launders=True))


def _hyperparameters_alone(jaxpr: Any, hyper: set[Any]) -> set[Any]:
    """The variables of ``jaxpr`` (one level) computed from ``hyper`` and literals alone."""
    alone = set(hyper)
    for eqn in jaxpr.eqns:
        inputs = [v for v in eqn.invars if not _jaxprs.is_literal(v)]
        if inputs and all(v in alone for v in inputs):
            alone.update(eqn.outvars)
    return alone


def _wrapped_adamw() -> Any:
    return opx.wrap(
        optax.adamw, opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 1000, exponent=1.5)
    )


@pytest.mark.parametrize("lowers_for", [None, ("cpu", "tpu")], ids=["this-process", "a-tpu-process"])
def test_a_laundering_backends_step_reads_no_hyperparameter_from_outside_the_step(
    laundering: None, monkeypatch: pytest.MonkeyPatch, lowers_for: tuple[str, ...] | None
) -> None:
    if lowers_for is not None:  # as a TPU machine's process, which lowers for its CPU too (jaxprs only)
        monkeypatch.setattr(_backends, "_platforms", lambda: lowers_for)
    # A laundered value is the value, bit for bit: its dtype, weak type and derivative kept. A
    # subnormal is not among them: a backend that flushes subnormals in its arithmetic (this
    # CPU; a TPU, the one that launders, has none) reads it as zero either way.
    values = jnp.asarray([-0.0, 0.0, np.inf, -np.inf, np.nan, 1e-30, -3e38, 0.1], jnp.float32)
    laundered = jax.jit(
        jax.vmap(lambda v, c: _backends.launder(v, _backends.step_zero(c)), in_axes=(0, None))
    )
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
        x = values.astype(dtype)
        for count in (0, 7, -7, 2**31 - 1, -(2**31)):  # any integer: its zero is +0.0 (-0.0 kept)
            got = laundered(x, jnp.int32(count))
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8), np.asarray(x).view(np.uint8))
    weak = jax.jit(lambda v, c: _backends.launder(v, _backends.step_zero(c)))
    assert jax.eval_shape(weak, 1.0, jnp.int32(0)).weak_type
    assert jax.grad(lambda v: _backends.launder(v * 2.0, _backends.step_zero(jnp.int32(3))))(1.0) == 2.0
    # Every scalar of the hyperparameters that the step's vector work reads is computed in it.
    tx = _wrapped_adamw()
    params = {"w": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.bfloat16)}
    closed = jax.make_jaxpr(lambda tx, s, p: tx.update(p, s, p))(tx, tx.init(params), params)
    n = len(jax.tree.leaves(tx))
    alone = _hyperparameters_alone(closed.jaxpr, set(closed.jaxpr.invars[:n]))
    vector_work = [e for e in closed.jaxpr.eqns if any(jnp.ndim(v.aval) > 0 for v in e.outvars)]
    read = [
        v
        for e in vector_work
        for v in e.invars
        if not _jaxprs.is_literal(v) and v in alone and v.aval.shape == ()
    ]
    assert vector_work and not read, read
    # What depends on the hyperparameters alone is still computed from them alone (before a
    # loop, by XLA's loop-invariant code motion): the folds are not laundered, only their use.
    assert len(alone) > 2 * n
    # Without laundering (on no backend of this process: a TPU's process lowers for the CPU too)
    # the same step reads them directly.
    plain_backend = jax.make_jaxpr(lambda tx, s, p: tx.update(p, s, p))
    for platform in _backends.platforms():
        monkeypatch.setitem(
            _backends.TABLE, platform, dataclasses.replace(_backends.treatment(platform), launders=False)
        )
    closed = plain_backend(tx, tx.init(params), params)
    alone = _hyperparameters_alone(closed.jaxpr, set(closed.jaxpr.invars[:n]))
    vector_work = [e for e in closed.jaxpr.eqns if any(jnp.ndim(v.aval) > 0 for v in e.outvars)]
    assert [
        v
        for e in vector_work
        for v in e.invars
        if not _jaxprs.is_literal(v) and v in alone and v.aval.shape == ()
    ]


_PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6), "b": jnp.linspace(0.5, -0.5, 3, dtype=jnp.bfloat16)}


def _scanned(tx: Any, state: Any, steps: int = 4) -> Any:
    """``steps`` updates in a ``lax.scan``, the state an input (made outside the program)."""

    def body(carry: Any, _: Any) -> Any:
        p, s = carry
        updates, s = tx.update(jax.tree.map(jnp.sin, p), s, p)
        return (optax.apply_updates(p, updates), s), updates

    return jax.lax.scan(body, (_PARAMS, state), None, length=steps)


@pytest.mark.exhaustive  # 5 s of compiles: CI's exhaustive stage runs it
def test_laundering_changes_no_number_dtype_or_derivative(laundering: None) -> None:
    # x - (+0.0) is x for every float x: a scan of steps is plain optax's, bit for bit, with the
    # dtypes of a weakly typed hyperparameter meeting bfloat16 parameters; so are a vmapped
    # grid and the derivative with respect to a schedule's peak, against the same without it.
    tx = _wrapped_adamw()
    plain = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 1000, exponent=1.5))
    state = tx.init(_PARAMS)
    laundered = jax.jit(_scanned)(tx, state)
    assert_jit_bit_for_bit(laundered, jax.jit(lambda s: _scanned(plain, s))(plain.init(_PARAMS)))
    grid, _ = opx.grid(tx, {"learning_rate.peak_value": [1e-3, 3e-3]})
    grid_state = jax.vmap(lambda t: t.init(_PARAMS))(grid)
    vmapped = jax.jit(jax.vmap(lambda t, s: _scanned(t, s, 2)[1]))(grid, grid_state)

    def peak_loss(peak: Any, s: Any) -> Any:
        t = tx.replace(learning_rate=tx.learning_rate.replace(peak_value=peak))
        return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(_scanned(t, s, 3)[0][0]))

    derivative = jax.jit(jax.grad(peak_loss))(jnp.float32(1e-3), state)
    _backends.TABLE["cpu"] = _backends.CPU
    chex.assert_trees_all_equal(laundered, jax.jit(_scanned)(tx, state))
    chex.assert_trees_all_equal(
        vmapped, jax.jit(jax.vmap(lambda t, s: _scanned(t, s, 2)[1]))(grid, grid_state)
    )
    chex.assert_trees_all_equal(derivative, jax.jit(jax.grad(peak_loss))(jnp.float32(1e-3), state))


@pytest.mark.exhaustive  # 15 s: muon's verification bisects to the trip count
def test_where_the_compiler_unrolls_constant_loops_a_trip_count_is_static(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # muon's ns_steps: plain optax's fori_loop of a constant 5 is a scan, which a TPU unrolls (15
    # dots); a leaf's is a while loop, kept (3 dots): other operations. The verification finds
    # the leaf that the loop's bound is, and makes it static where the backend unrolls: the
    # program is then plain optax's.
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.linspace(0.5, -0.5, 4)}
    _caches.clear_caches()
    monkeypatch.setitem(
        _backends.TABLE, "cpu", dataclasses.replace(_backends.CPU, unrolls_constant_loops=True)
    )
    try:
        # A nonzero weight decay: with a Python 0.0 optax skips its term, which a leaf cannot
        # (tests/test_catalogue.py: _WEIGHT_DECAY).
        tx = opx.wrap(optax.contrib.muon, 1e-3, weight_decay=1e-4)
        assert "ns_steps" not in tx.dynamic_argnames and "learning_rate" in tx.dynamic_argnames
        plain = optax.contrib.muon(1e-3, weight_decay=1e-4)

        def steps(tx: Any, state: Any) -> Any:
            def body(s: Any, _: Any) -> Any:
                updates, s = tx.update(jax.tree.map(jnp.cos, params), s, params)
                return s, updates

            return jax.lax.scan(body, state, None, length=3)[1]

        program = str(jax.make_jaxpr(steps)(tx, tx.init(params)))
        assert " while[" not in program and program.count(" scan[") == str(
            jax.make_jaxpr(lambda s: steps(plain, s))(plain.init(params))
        ).count(" scan[")
        assert_jit_bit_for_bit(
            jax.jit(steps)(tx, tx.init(params)), jax.jit(lambda s: steps(plain, s))(plain.init(params))
        )
    finally:
        _caches.clear_caches()
    monkeypatch.setitem(_backends.TABLE, "cpu", _backends.CPU)
    if version(optax) >= (0, 2, 8) and version(jax) < (0, 12):  # else static anyway (test_catalogue)
        assert (
            "ns_steps" in opx.wrap(optax.contrib.muon, 1e-3).dynamic_argnames
        )  # the CPU computes both alike
    _caches.clear_caches()
