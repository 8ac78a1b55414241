"""Every example runs (reduced sizes: OPTAX_PYTREE_SMOKE=1), so examples never rot."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

# Modules named _*.py are shared by the examples, not examples themselves.
EXAMPLES = sorted(
    p for p in (pathlib.Path(__file__).parent.parent / "examples").glob("*.py") if not p.name.startswith("_")
)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "OPTAX_PYTREE_SMOKE": "1", "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 0, f"{path.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{path.name} printed nothing"
