"""Benchmarks: zero overhead and one compilation, side by side with optax.

Every ratio is taken against a reference measured in the same process (raw
optax, plain-argument functions, ``inject_hyperparams`` or tuples of the same
leaves: each table names its reference), interleaved with it, after warm-up,
over several repeats: the table gives the median and the min-max of the
per-repeat ratios (section 7 compares fresh processes, round by round;
section 8 subtracts them, pair by pair).
Absolute times depend on the machine and its load; the ratios are what the
README quotes.

Run::

    python benchmarks/run.py            # full: about 9 minutes (section 10: 4)
    python benchmarks/run.py --quick    # about two minutes, fewer configurations
    python benchmarks/run.py --out DIR  # where results.md / results.json go
    python benchmarks/run.py --only 1,3 # some sections only (for development)

What is measured (section numbers match the output):

1. **Compilations and wall time for N configurations.** A 128-256-256-10 MLP
   (101,386 parameters, batch 128) trained for 50 steps in ``lax.scan`` by
   ``train(tx, params, batch)``, once for each of N learning rates (N = 20),
   end to end: building the optimizer, tracing, compiling, running, waiting
   for the result. Approaches:

   - (a) ``jax.jit(train, static_argnums=0)`` with ``optax.adam(lr)``;
   - (b) a new ``jax.jit`` closure over ``optax.adam(lr)`` per configuration:
     raw optax, the zero-overhead reference of sections 1, 2 and 5;
   - (c) ``optax.inject_hyperparams(optax.adam)(learning_rate=lr)`` built
     inside the jitted function, ``lr`` an argument;
   - (d) ``opx.wrap(optax.adam, learning_rate=lr)`` as an ordinary argument of
     ``jax.jit(train)``, also under ``eqx.filter_jit``;
   - (e) ``opx.wrap_transformation_as_pytree_with_state(optax.adam, ...)``.

   Traces are counted by a counter in the traced Python function; XLA
   compilations by a ``jax.monitoring`` listener on
   ``/jax/core/compile/backend_compile_duration`` (the event behind
   ``jax_log_compiles``; the two are cross-checked at start-up). Each round
   uses fresh Python functions, so no JAX cache carries over between rounds;
   one-time process costs (backend start-up, the first ``wrap`` of
   ``optax.adam``) are paid in a warm-up round that is not counted.

2. **Steady state.** Per-call time of each approach once compiled, paired
   with (b): the calls alternate (ABBA), and the ratio is taken per pair. Also
   (d'): ``opx.wrap(optax.adamw, learning_rate=opx.wrap(
   optax.warmup_cosine_decay_schedule, 0.0, lr, 10, 100))``, whose
   ``peak_value`` is guarded (a leaf; only the outcome of optax's
   ``peak_value == 0.0`` is static, and inside jit the library adds a traced
   check of the guards and a ``jnp.where`` on the outputs), paired with (b'):
   raw ``optax.adamw`` with the same raw schedule closed over. The noise-free
   check: XLA's cost analysis (flops, bytes accessed) of the compiled programs
   of (d) and (e) against (b), and of (d') against (b').

3. **Dispatch overhead.** A tiny workload (adam ``init`` + one ``update`` on
   three parameters): the jitted function called with the wrapped optimizer,
   against the same function called with its hyperparameters as a plain
   tuple of the same arrays; and (e) carried through ``jax.jit``
   (``params, opt = step(opt, params, grads)``), against the same loop
   carrying ``(hyperparameter arrays, optax state)``. Also
   ``tree_flatten``/``tree_unflatten`` of a wrapped adam and of a wrapped
   ``chain`` of three transforms, against a tuple of the same leaves.

4. **Construction.** ``opx.wrap(optax.adam, learning_rate=lr)`` the first time
   for a factory (``optax_pytree._wrap.clear_caches()`` before each sample:
   signature, binding, automatic static detection) and cached, against
   ``optax.adam(lr)`` and ``optax.inject_hyperparams(optax.adam)(learning_rate=lr)``
   (a ratio to each); also each followed by ``init``, where inject_hyperparams
   converts its values. The same for a guarded schedule,
   ``opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, peak, 100, 10_000)``
   (first and cached), against the raw schedule and the construction of
   ``optax.inject_hyperparams(optax.warmup_cosine_decay_schedule)(...)`` (the
   cost of optax's wrapper binding the same arguments; not usable, a schedule
   is not a transformation); and ``opx.wrap(optax.adamw, learning_rate=<that
   wrapped schedule>)`` against ``optax.adamw(<raw schedule>)`` and
   ``optax.inject_hyperparams(optax.adamw)(learning_rate=<raw schedule>)``.

5. **Sweeps.** 16 learning rates end to end (first call included): the
   wrapped optimizer stacked and ``jax.vmap``-ed (one program, one call), and
   in a Python loop (one program, 16 calls), against raw optax compiled per
   configuration.

6. **Scaling.** For parameter trees of 10, 100 and 1,000 leaves: one jitted
   adam step with the wrapped optimizer against the same step with plain
   hyperparameter arrays (the wrapper's own cost) and against raw optax with
   constant hyperparameters (not approach (b): what dynamic hyperparameters
   cost XLA), the extra ``tree_flatten`` time of the jit arguments, and (e)
   carried through ``jax.jit`` (its state grows with the tree). Then ``wrap`` and
   ``tree_flatten`` of a ``chain`` of 1, 4 and 16 wrapped transforms (cost
   per transform and per leaf). A growth row passes when the overhead at the
   largest tree exceeds the one at the smallest by at most 1 us + 5% of the
   plain time (the noise floor), or, for chains, when the cost per transform
   (per leaf) grows by at most 25% from 4 to 16 transforms.

7. **Persistent compilation cache.** With the hyperparameters out of the
   HLO, a second process with new values should load the program from JAX's
   persistent compilation cache. For each approach, two fresh Python
   processes share one fresh ``jax_compilation_cache_dir``
   (``jax_persistent_cache_min_compile_time_secs=0``,
   ``jax_persistent_cache_min_entry_size_bytes=-1``: every entry is written);
   the second uses a new learning rate (peak value). Each counts, from
   building the optimizer to the first result of the jitted ``train`` of
   section 1, the cache lookups and hits (``jax.monitoring`` events
   ``/jax/compilation_cache/compile_requests_use_cache`` and
   ``/jax/compilation_cache/cache_hits``; misses are lookups - hits, and
   jax's own log lines name the module of each), and the seconds to that
   first result. Approaches: raw ``optax.adam`` closed over by a new
   ``jax.jit`` (its constants are in the HLO: the second process misses),
   with a same-value control (full mode only);
   ``optax.inject_hyperparams(optax.adam)``; ``opx.wrap(optax.adam, ...)`` as
   an argument; raw adamw with the warmup-cosine schedule of section 2 closed
   over, and its wrapped form (d') with a new guarded ``peak_value``. The
   ratio is the second process's first result against raw optax's with the
   same values, in the same round. ``compile_cache.py`` is also the child
   process's script.

8. **Import time.** Fresh Python processes running ``import optax`` and
   ``import optax_pytree``, alternated (ABBA) after a warm-up process each, 16
   pairs (4 in ``--quick`` mode), reading their bytecode from a fresh cache
   that the warm-up fills (as pip compiles an installed package's). The extra
   cost of ``import optax_pytree`` is the median of the per-pair differences,
   in wall time and in the CPU time (user + system) of the child, on which the
   target (issue #17: at most +0.05 s) is set. Also the top-level packages
   that ``import optax_pytree`` loads beyond optax's (orbax-checkpoint is
   imported at the first checkpoint, not with the package).
   ``import_time.py`` is also a script of its own.

9. **Rebuild.** What a sweep pays to rebuild its optimizer for each value,
   all rows interleaved in one run. A cached configuration rebuilt with a new
   rate, against the same rebuild with ``optax.inject_hyperparams`` (target
   ratio) and with plain optax: ``opx.wrap(optax.adam, learning_rate=lr)``
   (at most 0.5); adamw with a wrapped warmup-cosine schedule (at most 1);
   ``chain(clip_by_global_norm(1.0), adamw(lr))`` wrapped at every level and
   through the drop-in (at most 1); ``replace(weight_decay=...)`` of that
   adamw (at most 1). An LLM-style composition rebuilt through a user's
   builder ``make_optimizer(lr)`` written with the drop-in
   (``multi_transform`` over 12 parameter groups with a label lambda; adamw
   with the schedule and a mask lambda, and lion, each after
   ``clip_by_global_norm``): fresh lambdas on every call (at most 0.5 ms, and
   the cost of the same builder given hoisted mask and label objects, within
   10%), against the inject_hyperparams and plain optax builders. Rebuilds
   are not waited for (waiting would flatten the object and make its leaves);
   "rebuild + first use" (``jax.tree_util.tree_leaves(tx)``, waited for) of
   adam and of the composition is timed against inject_hyperparams and
   plain optax rebuilt then ``init(params)``. The first wrap
   (``optax_pytree._caches.clear_caches()`` before each sample) of adam (at
   most 10 ms) and of the composition, with each step's share (bind,
   classify, detect, verify: their functions wrapped with timers where the
   pipeline looks them up; build/conversion the rest).

10. **Optuna on a database server.** The study of
    ``examples/optuna_multiprocess.py`` (2 worker processes, a fresh shared
    compilation cache for each study) run end to end by its launcher, with the
    wrapped optimizer and with plain optax, on PostgreSQL (the server
    ``OPTAX_PYTREE_TEST_POSTGRES`` names, a SQLAlchemy URL: ``.ci/run``
    starts a throwaway one; without it the row reads n/a) and on SQLite, all
    in one run: trials COMPLETE, compilations of the training step (from the
    study's trials), programs compiled by all workers, wall time from the
    first launch to the last exit. Smoke sizes in ``--quick`` mode.
    ``optuna_storage.py``.

Sections 3, 4, 6 and 9 are timed in process CPU time (a busy neighbour on a
shared machine does not inflate it), sections 1, 2, 5 and 7 in wall time;
section 2 also reports the CPU-time ratio, section 8 both (its target is on
CPU time).

Each target of issue #6 (and section 8's, of issue #17, and section 9's) is
printed with PASS or MISS next to its measured value; a target that needs the full
configuration count reads n/a in ``--quick`` mode.

Layout: this file is the entry point (arguments, the report, results.md and
results.json); each section is a module next to it (``compilations.py``,
``steady_state.py``, ``dispatch.py``, ``construction.py``, ``sweeps.py``,
``scaling.py``, ``compile_cache.py``, ``import_time.py``, ``rebuild.py``,
``optuna_storage.py``)
with ``TITLE``, ``run``, ``targets`` and ``markdown``; ``_common.py`` holds the settings,
timing, statistics and counting, ``_report.py`` the formatting (figures,
targets, markdown tables), ``_workload.py`` the MLP, the approaches and the
tiny step that several sections share.
"""

from __future__ import annotations

import os

# Every section measures a process that analyses each configuration itself:
# the analyses kept on disk by earlier runs are not read (section 9 measures
# them apart, in a folder of its own).
os.environ["OPTAX_PYTREE_ANALYSIS_CACHE"] = "0"

import argparse
import dataclasses
import datetime
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import equinox as eqx
import jax
import optax

# The section modules sit next to this file; Python puts the folder of the
# script it runs first on sys.path, so ``python benchmarks/run.py`` imports them
# from any working directory (benchmarks/ is not a package).
import compilations
import compile_cache
import construction
import dispatch
import import_time
import optax_pytree as opx
import optuna_storage
import rebuild
import scaling
import steady_state
import sweeps
from _common import Settings, check_compile_counting
from _report import Target, targets_table

DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# Each section module has TITLE, run(settings, log) -> results,
# targets(results, settings) -> [Target] and markdown(results) -> [lines].
SECTIONS: dict[str, ModuleType] = {
    "1": compilations,
    "2": steady_state,
    "3": dispatch,
    "4": construction,
    "5": sweeps,
    "6": scaling,
    "7": compile_cache,
    "8": import_time,
    "9": rebuild,
    "10": optuna_storage,
}


def targets(res: dict[str, Any], s: Settings) -> list[Target]:
    return [t for key, section in SECTIONS.items() if key in res for t in section.targets(res[key], s)]


def markdown(res: dict[str, Any], meta: dict[str, Any], tgts: list[Target]) -> str:
    lines = [
        "# optax_pytree benchmarks",
        "",
        f"`{meta['command']}` — {meta['mode']} mode, {meta['runtime_s']:.0f} s, {meta['date']}; "
        f"jax {meta['jax']}, optax {meta['optax']}, equinox {meta['equinox']}, Python {meta['python']}, "
        f"{meta['backend']} ({meta['device']}), {meta['cpu_count']} CPUs.",
        "",
        "Ratios: median [min-max] over repeats, each repeat paired with its reference in the same "
        "process. (b) is raw optax with a new jitted closure per configuration.",
        "",
        "## Targets",
        "",
        *targets_table(tgts),
    ]
    for key, section in SECTIONS.items():
        if key in res:
            lines += section.markdown(res[key])
    return "\n".join(lines) + "\n"


def environment(args: argparse.Namespace, runtime: float, settings: Settings) -> dict[str, Any]:
    device = jax.devices()[0]
    return {
        "command": "python benchmarks/run.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "mode": "quick" if settings.quick else "full",
        "runtime_s": runtime,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "jax": jax.__version__,
        "optax": optax.__version__,
        "equinox": eqx.__version__ if hasattr(eqx, "__version__") else "?",
        "optax_pytree": opx.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": jax.default_backend(),
        "device": getattr(device, "device_kind", str(device)),
        "cpu_count": os.cpu_count(),
        "settings": dataclasses.asdict(settings),
        "only": args.only,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer configurations and repeats (~1.5 min)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections, e.g. 1,3")
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick)
    chosen = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")

    def log(message: str) -> None:
        print(message, flush=True)

    start = time.perf_counter()
    counting = check_compile_counting()
    log(
        f"compile counting: {counting['method']}; cross-check with jax_log_compiles "
        f"{'agrees' if counting['agree'] else 'DISAGREES'} {counting['calls']}"
    )
    results: dict[str, Any] = {}
    for key in chosen:
        section = SECTIONS[key]
        log(f"[{key}] {section.TITLE}")
        t0 = time.perf_counter()
        results[key] = section.run(settings, log)
        log(f"[{key}] done in {time.perf_counter() - t0:.1f} s")
    runtime = time.perf_counter() - start
    meta = environment(args, runtime, settings)
    meta["compile_counting"] = counting
    tgts = targets(results, settings)
    text = markdown(results, meta, tgts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    payload = {"meta": meta, "targets": [dataclasses.asdict(t) for t in tgts], "results": results}
    (args.out / "results.json").write_text(json.dumps(payload, indent=1, default=str))
    log("")
    log("targets:")
    for t in tgts:
        log(f"  {t.line()}")
    log(f"\nwrote {args.out / 'results.md'} and {args.out / 'results.json'} in {runtime:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
