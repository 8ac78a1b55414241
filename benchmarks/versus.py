"""The working tree's optax_pytree against an earlier commit's, in one run: issues #15 and #16's budgets.

Run::

    python benchmarks/versus.py --baseline c1e7570            # full: a few minutes
    python benchmarks/versus.py --baseline c1e7570 --quick    # under a minute
    python benchmarks/versus.py --baseline c1e7570 --out DIR  # versus.md and versus.json go to DIR

The package of the baseline commit is exported into a temporary folder
(``git archive <ref> optax_pytree``: no worktree, the repository's git state
untouched). Then this same file runs as a child process (``--child ROOT``),
in rounds, once against each package: ``PYTHONPATH=ROOT``, and the child checks
that ``optax_pytree.__file__`` lies under ``ROOT`` before it measures anything.
Within a round the two children run one after the other, the order swapped
every round (AB, BA, AB, ...), so a change of load on the machine falls on
both. Each figure is the median over the rounds; its ratio is the median of
the per-round ratios (current / baseline, the two children of one round
paired), with their min-max. Rows that time the same code in both (optax's
own calls) show what that noise is. The children also report a digest of the
package they imported: a working tree edited during the run is named in the
output.

What a child measures (CPU time of the process, which a busy neighbour on a
shared machine does not inflate, as in the other sections; wall time where
process CPU time means nothing, on an accelerator or with a clock that
reads zero: ``_common.micro_clock``; a ratio with a zero denominator is left
out):

0. **first wrap in a fresh process**: the first wrap of 1, then the first
   of 2, right after the imports: one sample each per process, with the
   process's one-time costs (the XLA compilations of whatever a wrap runs
   eagerly, counted by ``jax.monitoring``).
1. **first wrap** of ``optax.adam``: ``optax_pytree._spec.clear_caches()``
   (every cached analysis, configuration and verification), then one
   ``opx.wrap(optax.adam, learning_rate=lr)``, waited for; the median of N
   samples, after the wraps of 0.
2. **first wrap** of a guarded schedule as adamw's learning rate:
   ``opx.wrap(optax.adamw, learning_rate=opx.wrap(
   optax.warmup_cosine_decay_schedule, 0.0, 0.1, 100, 10_000))``, the same
   way, its samples alternating with those of 1.
3. **cached wrap** of ``optax.adam`` (a new learning rate each call): seconds
   per call over a loop of about 2 ms, the min over the repeats.
4. ``optax.inject_hyperparams(optax.adam)(learning_rate=lr)`` and
   ``optax.adam(lr)``, sampled together with 3 (interleaved): the reference
   the cached wrap must beat, and the factory's own cost.
5. ``tx.replace(learning_rate=lr)`` on a wrapped adam, sampled with 3 and 4.
6. **dispatch**: ``step(tx, params, grads)`` (adam ``init`` + one ``update``
   on three parameters), jitted and compiled, called with a different wrapped
   adam each call (a pool of objects built beforehand, so construction is not
   timed), against the same step with raw ``optax.adam`` closed over, called
   with ``(params, grads)``; sampled in turn, the median of the per-repeat
   ratios.
7. **steady state**: 50 adam steps in ``lax.scan`` on a 32-64-32-10 MLP
   (4,522 parameters), jitted, the wrapped adam an argument, against raw
   ``optax.adam`` closed over; calls alternate (ABBA), the median of the
   per-pair ratios.

Budgets (issues #15 and #16, "What it must show", against c1e7570, the
commit before them): first wrap at most 3x the baseline's; cached wrap at
most 1.5x the baseline's (#16; #15's was 1.3x) and below
``inject_hyperparams`` in the same process; dispatch and steady state
unchanged, read as: the ratio to raw optax within ``UNCHANGED`` of the
baseline's (the noise of one run on a shared machine). Rows without a budget
are shown for reading.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The report's formatting (no jax, no package: the parent imports neither).
from _report import median_range, ratio, table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PACKAGE = "optax_pytree"

FIRST_WRAP_LIMIT = 3.0  # issues #15, #16: first wrap at most 3x c1e7570's
CACHED_WRAP_LIMIT = 1.5  # issue #16: cached wrap at most 1.5x c1e7570's (#15: 1.3x)
UNCHANGED = 1.10  # "unchanged": the ratio to raw optax within 10% of the baseline's

WARMUP, DECAY = 100, 10_000  # the guarded schedule: warmup_cosine_decay_schedule(0.0, 0.1, 100, 10_000)
SIZES = (32, 64, 32, 10)  # the MLP of the steady state: 4,522 parameters
BATCH = 64
STEPS = 50


@dataclasses.dataclass(frozen=True)
class Knobs:
    rounds: int  # pairs of child processes
    first_samples: int  # first wraps per child, of each kind
    micro_repeats: int  # interleaved samples of 3-6 per child
    micro_seconds: float  # duration of one sample
    pool: int  # wrapped objects the dispatch loop cycles through
    steady_pairs: int  # ABBA pairs of 7 per child

    @classmethod
    def make(cls, quick: bool) -> Knobs:
        if quick:
            return cls(
                rounds=2, first_samples=5, micro_repeats=15, micro_seconds=0.002, pool=512, steady_pairs=21
            )
        return cls(
            rounds=5, first_samples=11, micro_repeats=41, micro_seconds=0.002, pool=2048, steady_pairs=61
        )


# --------------------------------------------------------------------------
# The child: the measurements, against whichever optax_pytree PYTHONPATH gives.


def _mlp(key: Any) -> Any:
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(key, len(SIZES) - 1)
    return [
        {"w": jax.random.normal(k, (a, b)) / jnp.sqrt(a), "b": jnp.zeros(b)}
        for k, a, b in zip(keys, SIZES[:-1], SIZES[1:])
    ]


def _loss(params: Any, batch: Any) -> Any:
    import jax
    import jax.numpy as jnp

    x, y = batch
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def _train(tx: Any, params: Any, batch: Any) -> Any:
    import jax
    import optax

    def body(carry: Any, _: Any) -> Any:
        params, state = carry
        loss, grads = jax.value_and_grad(_loss)(params, batch)
        updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), loss

    (params, _), losses = jax.lax.scan(body, (params, tx.init(params)), None, length=STEPS)
    return params, losses


def _step(tx: Any, params: Any, grads: Any) -> Any:
    # _workload.tiny_step, not imported: _workload imports equinox and the
    # package at module level, which a child times from a fresh process.
    import optax

    state = tx.init(params)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def _first_wraps(k: Knobs, lrs: Callable[[], float]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Samples of each first wrap (caches cleared), and the very first of each in the process.

    The very first pays the process's one-time costs (XLA compilations of
    whatever the wrap executes eagerly): reported apart, with the number of
    compilations.
    """
    import jax
    import optax

    import optax_pytree as opx
    from _common import COMPILES, micro_clock
    from optax_pytree import _spec

    clock = micro_clock()  # process CPU time where it means something (not on an accelerator)

    def adam() -> Any:
        return opx.wrap(optax.adam, learning_rate=lrs())

    def adamw_schedule() -> Any:
        schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 0.1, WARMUP, DECAY)
        return opx.wrap(optax.adamw, learning_rate=schedule)

    makers = {"first_adam": adam, "first_adamw_schedule": adamw_schedule}
    cold: dict[str, float] = {}
    for name, make in makers.items():
        with COMPILES.window() as found:
            t0 = clock()
            jax.block_until_ready(make())
            cold[f"cold_{name}"] = clock() - t0
        cold[f"cold_{name}_compilations"] = len(found)
    samples: dict[str, list[float]] = {name: [] for name in makers}
    for i in range(k.first_samples):
        for name in list(makers) if i % 2 == 0 else list(makers)[::-1]:
            _spec.clear_caches()
            t0 = clock()
            jax.block_until_ready(makers[name]())
            samples[name].append(clock() - t0)
    return samples, cold


def _construction(k: Knobs, lrs: Callable[[], float]) -> dict[str, list[float]]:
    import optax

    import optax_pytree as opx
    from _common import interleaved

    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    return interleaved(
        {
            "cached_adam": lambda: opx.wrap(optax.adam, learning_rate=lrs()),
            "inject_adam": lambda: optax.inject_hyperparams(optax.adam)(learning_rate=lrs()),
            "optax_adam": lambda: optax.adam(lrs()),
            "replace": lambda: tx.replace(learning_rate=lrs()),
        },
        k.micro_repeats,
        k.micro_seconds,
    )


def _dispatch(k: Knobs, lrs: Callable[[], float]) -> dict[str, list[float]]:
    import jax
    import jax.numpy as jnp
    import optax

    import optax_pytree as opx
    from _common import interleaved

    params = {"w": jnp.linspace(-1.0, 1.0, 3)}
    grads = {"w": jnp.full(3, 0.1)}
    pool = itertools.cycle([opx.wrap(optax.adam, learning_rate=lrs()) for _ in range(k.pool)])
    raw = optax.adam(1e-3)
    wrapped_step = jax.jit(_step)
    raw_step = jax.jit(lambda params, grads: _step(raw, params, grads))
    jax.block_until_ready((wrapped_step(next(pool), params, grads), raw_step(params, grads)))
    return interleaved(
        {"wrapped": lambda: wrapped_step(next(pool), params, grads), "raw": lambda: raw_step(params, grads)},
        k.micro_repeats,
        k.micro_seconds,
    )


def _steady(k: Knobs) -> tuple[dict[str, list[float]], bool]:
    """CPU seconds per call of each (ABBA pairs), and whether both give the same losses.

    Wall seconds where process CPU time means nothing (an accelerator, a zero sample).
    """
    import jax
    import jax.numpy as jnp
    import optax

    import optax_pytree as opx
    from _common import cpu_time_usable, paired_abba

    key_p, key_x, key_y = jax.random.split(jax.random.PRNGKey(0), 3)
    params = _mlp(key_p)
    x = jax.random.normal(key_x, (BATCH, SIZES[0]))
    y = jax.nn.one_hot(jax.random.randint(key_y, (BATCH,), 0, SIZES[-1]), SIZES[-1])
    batch = (x, y)
    tx = opx.wrap(optax.adam, learning_rate=1e-3)
    raw = optax.adam(1e-3)
    wrapped_train = jax.jit(_train)
    raw_train = jax.jit(lambda params, batch: _train(raw, params, batch))
    out_w = jax.block_until_ready(wrapped_train(tx, params, batch))
    out_r = jax.block_until_ready(raw_train(params, batch))
    # The same computation, the same losses: both run what they should.
    same = bool(jnp.allclose(out_w[1], out_r[1], rtol=1e-5, atol=1e-6))
    wall_w, wall_r, cpu_w, cpu_r = paired_abba(
        lambda: raw_train(params, batch), lambda: wrapped_train(tx, params, batch), k.steady_pairs
    )
    if not cpu_time_usable() or min([*cpu_w, *cpu_r]) <= 0:
        return {"wrapped": wall_w, "raw": wall_r}, same
    return {"wrapped": cpu_w, "raw": cpu_r}, same


def finite(xs: Sequence[float]) -> list[float]:
    """The finite values of ``xs`` (a ratio to zero is NaN), or one NaN when there is none."""
    return [x for x in xs if math.isfinite(x)] or [float("nan")]


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """The median of the per-sample ratios (those with a zero denominator left out; NaN if all)."""
    return statistics.median(finite([ratio(a, b) for a, b in zip(num, den)]))


def digest(package: Path) -> str:
    """A digest of the package's Python files: which state of a changing working tree was measured."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def child(root: str, quick: bool) -> dict[str, Any]:
    import jax
    import numpy as np
    import optax

    import optax_pytree
    from _common import micro_clock_info
    from optax_pytree import _spec, _wrap

    where = Path(optax_pytree.__file__).resolve().parent
    if where != Path(root).resolve() / PACKAGE:
        raise SystemExit(f"optax_pytree imported from {where}, not from {root}")
    if not callable(getattr(_spec, "clear_caches", None)):
        raise SystemExit(f"{where}: optax_pytree._spec.clear_caches is missing")
    package_digest = digest(where)
    k = Knobs.make(quick)
    lrs = itertools.cycle([float(v) for v in np.geomspace(1e-4, 1e-2, 97)]).__next__
    phases: dict[str, float] = {}
    t0 = time.perf_counter()

    def done(phase: str) -> None:
        nonlocal t0
        phases[phase] = time.perf_counter() - t0
        t0 = time.perf_counter()

    first, cold = _first_wraps(k, lrs)
    done("first wraps")
    micro = _construction(k, lrs)
    done("construction")
    dispatch = _dispatch(k, lrs)
    done("dispatch")
    steady, same_losses = _steady(k)
    done("steady state")
    med = statistics.median
    return {
        "clock": micro_clock_info().describe(),
        "package": str(where),
        "package_digest": package_digest,
        "wrap_clear_caches_is_spec": getattr(_wrap, "clear_caches", None) is _spec.clear_caches,
        "versions": {"python": platform.python_version(), "jax": jax.__version__, "optax": optax.__version__},
        **cold,
        "first_adam": med(first["first_adam"]),
        "first_adamw_schedule": med(first["first_adamw_schedule"]),
        "cached_adam": min(micro["cached_adam"]),
        "inject_adam": min(micro["inject_adam"]),
        "cached_over_inject": ratio(min(micro["cached_adam"]), min(micro["inject_adam"])),
        "replace": min(micro["replace"]),
        "optax_adam": min(micro["optax_adam"]),
        "dispatch_wrapped": med(dispatch["wrapped"]),
        "dispatch_raw": med(dispatch["raw"]),
        "dispatch_ratio": median_ratio(dispatch["wrapped"], dispatch["raw"]),
        "steady_wrapped": med(steady["wrapped"]),
        "steady_raw": med(steady["raw"]),
        "steady_ratio": median_ratio(steady["wrapped"], steady["raw"]),
        "steady_same_losses": same_losses,
        "phase_wall_s": phases,
        "samples": {**first, **micro, **{f"dispatch_{n}": v for n, v in dispatch.items()}},
    }


# --------------------------------------------------------------------------
# The parent: export, rounds, table.


@dataclasses.dataclass(frozen=True)
class Row:
    key: str
    what: str
    unit: str  # "ms", "us" or "" (a ratio)
    budget: str  # as printed
    within: Callable[[float, float], bool] | None  # (ratio current/baseline, current) -> within budget


ROWS = (
    Row("cold_first_adam", "first wrap in a fresh process, optax.adam", "ms", "none set", None),
    Row(
        "cold_first_adamw_schedule",
        "first wrap in a fresh process, then adamw(wrapped warmup_cosine_decay_schedule)",
        "ms",
        "none set",
        None,
    ),
    Row(
        "first_adam",
        "first wrap, optax.adam",
        "ms",
        f"ratio ≤ {FIRST_WRAP_LIMIT:g}",
        lambda r, _: r <= FIRST_WRAP_LIMIT,
    ),
    Row(
        "first_adamw_schedule",
        f"first wrap, adamw(wrapped warmup_cosine_decay_schedule(0.0, 0.1, {WARMUP}, {DECAY:_}))",
        "ms",
        "none set",
        None,
    ),
    Row(
        "cached_adam",
        "cached wrap, optax.adam",
        "us",
        f"ratio ≤ {CACHED_WRAP_LIMIT:g}",
        lambda r, _: r <= CACHED_WRAP_LIMIT,
    ),
    Row("inject_adam", "inject_hyperparams(optax.adam)(learning_rate=lr)", "us", "reference", None),
    Row(
        "cached_over_inject",
        "cached wrap / inject_hyperparams (same process)",
        "",
        "current < 1",
        lambda _, c: c < 1,
    ),
    Row("optax_adam", "optax.adam(lr) (the factory alone)", "us", "reference", None),
    Row("replace", "tx.replace(learning_rate=lr)", "us", "none set", None),
    Row(
        "dispatch_ratio",
        "dispatch, wrapped argument / raw optax closed over",
        "",
        f"ratio ≤ {UNCHANGED:g}",
        lambda r, _: r <= UNCHANGED,
    ),
    Row(
        "steady_ratio",
        f"steady state ({STEPS} steps, lax.scan), wrapped argument / raw optax",
        "",
        f"ratio ≤ {UNCHANGED:g}",
        lambda r, _: r <= UNCHANGED,
    ),
)

COLD = ("first_adam", "first_adamw_schedule")
SCALE = {"ms": 1e3, "us": 1e6, "": 1.0}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout


def export(ref: str, into: Path) -> str:
    """``git archive ref optax_pytree`` unpacked into ``into``; returns the commit."""
    try:
        commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"unknown git ref {ref!r}: {e.stderr.strip()}") from e
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, PACKAGE], check=True, capture_output=True
    ).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return commit


def run_child(root: Path, quick: bool) -> dict[str, Any] | str:
    """The child's measurements against the package under ``root``, or its error."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(root), *(["--quick"] * quick)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return f"exit status {proc.returncode}: {lines[-1] if lines else '(no output)'}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(baseline: str, current: str | None, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Rounds of both children; ``current`` None is the working tree's package."""
    k = Knobs.make(quick)
    rounds: list[dict[str, Any]] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="versus-") as tmp:
        sides: dict[str, dict[str, Any]] = {
            "baseline": {"ref": baseline, "commit": export(baseline, Path(tmp) / "baseline")}
        }
        if current is None:
            modified = bool(_git("status", "--porcelain", "--", PACKAGE).strip())
            sides["current"] = {
                "ref": None,
                "commit": _git("rev-parse", "HEAD").strip(),
                "modified": modified,
            }
            roots = {"baseline": Path(tmp) / "baseline", "current": REPO}
        else:
            sides["current"] = {"ref": current, "commit": export(current, Path(tmp) / "current")}
            roots = {"baseline": Path(tmp) / "baseline", "current": Path(tmp) / "current"}
        names = list(roots)
        for r in range(k.rounds):
            got: dict[str, Any] = {}
            for name in names if r % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                got[name] = run_child(roots[name], quick)
                log(f"  round {r + 1}/{k.rounds}, {name}: {time.perf_counter() - t0:.1f} s")
                if isinstance(got[name], str):
                    failures.append(f"round {r + 1}, {name}: {got[name]}")
                    log(f"    failed: {got[name]}")
            if all(isinstance(v, dict) for v in got.values()):
                rounds.append(got)
    if not rounds:
        raise SystemExit("no round completed:\n" + "\n".join(failures))
    rows: dict[str, Any] = {}
    for row in ROWS:
        b = [x["baseline"][row.key] for x in rounds]
        c = [x["current"][row.key] for x in rounds]
        per_round = finite([ratio(y, x) for x, y in zip(b, c)])
        med = statistics.median(per_round)
        rows[row.key] = {
            "baseline": statistics.median(b),
            "current": statistics.median(c),
            "ratio": med,
            "ratio_min": min(per_round),
            "ratio_max": max(per_round),
            "within": None if row.within is None else bool(row.within(med, statistics.median(c))),
        }
    for name in names:
        sides[name]["package_digests"] = sorted({x[name]["package_digest"] for x in rounds})
        sides[name]["cold_compilations"] = {
            c: statistics.median([x[name][f"cold_{c}_compilations"] for x in rounds]) for c in COLD
        }
    return {
        **sides,
        "quick": quick,
        "knobs": dataclasses.asdict(k),
        "versions": rounds[0]["current"]["versions"],
        "clock": rounds[0]["current"].get("clock", "process CPU time"),
        "rows": rows,
        "same_losses": all(x[n]["steady_same_losses"] for x in rounds for n in names),
        "failures": failures,
        "rounds": rounds,
    }


def _value(v: float, unit: str) -> str:
    return f"{v * SCALE[unit]:.1f} {unit}" if unit else f"{v:.3f}"


def _side(side: dict[str, Any]) -> str:
    digests = ", ".join(side["package_digests"])
    if side["ref"] is None:
        modified = " + uncommitted changes to the package" if side["modified"] else ""
        return f"the working tree (HEAD {side['commit'][:10]}{modified}; package digest {digests})"
    return f"{side['ref']} ({side['commit'][:10]}; package digest {digests})"


def markdown(res: dict[str, Any]) -> list[str]:
    base, cur = res["baseline"], res["current"]
    lines = [
        f"# optax_pytree: {cur['ref'] or 'working tree'} vs {base['ref']}",
        "",
        f"Baseline {_side(base)}; current {_side(cur)}. "
        f"{len(res['rounds'])} rounds of two fresh processes (order swapped each round); "
        "medians over the rounds; the ratio is current / baseline, the median of the per-round "
        f"ratios [min-max]. Timed in {res['clock']}. "
        + ", ".join(f"{k} {v}" for k, v in res["versions"].items())
        + ("; --quick" if res["quick"] else "")
        + ".",
        "",
        *table(
            "metric | baseline | current | ratio | budget | within budget",
            [
                [
                    row.what,
                    _value(v["baseline"], row.unit),
                    _value(v["current"], row.unit),
                    median_range(v["ratio"], v["ratio_min"], v["ratio_max"], 2),
                    row.budget,
                    "-" if v["within"] is None else ("yes" if v["within"] else "no"),
                ]
                for row, v in ((row, res["rows"][row.key]) for row in ROWS)
            ],
        ),
    ]
    compilations = {
        n: "/".join(f"{res[n]['cold_compilations'][c]:g}" for c in COLD) for n in ("baseline", "current")
    }
    lines += [
        "",
        "XLA compilations during the first wraps in a fresh process (adam / then the schedule): "
        f"baseline {compilations['baseline']}, current {compilations['current']}. "
        f"Steady state, wrapped and raw give the same losses: {'yes' if res['same_losses'] else 'NO'}.",
    ]
    if len(cur["package_digests"]) > 1:
        lines += [
            "",
            "**The package changed during the run** (several digests): the current column mixes "
            "its states. Run it again.",
        ]
    if res["failures"]:
        lines += [
            "",
            "**Failed children** (their rounds left out):",
            "",
            *(f"- {f}" for f in res["failures"]),
        ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", help="the commit (or any git ref) to compare with")
    parser.add_argument("--current", help="a commit to measure instead of the working tree")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and samples (under a minute)")
    parser.add_argument("--out", type=Path, help="write versus.md and versus.json there")
    parser.add_argument("--child", metavar="ROOT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.quick)))
        return
    if not args.baseline:
        parser.error("--baseline is required")
    res = measure(args.baseline, args.current, args.quick, lambda m: print(m, file=sys.stderr, flush=True))
    md = "\n".join(markdown(res))
    print(md, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "versus.md").write_text(md + "\n")
        (args.out / "versus.json").write_text(json.dumps(res, indent=1) + "\n")
    if res["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
