"""The plumbing of ``conformance/run.py`` (issue #15): optax's own tests through the drop-in.

The script is not part of this suite (it runs optax's test files, for
minutes); here: the views its plugin gives optax's test modules, the
comparison of two runs, and one small file run end to end.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import types
from typing import Any

import optax
import optax._src.alias
import optax.contrib
import optax.schedules
import pytest
from warm_python import on_the_cpu

import optax_pytree
import optax_pytree.optax as dropin_optax

REAL_IMPORT = builtins.__import__
CONFORMANCE = pathlib.Path(__file__).parent.parent / "conformance"


def _load(name: str) -> types.ModuleType:
    """A module of conformance/ by path: the folder is a script's, not a package on sys.path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CONFORMANCE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plugin = _load("conformance_plugin")
run = _load("run")


def _execute(source: str, file: str) -> tuple[dict[str, Any], Any]:
    """Runs ``source`` as the body of the module of ``file`` (in optax's folder), with the import hook."""
    root = plugin.optax_dir()
    dropin = plugin.DropIn(plugin.replacements(), root)
    namespace: dict[str, Any] = {
        "__name__": file.removesuffix(".py").replace("/", "."),
        "__file__": str(root / file),
        # The hook in this namespace's builtins alone: nothing global is patched.
        "__builtins__": {**vars(builtins), "__import__": dropin.import_hook(builtins.__import__)},
    }
    exec(source, namespace)
    return namespace, dropin


IMPORTS = """
import optax
import optax.tree
from optax._src import alias
from optax._src import base
from optax import contrib
from optax.schedules import _schedule
from optax.transforms import _masking
import jax
"""


def test_an_optax_test_module_sees_the_dropin_factories() -> None:
    ns, dropin = _execute(IMPORTS, "_src/example_test.py")
    assert ns["optax"].adam is dropin_optax.adam
    assert ns["alias"].adam is dropin_optax.adam  # through optax's private module too
    assert ns["alias"].sgd is dropin_optax.sgd
    assert ns["contrib"].sam is dropin_optax.contrib.sam
    assert ns["_schedule"].cosine_decay_schedule is dropin_optax.schedules.cosine_decay_schedule
    assert ns["_masking"].masked is dropin_optax.masked  # optax.transforms has no drop-in of its own
    assert ns["optax"].contrib.sam is dropin_optax.contrib.sam
    assert {"optax._src.alias.adam", "optax.contrib.sam"} <= dropin.used


def test_what_the_dropin_does_not_replace_is_optax_own() -> None:
    ns, _ = _execute(IMPORTS, "_src/example_test.py")
    assert ns["jax"] is sys.modules["jax"]
    assert ns["base"].GradientTransformation is optax.GradientTransformation
    assert ns["alias"].transform.ScaleByAdamState is optax.ScaleByAdamState
    assert ns["optax"].apply_updates is optax.apply_updates
    assert ns["optax"].tree.add is optax.tree.add
    assert ns["alias"].__name__ == "optax._src.alias"
    assert "adam" in dir(ns["alias"])


def test_optax_library_modules_are_left_alone() -> None:
    # A module that is not a test module imports optax's own objects...
    ns, _ = _execute(IMPORTS, "_src/combine.py")
    assert ns["alias"] is optax._src.alias
    assert ns["alias"].adam is not dropin_optax.adam
    # ... and a test module's view does not change optax's modules.
    _execute(IMPORTS, "_src/example_test.py")
    assert optax._src.alias.adam is not dropin_optax.adam
    assert builtins.__import__ is REAL_IMPORT


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("_src/alias_test.py", True),  # imported by pytest as the top-level module alias_test
        ("optax_test.py", True),
        ("contrib/_common_test.py", True),
        ("_src/alias.py", False),
        ("_src/test_utils.py", False),
        ("../elsewhere/alias_test.py", False),
    ],
)
def test_which_files_are_optax_test_files(file: str, expected: bool) -> None:
    root = plugin.optax_dir()
    assert plugin.is_optax_test_file(str(root / file), root) is expected


OUTCOMES = """
import unittest
import pytest

class Cases(unittest.TestCase):
    def test_passes(self):
        pass

    def test_fails(self):
        self.assertEqual(1, 2)

    def test_fails_in_a_subtest(self):
        with self.subTest("first"):
            self.assertEqual(3, 4)
        with self.subTest("second"):
            pass

    def test_skips(self):
        self.skipTest("no reason")

def test_xfails():
    pytest.xfail("known")

@pytest.fixture
def broken():
    raise RuntimeError("in setup")

def test_errors(broken):
    pass
"""


def test_the_plugin_records_each_outcome(tmp_path: pathlib.Path) -> None:
    (tmp_path / "cases_test.py").write_text(OUTCOMES)
    (tmp_path / "pytest.ini").write_text("[pytest]\npython_files = *_test.py\n")
    results = tmp_path / "results.jsonl"
    env = {**on_the_cpu(os.environ), "PYTHONPATH": str(CONFORMANCE)}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "cases_test.py",
        "-p",
        "conformance_plugin",
        "-p",
        "no:cacheprovider",
    ]
    command += ["--conformance-results", str(results)]
    subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=120)
    records = [json.loads(line) for line in results.read_text().splitlines()]
    got = {
        r["nodeid"].rsplit(":", 1)[1]: (r["outcome"], r["message"]) for r in records if r["kind"] == "test"
    }
    assert got == {
        "test_passes": ("passed", ""),
        "test_fails": ("failed", "AssertionError: 1 != 2"),
        # A failing subtest fails its test, also when the test's own call passes (pytest >= 9).
        "test_fails_in_a_subtest": ("failed", "subtest [first] AssertionError: 3 != 4")
        if pytest.version_tuple >= (9,)
        else ("failed", "AssertionError: 3 != 4"),
        "test_skips": ("skipped", "no reason"),
        "test_xfails": ("xfailed", "known"),
        "test_errors": ("error", "RuntimeError: in setup"),
    }
    assert records[-1] == {"kind": "session", "mode": "plain", "dropin_names": [], "library": ""}


def _run(file: str, tests: dict[str, str], **problems: Any) -> Any:
    result = run.Run(file, "x", returncode=problems.pop("returncode", 1), **problems)
    result.tests = {
        f"optax/{file}::T::{name}": (outcome, f"{outcome} error") for name, outcome in tests.items()
    }
    return result


def test_compare_lists_what_passes_plainly_and_not_through_the_dropin() -> None:
    runs = {
        ("a_test.py", "plain"): _run(
            "a_test.py",
            {"kept": "passed", "lost": "passed", "gone": "passed", "bad": "failed", "fix": "error"},
        ),
        ("a_test.py", "dropin"): _run(
            "a_test.py", {"kept": "passed", "lost": "failed", "bad": "failed", "fix": "passed"}
        ),
        # Fails plainly for want of a module: reported, not compared.
        ("b_test.py", "plain"): _run(
            "b_test.py", {}, returncode=2, collect_errors=["ModuleNotFoundError: No module named 'sklearn'"]
        ),
        ("b_test.py", "dropin"): _run("b_test.py", {}, returncode=2),
    }
    summary = run.compare(["a_test.py", "b_test.py"], runs)
    lost = {r["nodeid"].rsplit("::", 1)[1]: r["dropin"] for r in summary["regressions"]}
    assert lost == {"lost": "failed", "gone": "missing"}
    assert [r["nodeid"].rsplit("::", 1)[1] for r in summary["fixed"]] == ["fix"]
    assert list(summary["excluded"]) == ["b_test.py"]
    assert "scikit-learn" in summary["excluded"]["b_test.py"]
    assert (summary["plain_passed"], summary["dropin_kept"], summary["compared_files"]) == (3, 1, 1)


def test_causes_group_messages_that_differ_in_numbers_only() -> None:
    assert run._cause("OverflowError: 10000000000 at 0x7f3a") == run._cause("OverflowError: 20 at 0x1b")
    assert run._cause("TypeError: a") != run._cause("ValueError: a")


def test_a_missing_requirement_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(run.REQUIRED, "no_such_module_for_conformance", "no-such-package")
    assert run.main(["--list"]) == 2
    assert "pip install no-such-package" in capsys.readouterr().out


def test_one_file_end_to_end(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The smallest schedule test file of the installed optax, both runs, in subprocesses:
    # on the CPU, as every child of the suite (on a TPU this process holds the chip, and
    # a child that opened it failed every test, plain too).
    if "schedules/_join_test.py" not in run.test_files(run.optax_dir()):
        pytest.skip(f"optax {optax.__version__} ships no schedules/_join_test.py")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    out = tmp_path / "summary.json"
    status = run.main(["--files", "schedules/_join_test.py", "--out", str(out), "--logs", str(tmp_path)])
    summary = json.loads(out.read_text())
    assert status == (1 if summary["regressions"] else 0)
    (row,) = summary["files"]
    assert row["excluded"] is None
    assert row["plain"]["passed"] >= 1
    assert sum(row["plain"][n] for n in run.COUNTS) == sum(row["dropin"][n] for n in run.COUNTS)
    # The drop-in run did reach the drop-in: the schedules the test builds are wrapped ones.
    assert any(name.startswith("optax.schedules.") for name in summary["dropin_names"])
    assert summary["libraries"] == [str(pathlib.Path(optax_pytree.__file__).parent)]
    assert "schedules/_join_test.py" in capsys.readouterr().out


def test_plain_where_needed_runs_plainly_only_what_did_not_pass_through_the_dropin(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each file runs plainly in one process that collects all its tests and runs
    # only those that did not pass through the drop-in: a lost test is still found.
    files = ["a_test.py", "b_test.py"]
    plain_runs: list[tuple[str, tuple[str, ...]]] = []

    def fake_run_file(file: str, mode: str, *args: Any, skip: Any = ()) -> Any:
        r = run.Run(file, mode, returncode=0)
        ids = [f"{file}::t1", f"{file}::t2", f"{file}::t3"]
        if mode == "dropin":  # b_test's t2 fails and t3 is skipped through the drop-in
            outcomes = ["passed", "failed", "skipped"] if file == "b_test.py" else ["passed"] * 3
            r.tests = {n: (o, "") for n, o in zip(ids, outcomes)}
        else:
            plain_runs.append((file, tuple(n for n in ids if n not in skip)))
            r.tests = {n: (run.UNRUN if n in skip else "passed", "") for n in ids}
        return r

    for name in files:
        (tmp_path / name).write_text("")
    monkeypatch.setattr(run, "run_file", fake_run_file)
    runs = run.run_all(files, run.MODES, tmp_path, tmp_path, None, 1, 60.0, plain_where_needed=True)
    assert sorted(plain_runs) == [("a_test.py", ()), ("b_test.py", ("b_test.py::t2", "b_test.py::t3"))]
    summary = run.compare(files, runs)
    assert sorted(r["nodeid"] for r in summary["regressions"]) == ["b_test.py::t2", "b_test.py::t3"]
    assert (summary["plain_passed"], summary["unrun"]) == (2, 4)


@pytest.mark.parametrize(
    ("source", "reachable"),
    [
        ("from optax._src import alias\ndef test_a():\n    alias.adam(1e-3)\n", True),
        ("from optax import sgd as s\n", True),
        ("import optax\ndef test_a():\n    getattr(optax, name)\n", True),  # a name not in the text
        ("import optax\nassert 'chain' in PUBLIC\n", True),  # a string may be read by name
        ("from optax.contrib import _common_test\n", True),  # another test file's names
        ("import optax\ndef test_a():\n    vars(optax)\n", True),
        ("from optax import losses\ndef test_a():\n    losses.l2_loss(x)\n", False),
    ],
)
def test_a_file_is_left_out_only_when_it_cannot_reach_the_dropin(
    tmp_path: pathlib.Path, source: str, reachable: bool
) -> None:
    _load("conformance_plugin")
    run = _load("run")
    (tmp_path / "a_test.py").write_text(source)
    names = run.replaced_names()
    assert {"adam", "sgd", "chain", "warmup_cosine_decay_schedule"} <= names
    assert "l2_loss" not in names  # a loss, not replaced
    assert (run.unreachable(["a_test.py"], tmp_path, names) == {}) is reachable
