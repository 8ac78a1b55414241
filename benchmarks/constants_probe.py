"""What this backend's compiler does with a program's constants: the measurements behind a column of
``optax_pytree/_backends.py`` (the TPU's was made with it; a GPU's joins the same way).

Plain optax's hyperparameters are constants of its compiled program, a wrapped
object's are arguments. Run on the backend to measure (one process holds the
chip: nothing else may run on it meanwhile)::

    python benchmarks/constants_probe.py                 # every part, about 5 minutes on a TPU v5e
    python benchmarks/constants_probe.py --quick         # a few factories (CI runs it on the CPU)
    python benchmarks/constants_probe.py --only exponents,rules
    XLA_FLAGS=--xla_disable_hlo_passes=algsimp python benchmarks/constants_probe.py --only catalogue \\
        --names optax.adadelta,optax.contrib.madgrad   # a listed exception without the simplifier

Parts:

1. ``exponents``: ``x ** e`` with ``e`` a constant against ``e`` an argument, for
   multiples of 1/1 ... 1/12 and others; prints which the compiler specializes
   and where ``_backends.specializes_exponent`` disagrees (it must say
   "specialized" for every one measured so, and may for more: static is safe).
2. ``exact``: ``_backends.log2`` over whole binades, ``divide``, ``reciprocal``,
   ``sqrt``, ``rsqrt`` on random values, against NumPy's correctly rounded
   results (the exact operations must be exact on the device too: its
   float32 arithmetic must be IEEE round-to-nearest, with no fused
   multiply-add and no reassociation); and the device's own division.
3. ``rules``: ``c ** t`` with ``c`` a constant against the backend's rule
   (``_backends.treatment(backend).power_of_constant_base``) with ``c`` an
   argument, over bases, exponents and edge cases; ``x / c`` against
   ``x * reciprocal(c)``. ``--record FILE`` writes the recorded rows that
   ``tests/test_backends.py`` checks the rule against on the CPU.
4. ``catalogue``: every factory of optax's catalogue, wrapped and plain, six
   jitted steps (the wrapped object an argument, the state an input) and four
   eager ones; each that differs is then taken apart op by op: every equation
   where a value of the hyperparameters meets data (or values of
   hyperparameters alone), run with those values as arguments and as
   constants of the program. A factory that differs with no single operation
   differing is a rewrite across operations (run it again without XLA's
   algebraic simplifier, as above, to prove it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the catalogue's arguments (tests/helpers.py)

from optax_pytree import _backends  # noqa: E402
from optax_pytree import _jaxprs as J  # noqa: E402
from optax_pytree import _staged as S  # noqa: E402

F32 = np.float32


def _bits(x: Any) -> np.ndarray:
    if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    x = np.asarray(x)
    return x.view(np.uint32) if x.dtype == F32 else x


def _differ(a: Any, b: Any) -> int:
    return int(np.sum(_bits(a) != _bits(b)))


# --------------------------------------------------------------------------
# 1. Exponents.


def exponents() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(1e-3, 2, 200), rng.uniform(2, 100, 50)]).astype(F32)
    values = sorted(
        {k / d for d in (1, 2, 3, 4, 5, 6, 8, 12) for k in range(-13, 14)}
        | {100.0, 1000.0, 1e6, 33.0, 0.1, 0.7, 0.8, 1.0001, -0.8, 2.2, 7.5, 0.3, 0.35}
    )
    as_argument = jax.jit(lambda x, e: x**e)
    specialized, unsafe, conservative = [], [], []
    for e in values:
        constant = jax.jit(lambda x, e=e: x ** F32(e))(xs)
        measured = _differ(constant, as_argument(xs, F32(e))) > 0
        said = _backends.specializes_exponent(e)
        if measured:
            specialized.append(e)
        if measured and not said:
            unsafe.append(e)
        if said and not measured and e not in (0.0, 1.0):
            conservative.append(e)
    print(f"  specialized ({len(specialized)}): {[round(e, 4) for e in specialized]}")
    print(f"  the table says not specialized, measured specialized (wrong numbers): {unsafe}")
    print(f"  the table says specialized, measured not (static, safe): {[round(e, 4) for e in conservative]}")
    return {"specialized": specialized, "unsafe": unsafe, "conservative": conservative}


# --------------------------------------------------------------------------
# 2. The exact operations.


def exact(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log2 = jax.jit(_backends.log2)
    bad = total = 0
    for e in (-1, 0) if quick else (-20, -10, -3, -2, -1, 0, 1, 2, 5, 10, 20):
        c = (np.arange(2**23, dtype=np.uint32) | np.uint32((e + 127) << 23)).view(F32)
        bad += _differ(log2(c), np.log2(c.astype(np.float64)).astype(F32))
        total += c.size
    print(f"  log2: {bad} of {total} differ from float32(log2(float64(c)))")
    out["log2"] = [bad, total]
    n = 200_000 if quick else 4_000_000
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(n) * np.exp(rng.uniform(-15, 15, n))).astype(F32)
    b = (rng.standard_normal(n) * np.exp(rng.uniform(-15, 15, n))).astype(F32)
    x = np.abs(a)
    for name, fn, args, expected in (
        ("divide", _backends.divide, (a, b), a / b),
        ("reciprocal", _backends.reciprocal, (b,), F32(1) / b),
        ("sqrt", _backends.sqrt, (x,), np.sqrt(x)),
        ("rsqrt", _backends.rsqrt, (x,), F32(1) / np.sqrt(x)),
        ("the device's division", lax.div, (a, b), a / b),
        ("the device's square root", lax.sqrt, (x,), np.sqrt(x)),
    ):
        k = _differ(jax.jit(fn)(*args), expected)
        print(f"  {name}: {k} of {n} differ from the correctly rounded")
        out[name] = [k, n]
    return out


# --------------------------------------------------------------------------
# 3. The rules.


def rules(record: str | None) -> dict[str, Any]:
    rule = _backends.treatment(jax.default_backend()).power_of_constant_base or lax.pow
    rng = np.random.default_rng(2)
    common = [0.9, 0.95, 0.99, 0.999, 0.9999, 0.5, 0.75, 0.1, 0.96, 1.5, 2.5, 10.0, 0.65]
    bases = np.array([*common, *rng.uniform(0.01, 1, 24)], F32)
    counts = np.arange(1, 300, dtype=F32)
    fractions = np.arange(0, 200, dtype=F32) / F32(10)
    ts = np.concatenate([counts, fractions, np.array([0, -1, 0.5, 1e4, 2**20], F32)])
    emulated = np.asarray(jax.jit(lambda c, t: rule(c[:, None], t[None, :]))(bases, ts))
    log = np.log2(bases.astype(np.float64)).astype(F32)
    power_of_two = np.asarray(jax.jit(lambda t, L: lax.pow(F32(2.0), t[None, :] * L[:, None]))(ts, log))
    general = np.asarray(jax.jit(lambda c, t: lax.pow(c[:, None], t[None, :]))(bases, ts))
    rows, differ, tiny = [], 0, 0
    for i, c in enumerate(bases):
        cc = float(c)
        constant = np.asarray(jax.jit(lambda t, cc=cc: jnp.power(F32(cc), t))(ts))
        wrong = (_bits(constant) != _bits(emulated[i])) & ~(np.isnan(constant) & np.isnan(emulated[i]))
        differ += int(wrong.sum())
        tiny += int((wrong & (np.abs(constant) < 2.0**-100)).sum())  # see docs/guide/numerics.md
        for j in [*range(0, 256, 7), 256, 299, 308, 309, 318]:
            recorded = (constant[j], power_of_two[i, j], general[i, j])
            rows.append([cc, float(ts[j]), *(int(_bits(v)) for v in recorded)])
    print(f"  c ** t, c a constant, against the rule with c an argument: {differ} of {emulated.size} differ")
    print(f"    of which {tiny} where the power is below 2**-100")
    x = (rng.standard_normal(20_000) * 3).astype(F32)
    division = 0
    for c in rng.uniform(0.001, 1000, 40).astype(F32):
        cc = float(c)
        folded = jax.jit(lambda x, cc=cc: x / F32(cc))(x)
        division += _differ(
            folded, jax.jit(lambda x, c: x * _backends.treatment(jax.default_backend()).reciprocal(c))(x, c)
        )
    print(f"  x / c, c a constant, against x * reciprocal(c): {division} of {40 * x.size} differ")
    if record:
        columns = ["c", "t", "constant", "power_of_two", "general"]
        what = (
            f"Recorded on {jax.devices()[0].device_kind} (jax {jax.__version__}) by "
            "benchmarks/constants_probe.py: for a float32 base c and exponent t, 'constant' is "
            "jit(lambda t: c ** t) with c a constant of the program, 'power_of_two' is "
            "jit(lambda t, L: 2.0 ** (t * L)) with L = float32(log2(float64(c))) an argument, "
            "'general' is jit(lambda c, t: c ** t) with c an argument; each the bits of a float32."
        )
        with open(record, "w") as f:
            json.dump({"what": what, "rows": rows, "columns": columns}, f)
    return {"power": [differ, int(emulated.size), tiny], "division": [division, 40 * x.size]}


# --------------------------------------------------------------------------
# 4. The catalogue, and op by op what differs.


class _Localizer:
    """Runs a wrapped build's jaxpr eagerly, testing each equation that takes values of the
    hyperparameters with them as arguments and as constants of the program."""

    def __init__(self) -> None:
        self.found: list[dict[str, Any]] = []
        self.seen: set[Any] = set()
        self.original = S.call

    def call(self, owner: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """In place of ``_staged.call``: each eager call taken apart, then made as it is."""

        def fn(h: Any, *a: Any, **k: Any) -> Any:
            return getattr(owner.built_from(h), method)(*a, **k)

        flat_h, tree_h = jax.tree_util.tree_flatten((owner.leaves, owner.exact))
        if any(J.is_tracer(x) for x in flat_h) or not flat_h:
            return self.original(owner, method, *args, **kwargs)
        flat, tree = jax.tree_util.tree_flatten((args, kwargs))
        where = [i for i, x in enumerate(flat) if J.is_array(x)]
        n = len(flat_h)

        def traced(*xs: Any) -> Any:
            rest = list(flat)
            for i, x in zip(where, xs[n:]):
                rest[i] = x
            a, k = jax.tree_util.tree_unflatten(tree, rest)
            return fn(jax.tree_util.tree_unflatten(tree_h, list(xs[:n])), *a, **k)

        inputs = [*flat_h, *(flat[i] for i in where)]
        try:
            closed = jax.make_jaxpr(traced)(*inputs)
            self.run(closed.jaxpr, list(closed.consts), inputs, [True] * n + [False] * len(where))
        except Exception as e:  # noqa: BLE001 - a probe: say so and go on
            print(f"    (could not take it apart: {e!r:.160})")
        return self.original(owner, method, *args, **kwargs)

    def run(
        self, jaxpr: Any, consts: list[Any], args: list[Any], derived_in: list[bool]
    ) -> tuple[list[Any], list[bool]]:
        env: dict[Any, Any] = {}
        derived: set[Any] = set()
        for v, x in zip(jaxpr.constvars, consts):
            env[v] = x
            if not J.is_tracer(x):
                derived.add(v)
        for v, x, d in zip(jaxpr.invars, args, derived_in):
            env[v] = x
            if d:
                derived.add(v)
        for eqn in jaxpr.eqns:
            inputs = [v.val if J.is_literal(v) else env[v] for v in eqn.invars]
            flags = [J.is_literal(v) or v in derived for v in eqn.invars]
            if eqn.primitive.name in J.INLINED and "jaxpr" in eqn.params:
                inner = eqn.params["jaxpr"]
                outs, out_flags = self.run(inner.jaxpr, list(inner.consts), inputs, flags)
            else:
                if any(f and not J.is_literal(v) for f, v in zip(flags, eqn.invars)):
                    self.test(eqn, inputs, flags)
                out = J.bind(eqn, inputs)
                outs = list(out) if eqn.primitive.multiple_results else [out]
                out_flags = [all(flags) and not eqn.effects] * len(outs)
            for v, x, d in zip(eqn.outvars, outs, out_flags):
                env[v] = x
                if d:
                    derived.add(v)
        outs = [v.val if J.is_literal(v) else env[v] for v in jaxpr.outvars]
        return outs, [J.is_literal(v) or v in derived for v in jaxpr.outvars]

    def test(self, eqn: Any, inputs: list[Any], flags: list[bool]) -> None:
        if not eqn.outvars or not all(jnp.issubdtype(J.aval(v).dtype, jnp.floating) for v in eqn.outvars):
            return
        constant = [i for i, (f, v) in enumerate(zip(flags, eqn.invars)) if f and not J.is_literal(v)]
        values = {i: np.asarray(inputs[i]) for i in constant}
        key = (eqn.primitive.name, str(eqn.params)[:200], tuple(np.shape(x) for x in inputs), tuple(flags))
        key += tuple(values[i].tobytes() for i in constant)
        if key in self.seen:
            return
        self.seen.add(key)
        rest = [i for i in range(len(inputs)) if i not in values]

        def with_constants(*xs: Any) -> Any:
            it = iter(xs)
            return J.bind(
                eqn, [jnp.asarray(values[i]) if i in values else next(it) for i in range(len(inputs))]
            )

        a = jax.jit(lambda *xs: J.bind(eqn, list(xs)))(*inputs)
        c = jax.jit(with_constants)(*[inputs[i] for i in rest])
        a, c = (list(x) if eqn.primitive.multiple_results else [x] for x in (a, c))
        k = sum(_differ(x, y) for x, y in zip(a, c))
        if k:
            where = "with data" if rest else "of constants alone"
            found = {"primitive": eqn.primitive.name, "where": where, "differ": k}
            found["constants"] = [values[i].ravel()[:3].tolist() for i in constant]
            self.found.append(found)
            print(f"    differs: {eqn.primitive.name} {where}, constants {found['constants']}: {k} elements")


def catalogue(quick: bool, names: list[str] | None) -> dict[str, Any]:
    import helpers as h  # pyright: ignore[reportMissingImports]  # tests/, put on sys.path above

    entries = [(n, f, k) for n, f, k in h.catalogue() if not names or n in names]
    if quick and not names:
        entries = [e for e in entries if e[0] in ("optax.adam", "optax.exponential_decay", "optax.lion")]
    rows = []
    for name, factory, kind in entries:
        row: dict[str, Any] = {"name": name}
        try:
            wrapped, plain = h.call(name, factory, h.wrapped), h.call(name, factory, h.raw)
            if kind == "schedule":
                steps = jnp.arange(0, 300)
                row["jit"] = _differ(
                    jax.jit(lambda s, c: jax.vmap(s)(c))(wrapped, steps), jax.jit(jax.vmap(plain))(steps)
                )
                row["eager"] = sum(_differ(wrapped(int(s)), plain(int(s))) for s in h.SCHEDULE_STEPS)
            else:
                params = h.PARAMS_FOR.get(name, lambda: h.PARAMS)()
                options = h.RUN_OPTIONS.get(name, {})
                for mode, jit, steps in (("jit", True, 6), ("eager", False, 4)):
                    a = h.training_loop(wrapped, params, steps=steps, jit=jit, **options)
                    b = h.training_loop(plain, params, steps=steps, jit=jit, **options)
                    row[mode] = sum(_differ(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
        except Exception as e:  # noqa: BLE001 - a probe: say so and go on
            row["error"] = f"{e!r:.300}"
        rows.append(row)
        if row.get("jit") or row.get("eager") or row.get("error"):
            print(f"  {name}: {row}")
            if row.get("jit") and not row.get("error"):
                _take_apart(h, name, factory, kind)
    same = sum(1 for r in rows if not (r.get("jit") or r.get("eager") or r.get("error")))
    flags = os.environ.get("XLA_FLAGS", "XLA defaults")
    print(f"  {same} of {len(rows)} bit for bit under jit and eagerly ({flags})")
    return {"rows": rows}


def _take_apart(h: Any, name: str, factory: Any, kind: str) -> None:
    localizer = _Localizer()
    S.call = localizer.call
    try:
        wrapped = h.call(name, factory, h.wrapped)
        if kind == "schedule":
            core = wrapped._core
            for count in range(0, 300, 7):
                S.call(core, "__call__", jnp.asarray(count))
        else:
            params = h.PARAMS_FOR.get(name, lambda: h.PARAMS)()
            options = {k: v for k, v in h.RUN_OPTIONS.get(name, {}).items() if k != "scan"}
            state = wrapped.init(params)
            for _ in range(5):
                params, state = h.one_step(wrapped, params, state, **options)
    finally:
        S.call = localizer.original
    if not localizer.found:
        print("    no single operation differs: a rewrite across operations")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a few factories, a few binades (CI, on the CPU)"
    )
    parser.add_argument("--only", default="exponents,exact,rules,catalogue", help="parts, comma-separated")
    parser.add_argument("--names", default="", help="catalogue: these factories only, comma-separated")
    parser.add_argument("--record", default=None, help="rules: write the recorded rows to this JSON file")
    parser.add_argument("--out", default=None, help="a JSON file of the results")
    args = parser.parse_args()
    print(
        f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
        f"lowered for {_backends.platforms()}",
        flush=True,
    )
    results: dict[str, Any] = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind}
    parts = {
        "exponents": exponents,
        "exact": lambda: exact(args.quick),
        "rules": lambda: rules(args.record),
        "catalogue": lambda: catalogue(args.quick, [n for n in args.names.split(",") if n]),
    }
    start = time.perf_counter()
    for part in args.only.split(","):
        print(f"== {part} (at {time.perf_counter() - start:.0f} s)", flush=True)
        try:
            results[part] = parts[part]()
        except Exception:  # noqa: BLE001 - a probe: the other parts still run
            traceback.print_exc()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, default=str)
    print(f"== done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
