"""Shared: what XLA does with a program's constants, per backend: one table, read by rewrites and analysis.

Plain optax's hyperparameters are constants of its compiled program; a
wrapped object's are arguments (one compilation for every value). Where the
compiler treats a constant otherwise than a value it reads at run time, the
wrapped build does for its leaves what the compiler does for the constant
(``_jaxprs.rewritten_call``), so both compute the same numbers. What each backend does
is measured, not assumed (``benchmarks/constants_probe.py`` measures a
column; docs/guide/numerics.md gives the figures), and kept here, one
:class:`Treatment` per backend:

- **a division by a constant**, ``x / c``: XLA's algebraic simplifier (every
  backend) multiplies by the reciprocal, folded once: ``x * fl(1 / c)``.
  The wrapped build does the same with the reciprocal of its leaf, computed
  as the compiler folds it: correctly rounded. On the CPU the device's own
  division is correctly rounded; the TPU's is not (39 of 127 quotients one
  unit in the last place away), so there it is rounded exactly
  (:func:`reciprocal`, an error-free residual and a choice among
  neighbours).
- **a value of constants alone** (``a / b``, ``sqrt(a)`` of hyperparameters
  only) is folded by XLA on the host, correctly rounded; a leaf's is
  computed on the device: on the TPU it is rounded exactly as well
  (:func:`divide`, :func:`sqrt`).
- **a power of a constant base**, ``c ** t`` (Adam's bias correction
  ``1 - b1 ** count``, ``exponential_decay``): the TPU's compiler computes
  it as ``2 ** (t * fl(log2 c))``, the logarithm folded on the host, and
  ``c`` itself where ``t == 1``; with ``c`` read at run time it computes a
  general power that differs at most counts (243 of 256 for 0.9). The
  wrapped build computes the same expression with the logarithm rounded
  exactly on the device (:func:`log2`, in double-float arithmetic) and the
  power of two as the compiler computes it (a power of the constant 2).
- **a power by a constant exponent**: which exponents the compiler
  specializes (``x ** 2.0`` as ``x * x``) cannot be matched by a leaf, so an
  argument that is a power's exponent is static at those values
  (``_verify``, ``_spec.Analysis.exponents``): :func:`specializes_exponent`.

Not a constant's treatment but a cost of the same programs: on a TPU a
hyperparameter that a step's vector work reads from a loop's state costs the
step twice what the same scalar computed in the step costs, so there the
values a step reads are computed in it (:func:`launder`, ``x - 0 * |count|``:
``x`` itself, bit for bit), while what depends on the hyperparameters alone
is still computed once, before the loop.

A backend with no column (a GPU: not measured here) gets the CPU's, the
compiler's rewrites that hold on every backend. The per-backend choice is
made where the program is lowered (``jax.lax.platform_dependent``), and only
where the backends this process can lower for treat the operation
differently: a process with the CPU alone traces exactly what it always did.

The exact operations use only additions, subtractions, multiplications
(IEEE round-to-nearest on both backends, no fused multiply-add on the TPU),
comparisons and bit operations of float32, with the device's approximate
division or square root as a first guess; the rounding is then decided with
error-free residuals. Where an input is outside their range (zero, a
subnormal, an infinity, a NaN, a dtype other than float32) the device's own
operation is used, as before.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dataclasses
import decimal
import functools
import itertools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _leaves

# --------------------------------------------------------------------------
# Error-free float32 arithmetic (Dekker, Knuth): each pair (hi, lo) is an
# unevaluated sum, hi the rounded value of hi + lo.

_F32 = jnp.float32
_SPLITTER = np.float32(4097.0)  # 2**12 + 1: splits a float32 into two halves of 12 bits


def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a: Any, b: Any) -> tuple[Any, Any]:  # |a| >= |b|
    s = a + b
    return s, b - (s - a)


def _split(a: Any) -> tuple[Any, Any]:
    c = a * _SPLITTER
    h = c - (c - a)
    return h, a - h


def _two_prod(a: Any, b: Any) -> tuple[Any, Any]:
    """``a * b`` as ``p + e`` exactly (no overflow or underflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _df_add(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
    s, e = _two_sum(a[0], b[0])
    t, f = _two_sum(a[1], b[1])
    e = e + t
    s, e = _fast_two_sum(s, e)
    return _fast_two_sum(s, e + f)


def _df_mul(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
    p, e = _two_prod(a[0], b[0])
    return _fast_two_sum(p, e + (a[0] * b[1] + a[1] * b[0]))


def _neighbours(x: Any, k: int) -> Any:
    """The float32 ``k`` steps from ``x`` in its bit pattern (towards larger magnitude for k > 0)."""
    return lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.int32) + jnp.int32(k), _F32)


def _is_normal(x: Any) -> Any:
    a = jnp.abs(x)
    return (a >= np.float32(np.finfo(np.float32).tiny)) & (a <= np.float32(np.finfo(np.float32).max))


def _closest(candidates: list[Any], residuals: list[Any]) -> Any:
    """The candidate of the smallest absolute residual (the first on a tie)."""
    best, best_r = candidates[0], jnp.abs(residuals[0])
    for c, r in zip(candidates[1:], residuals[1:]):
        r = jnp.abs(r)
        better = r < best_r
        best, best_r = jnp.where(better, c, best), jnp.where(better, r, best_r)
    return best


def _float32_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The device's own operation for any dtype but float32 (no exact variant there)."""

    @functools.wraps(fn)
    def wrapped(*xs: Any) -> Any:
        if not all(jnp.result_type(x) == _F32 for x in xs):
            return None
        return fn(*(jnp.asarray(x, _F32) for x in xs))

    return wrapped


# --------------------------------------------------------------------------
# Correctly rounded float32 operations from the device's approximate ones.


def divide(a: Any, b: Any) -> Any:
    """``a / b`` rounded to nearest, as XLA folds it: the quotient whose residual is smallest."""
    q0 = lax.div(a, b)
    candidates = [_neighbours(q0, k) for k in (-2, -1, 0, 1, 2)]
    residuals = []
    for q in candidates:
        p, e = _two_prod(q, b)
        residuals.append((a - p) - e)  # a - p is exact: p is within a few units of a
    exact = _closest(candidates, residuals)
    ok = _is_normal(a) & _is_normal(b) & _is_normal(q0) & (jnp.abs(q0) < np.float32(2.0**100))
    ok = ok & (jnp.abs(q0) > np.float32(2.0**-100)) & (jnp.abs(b) < np.float32(2.0**100))
    return jnp.where(ok, exact, q0)


def reciprocal(b: Any) -> Any:
    """``1 / b`` rounded to nearest (the reciprocal XLA folds for a division by a constant)."""
    return divide(jnp.ones_like(b), b)


def sqrt(x: Any) -> Any:
    """The square root rounded to nearest: of the device's root and its neighbours, the one
    between whose midpoints ``sqrt(x)`` lies (each midpoint's square against ``x`` exactly)."""
    s0 = lax.sqrt(x)
    candidates = [_neighbours(s0, k) for k in range(-4, 5)]  # the TPU's root: 2 units off, at times more

    def above(lower: Any, upper: Any) -> Any:
        # x - m**2 for the midpoint m = lower + h: (x - lower**2) - 2 * lower * h - h**2, each
        # term exact (x - lower**2 as (x - p) - e; h half a unit, a power of 2).
        h = (upper - lower) * np.float32(0.5)
        p, e = _two_prod(lower, lower)
        a, a_err = _two_sum(x - p, -(lower * (h + h)))
        return (a + ((a_err - e) - h * h)) > 0

    index = sum(above(lo, hi).astype(jnp.int32) for lo, hi in itertools.pairwise(candidates))
    pick = jnp.select([index == i for i in range(len(candidates) - 1)], candidates[:-1], candidates[-1])
    ok = (x > np.float32(2.0**-100)) & (x < np.float32(2.0**100)) & jnp.isfinite(x)
    return jnp.where(ok, pick, s0)


def rsqrt(x: Any) -> Any:
    """``1 / sqrt(x)`` as XLA folds it: two correctly rounded steps."""
    return reciprocal(sqrt(x))


# log2 of the table's points m0 = k / 256, k = 192 ... 384 (m0 in [0.75, 1.5]), each as three
# float32 whose sum is exact to about 70 bits; computed once, in decimal arithmetic.
_TABLE_FIRST, _TABLE_LAST = 192, 384


@functools.cache
def _log2_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with decimal.localcontext() as context:
        context.prec = 40
        ln2 = decimal.Decimal(2).ln()
        rows = []
        for k in range(_TABLE_FIRST, _TABLE_LAST + 1):
            value = (decimal.Decimal(k) / 256).ln() / ln2 if k != 256 else decimal.Decimal(0)
            hi = np.float32(value)
            mid = np.float32(value - decimal.Decimal(float(hi)))
            lo = np.float32(value - decimal.Decimal(float(hi)) - decimal.Decimal(float(mid)))
            rows.append((hi, mid, lo))
    table = np.array(rows, np.float32)
    return table[:, 0].copy(), table[:, 1].copy(), table[:, 2].copy()


def _constant_pair(value: decimal.Decimal) -> tuple[np.float32, np.float32]:
    hi = np.float32(value)
    return hi, np.float32(value - decimal.Decimal(float(hi)))


with decimal.localcontext() as _context:
    _context.prec = 40
    _INV_LN2 = _constant_pair(1 / decimal.Decimal(2).ln())
    _THIRD = _constant_pair(1 / decimal.Decimal(3))


def log2(c: Any) -> Any:
    """``log2(c)`` rounded to nearest float32, for a positive normal float32 ``c``.

    ``c = 2**e * m`` with ``m`` in [0.75, 1.5), ``m = m0 * (1 + r)`` with
    ``m0`` the nearest point k/256 of a table (so |r| < 2**-9, and ``r`` is
    ``m - 1`` near 1: no cancellation), ``log2(1 + r)`` from its series in
    double-float arithmetic, the table's ``log2(m0)`` in triple-float, the
    sum rounded once. Checked against ``float32(log2(float64(c)))`` for
    every float32 from 2**-24 to 2**24 (``tests/test_backends.py``).
    """
    bits = lax.bitcast_convert_type(c, jnp.int32)
    e = (bits >> 23) - 127
    m = lax.bitcast_convert_type((bits & 0x7FFFFF) | 0x3F800000, _F32)  # [1, 2)
    high = m >= np.float32(1.5)
    m = jnp.where(high, m * np.float32(0.5), m)  # [0.75, 1.5), exact
    e = jnp.where(high, e + 1, e)
    k = jnp.round(m * np.float32(256.0))  # the nearest table point (exact: m * 256 is a float32)
    m0 = k * np.float32(1.0 / 256.0)
    d = m - m0  # exact: both multiples of 2**-24 within 2**-9
    # r = d / m0 in double-float: a first quotient, then the exact residual's correction.
    r0 = d / m0
    p, pe = _two_prod(r0, m0)
    r = _fast_two_sum(r0, ((d - p) - pe) / m0)
    # ln(1 + r) = r - r**2/2 + r**3/3 - r**4/4 + ...; the first three in double-float.
    r2 = _df_mul(r, r)
    r3 = _df_mul(r2, r)
    x = r[0]
    tail = (x * x) * (x * x) * (np.float32(-0.25) + x * (np.float32(0.2) + x * np.float32(-1.0 / 6.0)))
    ln = _df_add(r, (r2[0] * np.float32(-0.5), r2[1] * np.float32(-0.5)))
    ln = _df_add(ln, _df_add(_df_mul(r3, _THIRD), (tail, jnp.zeros_like(tail))))
    small = _df_mul(ln, _INV_LN2)
    hi_t, mid_t, lo_t = (jnp.asarray(t) for t in _log2_table())
    index = k.astype(jnp.int32) - _TABLE_FIRST
    # e + log2(m0) + log2(1 + r): e + hi exactly as a pair (e an integer, |hi| < 0.6), the rest
    # (below a unit of e + hi) in double-float, and the whole rounded once, exactly.
    whole, whole_lo = _two_sum(e.astype(_F32), hi_t[index])
    rest = _df_add(_df_add(small, (mid_t[index], lo_t[index])), (whole_lo, jnp.zeros_like(whole_lo)))
    return _round_sum(whole, rest)


def _round_sum(w: Any, t: tuple[Any, Any]) -> Any:
    """``w + t[0] + t[1]`` rounded to nearest float32 (``t`` below a unit of ``w`` or ``w`` zero).

    The sum rounded in float32 is off only where the exact sum lies next to
    a midpoint between two float32; the exact remainders decide there.
    """
    s, d0 = _two_sum(w, t[0])
    c, c_lo = _two_sum(d0, t[1])
    r, d1 = _two_sum(s, c)  # w + t = r + d1 + c_lo, exactly
    up, down = _neighbours(r, 1), _neighbours(r, -1)
    upper = jnp.where(r >= 0, up, down)  # the next float32 above r
    lower = jnp.where(r >= 0, down, up)
    # Past the midpoint to a neighbour: d1 + c_lo beyond half the step (d1 and the half
    # step exact, their difference exact or of an obvious sign, c_lo added once).
    over = ((d1 - (upper - r) * np.float32(0.5)) + c_lo) > 0
    under = ((d1 - (lower - r) * np.float32(0.5)) + c_lo) < 0
    return jnp.where(over, upper, jnp.where(under, lower, r))


def power_of_constant_base(c: Any, t: Any, log2_c: Any = None) -> Any:
    """``c ** t`` as the TPU's compiler computes it for a constant ``c`` (``c`` where ``t == 1``,
    else ``2 ** (t * fl(log2 c))``); the device's general power outside the measured range (a
    base that is not a positive normal float32, an infinite or NaN exponent, other dtypes).
    ``log2_c``: ``fl(log2 c)`` where it is known (carried: :func:`log2_of_base` computes it
    otherwise). Derivatives are the general power's."""
    t_type = jnp.result_type(t)
    if jnp.result_type(c) != _F32 or not (t_type == _F32 or jnp.issubdtype(t_type, jnp.integer)):
        return lax.pow(c, t)
    if log2_c is None:
        return _power_of_constant_base(c, t)
    return _power_with_log2(c, t, log2_c)


def log2_of_base(c: Any) -> Any:
    """``fl(log2 c)`` as the TPU's compiler folds it for a constant base, where ``c`` is a
    positive normal float32 (0 elsewhere: the general power is taken there).

    A value of the base alone, so that XLA computes it once where the base
    is (a scan over steps that share one hyperparameter computes it before
    its loop, not in every step).
    """
    valid = _is_normal(c) & (c > 0)
    return jnp.where(valid, log2(jnp.where(valid, c, np.float32(1.0))), np.float32(0.0))


@jax.custom_jvp
def _power_of_constant_base(c: Any, t: Any) -> Any:
    return _power_given_log2(c, t, log2_of_base(c))


def _power_given_log2(c: Any, t: Any, log2_c: Any) -> Any:
    """``c ** t`` as the TPU's compiler computes it for a constant ``c`` whose folded
    logarithm is ``log2_c``: what depends on ``c`` alone first (loop-invariant), then ``t``.

    The general power is needed only for a base outside the rule's range (a
    grid may hold ``b1=0.0``) or an exponent that is not finite. Of scalars
    (a step's count, a hyperparameter), the whole power is a ``lax.cond``
    whose branches compute one power each, the folded one or the general
    one: on a TPU a step then reads what it would read for
    ``inject_hyperparams``' one power, in one place. Elsewhere (a batched
    base under ``vmap``, an array exponent) the general power is taken in a
    branch, where any element needs it, whose other side computes nothing
    (XLA keeps such a conditional; two computing branches of arrays become a
    select of both), and each element's power selected. Which of the two
    each element gets is the same either way, and so are the operations.
    """
    # An integer exponent is converted to the base's dtype where the power is lowered.
    tf = jnp.asarray(t).astype(_F32)
    use_folded = _is_normal(c) & (c > 0)  # of the base alone
    if not jnp.issubdtype(jnp.result_type(t), jnp.integer):  # an integer's float is finite
        use_folded = use_folded & jnp.isfinite(tf)
    if jnp.ndim(use_folded) == 0:
        return lax.cond(use_folded, _folded_power, _general_power, c, t, log2_c)
    folded = _folded_power(c, t, log2_c)
    base = jnp.broadcast_to(c, jnp.shape(folded))  # the empty side returns it as it is
    general = lax.cond(jnp.all(use_folded), lambda c, t: c, _general_power, base, t)
    return jnp.where(use_folded, folded, general)


def _folded_power(c: Any, t: Any, log2_c: Any = None) -> Any:
    tf = jnp.asarray(t).astype(_F32)
    return jnp.where(tf == 1, c, lax.pow(np.float32(2.0), tf * log2_c))


def _general_power(c: Any, t: Any, log2_c: Any = None) -> Any:
    return jnp.broadcast_to(lax.pow(c, t).astype(c.dtype), jnp.broadcast_shapes(jnp.shape(c), jnp.shape(t)))


@_power_of_constant_base.defjvp
def _power_of_constant_base_jvp(primals: tuple[Any, Any], tangents: tuple[Any, Any]) -> tuple[Any, Any]:
    _, tangent = jax.jvp(lax.pow, primals, tangents)
    return _power_of_constant_base(*primals), tangent


@jax.custom_jvp
def _power_with_log2(c: Any, t: Any, log2_c: Any) -> Any:
    return _power_given_log2(c, t, log2_c)


@_power_with_log2.defjvp
def _power_with_log2_jvp(primals: tuple[Any, Any, Any], tangents: tuple[Any, Any, Any]) -> tuple[Any, Any]:
    _, tangent = jax.jvp(lax.pow, primals[:2], tangents[:2])
    return _power_with_log2(*primals), tangent


# --------------------------------------------------------------------------
# Folds: what the compiler computes from constants alone, by kind (``_jaxprs.folded``). An
# object carries each one's host value (``_folds``); the device computes it where it does not,
# or where the carried value is stale (its leaves changed behind the object's back): then
# with the device's own operation, the documented float32 fallback.


_DEVICE: dict[str, Callable[..., Any]] = {
    "reciprocal": lambda c: lax.div(jnp.ones_like(c), c),
    "div": lax.div,
    "sqrt": lax.sqrt,
    "rsqrt": lax.rsqrt,
    "log2": jnp.log2,
}


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _carried(kind: str, fresh: Any, carried: Any, *xs: Any) -> Any:
    """The carried value where fresh, else the device's; derivatives are the device's."""
    return jnp.where(fresh, carried.astype(jnp.result_type(*xs)), _DEVICE[kind](*xs))


@_carried.defjvp
def _carried_jvp(kind: str, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
    fresh, carried, *xs = primals
    _, tangent = jax.jvp(_DEVICE[kind], tuple(xs), tuple(tangents[2:]))
    return _carried(kind, fresh, carried, *xs), tangent


# --------------------------------------------------------------------------
# The table.


@dataclasses.dataclass(frozen=True)
class Treatment:
    """What XLA on one backend does with a program's constants, as the wrapped build redoes it.

    Each field is ``None`` where the backend does what a value read at run
    time gets (nothing to redo), else the operation that gives the
    constant's result from a leaf. ``measured`` says where the column comes
    from.
    """

    platform: str
    measured: str
    # x / c: x * reciprocal(c) (the folded reciprocal).
    reciprocal: Callable[[Any], Any]
    # Values of constants alone, folded on the host: a / b, sqrt(a), rsqrt(a).
    folded: dict[str, Callable[..., Any]]
    # c ** t for a constant base c and a value t.
    power_of_constant_base: Callable[..., Any] | None
    # Whether x ** e with a constant exponent e is compiled otherwise than a power by a value.
    specializes_exponent: Callable[[float], bool]
    exponents_text: str
    # Whether a carried fold stands for the device's exact one (its host value is what this
    # backend's compiler folds, and computing it on the device costs): the TPU's.
    carries: bool = False
    # Whether a value of the hyperparameters that a step's work reads is better computed in the
    # step than read from a loop's state (:func:`step_zero`): the TPU's.
    launders: bool = False
    # Whether the compiler unrolls a loop of a constant trip count (``fori_loop(0, 5, ...)``, a
    # ``scan``) into other operations than the loop that a leaf's trip count keeps (a
    # ``while``): the TPU's (muon's Newton-Schulz loop, 15 dots in 39 fusions against the loop's
    # 3 in 10). A leaf that is a trip count is then static: plain optax's program.
    unrolls_constant_loops: bool = False

    def folded_value(self, name: str, inputs: list[Any]) -> Any:
        """The folded value of a primitive of constants alone, or None (the device's is the same)."""
        rule = self.folded.get(name)
        return None if rule is None else _float32_only(rule)(*inputs)

    def fold(self, kind: str, fresh: Any, carried: Any, *xs: Any) -> Any:
        """A fold of values of the hyperparameters alone (``_jaxprs``): the carried value where
        this backend uses it and it is fresh, else computed here as the compiler folds it."""
        if carried is not None and self.carries:
            return _carried(kind, fresh, carried, *xs)
        if kind == "reciprocal":
            return self.reciprocal(xs[0])
        if kind == "log2":  # the base's folded logarithm, for the power's rule (if any)
            c = xs[0]
            if self.power_of_constant_base is None or jnp.result_type(c) != _F32:
                return jnp.zeros_like(c)
            return log2_of_base(c)
        out = self.folded_value(kind, list(xs))
        return _DEVICE[kind](*xs) if out is None else out


# Measured on the CPU (x86-64; jax 0.10.2): x ** e by a constant e differs from a power by a
# value at 2.0, 3.0, 0.5, -1.0, and not at 1.0, 4.0, -0.5, 1.5, ...
_CPU_EXPONENTS = frozenset((2.0, 3.0, 0.5, -1.0))


def _cpu_specializes(value: float) -> bool:
    return value in _CPU_EXPONENTS


def _tpu_specializes(value: float) -> bool:
    """Measured on a TPU v5e (jax 0.10.2): a constant exponent that is the float32 nearest to
    k/1, k/2, k/3 or k/4 (0 and 1 aside) gives other numbers than a power by a value; 0.1, 0.2,
    0.125, 1/6, 0.8, 1.0001 and 1e6 do not. Specialized is the safe side (the argument is then
    static at that value: plain optax's program), so integers are, at any size."""
    x = np.float32(value)
    if not np.isfinite(x) or x in (0.0, 1.0):
        return False
    for d in (1, 2, 3, 4):
        k = np.round(np.float64(x) * d)
        if np.float32(k / d) == x:
            return True
    return False


def _device_reciprocal(c: Any) -> Any:
    return lax.div(jnp.ones_like(c), c)


CPU = Treatment(
    platform="cpu",
    measured="x86-64, jax 0.10.2 (benchmarks/constants_probe.py)",
    reciprocal=_device_reciprocal,  # the device's division is correctly rounded
    folded={},
    power_of_constant_base=None,
    specializes_exponent=_cpu_specializes,
    exponents_text="the CPU: 2.0, 3.0, 0.5 and -1.0",
)

TPU = Treatment(
    platform="tpu",
    measured="TPU v5e, jax 0.10.2, libtpu of 2026-12 (benchmarks/constants_probe.py)",
    reciprocal=lambda c: reciprocal(c) if jnp.result_type(c) == _F32 else _device_reciprocal(c),
    folded={"div": divide, "sqrt": sqrt, "rsqrt": rsqrt},
    power_of_constant_base=power_of_constant_base,
    specializes_exponent=_tpu_specializes,
    exponents_text="the TPU: the whole multiples of 1/2, 1/3 and 1/4 but 0 and 1",
    carries=True,
    launders=True,
    unrolls_constant_loops=True,
)

TABLE: dict[str, Treatment] = {"cpu": CPU, "tpu": TPU}
DEFAULT = CPU  # a backend with no column of its own


def treatment(platform: str) -> Treatment:
    return TABLE.get(platform, DEFAULT)


@functools.cache
def _platforms() -> tuple[str, ...]:
    """The platforms this process can lower for (its initialized backends), once asked."""
    try:
        from jax._src import xla_bridge

        found = tuple(sorted(xla_bridge.backends()))
    except (ImportError, AttributeError, RuntimeError):  # another layout: the default backend
        found = (jax.default_backend(),)
    return found or ("cpu",)


def platforms() -> tuple[str, ...]:
    return _platforms()


def lowered(fn: Callable[[Treatment], Callable[..., Any]], *args: Any) -> Any:
    """``fn(treatment)(*args)`` for the treatment of the platform the program is lowered for.

    One platform, or several treating it alike: traced once, as it is. Else
    ``jax.lax.platform_dependent`` stages each platform's own, chosen at
    lowering (the compiler never sees the others).
    """
    kinds = {p: treatment(p) for p in platforms()}
    distinct = {id(t): t for t in kinds.values()}
    if len(distinct) == 1:
        return fn(next(iter(distinct.values())))(*args)
    branches = {p: fn(t) for p, t in kinds.items() if t is not DEFAULT}
    return lax.platform_dependent(*args, default=fn(DEFAULT), **branches)


# --------------------------------------------------------------------------
# Values of the hyperparameters read in a step. Measured on a TPU v5e (jax 0.10.2,
# benchmarks/scalar_probe.py): in a loop (``lax.scan``), a scalar of the loop's state (a
# hyperparameter read at run time, or a value of the hyperparameters alone, which XLA moves
# out of the loop into its state) that the step's vector work reads costs the step about
# 0.7 µs; the same scalar computed in the step (``x - 0 * count``) about 0.35. So on that
# backend each such value is passed through a subtraction of a zero made from the step's
# count where the step reads it: what depends on the hyperparameters alone is still
# computed once, before the loop, and ``x - (+0.0)`` is ``x`` for every float ``x`` (-0.0,
# infinities and NaN included).


def step_zero(count: Any) -> Any:
    """``+0.0`` computed from ``count`` (an integer scalar that changes from step to step) on
    the backends that launder (:attr:`Treatment.launders`), a constant zero on the others;
    None where no backend of this process launders (the program is traced as before)."""
    kinds = {p: treatment(p) for p in platforms()}
    if not any(t.launders for t in kinds.values()):
        return None

    def for_backend(t: Treatment) -> Callable[[Any], Any]:
        if t.launders:
            # |c| * 0 is +0.0 for any integer c: x - (+0.0) keeps a -0.0 (x + 0.0 would not).
            return lambda c: lax.abs(lax.convert_element_type(c, _F32)) * np.float32(0.0)
        return lambda c: jnp.zeros((), _F32)  # x - 0.0 is simplified away by XLA

    return lowered(for_backend, count)


def launder(x: Any, zero: Any) -> Any:
    """``x - zero`` for a traced real float scalar ``x`` (its dtype and weak type kept), else ``x``."""
    if zero is None or not _leaves.is_tracer(x) or jnp.shape(x) != ():
        return x
    dtype = jnp.result_type(x)
    if not jnp.issubdtype(dtype, jnp.floating):
        return x
    out = lax.sub(x, lax.convert_element_type(zero, dtype))
    return _leaves.weak(out) if x.aval.weak_type else out


def exact_fold(kind: str) -> Callable[[Treatment], Callable[..., Any]]:
    """The backend's fold computed on the device (no carried value)."""

    def for_backend(treatment: Treatment) -> Callable[..., Any]:
        return functools.partial(treatment.fold, kind, None, None)

    return for_backend


@functools.cache
def reassociates_scalar_products() -> bool:
    """Whether XLA's algebraic simplifier computes ``(A * C) * s`` as ``A * (s * C)``, ``C`` a
    constant scalar and ``s`` a scalar read at run time (jax 0.10's does, 0.12's does not):
    asked of the default backend's compiler once, with a program of eight elements."""
    program = jax.jit(lambda a, s: (a * np.float32(0.01)) * s).lower(
        jax.ShapeDtypeStruct((8,), _F32), jax.ShapeDtypeStruct((), _F32)
    )
    return multiplies_scalars_first(program.compile().as_text() or "")


# A scalar float32 multiplication in an optimized HLO module's text, with or without a layout
# (a TPU's compiler writes ``f32[]{:T(128)S(6)} multiply(``, the CPU's ``f32[] multiply(``).
_SCALAR_MULTIPLY = re.compile(r" f32\[\](?:\{[^}]*\})? multiply\(")


def multiplies_scalars_first(text: str) -> bool:
    """Whether the compiled text of ``(a * 0.01) * s`` multiplies the two scalars first."""
    return _SCALAR_MULTIPLY.search(text) is not None


def specialized_exponents_text(platform: str | None = None) -> str:
    """Which exponents the backend's compiler specializes, in words (for messages)."""
    return treatment(platform or jax.default_backend()).exponents_text


def unrolls_constant_loops(platform: str | None = None) -> bool:
    """Whether the compiler of ``platform`` (the default backend's) unrolls a loop of a constant
    trip count into other numbers than a loop of a trip count read at run time."""
    return treatment(platform or jax.default_backend()).unrolls_constant_loops


def specializes_exponent(value: Any, platform: str | None = None) -> bool:
    """Whether the compiler of ``platform`` (the default backend's) specializes ``x ** value``."""
    x = np.asarray(value)
    if x.size == 0 or not np.issubdtype(x.dtype, np.number):
        return False
    rule = treatment(platform or jax.default_backend()).specializes_exponent
    return bool(all(rule(float(v)) for v in x.ravel()))
