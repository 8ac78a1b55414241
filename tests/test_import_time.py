"""``import optax_pytree`` costs next to nothing over ``import optax`` (issue 43; at most +0.05 s).

The package imports no module of its own until a name is first read (its
``__getattr__``): that is checked in the default run by counting the modules a
fresh interpreter loads, which no neighbour on a shared machine can make
noisy. The time itself is in the exhaustive sets, with the target of issue
43: the CPU time of ``import optax_pytree`` after ``import optax``, read in
fresh processes themselves (the bytecode cached first; the fastest of eight,
which a neighbour cannot make faster). ``benchmarks/import_time.py`` pairs
whole processes instead, which CI's stages running side by side make too
noisy for a test (two totals of 1.2 s each, +0.06 s apart once).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from helpers import exhaustive

import optax_pytree

LIMIT_S = 0.05  # issue 43 (issue 28's target): at most +0.05 s of CPU time over ``import optax``
PAIRS = 8

_LOADED = (
    "import sys, optax\n"
    "before = set(sys.modules)\n"
    "import optax_pytree\n"
    "print(' '.join(sorted(set(sys.modules) - before)))\n"
)


def _fresh(code: str, env: dict[str, str] | None = None) -> str:
    # A new interpreter (not the warm server of tests/warm_python.py: it imported them all).
    command = [sys.executable, "-c", code]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=True, env=env).stdout


def test_importing_the_package_after_optax_loads_the_package_alone_and_each_name_when_read() -> None:
    assert _fresh(_LOADED).split() == ["optax_pytree"]
    names = optax_pytree.__all__
    assert len(names) == 22 and set(names) <= set(dir(optax_pytree))
    for name in names:
        assert getattr(optax_pytree, name) is not None
    assert isinstance(optax_pytree.__version__, str)
    with pytest.raises(AttributeError, match="has no attribute 'wrapp'"):
        optax_pytree.wrapp  # noqa: B018 - the error names it


_TIMED = (
    "import time, optax\n"
    "start = time.process_time()\n"
    "import optax_pytree\n"
    "print(time.process_time() - start)\n"
)


@exhaustive
def test_import_optax_pytree_costs_at_most_five_hundredths_of_a_second_over_optax() -> None:
    # The CPU time of `import optax_pytree` after `import optax`, read in the process itself:
    # two fresh processes' totals (the benchmark's paired method, benchmarks/import_time.py)
    # differ by more than the target on a busy machine (CI's stages side by side), each ~1.2 s.
    with tempfile.TemporaryDirectory(prefix="optax_pytree_import_pycache_") as pycache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        _fresh(_TIMED, env)  # warm-up: the bytecode cache
        samples = [float(_fresh(_TIMED, env)) for _ in range(PAIRS)]
    # The least: a busy neighbour only ever adds to a process's time.
    extra = min(samples)
    assert extra <= LIMIT_S, f"import optax_pytree after optax: {extra:+.4f} s CPU (fastest of {PAIRS})"
