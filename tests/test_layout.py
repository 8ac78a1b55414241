"""The package's layout: its import graph is a DAG and no module is too long to read in one sitting.

Read from the source with ``ast`` (nothing is imported): every
``from . import x``, ``from .x import y`` and ``import optax_pytree.x``,
at module level or inside a function (a lazy import is still an arrow).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import optax_pytree

PACKAGE = Path(optax_pytree.__file__).resolve().parent
MAX_LINES = 550
# Modules that hold one concept at a greater length: split, they would be one
# concept in two files. ``_closures``: every captured value, from reading the
# code to rebuilding the callable (issue 35: one home). ``_explain``: the walk
# of two pytrees and how two static values differ, in words (one feature).
LONGER = {"optax_pytree._closures": 900, "optax_pytree._explain": 950}

# What ``import optax_pytree`` and ``import optax_pytree.optax`` must not load
# (issue #28): the optional frameworks, imported by the modules that need
# them when first used (``optax_pytree.nnx``, the first checkpoint); and the
# analysis of a configuration (the probe, the verification and its numpy
# evaluation of jaxprs), imported at the first wrap.
HEAVY = (
    "flax",
    "orbax",
    "equinox",
    "matplotlib",
    "optax_pytree._pipeline",
    "optax_pytree._detect",
    "optax_pytree._verify",
    "optax_pytree._disk",
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in relative.parts if p != "__init__"]
        out[".".join(["optax_pytree", *parts])] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        found.update(c for c in candidates if c in known and c != name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    # A package's face (``__init__``) hands names on: its arrows are not the design's.
    return {
        n: _imports(n, p, known) - {"optax_pytree"}
        for n, p in modules.items()
        if p.name != "__init__.py" or n != "optax_pytree"
    }


def test_the_import_graph_has_no_circle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cycle = [*stack[stack.index(m) :], m]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert len(graph) > 20  # the walk saw the package


def test_no_library_module_is_over_550_lines() -> None:
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    over = {n: lines for n, lines in long.items() if lines > LONGER.get(n, MAX_LINES)}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_the_graph_sees_a_circle_when_there_is_one(tmp_path: Path) -> None:
    # The test above cannot pass vacuously: the same reading finds the
    # arrows of a planted pair.
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from . import b\n")
    b.write_text("def f():\n    from .a import g\n")
    known = {"pkg.a", "pkg.b"}
    assert _imports("pkg.a", a, known) == {"pkg.b"}
    assert _imports("pkg.b", b, known) == {"pkg.a"}


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_importing_the_package_loads_nothing_heavy() -> None:
    # A new interpreter (not the warm server of tests/warm_python.py: it imported them all).
    code = (
        "import sys, optax, optax.contrib\n"
        "before = set(sys.modules)\n"
        "import optax_pytree, optax_pytree.optax\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))\n"
    )
    command = [sys.executable, "-c", code]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    loaded = result.stdout.split()
    assert "optax_pytree._tree" in loaded  # it did import the package
    assert _heavy(loaded) == [], "imported with the package; import it where it is first used"
    assert _heavy(["optax_pytree._verify", "orbax.checkpoint", "optax_pytree._tree"]) == [
        "optax_pytree._verify",
        "orbax.checkpoint",
    ]
