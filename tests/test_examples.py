"""Every example runs (reduced sizes: OPTAX_PYTREE_SMOKE=1), so examples never rot."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import subprocess
import sys

import pytest

# Modules named _*.py are shared by the examples, not examples themselves.
EXAMPLES = sorted(
    p for p in (pathlib.Path(__file__).parent.parent / "examples").glob("*.py") if not p.name.startswith("_")
)


def _installed(distribution: str) -> tuple[int, ...]:
    """The installed version of ``distribution`` as numbers; () if it is not installed."""
    try:
        text = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ()
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


# Examples that need more than the oldest supported setup has, and why.
NEEDS = {
    "flax_nnx.py": (
        _installed("flax") >= (0, 12, 7),
        "needs flax>=0.12.7 (nnx.as_pure, nnx.data), on Python>=3.11",
    ),
    # Run (both modes, two processes) and its counts asserted by test_optuna_multiprocess.py.
    "optuna_multiprocess.py": (False, "covered by tests/test_optuna_multiprocess.py"),
    "digits_nnx.py": (
        _installed("flax") >= (0, 12, 7) and _installed("scikit-learn") != (),
        "needs flax>=0.12.7 (nnx.merge(..., copy=True)), on Python>=3.11, and scikit-learn (the digits)",
    ),
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    available, reason = NEEDS.get(path.name, (True, ""))
    if not available:
        pytest.skip(reason)
    env = {**os.environ, "OPTAX_PYTREE_SMOKE": "1", "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 0, f"{path.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{path.name} printed nothing"


def test_the_readme_demo_needs_only_the_runtime_dependencies(tmp_path: pathlib.Path) -> None:
    # The README runs it after `pip install .`, without the test extras (tqdm).
    demo = next(p for p in EXAMPLES if p.name == "recompilation.py")
    code = (
        "import runpy, sys\n"
        "sys.modules['tqdm'] = None  # as if not installed\n"
        f"sys.path.insert(0, {str(demo.parent)!r})\n"
        f"runpy.run_path({str(demo)!r}, run_name='__main__')\n"
    )
    env = {**os.environ, "OPTAX_PYTREE_SMOKE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 compilation" in result.stdout
