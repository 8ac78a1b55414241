"""optax's own test files, run plainly and through the drop-in ``optax_pytree.optax``.

optax's wheel ships its test files inside the installed package
(``optax/_src/alias_test.py``, ``optax/contrib/_common_test.py``,
``optax/schedules/_schedule_test.py``, ...). This script runs them twice, each
file in its own pytest subprocess:

- **plain**: as optax runs them;
- **drop-in**: with every optax object that ``optax_pytree.optax`` replaces (the
  factories of ``optax``, ``optax.contrib`` and ``optax.schedules``) replaced
  by the drop-in's in what the *test modules* see — ``alias.adam`` after
  ``from optax._src import alias`` too — while optax's library modules are
  untouched (see ``conformance_plugin.py``).

It prints passed/failed/skipped per file for both runs and the tests that pass
plainly but not through the drop-in, with the first line of their error,
grouped by that line; ``--out`` writes the same as JSON. Files that cannot run
plainly (a missing optional dependency) are reported and left out of the
comparison. Exit status: 0 when every test that passes plainly passes through
the drop-in, 1 otherwise, 2 when the setup is incomplete.

Usage::

    python conformance/run.py --subset fast --out conformance.json
    python conformance/run.py                       # every test file (long)
    python conformance/run.py --files schedules/_schedule_test.py -k cosine
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import contextlib
import dataclasses
import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLUGIN = "conformance_plugin"  # HERE/conformance_plugin.py, loaded by each pytest with -p
MODES = ("plain", "dropin")

# What the script and optax's test files need at all (import name -> package to install).
REQUIRED = {
    "pytest": "pytest",
    "absl": "absl-py",
    "chex": "chex",
    "optax": "optax",
    "optax_pytree": "optax_pytree",
}
# What some of the test files need; without it those files fail plainly and are left out.
OPTIONAL = {"scipy": "scipy", "sklearn": "scikit-learn", "flax": "flax"}

# The fast subset: the schedules and contrib files (contrib/_common_test.py,
# the contrib catalogue, takes half of its time; about 9 CPU-minutes in all),
# and the small files that exercise the factories (combinators, lookahead,
# transforms) in seconds each.
FAST = (
    "schedules/*_test.py",
    "contrib/*_test.py",
    "optax_test.py",
    "_src/combine_test.py",
    "_src/lookahead_test.py",
    "_src/transform_test.py",
    "_src/factorized_test.py",
    "transforms/_clipping_test.py",
    "transforms/_masking_test.py",
)

# The pytest processes under way, ended when the script is interrupted.
_RUNNING: set[subprocess.Popen[bytes]] = set()

COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
# A test collected plainly and not run plainly, since it passed through the
# drop-in (--plain-where-needed): it cannot be lost, whatever it does plainly.
UNRUN = "unrun"
PASSED = ("passed", "xpassed")


@dataclasses.dataclass
class Run:
    """One test file run in one mode."""

    file: str
    mode: str
    returncode: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    # nodeid -> (outcome, first line of the error or the skip reason)
    tests: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    collect_errors: list[str] = dataclasses.field(default_factory=list)
    dropin_names: list[str] = dataclasses.field(default_factory=list)
    library: str = ""  # the folder optax_pytree was imported from
    log: str = ""

    def counts(self) -> dict[str, int]:
        found = collections.Counter(outcome for outcome, _ in self.tests.values())
        return {name: found[name] for name in COUNTS}

    def problem(self) -> str | None:
        """Why this run did not give a result for each of its tests, if so."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.collect_errors:
            return "collection error: " + "; ".join(self.collect_errors)
        if self.returncode not in (0, 1, 5):  # 5: no tests collected (-k)
            return f"pytest exited with status {self.returncode} (see {self.log})"
        return None

    def summary(self) -> dict[str, Any]:
        return {
            **self.counts(),
            "seconds": round(self.seconds, 1),
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "collect_errors": self.collect_errors,
            "log": self.log,
        }


# --------------------------------------------------------------------------
# Setup.


def missing(modules: dict[str, str]) -> list[str]:
    """The packages (to install) of the modules in ``modules`` that cannot be imported."""
    return [package for module, package in modules.items() if importlib.util.find_spec(module) is None]


def optax_dir() -> Path:
    spec = importlib.util.find_spec("optax")
    assert spec is not None and spec.submodule_search_locations, "optax is not installed"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def test_files(root: Path) -> list[str]:
    """Every test file of the installed optax, relative to its package folder."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*_test.py"))


def select(available: Sequence[str], subset: str, patterns: Sequence[str] | None) -> list[str]:
    """The files to run: those matching ``patterns`` (globs relative to optax's folder) or the subset.

    Raises:
        SystemExit: a pattern matches no test file.
    """
    if patterns is None:
        if subset == "full":
            return list(available)
        patterns = FAST
    chosen: list[str] = []
    for pattern in patterns:
        pattern = pattern.removeprefix("optax/")
        matched = [f for f in available if fnmatch.fnmatch(f, pattern)]
        if not matched:
            raise SystemExit(f"no optax test file matches {pattern!r} (see --list)")
        chosen += [f for f in matched if f not in chosen]
    return chosen


# What a test file may do to reach an object by a name that is not in its
# text: read a module's namespace as a whole, or import another test file.
_DYNAMIC = frozenset(
    {"getattr", "dir", "vars", "getmembers", "__dict__", "__all__", "import_module", "__import__"}
)


def replaced_names() -> frozenset[str]:
    """Every name under which an optax module holds an object that the drop-in replaces."""
    from conformance_plugin import replacements

    table = replacements()
    names = set()
    for name, module in list(sys.modules.items()):
        if name == "optax" or name.startswith("optax."):
            for attribute, value in list(vars(module).items()):
                found = table.get(id(value))
                if found is not None and found[0] is value:
                    names.add(attribute)
    return frozenset(names)


def unreachable(files: Sequence[str], root: Path, names: frozenset[str]) -> dict[str, str]:
    """The files that cannot reach the drop-in, read from their source: file -> why.

    In drop-in mode a test file gets the drop-in's object where it reads, from
    an optax module, a name whose object the drop-in replaces (its globals,
    ``alias.adam``, ``getattr(alias, "adam")``). A file that has none of those
    names among its identifiers and strings, reads no namespace as a whole
    (``getattr``, ``dir``, ``vars``, ``__dict__``, ``__all__``, imports by
    name) and imports no other test file runs the same in both modes: its
    drop-in run would be its plain run.
    """
    out: dict[str, str] = {}
    for file in files:
        tree = ast.parse((root / file).read_text(encoding="utf-8"))
        words: set[str] = set()
        imports_tests = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                words.add(node.id)
            elif isinstance(node, ast.Attribute):
                words.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                words.add(node.value)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                words.update(a.name for a in node.names)  # `from optax import sgd as s` reads sgd
                imports_tests |= any(m.rsplit(".", 1)[-1].endswith("_test") for m in modules)
        if not (words & names or words & _DYNAMIC or imports_tests):
            out[file] = "names none of the objects the drop-in replaces (its drop-in run is its plain run)"
    return out


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("optax", "optax_pytree", "jax", "jaxlib", "chex", "absl-py", "pytest"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


# --------------------------------------------------------------------------
# Running.


def run_file(
    file: str,
    mode: str,
    root: Path,
    work: Path,
    keyword: str | None,
    timeout: float,
    pythonpath: Sequence[str],
    skip: Sequence[str] = (),
) -> Run:
    """Runs one optax test file in one mode, in a pytest subprocess, and reads back its outcomes.

    ``skip``: of the tests it collects, those are not run, recorded as ``UNRUN``.
    """
    stem = file.replace("/", "__").removesuffix(".py")
    stem += ".rest" if skip else ""
    results, log = work / f"{stem}.{mode}.jsonl", work / f"{stem}.{mode}.log"
    results.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "pytest", str(root / file),
        "-p", PLUGIN, "--conformance-mode", mode, "--conformance-results", str(results),
        # optax's files alone: no ini, conftest or cache of the project around them.
        "-c", str(work / "pytest.ini"), "--rootdir", str(root.parent), "--noconftest",
        "-p", "no:cacheprovider", "-q", "--tb=short",
    ]  # fmt: skip
    if keyword:
        command += ["-k", keyword]
    if skip:
        listed = work / f"{stem}.{mode}.skip"
        listed.write_text("".join(f"{n}\n" for n in skip), encoding="utf-8")
        command += ["--conformance-skip", str(listed)]
    path = os.pathsep.join(filter(None, [*pythonpath, str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    run = Run(file, mode, log=str(log))
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        with subprocess.Popen(command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT) as process:
            _RUNNING.add(process)
            try:
                run.returncode = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                run.timed_out = True
            finally:
                _RUNNING.discard(process)
    run.seconds = time.perf_counter() - start
    if results.exists():
        for line in results.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["kind"] == "test" and record["outcome"] == UNRUN:
                run.tests[record["nodeid"]] = (UNRUN, "passed through the drop-in; not run plainly")
            elif record["kind"] == "test":
                run.tests[record["nodeid"]] = (record["outcome"], record["message"])
            elif record["kind"] == "collect_error":
                run.collect_errors.append(record["error"])
            elif record["kind"] == "session":
                run.dropin_names = record["dropin_names"]
                run.library = record.get("library", "")
    return run


def run_all(
    files: Sequence[str], modes: Sequence[str], root: Path, work: Path, keyword: str | None, jobs: int,
    timeout: float, pythonpath: Sequence[str] = (), plain_where_needed: bool = False,
) -> dict[tuple[str, str], Run]:  # fmt: skip
    """Every (file, mode), ``jobs`` at a time, the largest files first; progress on stdout.

    ``plain_where_needed``: the drop-in runs first; then each file runs
    plainly in one process that collects all its tests and runs only those
    that did not pass through the drop-in (failed, skipped, not collected
    there): the others are recorded ``UNRUN`` plainly (the whole file where
    the drop-in run broke off, or where this run does). No test that passes
    plainly and not through the drop-in is missed so: only the plain outcomes
    of tests that passed through the drop-in are not known.
    """
    (work / "pytest.ini").write_text("[pytest]\npython_files = *_test.py\n", encoding="utf-8")
    order = sorted(files, key=lambda f: -(root / f).stat().st_size)
    runs: dict[tuple[str, str], Run] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:

        def each(tasks: Sequence[tuple[str, str, Sequence[str]]], label: str) -> list[Run]:
            futures = [
                pool.submit(run_file, f, m, root, work, keyword, timeout, pythonpath, skip=k)
                for f, m, k in tasks
            ]
            done_runs = []
            try:
                for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                    done_runs.append(future.result())
                    print(f"[{label}{done}/{len(tasks)}] {progress(done_runs[-1])}", flush=True)
            finally:  # also when interrupted (Ctrl-C, SIGTERM): no pytest left running
                for future in futures:
                    future.cancel()
                for process in list(_RUNNING):
                    process.kill()
            return done_runs

        if not plain_where_needed or "plain" not in modes:
            for run in each([(f, m, ()) for f in order for m in modes], ""):
                runs[run.file, run.mode] = run
            return runs
        for run in each([(f, m, ()) for f in order for m in modes if m != "plain"], ""):
            runs[run.file, run.mode] = run
        # Where the drop-in run broke off, the whole file plainly; elsewhere all
        # but what passed through the drop-in.
        full = [f for f in order if runs[f, "dropin"].problem() is not None]
        passed = {
            f: [n for n, (o, _) in runs[f, "dropin"].tests.items() if o in PASSED]
            for f in order
            if f not in full
        }
        for run in each([(f, "plain", passed[f]) for f in order if f not in full], "plain, the rest: "):
            if run.problem() is not None:
                full.append(run.file)  # a crash, a collection error: the whole file plainly
            else:
                runs[run.file, run.mode] = run
        for run in each([(f, "plain", ()) for f in order if f in full], "plain: "):
            runs[run.file, run.mode] = run
    return runs


def progress(run: Run) -> str:
    c = run.counts()
    return (
        f"{run.mode:6} {run.file:40} {c['passed']:5} passed {c['failed'] + c['error']:4} failed "
        f"{c['skipped'] + c['xfailed']:4} skipped {run.seconds:7.1f} s  {run.problem() or ''}"
    )


# --------------------------------------------------------------------------
# Comparing.


def _cause(message: str) -> str:
    """A message with its numbers and addresses blanked, so that one cause groups its tests."""
    return re.sub(r"\b0x[0-9a-f]+\b|\b\d+(\.\d+)?(e[-+]?\d+)?\b", "#", message)


def missing_module(errors: Iterable[str]) -> str | None:
    for error in errors:
        found = re.search(r"No module named '([^'.]+)", error)
        if found:
            return found.group(1)
    return None


def compare(files: Sequence[str], runs: dict[tuple[str, str], Run]) -> dict[str, Any]:
    """Per file and overall: the tests that pass plainly and not through the drop-in, and why."""
    table, regressions, fixed, excluded = [], [], [], {}
    for file in files:
        plain, dropin = runs[file, "plain"], runs[file, "dropin"]
        reason = plain.problem()
        if reason is not None:
            module = missing_module(plain.collect_errors)
            if module is not None:
                reason = f"needs {OPTIONAL.get(module, module)} (not installed): {reason}"
            excluded[file] = reason
        lost = 0
        if reason is None:
            for nodeid, (outcome, _) in plain.tests.items():
                got, message = dropin.tests.get(nodeid, ("missing", ""))
                if outcome in PASSED and got not in PASSED:
                    if got == "missing":
                        message = dropin.problem() or "not run through the drop-in"
                    regressions.append({"nodeid": nodeid, "file": file, "dropin": got, "error": message})
                    lost += 1
                elif outcome in ("failed", "error") and got == "passed":
                    fixed.append({"nodeid": nodeid, "file": file, "plain_error": plain.tests[nodeid][1]})
        table.append(
            {
                "file": file,
                "plain": plain.summary(),
                "dropin": dropin.summary(),
                "lost": lost,
                "excluded": reason,
                "reached": len(dropin.dropin_names),
            }
        )
    causes: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for r in regressions:
        causes[_cause(r["error"])].append(r)
    compared = [f for f in files if f not in excluded]
    passing = sum(runs[f, "plain"].counts()["passed"] for f in compared)
    unrun = sum(o == UNRUN for f in compared for o, _ in runs[f, "plain"].tests.values())
    return {
        "files": table,
        "excluded": excluded,
        "totals": {
            mode: {name: sum(runs[f, mode].counts()[name] for f in files) for name in COUNTS}
            for mode in MODES
        },
        "compared_files": len(compared),
        "plain_passed": passing,
        "dropin_kept": passing - len(regressions),
        "unrun": unrun,
        "regressions": regressions,
        "causes": [
            {"error": tests[0]["error"], "count": len(tests), "tests": [t["nodeid"] for t in tests]}
            for tests in sorted(causes.values(), key=len, reverse=True)
        ],
        "fixed": fixed,
        "dropin_names": sorted({n for (_, m), r in runs.items() if m == "dropin" for n in r.dropin_names}),
        "libraries": sorted({r.library for (_, m), r in runs.items() if m == "dropin" and r.library}),
    }


def report(summary: dict[str, Any]) -> None:
    """The per-file table, the excluded files and the regressions, grouped by cause."""
    header = (
        f"{'file':40} {'plain p/f/s':>14} {'drop-in p/f/s':>14} {'lost':>5} {'reached':>7} {'seconds':>11}"
    )
    print("\n" + header + "\n" + "-" * len(header))

    def cell(c: dict[str, Any]) -> str:
        return f"{c['passed']}/{c['failed'] + c['error']}/{c['skipped'] + c['xfailed']}"

    for row in summary["files"]:
        p, d = row["plain"], row["dropin"]
        lost = "-" if row["excluded"] else str(row["lost"])
        seconds = f"{p['seconds']:.0f} / {d['seconds']:.0f}"
        print(f"{row['file']:40} {cell(p):>14} {cell(d):>14} {lost:>5} {row['reached']:>7} {seconds:>11}")
    t = summary["totals"]
    print("-" * len(header))
    print(f"{'total':40} {cell(t['plain']):>14} {cell(t['dropin']):>14} {len(summary['regressions']):>5}")
    print(
        "p/f/s: passed / failed or error / skipped or xfailed; lost: pass plainly, not through the drop-in;\n"
        "reached: the names of optax objects the drop-in replaced that the file's tests used"
    )
    print(f"optax_pytree imported from: {', '.join(summary['libraries']) or '(no drop-in run finished)'}")
    for file, reason in summary["excluded"].items():
        print(f"\nleft out of the comparison: {file}: {reason}")
    print(
        f"\n{summary['dropin_kept']} of the {summary['plain_passed']} tests that pass with plain optax "
        f"pass through the drop-in ({summary['compared_files']} files compared)."
    )
    if summary.get("unrun"):
        print(
            f"{summary['unrun']} more pass through the drop-in and were not run plainly "
            "(--plain-where-needed: they cannot be lost)."
        )
    if summary["causes"]:
        print("\nPass plainly, fail through the drop-in, grouped by the first line of the error:")
        for cause in summary["causes"]:
            print(f"\n  [{cause['count']}] {cause['error']}")
            for nodeid in cause["tests"]:
                print(f"      {nodeid}")
    if summary["fixed"]:
        print("\nFail plainly, pass through the drop-in:")
        for r in summary["fixed"]:
            print(f"      {r['nodeid']}  (plain: {r['plain_error']})")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--subset", choices=("fast", "full"), default="full", help="the files to run")
    parser.add_argument(
        "--files", nargs="+", metavar="GLOB", help="test files (globs) in optax's folder; overrides --subset"
    )
    parser.add_argument("-k", dest="keyword", help="passed to pytest -k")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="pytest processes at a time"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per file and mode")
    parser.add_argument("--out", type=Path, help="write the JSON summary here")
    parser.add_argument("--logs", type=Path, help="folder for each run's pytest output (default: a temp one)")
    parser.add_argument(
        "--pythonpath",
        action="append",
        default=[],
        metavar="DIR",
        help="put DIR first on the pytest processes' sys.path (say, a snapshot of optax_pytree)",
    )
    parser.add_argument(
        "--plain-where-needed",
        action="store_true",
        help="run plainly only the tests that did not pass through the drop-in (CI: about half the "
        "time, and no lost test missed)",
    )
    parser.add_argument(
        "--no-shared-cache",
        action="store_true",
        help="no JAX compilation cache and no folder of optax_pytree's analyses shared by the run's pytest "
        "processes (by default a new temporary one of each, removed at the end: each process finds what "
        "the others compiled and analysed; a JAX_COMPILATION_CACHE_DIR or OPTAX_PYTREE_ANALYSIS_CACHE "
        "already set is used instead)",
    )
    parser.add_argument(
        "--reachable-only",
        action="store_true",
        help="leave out the files whose source names none of the objects the drop-in replaces and reads "
        "no namespace as a whole (they run the same in both modes); listed in the output (CI)",
    )
    parser.add_argument("--list", action="store_true", help="list the test files of the subset and exit")
    return parser.parse_args(argv)


@contextlib.contextmanager
def shared_compilation_cache(on: bool) -> Iterator[None]:
    """One JAX persistent compilation cache for every pytest process started inside, then removed.

    Most of the time of optax's test files is compiling small programs (each
    eager operation, each test's jitted step), many the same from file to
    file and in both modes; a process finds what another compiled. A cache
    changes no result: an entry is the executable XLA compiled for the same
    program, options and versions.
    """
    if not on or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        yield
        return
    settings = {
        "JAX_COMPILATION_CACHE_DIR": tempfile.mkdtemp(prefix="optax-conformance-cache-"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(settings["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


@contextlib.contextmanager
def shared_analyses(on: bool) -> Iterator[None]:
    """The analyses optax_pytree keeps on disk (``optax_pytree/_disk.py``): one new folder for the
    run's processes (a file's process reads what another analysed, as a user's later runs do), or
    off; never the user's own folder. An ``OPTAX_PYTREE_ANALYSIS_CACHE`` already set is used."""
    if os.environ.get(ANALYSIS_CACHE_ENV) is not None:
        yield
        return
    folder = tempfile.mkdtemp(prefix="optax-conformance-analyses-") if on else None
    os.environ[ANALYSIS_CACHE_ENV] = folder or "0"
    try:
        yield
    finally:
        os.environ.pop(ANALYSIS_CACHE_ENV, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


ANALYSIS_CACHE_ENV = "OPTAX_PYTREE_ANALYSIS_CACHE"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    absent = missing(REQUIRED)
    if absent:
        print(f"conformance: missing {', '.join(absent)}; install with: pip install {' '.join(absent)}")
        return 2
    root = optax_dir()
    files = select(test_files(root), args.subset, args.files)
    if args.list:
        print("\n".join(files))
        return 0
    absent = missing(OPTIONAL)
    if absent:
        print(f"conformance: not installed: {', '.join(absent)}; the test files that need them are left out")
    left_out = unreachable(files, root, replaced_names()) if args.reachable_only else {}
    if left_out:
        print(f"conformance: {len(left_out)} files left out, each of which {next(iter(left_out.values()))}:")
        print("  " + ", ".join(left_out))
        files = [f for f in files if f not in left_out]
    work = args.logs or Path(tempfile.mkdtemp(prefix="optax-conformance-"))
    work.mkdir(parents=True, exist_ok=True)
    found = versions()
    print(
        f"optax {found['optax']} ({root}), optax_pytree {found['optax_pytree']}, jax {found['jax']}: "
        f"{len(files)} test files, {args.jobs} at a time; pytest output in {work}",
        flush=True,
    )
    start = time.perf_counter()
    pythonpath = [str(Path(p).resolve()) for p in args.pythonpath]
    with shared_compilation_cache(not args.no_shared_cache), shared_analyses(not args.no_shared_cache):
        runs = run_all(
            files, MODES, root, work, args.keyword, max(1, args.jobs), args.timeout, pythonpath,
            plain_where_needed=args.plain_where_needed,
        )  # fmt: skip
    summary = compare(files, runs)
    report(summary)
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.out is not None:
        settings = {
            "subset": args.subset,
            "files": args.files,
            "k": args.keyword,
            "jobs": args.jobs,
            "plain_where_needed": args.plain_where_needed,
            "reachable_only": args.reachable_only,
        }
        document = {"versions": found, "settings": settings, "left_out": left_out, **summary}
        args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"summary written to {args.out}")
    return 1 if summary["regressions"] else 0


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds run_all, which ends the pytest processes


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())
