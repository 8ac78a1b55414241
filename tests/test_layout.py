"""The package's layout, by concept: the step map holds every module, and the imports show every arrow.

- every module is on the step map (``optax_pytree/ARCHITECTURE.md``): listed
  once, under the step that the first line of its docstring names, so that
  the map and the modules cannot drift apart;
- the import graph is a DAG, and no module reaches into another without an
  import arrow (a hook set at import time hides one);
- importing the package loads nothing heavy;
- a generous line cap, as a backstop only.

Read from the source with ``ast`` (nothing is imported): every
``from . import x``, ``from .x import y`` and ``import optax_pytree.x``,
at module level or inside a function (a lazy import is still an arrow).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import optax_pytree

PACKAGE = Path(optax_pytree.__file__).resolve().parent
ROOT = PACKAGE.parent
ARCHITECTURE = PACKAGE / "ARCHITECTURE.md"
# A backstop, not the rule: the rules are the concepts (the step map) and the
# arrows (the graph). A cap close to the modules' lengths got modules cut for
# their line count, one concept in two files (``_explain`` and how two static
# values differ, until they were merged back). Past this many lines a module
# is too long to read in one sitting: ask which concepts it holds.
MAX_LINES = 1000
# Modules whose docstrings the consolidation of the analysis (its own branch)
# rewrites: their first lines name their step there. A test below fails once
# one does here, or is gone: then take it out.
FIRST_LINE_PENDING: set[str] = set()
# On the step map, not in the package yet (the same consolidation): the jaxpr
# interpreters and the constants' rewrite in one module. Take it out once it exists.
COMING: set[str] = set()

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


def _from_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` reads, in ``package``."""
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = _from_target(node, package)
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


def test_no_library_module_is_past_the_backstop() -> None:
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    over = {n: lines for n, lines in long.items() if lines > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines, too long to read in one sitting: {over}"


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


# --------------------------------------------------------------------------
# Hooks: a module reaching into another without an import arrow.


def _hooks(name: str, path: Path, known: set[str]) -> list[str]:
    """Where ``name`` reaches into another module of the package past the import graph.

    ``other.attr = value`` (or ``setattr(other, ...)``, ``del other.attr``) on
    a module of the package, anywhere; and, at module level, a function or
    class of its own handed to a function of the package in a call made for
    its effect alone (its result dropped): a callback registered at import
    time, which the other module then calls with no import of this one. A
    value built from them (``x = other.Tree(f)``) and handed over in a call
    is an explicit hand-down, as ``make_child`` is.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # local names of package modules
    members: set[str] = set()  # local names of things imported from package modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _from_target(node, package)
            for a in node.names:
                local = a.asname or a.name
                if f"{target}.{a.name}" in known:
                    modules.add(local)
                elif target in known:
                    members.add(local)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    modules.add(a.asname or a.name.partition(".")[0])

    def on_module(node: ast.AST) -> bool:
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id in modules

    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and on_module(node.args[0])
        ):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
        found.extend(
            f"{name}:{t.lineno}: {ast.unparse(t)} set"
            for t in targets
            if isinstance(t, ast.Attribute) and on_module(t.value)
        )

    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}

    def module_level(statements: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in statements:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            out.append(statement)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list):
                    out.extend(module_level([s for s in inner if isinstance(s, ast.stmt)]))
                    for handler in inner:
                        if isinstance(handler, ast.ExceptHandler):
                            out.extend(module_level(handler.body))
        return out

    for statement in module_level(tree.body):
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        f = call.func
        if not (
            (isinstance(f, ast.Name) and f.id in members) or (isinstance(f, ast.Attribute) and on_module(f))
        ):
            continue
        handed = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(a, ast.Lambda) or (isinstance(a, ast.Name) and a.id in own) for a in handed):
            found.append(f"{name}:{call.lineno}: {ast.unparse(call)} at import")
    return found


def test_no_module_reaches_into_another_past_its_imports() -> None:
    modules = _modules()
    known = set(modules)
    found = [hook for n, p in modules.items() for hook in _hooks(n, p, known)]
    assert not found, (
        "a hook hides an import arrow: import the module that is called, and where that makes "
        f"a circle, hand the function down in a call (as _tree.make_child is): {found}"
    )


def test_the_hooks_are_seen_where_there_are_some(tmp_path: Path) -> None:
    planted = {
        "a": "from . import b\nb.hook = print\n",
        "c": "from .b import set_hook\ndef f():\n    pass\nset_hook(f)\n",
        "d": "from . import b\ndef g():\n    setattr(b, 'x', 1)\n",
        "e": "import pkg.b as other\ntry:\n    other.install(lambda: None)\nexcept ImportError:\n    pass\n",
        # explicit: a value handed down, a call with no callback, a callback of another module
        "f": "from . import b\nfrom .b import g\ndef h():\n    pass\nX = b.Tree(h)\nb.register()\nb.use(g)\n",
    }
    for n, text in planted.items():
        (tmp_path / f"{n}.py").write_text(text)
    known = {f"pkg.{n}" for n in (*planted, "b")}
    seen = {n: len(_hooks(f"pkg.{n}", tmp_path / f"{n}.py", known)) for n in planted}
    assert seen == {"a": 1, "c": 1, "d": 1, "e": 1, "f": 0}


# --------------------------------------------------------------------------
# The step map: ARCHITECTURE.md and the first line of every module's docstring.


def _step_map() -> dict[str, str]:
    """Module -> the step it is listed under: the ``Modules:`` line under each ``## `` heading."""
    found: dict[str, str] = {}
    step = None
    for line in ARCHITECTURE.read_text().splitlines():
        heading = re.match(r"## (?:\d+\. )?(\w+)", line)
        if heading:
            step = heading.group(1)
        elif line.startswith("Modules:"):
            assert step is not None, "a Modules: line before the first step's heading"
            for short in re.findall(r"`([\w.]+)`", line):
                name = short if short == "optax_pytree" else f"optax_pytree.{short}"
                assert name not in found, f"ARCHITECTURE.md lists {name} under {found[name]} and {step}"
                found[name] = step
    return found


def _read_by_users() -> set[str]:
    """Modules whose docstring is written for users: the public ones, and those an API page renders."""
    modules = set(_modules())
    public = {n for n in modules if not any(part.startswith("_") for part in n.split("."))}
    rendered = {
        m
        for page in (ROOT / "docs" / "api").glob("*.md")
        for m in re.findall(r"^::: ([\w.]+)", page.read_text(), re.MULTILINE)
        if m in modules
    }
    return public | rendered


def _first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    return doc.strip().splitlines()[0] if doc and doc.strip() else ""


def test_every_module_is_on_the_step_map() -> None:
    modules, mapped = set(_modules()), _step_map()
    assert len(set(mapped.values())) >= 7, f"the map's steps were not read: {sorted(set(mapped.values()))}"
    assert not modules - mapped.keys(), (
        f"not on the step map (ARCHITECTURE.md): {sorted(modules - mapped.keys())}"
    )
    gone = mapped.keys() - modules - COMING
    assert not gone, f"ARCHITECTURE.md lists modules that do not exist: {sorted(gone)}"
    assert not COMING & modules, f"they exist now: take them out of COMING: {sorted(COMING & modules)}"


def test_every_module_says_its_step_first() -> None:
    modules, mapped, users = _modules(), _step_map(), _read_by_users()
    assert {"optax_pytree", "optax_pytree.nnx", "optax_pytree._sweep"} <= users  # the docs were read
    wrong, done = [], []
    for name, path in modules.items():
        first = _first_line(path)
        assert first, f"{name} has no docstring"
        if name in users or name not in mapped:  # users' prose; off the map: the test above says so
            continue
        says = re.match(rf"{re.escape(mapped[name])}: \S", first) is not None
        if name in FIRST_LINE_PENDING:
            if says:
                done.append(name)
        elif not says:
            wrong.append(f"{name}: {first!r} (listed under {mapped[name]})")
    assert not wrong, (
        "a docstring's first line must start with its step, as in ARCHITECTURE.md: " + "; ".join(wrong)
    )
    assert not done, f"their first lines name their step now: take them out of FIRST_LINE_PENDING: {done}"
    assert FIRST_LINE_PENDING <= set(modules), (
        f"gone: take out of FIRST_LINE_PENDING: {FIRST_LINE_PENDING - set(modules)}"
    )
