"""Section 7: JAX's persistent compilation cache across processes (see ``run.py``).

Run as a script (``python benchmarks/compile_cache.py --child '{...}'``) it is
one child process of the measurement: it trains once, with the persistent
cache in the folder it is given, and prints its counts and times as one JSON
line. ``run.py`` starts the children, on the CPU (``JAX_PLATFORMS=cpu``: the
parent may hold an accelerator, and only one process may); nothing else
needs to.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import optax

import optax_pytree as opx
from _common import (
    BACKEND_COMPILE_EVENT,
    CHILDREN_ON_CPU,
    COMPILES,
    Capture,
    Log,
    Settings,
    child_env,
    ratios,
    rotated,
    summary,
)
from _report import Target, check, fmt, section, span, table
from _workload import Workload, raw_adamw_schedule, train, train_inject, wrapped_adamw_schedule

TITLE = "persistent compilation cache across processes"

# Events of the installed jax (jax/_src/compiler.py, compilation_cache.py).
REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"  # every lookup
HIT_EVENT = "/jax/compilation_cache/cache_hits"
MISS_EVENT = "/jax/compilation_cache/cache_misses"  # recorded when a miss is written to the cache
SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"
HIT_LOG = "Persistent compilation cache hit for"  # jax's log lines, naming the module
MISS_LOG = "PERSISTENT COMPILATION CACHE MISS for"
RESULT_PREFIX = "COMPILE_CACHE_RESULT "

VALUES = (1e-3, 3e-3)  # the first process's learning rate (peak value), the second's
CHILD_TIMEOUT_S = 300

# key -> (label, what changes, runs in --quick)
APPROACHES: dict[str, tuple[str, str, bool]] = {
    "raw": ("optax.adam closed over, new jax.jit per configuration", "learning rate", True),
    "raw_same": ("control: the same, same learning rate in both processes", "nothing", False),
    "inject": ("optax.inject_hyperparams(optax.adam), learning rate an argument", "learning rate", True),
    "wrapped": ("opx.wrap(optax.adam), an argument of jax.jit", "learning rate", True),
    "raw_sched": ("optax.adamw + warmup-cosine schedule closed over", "peak_value", True),
    "wrapped_sched": (
        "opx.wrap(optax.adamw, learning_rate=opx.wrap(warmup_cosine_decay_schedule, ...))",
        "peak_value (guarded)",
        True,
    ),
}
# The reference of each row's second-process ratio.
REFERENCE = {"inject": "raw", "wrapped": "raw", "wrapped_sched": "raw_sched"}
REFERENCE_NAME = {"raw": "raw optax", "raw_sched": "raw adamw + schedule"}
TARGETS = ("wrapped", "wrapped_sched")


# --------------------------------------------------------------------------
# The child process.


def _call(kind: str, value: float, w: Workload) -> Callable[[], Any]:
    """Build the optimizer for ``value``, jit, call: the timed work of one child."""
    if kind in ("raw", "raw_same", "raw_sched"):

        def raw() -> Any:
            tx = optax.adam(value) if kind != "raw_sched" else raw_adamw_schedule(value)
            return jax.jit(lambda p, b: train(tx, p, b))(w.params, w.batch)

        return raw
    if kind == "inject":
        return lambda: jax.jit(train_inject)(value, w.params, w.batch)
    if kind == "wrapped":
        return lambda: jax.jit(train)(opx.wrap(optax.adam, learning_rate=value), w.params, w.batch)
    if kind == "wrapped_sched":
        return lambda: jax.jit(train)(wrapped_adamw_schedule(value), w.params, w.batch)
    raise ValueError(f"unknown approach {kind!r}")


class _CacheEvents:
    """Persistent-cache events, and the modules named in jax's hit / miss log lines."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.saved_s = 0.0
        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        self.log = Capture()
        logger = logging.getLogger("jax._src.compiler")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self.log)
        logger.propagate = False

    def _event(self, event: str, **kwargs: Any) -> None:
        self.counts[event] += 1

    def _duration(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        if event == SAVED_EVENT:
            self.saved_s += duration_secs

    def reset(self) -> None:
        self.counts.clear()
        self.saved_s = 0.0
        self.log.messages.clear()

    def modules(self, start: str) -> list[str]:
        """Module names of the log lines starting with ``start`` (``... for 'jit_f' with key ...``)."""
        return [m.split("'")[1] for m in self.log.messages if m.startswith(start) and "'" in m]


def child(spec: dict[str, Any]) -> dict[str, Any]:
    jax.config.update("jax_compilation_cache_dir", spec["cache_dir"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # -1: no size threshold, and none set by jax for the file system (0 lets jax pick one).
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    events = _CacheEvents()
    t0 = time.perf_counter()
    w = Workload.make(1)
    jax.block_until_ready(w.params)
    setup_s = time.perf_counter() - t0
    call = _call(spec["kind"], spec["value"], w)
    events.reset()
    with COMPILES.window() as compiled:
        t0 = time.perf_counter()
        _, loss = jax.block_until_ready(call())
        first_s = time.perf_counter() - t0
    hits = events.modules(HIT_LOG)
    misses = events.modules(MISS_LOG)
    # The train program is the last lookup of the window (construction comes first).
    lookups = [m for m in events.log.messages if m.startswith((HIT_LOG, MISS_LOG))]
    last = lookups[-1] if lookups else ""
    train_program = "hit" if last.startswith(HIT_LOG) else "miss" if last.startswith(MISS_LOG) else "?"
    return {
        "kind": spec["kind"],
        "value": spec["value"],
        "first_result_s": first_s,
        "setup_s": setup_s,
        "requests": events.counts[REQUEST_EVENT],
        "hits": events.counts[HIT_EVENT],
        "misses": events.counts[REQUEST_EVENT] - events.counts[HIT_EVENT],
        "miss_events": events.counts[MISS_EVENT],
        "hit_modules": hits,
        "miss_modules": misses,
        "train_program": train_program,
        # jax records this event around "compile or load from the persistent cache".
        "backend_compile_events": len(compiled),
        "compile_or_load_s": sum(d for _, d in compiled),
        "compile_time_saved_s": events.saved_s,
        "loss": float(loss),
        "jax_cache_dir_entries": len(os.listdir(spec["cache_dir"])),
    }


# --------------------------------------------------------------------------
# The parent: pairs of fresh processes sharing a fresh cache folder.


def _spawn(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        env=child_env(),  # on the CPU: this process may hold the accelerator
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    wall = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode or not lines:
        raise RuntimeError(
            f"compile-cache child {spec} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return {**json.loads(lines[-1][len(RESULT_PREFIX) :]), "process_wall_s": wall}


@contextlib.contextmanager
def _cache_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="optax_pytree_bench_cache_")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _pair(kind: str) -> tuple[float, float]:
    return (VALUES[0], VALUES[0]) if kind == "raw_same" else VALUES


def run(s: Settings, log: Log) -> dict[str, Any]:
    todo = [k for k, (_, _, quick) in APPROACHES.items() if quick or s.cache_controls]
    if s.cache_only:
        todo = [k for k in todo if k in s.cache_only]
    runs: dict[str, list[list[dict[str, Any]]]] = {k: [] for k in todo}  # per round: [first, second]
    for r in range(s.cache_rounds):
        for kind in rotated(todo, r):
            with _cache_dir() as d:
                pair = [_spawn({"kind": kind, "value": v, "cache_dir": d}) for v in _pair(kind)]
            runs[kind].append(pair)
            log(
                f"  round {r + 1}/{s.cache_rounds} {kind}: "
                + "; ".join(
                    f"process {i + 1}: {p['hits']} hits, {p['misses']} misses, "
                    f"first result {p['first_result_s']:.2f} s"
                    for i, p in enumerate(pair)
                )
            )
    out: dict[str, Any] = {
        "values": list(VALUES),
        "rounds": s.cache_rounds,
        "children": CHILDREN_ON_CPU,
        "config": {
            "jax_compilation_cache_dir": "a fresh temporary folder per approach and round",
            "jax_persistent_cache_min_compile_time_secs": 0.0,
            "jax_persistent_cache_min_entry_size_bytes": -1,
        },
        "events": {"lookups": REQUEST_EVENT, "hits": HIT_EVENT, "written misses": MISS_EVENT},
        "approaches": {},
    }
    for kind in todo:
        label, changes, _ = APPROACHES[kind]
        row: dict[str, Any] = {"label": label, "changes": changes, "processes": []}
        for i in range(2):
            ps = [pair[i] for pair in runs[kind]]
            row["processes"].append(
                {
                    "value": ps[0]["value"],
                    "runs": ps,
                    "hits": [p["hits"] for p in ps],
                    "misses": [p["misses"] for p in ps],
                    "train_program": sorted({p["train_program"] for p in ps}),
                    "compile_or_load_s": summary([p["compile_or_load_s"] for p in ps]),
                    "first_result_s": summary([p["first_result_s"] for p in ps]),
                    "process_wall_s": summary([p["process_wall_s"] for p in ps]),
                    "loss": ps[0]["loss"],
                }
            )
        out["approaches"][kind] = row
    for kind, ref in REFERENCE.items():
        if kind not in out["approaches"] or ref not in out["approaches"]:
            continue
        row, base = out["approaches"][kind], out["approaches"][ref]
        for key in ("first_result_s", "process_wall_s"):
            num = row["processes"][1][key]["samples"]
            den = base["processes"][1][key]["samples"]
            row[f"second_{key}_ratio_to_{ref}"] = summary(ratios(num, den))
        row["reference"] = ref
        row["max_abs_loss_diff_vs_reference"] = max(
            abs(a["loss"] - b["loss"]) for a, b in zip(row["processes"], base["processes"])
        )
    return out


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    out: list[Target] = []
    for kind in TARGETS:
        if kind not in r["approaches"]:
            what = f"persistent cache, {APPROACHES[kind][0]}, second process: misses"
            out.append(Target(7, what, "n/a", "0 misses", "n/a", "not run in this profile"))
            continue
        second = r["approaches"][kind]["processes"][1]
        misses = max(second["misses"])
        what = "wrapped adamw + warmup-cosine" if kind == "wrapped_sched" else "wrapped adam"
        program = "/".join(second["train_program"])
        out.append(
            Target(
                7,
                f"persistent cache, {what}, second process with a new {APPROACHES[kind][1]}: misses",
                f"{misses} misses, {min(second['hits'])} hits (train program: {program})",
                "0 misses",
                check(misses == 0),
            )
        )
    return out


def _second_label(changes: str) -> str:
    return "(same folder) same value" if changes == "nothing" else f"(same folder) new {changes}"


def markdown(r: dict[str, Any]) -> list[str]:
    rows = []
    for a in r["approaches"].values():
        for i, p in enumerate(a["processes"]):
            ref = a.get("reference")
            ratio = a.get(f"second_first_result_s_ratio_to_{ref}") if i == 1 and ref else None
            rows.append(
                [
                    a["label"] if i == 0 else _second_label(a["changes"]),
                    i + 1,
                    f"{p['value']:g}",
                    span(p["hits"]),
                    span(p["misses"]),
                    "/".join(p["train_program"]),
                    fmt(p["compile_or_load_s"], 2),
                    fmt(p["first_result_s"], 2),
                    fmt(ratio, 2) + f" (vs {REFERENCE_NAME[ref]})" if ratio and ref else "",
                    fmt(p["process_wall_s"], 2),
                    f"{p['loss']:.6f}",
                ]
            )
    return section(
        f"## 7. Persistent compilation cache: two fresh processes, one fresh cache folder "
        f"({r['rounds']} round(s))",
        "Each pair of fresh Python processes shares one new `jax_compilation_cache_dir` "
        "(`jax_persistent_cache_min_compile_time_secs=0`, `jax_persistent_cache_min_entry_size_bytes=-1`); "
        "the second uses a new value. Counted from building the optimizer to the first result of the "
        f"jitted `train` (the MLP of section 1): lookups `{REQUEST_EVENT}`, hits `{HIT_EVENT}`, "
        "misses = lookups - hits; the train program is the last lookup (the others are eager operations "
        "run while building the optimizer). Compiling or loading: the time jax records as "
        f"`{BACKEND_COMPILE_EVENT}`, which on a hit is the load from the cache. Process wall time "
        "includes starting Python and importing jax. Second / raw: the second process's first result "
        "against raw optax's (closed over, same values) in the same round. The "
        f"{r.get('children', CHILDREN_ON_CPU)}.",
        table(
            "approach | process | value | cache hits | misses | train program | compiling or loading (s) | "
            "first result (s) | second / raw | process wall (s) | loss",
            rows,
        ),
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one child process of section 7 (run by run.py)")
    parser.add_argument("--child", required=True, help="JSON: kind, value, cache_dir")
    print(RESULT_PREFIX + json.dumps(child(json.loads(parser.parse_args().child))), flush=True)
