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

    python benchmarks/run.py            # full: about 11 minutes on the CPU (section 10: 4)
    python benchmarks/run.py --quick    # about three minutes, fewer configurations, tiny section 11
    python benchmarks/run.py --accelerator --out DIR  # on a TPU/GPU: about 6 minutes (below)
    python benchmarks/run.py --out DIR  # where results.md / results.json go
    python benchmarks/run.py --only 1,3 # some sections only (for development)
    python benchmarks/run.py --only accelerator  # a section by its module's name
    python benchmarks/run.py --accelerator --tiny --only accelerator  # the same code at tiny sizes (CPU)

Profiles: ``--full`` (the default on the CPU), ``--quick``, and
``--accelerator`` (the default on any other backend): section 11 first, at
its full sizes, then the others as in ``--quick`` (section 7 with raw and
wrapped adam only, section 8 with 2 pairs), the sections whose child
processes run on the CPU last. With ``--budget SECONDS`` (330 by default in
the accelerator profile: the whole run in about 6 minutes on a TPU v5e), a
section, and each part of section 11, starts only if its estimate (written
for a TPU v5e, compiles included, conservative) fits in what is left; a
skipped one is named in the report with the reason. The report is written
after every section (and every part of section 11), whole or not at all, so
a run that is stopped keeps what it measured; a section that raises is
reported as failed, the others still run, and the exit status is 1.

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
   raw ``optax.adamw`` with the same raw schedule closed over. Like with
   like: (c) makes its state inside the jitted function, so its
   hyperparameters but the learning rate are constants of the program; (c*)
   is ``inject_hyperparams`` with its state an argument (every hyperparameter
   read at run time, as (d)'s leaves are), and (d*) the wrapped adam with
   the learning rate its only dynamic argument (``dynamic_only``); targets
   (d) / (c*) and (d*) / (c) ≤ 1.03. The noise-free
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

11. **On the accelerator** (``accelerator.py``). adamw with a
    warmup-cosine schedule (``peak`` 1e-3, 10 warm-up steps of 100, weight
    decay 1e-4) three ways: raw optax closed over (its numbers constants),
    ``optax.inject_hyperparams(optax.adamw)`` built in the step from the peak
    as an argument (the schedule written as the peak times optax's schedule
    of peak 1: optax's compares a traced peak with 0.0), and
    ``opx.wrap(optax.adamw, learning_rate=opx.wrap(
    optax.warmup_cosine_decay_schedule, 0.0, lr, 10, 100), weight_decay=1e-4)``
    as an argument of the jitted step. Wall time around
    ``block_until_ready``; median [min-max] over repeats; the rows of a ratio
    interleaved (order rotated, reversed every other repeat: ABBA).

    In this order:

    - (a) steady state at three model sizes (MLPs of 0.4M, 16.8M and 100.7M
      parameters, batch 128/256/256), one step a call and ten steps a call in
      ``lax.scan``; parameters and state donated and carried from call to
      call; wrapped / raw and wrapped / inject (target ≤ 1.02 from 16M up);
      the first call of each (compile + run), the loss after one step
      (wrapped against raw: the same numbers), the device's peak memory.
    - (c) compile time (``jit(f).trace``, ``.lower()``, ``.compile()``) of the
      one-step program of the 16M model, a fresh function every sample, the
      persistent compilation cache off, one XLA compilation and no cache hit
      per sample checked; wrapped / inject (target ≤ 1.1) and / raw.
    - (b) sweeps end to end, compiles included: 16 learning rates x 100
      steps of the 0.4M model and 8 x 50 of the 16M one; raw optax with a new
      ``jax.jit`` per configuration, the wrapped optimizer looped through one
      compiled program, and ``vmap`` over ``opx.grid``'s members;
      compilations of the training program (exactly 1 for both wrapped).
    - (d) populations, each member a run from scratch (``init``, 10 steps) with
      its own peak: a loop over one compiled program against one ``vmap``
      over ``opx.stack`` of the members, 16 and 64 members, models of 0.4M,
      3.2M and 16.8M parameters (the last if the budget allows: 64 of it do
      not fit in one vmap, as the report says); the run time of the compiled
      programs per population (compilation excluded), the crossover (where
      the vmapped call gets faster than the loop, from the medians), and 64
      members as 4 chunks of ``opx.stack`` of 16 through one compiled vmapped
      program, against one vmap of 64 and against the loop.

    Sizes: as above in the accelerator profile; up to 1.6M parameters in the
    full profile on the CPU; one-hidden-layer MLPs of a few hundred
    parameters with ``--quick`` or ``--tiny`` (seconds on the CPU: CI runs it
    so it does not rot).

12. **A step in a scan** (``scan_step.py``). 1,000 updates in one
    ``lax.scan`` (100 with ``--quick``), the gradient ``sin(p) * 0.1`` of the
    parameters: adam, adamw with a warmup-cosine schedule and sgd at 1,024
    and 101,386 parameters (1,024 only with ``--quick``), raw optax closed
    over, ``optax.inject_hyperparams`` and the wrapped optimizer an
    argument; wall time per step (a call over its steps), 15 calls in turn;
    wrapped / inject (targets ≤ 1.10 at 1,024 parameters, ≤ 1.03 from
    101,386 up) and the compile time of each scan program, wrapped / inject
    (≤ 1.1). It is the case that shows a per-step cost: what the program
    computes from the hyperparameters alone must not be computed again in
    every step.

Sections 3, 4, 6 and 9 are timed in process CPU time (a busy neighbour on a
shared machine does not inflate it), sections 1, 2, 5, 7, 11 and 12 in wall time;
section 2 also reports the CPU-time ratio, section 8 both (its target is on
CPU time). Process CPU time means nothing on an accelerator (the device's
work is not in it; on a TPU host it read 0 for a short call) nor where its
clock is coarse: there (a probe at start-up decides, and the report names
the clock), sections 3, 4, 6 and 9 use wall time and section 2's CPU-time
ratio reads n/a; any measurement with a zero CPU sample is taken again in
wall time, and section 8's target reads n/a where the system reports no CPU
time for its children. No ratio divides by zero: a zero
denominator gives a sample that the statistics leave out (n/a when none is
left).

Child processes (sections 7, 8 and 10) run JAX on the CPU
(``JAX_PLATFORMS=cpu`` added to their environment, PYTHONPATH and the rest
kept): only one process may hold an accelerator, and this one does. Where no
socket can be opened, section 10's PostgreSQL row reads n/a with the reason.

Each target of issue #6 (and section 8's, of issue #17, and sections 9 and 11's) is
printed with PASS or MISS next to its measured value; a target that needs the full
configuration count reads n/a in ``--quick`` mode.

Layout: this file is the entry point (arguments, the report, results.md and
results.json); each section is a module next to it (``compilations.py``,
``steady_state.py``, ``dispatch.py``, ``construction.py``, ``sweeps.py``,
``scaling.py``, ``compile_cache.py``, ``import_time.py``, ``rebuild.py``,
``optuna_storage.py``, ``accelerator.py``)
with ``TITLE``, ``run``, ``targets`` and ``markdown``; ``_common.py`` holds the settings,
timing, statistics, the clocks, the children's environment, the budget and
counting, ``_report.py`` the formatting (figures,
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
import math
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import optax

# The section modules sit next to this file; Python puts the folder of the
# script it runs first on sys.path, so ``python benchmarks/run.py`` imports them
# from any working directory (benchmarks/ is not a package).
import accelerator
import compilations
import compile_cache
import construction
import dispatch
import import_time
import optax_pytree as opx
import optuna_storage
import rebuild
import scaling
import scan_step
import steady_state
import sweeps
from _common import BUDGET, Settings, check_compile_counting, eqx, micro_clock_info
from _report import Target, targets_table

START = time.perf_counter()  # the run's budget counts from here (after the imports: a few seconds)
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# Each section module has TITLE, run(settings, log) -> results,
# targets(results, settings) -> [Target] and markdown(results) -> [lines];
# one with PARTIAL = True takes run(..., save=callback) and gives its results
# so far after each of its parts.
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
    "11": accelerator,
    "12": scan_step,
}
# --only also takes a section's module name: --only accelerator.
ALIASES: dict[str, str] = {module.__name__: key for key, module in SECTIONS.items()}

# The accelerator profile: section 11 first (what the machine is for), the
# sections whose children run on the CPU last; each section starts only if
# its estimate (seconds on a TPU v5e, compiles included, conservative) fits
# in what is left of the budget.
ACCELERATOR_ORDER = ("11", "12", "2", "1", "5", "3", "6", "4", "9", "8", "7", "10")
ACCELERATOR_ESTIMATE_S = {
    "1": 35,
    "2": 30,
    "3": 10,
    "4": 5,
    "5": 20,
    "6": 20,
    "7": 30,
    "8": 15,
    "9": 12,
    "10": 35,
    "11": 150,
    "12": 40,
}
ACCELERATOR_BUDGET_S = 330.0  # about 6 minutes on a TPU v5e, with a margin


def _known(key: str) -> bool:
    return key in SECTIONS or key in ALIASES


def targets(res: dict[str, Any], s: Settings, broken: dict[str, str]) -> list[Target]:
    out: list[Target] = []
    for key, section in SECTIONS.items():
        if key not in res:
            continue
        try:
            out += section.targets(res[key], s)
        except Exception:  # noqa: BLE001 - partial results of a failed section: report what can be
            broken[key] = traceback.format_exc(limit=3)
    return out


def markdown(res: dict[str, Any], meta: dict[str, Any], tgts: list[Target], broken: dict[str, str]) -> str:
    done = "" if meta["complete"] else f" (incomplete: after section {meta['last_section']})"
    lines = [
        "# optax_pytree benchmarks",
        "",
        f"`{meta['command']}` — {meta['mode']} mode, {meta['runtime_s']:.0f} s{done}, {meta['date']}; "
        f"jax {meta['jax']}, optax {meta['optax']}, equinox {meta['equinox']}, Python {meta['python']}, "
        f"{meta['backend']} ({meta['device']}), {meta['cpu_count']} CPUs.",
        "",
        "Ratios: median [min-max] over repeats, each repeat paired with its reference in the same "
        "process. (b) is raw optax with a new jitted closure per configuration. Micro-benchmarks "
        f"(sections 3, 4, 6, 9) timed in {meta['micro_clock']}.",
    ]
    for what, notes in (("Skipped", meta["skipped"]), ("Failed", meta["failed"])):
        if notes:
            lines += ["", f"{what}: " + "; ".join(f"section {k}: {v}" for k, v in notes.items()) + "."]
    lines += ["", "## Targets", "", *targets_table(tgts)]
    for key, section in SECTIONS.items():
        if key not in res:
            continue
        try:
            lines += section.markdown(res[key])
        except Exception:  # noqa: BLE001 - partial results of a failed section
            broken[key] = traceback.format_exc(limit=3)
            lines += ["", f"## {key}. {section.TITLE}: no report (the section failed)"]
    return "\n".join(lines) + "\n"


def environment(args: argparse.Namespace, runtime: float, settings: Settings) -> dict[str, Any]:
    device = jax.devices()[0]
    return {
        "command": "python benchmarks/run.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "mode": settings.profile,
        "runtime_s": runtime,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "jax": jax.__version__,
        "optax": optax.__version__,
        "equinox": "not installed" if eqx is None else getattr(eqx, "__version__", "?"),
        "optax_pytree": opx.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": jax.default_backend(),
        "device": getattr(device, "device_kind", str(device)),
        "cpu_count": os.cpu_count(),
        "settings": dataclasses.asdict(settings),
        "only": args.only,
        "micro_clock": micro_clock_info().describe(),
        "budget_s": args.budget,
    }


def _jsonable(x: Any) -> Any:
    """``x`` with NaN and infinities as None (strict JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a run killed while writing leaves the previous file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _profile(args: argparse.Namespace) -> str:
    if args.quick:
        return "quick"
    if args.accelerator:
        return "accelerator"
    if args.full:
        return "full"
    return "full" if jax.default_backend() == "cpu" else "accelerator"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    profile = parser.add_mutually_exclusive_group()
    profile.add_argument("--quick", action="store_true", help="fewer configurations and repeats (~3 min)")
    profile.add_argument(
        "--accelerator",
        action="store_true",
        help="section 11 at full sizes first, the others reduced, within --budget (the default on "
        "any backend but the CPU)",
    )
    profile.add_argument("--full", action="store_true", help="every section in full (the default on the CPU)")
    parser.add_argument(
        "--tiny", action="store_true", help="section 11 at tiny sizes whatever the profile (a CPU smoke run)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds: a section (or a part of 11) starts only if its estimate fits in what is left "
        f"(default {ACCELERATOR_BUDGET_S:g} in the accelerator profile, else none; 0: none)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated sections by number or module name, e.g. 1,3 or accelerator",
    )
    args = parser.parse_args(argv)
    chosen: list[str] = [x.strip() for x in str(args.only).split(",") if x.strip()]
    unknown = [x for x in chosen if not _known(x)]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)} or {list(ALIASES)}")
    name = _profile(args)
    settings = Settings.make(
        name == "quick",
        accelerator=name == "accelerator",
        tiny=args.tiny,
        on_cpu=jax.default_backend() == "cpu",
    )
    if args.budget is None:
        args.budget = ACCELERATOR_BUDGET_S if name == "accelerator" else 0.0
    BUDGET.start(args.budget, START)
    default_order = ACCELERATOR_ORDER if name == "accelerator" else tuple(SECTIONS)
    chosen = [ALIASES.get(x, x) for x in chosen] or list(default_order)

    def log(message: str) -> None:
        print(message, flush=True)

    log(
        f"profile {name} (section 11 at {settings.accel_scale} sizes), backend {jax.default_backend()}, "
        f"sections {','.join(chosen)}" + (f", budget {args.budget:g} s" if args.budget else "")
    )
    counting = check_compile_counting()
    log(
        f"compile counting: {counting['method']}; cross-check with jax_log_compiles "
        f"{'agrees' if counting['agree'] else 'DISAGREES'} {counting['calls']}"
    )
    log(f"micro-benchmark clock: {micro_clock_info().describe()}")
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}

    def write(last: str, complete: bool) -> list[Target]:
        meta = environment(args, time.perf_counter() - START, settings)
        meta |= {"compile_counting": counting, "complete": complete, "last_section": last}
        broken: dict[str, str] = {}
        tgts = targets(results, settings, broken)
        errors = {**failed, **broken}  # whole tracebacks in results.json; their last lines in the report
        meta |= {"skipped": skipped, "failed": {k: v.strip().splitlines()[-1] for k, v in errors.items()}}
        text = markdown(results, meta, tgts, broken)
        args.out.mkdir(parents=True, exist_ok=True)
        _write(args.out / "results.md", text)
        payload = {"meta": meta, "targets": [dataclasses.asdict(t) for t in tgts], "results": results}
        payload["errors"] = errors
        _write(args.out / "results.json", json.dumps(_jsonable(payload), indent=1, default=str))
        return tgts

    for key in chosen:
        section = SECTIONS[key]
        estimate = ACCELERATOR_ESTIMATE_S.get(key, 0) if name == "accelerator" else 0
        if section is accelerator and settings.accel_scale != "accelerator":
            estimate = 0  # --tiny: seconds
        if not BUDGET.allows(estimate):
            skipped[key] = f"about {estimate} s needed, {max(BUDGET.left(), 0):.0f} s left of the budget"
            log(f"[{key}] {section.TITLE}: skipped ({skipped[key]})")
            continue
        log(f"[{key}] {section.TITLE}")
        t0 = time.perf_counter()
        kwargs: dict[str, Callable[[dict[str, Any]], Any]] = {}
        if getattr(section, "PARTIAL", False):

            def save(partial: dict[str, Any], key: str = key) -> None:
                results[key] = partial
                write(key, complete=False)

            kwargs["save"] = save
        try:
            results[key] = section.run(settings, log, **kwargs)
        except Exception:  # noqa: BLE001 - one section's failure must not lose the others (exit 1)
            failed[key] = traceback.format_exc()
            log(f"[{key}] FAILED after {time.perf_counter() - t0:.1f} s:\n{failed[key]}")
        else:
            log(f"[{key}] done in {time.perf_counter() - t0:.1f} s")
        write(key, complete=False)
    tgts = write(chosen[-1], complete=True)
    runtime = time.perf_counter() - START
    log("")
    log("targets:")
    for t in tgts:
        log(f"  {t.line()}")
    for key, why in skipped.items():
        log(f"skipped section {key}: {why}")
    for key in failed:
        log(f"FAILED section {key} (the traceback is above and in results.json)")
    log(f"\nwrote {args.out / 'results.md'} and {args.out / 'results.json'} in {runtime:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
