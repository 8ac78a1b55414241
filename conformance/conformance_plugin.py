"""The conformance run's pytest plugin: records outcomes; in drop-in mode, test modules see the drop-in.

Loaded by ``run.py`` with ``-p conformance_plugin`` in each pytest
subprocess. It writes one JSON line per test (and per collection error) to
``--conformance-results`` as tests finish, so a file that times out or
crashes still leaves what it ran.

With ``--conformance-mode dropin``, ``builtins.__import__`` is wrapped so that
an ``import`` statement executed *by an optax test module* (a module whose
file is an ``*_test.py`` in optax's folder) that names an optax module gets a :class:`DropInView` of
it instead: an attribute that is one of the objects ``optax_pytree.optax``
(or its ``contrib``, ``schedules``) replaces — found by identity, whatever the
path (``alias.adam``, ``optax.contrib.sam``, ``_schedule.cosine_decay_schedule``,
``transforms.masked``) — is the drop-in's; a submodule of optax is viewed the
same way; anything else is optax's own object. The views exist only in the
test modules' namespaces, bound by their own imports before their bodies use
them (so decorators and module-level tables see the drop-in too); optax's
library modules keep importing each other untouched.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

MODES = ("plain", "dropin")


def optax_dir() -> Path:
    """The installed optax package's folder."""
    spec = importlib.util.find_spec("optax")
    assert spec is not None and spec.submodule_search_locations, "optax is not installed"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def is_optax_test_file(file: object, root: Path) -> bool:
    """Whether a module's ``__file__`` is one of optax's own test files (in ``root``, named ``*_test.py``).

    By file, not by module name: pytest imports a test file of a folder that
    has no ``__init__.py`` (``optax/_src``) as a top-level module
    (``alias_test``).
    """
    if not isinstance(file, str) or not file.endswith("_test.py"):
        return False
    return Path(file).resolve().is_relative_to(root)


def _is_optax_module(value: object) -> bool:
    name = getattr(value, "__name__", None) if isinstance(value, types.ModuleType) else None
    return isinstance(name, str) and (name == "optax" or name.startswith("optax."))


def replacements() -> dict[int, tuple[Any, Any]]:
    """``id(optax object) -> (optax object, drop-in object)`` for every object the drop-in replaces.

    Read from the drop-in modules themselves: a public name of ``optax``,
    ``optax.contrib`` or ``optax.schedules`` whose drop-in attribute is not
    optax's own object. The optax object is kept so that its id stays valid.
    """
    import optax
    import optax.contrib
    import optax.schedules

    import optax_pytree.optax
    import optax_pytree.optax.contrib
    import optax_pytree.optax.schedules

    pairs = (
        (optax, optax_pytree.optax),
        (optax.contrib, optax_pytree.optax.contrib),
        (optax.schedules, optax_pytree.optax.schedules),
    )
    table: dict[int, tuple[Any, Any]] = {}
    for source, dropin in pairs:
        for name in dir(source):
            if name.startswith("_"):
                continue
            # Quietly: reading a deprecated name warns, and building the table is no use of it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    original = getattr(source, name)
                    replaced = getattr(dropin, name)
                except AttributeError:  # listed but gone (an accelerated deprecation)
                    continue
            if replaced is not original and not isinstance(original, types.ModuleType):
                table.setdefault(id(original), (original, replaced))
    return table


class DropIn:
    """The views of optax modules a test module gets, and the names it reached that the drop-in replaced."""

    def __init__(self, table: Mapping[int, tuple[Any, Any]], root: Path) -> None:
        self.table = table
        self.root = root  # optax's folder
        self.test_files: dict[str, bool] = {}  # __file__ -> is_optax_test_file
        self.views: dict[str, DropInView] = {}
        self.used: set[str] = set()  # "optax._src.alias.adam": names resolved to the drop-in's object

    def view(self, module: types.ModuleType) -> DropInView:
        found = self.views.get(module.__name__)
        if found is None or found.conformance_module is not module:
            found = self.views[module.__name__] = DropInView(module, self)
        return found

    def resolve(self, module: types.ModuleType, name: str, value: Any) -> Any:
        if _is_optax_module(value):
            return self.view(value)
        found = self.table.get(id(value))
        if found is not None and found[0] is value:
            self.used.add(f"{module.__name__}.{name}")
            return found[1]
        return value

    def is_test(self, namespace: Mapping[str, Any] | None) -> bool:
        """Whether ``namespace`` is the globals of one of optax's test modules."""
        file = namespace.get("__file__") if namespace is not None else None
        if not isinstance(file, str):
            return False
        found = self.test_files.get(file)
        if found is None:
            found = self.test_files[file] = is_optax_test_file(file, self.root)
        return found

    def import_hook(self, real_import: Any) -> Any:
        """A ``builtins.__import__`` giving views to optax's test modules; ``real_import`` does the work."""

        def __import__(name, globals=None, locals=None, fromlist=(), level=0):
            module = real_import(name, globals, locals, fromlist, level)
            if level == 0 and (name == "optax" or name.startswith("optax.")) and self.is_test(globals):
                return self.view(module)
            return module

        return __import__


class DropInView(types.ModuleType):
    """An optax module as an optax test module sees it in drop-in mode (see the module docstring).

    Reading an attribute reads optax's module and swaps in the drop-in's
    object; setting or deleting one (``mock.patch.object``) acts on optax's
    module, as it would in the plain run.
    """

    conformance_module: types.ModuleType
    conformance_dropin: DropIn

    def __init__(self, module: types.ModuleType, dropin: DropIn) -> None:
        super().__init__(module.__name__, module.__doc__)
        # Straight into the instance dict: __setattr__ forwards to optax's module.
        self.__dict__.update(
            conformance_module=module,
            conformance_dropin=dropin,
            __package__=module.__package__,
            __spec__=module.__spec__,
            __loader__=module.__loader__,
        )

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__["conformance_module"]
        return self.__dict__["conformance_dropin"].resolve(module, name, getattr(module, name))

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.conformance_module, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.conformance_module, name)

    def __dir__(self) -> list[str]:
        return dir(self.conformance_module)

    def __repr__(self) -> str:
        return f"<drop-in view of {self.conformance_module!r}>"


# --------------------------------------------------------------------------
# The pytest hooks.


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "optax_pytree conformance run")
    group.addoption("--conformance-mode", choices=MODES, default="plain", help="plain optax, or the drop-in")
    group.addoption("--conformance-results", default=None, help="a JSON-lines file the outcomes go to")
    group.addoption(
        "--conformance-skip",
        default=None,
        help="a file of node ids, one a line: collected, not run, recorded as unrun (they passed "
        "through the drop-in)",
    )


# How a test collected and not run (``--conformance-skip``) is recorded.
UNRUN = "unrun"


class Recorder:
    """Writes each test's outcome as it finishes; installs the import hook in drop-in mode."""

    def __init__(self, mode: str, path: str | None, skip: str | None = None) -> None:
        self.mode = mode
        self.skip: frozenset[str] = frozenset()
        if skip:
            with open(skip, encoding="utf-8") as f:
                self.skip = frozenset(line.strip() for line in f if line.strip())
        self.out = open(path, "a", encoding="utf-8") if path else None  # open for the whole session
        self.outcomes: dict[str, tuple[str, str]] = {}
        self.dropin: DropIn | None = None
        self.real_import: Any = None

    def write(self, record: dict[str, Any]) -> None:
        if self.out is not None:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        if self.mode == "dropin":
            self.dropin = DropIn(replacements(), optax_dir())
            self.real_import = builtins.__import__
            builtins.__import__ = self.dropin.import_hook(self.real_import)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.real_import is not None:
            builtins.__import__ = self.real_import
            self.real_import = None
        if self.out is not None:
            self.out.close()
            self.out = None

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not self.skip:
            return
        dropped = [item for item in items if item.nodeid in self.skip]
        if dropped:
            items[:] = [item for item in items if item.nodeid not in self.skip]
            config.hook.pytest_deselected(items=dropped)
        for item in dropped:
            self.write(
                {"kind": "test", "nodeid": item.nodeid, "outcome": UNRUN, "message": "not run: skipped"}
            )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.write({"kind": "collect_error", "nodeid": report.nodeid, "error": error_line(report)})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome, message = self.outcomes.get(report.nodeid, ("passed", ""))
        if outcome in ("failed", "error"):  # the first failure is the one reported
            return
        context = getattr(report, "context", None)
        if context is not None:  # a subtest's report (pytest >= 9): its failure fails the test
            if report.failed:
                label = f"[{context.msg}] " if getattr(context, "msg", None) else ""
                self.outcomes[report.nodeid] = ("failed", f"subtest {label}{error_line(report)}")
            return
        xfail = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                outcome, message = ("xpassed", "") if xfail else ("passed", "")
            elif report.skipped:
                outcome, message = ("xfailed", report.wasxfail) if xfail else ("skipped", skip_reason(report))
            else:
                outcome, message = "failed", error_line(report)
        elif report.failed:  # setup or teardown
            outcome, message = "error", error_line(report)
        elif report.skipped:  # skipped in setup (skipTest in setUp, a skip mark)
            outcome, message = "skipped", skip_reason(report)
        self.outcomes[report.nodeid] = (outcome, message)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        outcome, message = self.outcomes.pop(nodeid, ("error", "no report"))
        self.write({"kind": "test", "nodeid": nodeid, "outcome": outcome, "message": message})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        used = sorted(self.dropin.used) if self.dropin is not None else []
        library = ""
        if self.dropin is not None:
            import optax_pytree

            library = str(Path(optax_pytree.__file__).parent)
        self.write({"kind": "session", "mode": self.mode, "dropin_names": used, "library": library})


def error_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The line that says what went wrong: the exception and the first line of its message."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if isinstance(message, str) and message.strip():
        return message.strip().splitlines()[0]
    # A collection error is a text whose "E   " lines hold the exception.
    lines = str(report.longrepr).splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return errors[-1] if errors else next((line.strip() for line in lines if line.strip()), "")


def skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return ""


def pytest_configure(config: pytest.Config) -> None:
    recorder = Recorder(
        str(config.getoption("conformance_mode")),
        config.getoption("conformance_results"),
        config.getoption("conformance_skip"),
    )
    config.pluginmanager.register(recorder, "conformance-recorder")
    # Registered from inside pytest_configure: pluggy calls the recorder's own
    # pytest_configure as a historic hook right away.
