"""Every example runs (reduced sizes: OPTAX_PYTREE_SMOKE=1), so examples never rot.

Each in a new Python process forked from a server that imported jax and
optax already (tests/warm_python.py): the example's own work, not the imports.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import pathlib

import pytest
import warm_python
from helpers import one_distributed_job_at_a_time, sockets_available

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
    # Run, without the test extras, by test_the_readme_demo_needs_only_the_runtime_dependencies.
    "recompilation.py": (False, "covered by test_the_readme_demo_needs_only_the_runtime_dependencies"),
    "digits_nnx.py": (
        _installed("flax") >= (0, 12, 7) and _installed("scikit-learn") != (),
        "needs flax>=0.12.7 (nnx.merge(..., copy=True)), on Python>=3.11, and scikit-learn (the digits)",
    ),
}


# Examples that launch a local jax.distributed job.
DISTRIBUTED = {"multiprocess_sweep.py"}


# Examples whose guide page runs the same calls in the default run
# (tests/test_docs.py): they run in the exhaustive set, which CI runs, to keep
# the README's test command within its five minutes.
COVERED_BY_THEIR_PAGE = {
    "meta_learning.py": "guide/meta-learning.md",
    "population_based_training.py": "guide/population-based-training.md",
}


# The examples that are jobs of several processes are in the exhaustive set
# (pytest --exhaustive; CI runs them), as the other multi-process jobs.
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p,
            id=p.name,
            marks=(pytest.mark.exhaustive,) if p.name in DISTRIBUTED | COVERED_BY_THEIR_PAGE.keys() else (),
        )
        for p in EXAMPLES
    ],
)
def test_example_runs(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    available, reason = NEEDS.get(path.name, (True, ""))
    if not available:
        pytest.skip(reason)
    env = {**os.environ, "OPTAX_PYTREE_SMOKE": "1", "MPLBACKEND": "Agg"}
    # A jax.distributed job (its own launcher): one such job on the machine at a time.
    distributed = path.name in DISTRIBUTED
    if distributed and not sockets_available():
        pytest.skip("this machine refuses sockets, even on the loopback: jax.distributed needs one")
    with one_distributed_job_at_a_time() if distributed else contextlib.nullcontext():
        result = warm_python.run([str(path)], env=env, timeout=600, cwd=tmp_path)
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
    result = warm_python.run(["-c", code], env=env, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 compilation" in result.stdout
