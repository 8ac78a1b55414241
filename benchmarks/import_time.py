"""Section 8: the cost of ``import optax_pytree`` over ``import optax`` (see ``run.py``).

Each sample is a fresh Python process that runs ``import optax`` or ``import
optax, optax_pytree`` (a program's imports: optax_pytree loads its modules,
and optax, when a public name is first read) and exits; a third process
also reads ``optax_pytree.wrap`` (what a program's first use of it costs,
not a target) (interpreter start-up included in both, so it
cancels in the difference). The two alternate, ABBA, after one warm-up
process each; the difference is taken pair by pair. Wall time is read around
each process; CPU time (user + system) is the operating system's accounting
of the finished child, which a busy neighbour on a shared machine does not
inflate: the target is on it (n/a where the system reports none). The
children run JAX on the CPU (``JAX_PLATFORMS=cpu``): a parent on an
accelerator holds it.

The processes read their bytecode from a fresh cache in a temporary folder
(``PYTHONPYCACHEPREFIX``), which the warm-up processes fill: an installed
package has its bytecode compiled by pip, but a source checkout run with
``PYTHONDONTWRITEBYTECODE`` set would compile optax_pytree's sources in every
process (tens of milliseconds) and optax's not.

Also a script of its own::

    python benchmarks/import_time.py            # 16 pairs
    python benchmarks/import_time.py --runs 8
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import CHILDREN_ON_CPU, Log, Settings, child_env, summary
from _report import Target, fmt, on_median, section, table

TITLE = "import time"

LIMIT_S = 0.05  # issue #17: at most +0.05 s over import optax
RUNS = 16  # pairs of processes when run as a script (run.py: its settings' import_pairs)

MODULES = ("optax", "optax, optax_pytree", "optax, optax_pytree; optax_pytree.wrap")

try:
    import resource
except ImportError:  # pragma: no cover - not on Unix: wall time only
    resource = None


def _child_cpu() -> float:
    if resource is None:  # pragma: no cover
        return float("nan")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


_SHOW = "; import sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"


def _import(module: str, env: dict[str, str], show: bool = False) -> tuple[float, float, str]:
    """Wall and CPU seconds of a fresh Python process running ``import module``, and its output.

    ``show``: the process also prints the top-level packages it has loaded.
    """
    code = f"import {module}" + (_SHOW if show else "")
    cpu0 = _child_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    return wall, _child_cpu() - cpu0, proc.stdout


def measure(runs: int, log: Log) -> dict[str, Any]:
    wall: dict[str, list[float]] = {m: [] for m in MODULES}
    cpu: dict[str, list[float]] = {m: [] for m in MODULES}
    with tempfile.TemporaryDirectory(prefix="optax_pytree_bench_pycache_") as pycache:
        # JAX on the CPU: a parent on an accelerator holds it (and importing opens no device anyway).
        env = child_env({k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
        env["PYTHONPYCACHEPREFIX"] = pycache
        # A warm-up process each (bytecode, the disk cache), which also lists its packages.
        packages = {module: set(_import(module, env, show=True)[2].split()) for module in MODULES}
        for i in range(runs):
            for module in MODULES if i % 2 == 0 else MODULES[::-1]:
                w, c, _ = _import(module, env)
                wall[module].append(w)
                cpu[module].append(c)
    res: dict[str, Any] = {"runs": runs}
    for module in MODULES:
        res[module] = {"wall_s": summary(wall[module]), "cpu_s": summary(cpu[module])}
    a, b, used = MODULES
    res["extra_wall_s"] = summary([y - x for x, y in zip(wall[a], wall[b])])
    res["extra_cpu_s"] = summary([y - x for x, y in zip(cpu[a], cpu[b])])
    res["first_use_cpu_s"] = summary([y - x for x, y in zip(cpu[a], cpu[used])])
    res["extra_packages"] = sorted(packages[b] - packages[a] - {"optax_pytree"})
    log(
        f"  import optax {res[a]['wall_s']['median']:.3f} s, import optax, optax_pytree "
        f"{res[b]['wall_s']['median']:.3f} s (wall, medians); difference "
        f"{res['extra_wall_s']['median']:+.3f} s wall, {res['extra_cpu_s']['median']:+.3f} s CPU "
        f"(medians of {runs} pairs); with optax_pytree.wrap read: "
        f"{res['first_use_cpu_s']['median']:+.3f} s CPU"
    )
    return res


def run(s: Settings, log: Log) -> dict[str, Any]:
    return measure(s.import_pairs, log)


def targets(r: dict[str, Any], s: Settings) -> list[Target]:
    del s
    what = "import optax, optax_pytree - import optax, CPU s (median of paired differences)"
    cpu = [x for m in MODULES for x in r[m]["cpu_s"]["samples"]]
    na = "" if cpu and min(cpu) > 0 else "the system reported no CPU time for a child process"
    return [on_median(8, what, r["extra_cpu_s"], f"≤ +{LIMIT_S} s", LIMIT_S, na=na)]


def markdown(r: dict[str, Any]) -> list[str]:
    rows = [[f"`import {m}`", fmt(r[m]["wall_s"], 3), fmt(r[m]["cpu_s"], 3)] for m in MODULES]
    rows.append(["difference (paired)", fmt(r["extra_wall_s"], 3), fmt(r["extra_cpu_s"], 3)])
    rows.append(["difference with `optax_pytree.wrap` read (paired)", "", fmt(r["first_use_cpu_s"], 3)])
    extra = ", ".join(r["extra_packages"]) or "none"
    return section(
        f"## 8. Import time ({r['runs']} pairs of fresh processes, interleaved)",
        table("command | wall (s) | CPU (s)", rows),
        f"Top-level packages `import optax_pytree` loads beyond `import optax`: {extra}. The "
        f"{CHILDREN_ON_CPU}.",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="pairs of processes")
    args = parser.parse_args()
    result = measure(args.runs, print)
    print("\n".join(markdown(result)))
    print("\n".join(t.line(section=False) for t in targets(result, Settings.make())))
