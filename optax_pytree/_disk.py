"""Spec: the analyses kept on disk: a second process wraps a configuration seen before without probing it.

The first wrap of a configuration probes the factory and verifies the
result (``_detect``, ``_verify``): three traces of its ``init`` and
``update``, tens of milliseconds, once per process. What they find (an
:class:`~optax_pytree._spec.Analysis`: the static candidates, the guards,
the carried expressions) is a function of the configuration and of the code
that runs, so it is kept in a file named by a digest of both, and a later
process that makes the same configuration with the same code reads it
instead (about a millisecond).

The digest covers:

- the configuration as the in-memory caches key it (``Classified.analysis_key``:
  the factory, each argument's role and static value, the structure of its
  children, the options), in a stable form: functions by their code
  (``marshal``) and module, types by module and name, numbers by their bits.
  A part with no stable form (an object compared by identity, a function of
  a notebook's cell, a custom pytree node) means no disk entry: the
  configuration is analysed in each process, as without this cache;
- the code: the versions of Python, JAX, jaxlib, NumPy (and of the other
  packages named in ``_BY_VERSION``, where loaded), JAX's numeric settings,
  and the size and modification time of every loaded module file of the
  other packages involved (optax, optax_pytree, the factory's package) and
  of every module of the program's own (not installed: its scripts, its
  project, a namespace package's modules), so that an edit of a helper
  anywhere in the program's code is another digest.

A package whose loaded modules hold a function of the program's own (a
monkeypatch of optax's internals, a test's planted fault) is not read from
disk: its code is not what its files say. Within a process the caches work
as before: a later patch, like an edit of a global a factory reads, is not
seen (factories must be pure, see the README).

``OPTAX_PYTREE_ANALYSIS_CACHE``: a directory (default: ``optax_pytree/analyses``
under ``$XDG_CACHE_HOME`` or ``~/.cache``), or ``0`` to turn it off. Any
failure to read or write is a miss, never an error. Files are read with an
unpickler that admits only the types an analysis is made of.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dataclasses
import enum
import functools
import hashlib
import io
import marshal
import os
import pickle
import sys
import types
from typing import Any

import jax
import numpy as np

from ._children import SLOT
from ._classify import Classified
from ._spec import Analysis, Spec
from ._static import ByIdentity
from ._value import ConfigKey

FORMAT = 1  # of the files: a new format is another folder
_ENV = "OPTAX_PYTREE_ANALYSIS_CACHE"
_MAX_PER_FILE = 64  # branches of one configuration
# Packages whose version says what they compute (their files are not read).
_BY_VERSION = frozenset({"jax", "jaxlib", "numpy", "ml_dtypes", "scipy", "opt_einsum", "builtins"})
_FIELDS = tuple(f.name for f in dataclasses.fields(Analysis))  # what a record holds


class _Unstable(Exception):
    """A part of the configuration has no form that means the same in another process."""


def directory() -> str | None:
    """The folder of the analyses, or None when the cache is off."""
    setting = os.environ.get(_ENV)
    if setting is not None:
        if setting.strip().lower() in ("", "0", "off", "false", "no"):
            return None
        return os.path.join(os.path.expanduser(setting), f"v{FORMAT}")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "optax_pytree", "analyses", f"v{FORMAT}")


# --------------------------------------------------------------------------
# Which code a module is.


def _is_installed(path: str, top: str | None = None) -> bool:
    """Whether a module's file is an installed package's: in a ``site-packages`` folder, or in
    one beside its wheel's record (``pip install --target DIR``, a folder on ``PYTHONPATH``)."""
    if "site-packages" in path or "dist-packages" in path:
        return True
    if top is None:
        return False
    parts = os.path.normpath(path).split(os.sep)
    # The folder that holds the top-level package (``DIR/top/...``) or module (``DIR/top.py``).
    where = [i for i, part in enumerate(parts[:-1]) if part == top] or [len(parts) - 1]
    return top in _installed_beside(os.sep.join(parts[: where[-1]]) or os.sep)


@functools.cache
def _installed_beside(folder: str) -> frozenset[str]:
    """The top-level names the wheels recorded in ``folder`` (``*.dist-info/RECORD``) installed."""
    found: set[str] = set()
    try:
        entries = [e for e in os.listdir(folder) if e.endswith(".dist-info")]
    except OSError:
        return frozenset()
    for entry in entries:
        try:
            with open(os.path.join(folder, entry, "RECORD"), encoding="utf-8") as record:
                for line in record:
                    first = line.split(",", 1)[0].split("/", 1)[0]
                    if first and not first.endswith((".dist-info", ".data")):
                        found.add(first.removesuffix(".py"))
        except OSError:
            continue
    return frozenset(found)


def _stdlib_tops() -> frozenset[str]:
    return frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__", "builtins"}


_STDLIB = _stdlib_tops()


def _kind_of(name: str) -> str:
    """``"version"`` (said by the environment), ``"installed"`` or ``"program"`` (the user's code)."""
    top = name.partition(".")[0]
    if top in _BY_VERSION or top in _STDLIB:
        return "version"
    members = _groups().get(top, [])
    if not members:
        raise _Unstable(f"module {name} is not loaded")
    # The first file of the package: its top module's, or a submodule's (a namespace package).
    path = next((p for _, m in members if isinstance(p := getattr(m, "__file__", None), str)), None)
    if path is None:
        if top == "__main__":
            raise _Unstable("__main__ has no file (a notebook, a REPL)")
        return "version"  # a built-in module
    return "installed" if _is_installed(path, top) else "program"


_groups_seen: tuple[int, dict[str, list[tuple[str, Any]]]] = (-1, {})


def _groups() -> dict[str, list[tuple[str, Any]]]:
    """The loaded modules by top-level package (regrouped when a module is imported)."""
    global _groups_seen
    modules = sys.modules
    if _groups_seen[0] != len(modules):
        groups: dict[str, list[tuple[str, Any]]] = {}
        for name, module in list(modules.items()):
            groups.setdefault(name.partition(".")[0], []).append((name, module))
        _groups_seen = (len(modules), groups)
    return _groups_seen[1]


def forget_modules() -> None:
    """Groups the loaded modules again at the next digest (as a new process does; benchmarks)."""
    global _groups_seen
    _groups_seen = (-1, {})


def _files(top: str) -> list[tuple[str, int, int]]:
    """(module, modification time, size) of every loaded module file of package ``top``."""
    out: list[tuple[str, int, int]] = []
    for name, module in _groups().get(top, ()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str):
            continue
        try:
            st = os.stat(path)
        except OSError as e:
            raise _Unstable(f"cannot read {path}") from e
        out.append((name, st.st_mtime_ns, st.st_size))
    out.sort()
    return out


def _program_tops() -> list[str]:
    """The program's own top-level modules (loaded, not installed, not the standard library)."""
    tops: list[str] = []
    for top, members in _groups().items():
        if top in _STDLIB or top in _BY_VERSION:
            continue
        for _, module in members:
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                if not _is_installed(path, top) and not path.startswith(sys.base_prefix):
                    tops.append(top)
                break
    return sorted(tops)


def _patched(top: str, program: frozenset[str]) -> bool:
    """Whether a loaded module of ``top`` holds a function of another of the program's modules."""
    function = types.FunctionType
    for _, module in _groups().get(top, ()):
        try:
            attributes = vars(module)
        except TypeError:
            continue
        for value in list(attributes.values()):
            if type(value) is function:
                home = (value.__module__ or "").partition(".")[0]
                if home != top and (home in program or home == "__main__"):
                    return True
    return False


# --------------------------------------------------------------------------
# The stable form of a configuration's key.


class _Form:
    """Turns an in-memory key into bytes that mean the same in another process."""

    def __init__(self) -> None:
        self.out = io.StringIO()
        self.modules: set[str] = set()

    def add(self, x: Any) -> None:
        w = self.out.write
        kind = type(x)
        if x is None or kind is bool or kind is int or kind is str:
            w(f"{kind.__name__}:{x!r};")
        elif kind is float:
            w(f"f:{x.hex()};")
        elif kind is complex:
            w(f"c:{x.real.hex()},{x.imag.hex()};")
        elif kind is bytes:
            w(f"b:{hashlib.sha256(x).hexdigest()};")
        elif isinstance(x, ConfigKey):
            self.add(x.key)
        elif isinstance(x, enum.Enum):
            self.add_type(kind)
            w(f"={x.name};")
        elif isinstance(x, (tuple, list)):
            if kind not in (tuple, list):  # a named tuple (an expression's key)
                self.add_type(kind)
            w(f"{'(' if isinstance(x, tuple) else '['}{len(x)}:")
            for item in x:
                self.add(item)
            w(")")
        elif kind is dict:
            w(f"{{{len(x)}:")
            for k, v in x.items():
                self.add(k)
                self.add(v)
            w("}")
        elif kind in (frozenset, set):
            parts = []
            for item in x:
                inner = _Form()
                inner.add(item)
                self.modules |= inner.modules
                parts.append(inner.out.getvalue())
            w(f"set{len(parts)}:{''.join(sorted(parts))};")
        elif isinstance(x, type):
            self.add_type(x)
        elif kind is types.CodeType:
            self.add_code(x)
        elif kind is ByIdentity:
            held = x.value
            if type(held) is dict and isinstance(held.get("__name__"), str) and "__builtins__" in held:
                self.add_module(held["__name__"])  # a function's globals: its module
            else:
                raise _Unstable(f"{type(held).__name__} compared by identity")
        elif isinstance(x, Spec):
            self.add(("spec", x.key))
        elif isinstance(x, jax.tree_util.PyTreeDef):
            text = str(x)
            if "CustomNode" in text:
                raise _Unstable("a custom pytree node")
            w(f"tree:{text};")
        elif isinstance(x, np.dtype):
            w(f"dtype:{x.str};")
        elif x is SLOT:
            w("slot;")
        else:
            raise _Unstable(f"a {kind.__name__}")

    def add_type(self, t: type) -> None:
        module = getattr(t, "__module__", "") or ""
        self.add_module(module)
        self.out.write(f"type:{module}.{t.__qualname__};")

    def add_module(self, name: str) -> None:
        self.modules.add(name)
        self.out.write(f"module:{name};")

    def add_code(self, code: types.CodeType) -> None:
        self.out.write(f"code:{hashlib.sha256(marshal.dumps(code)).hexdigest()};")


def _environment(form: _Form) -> None:
    """The versions and settings that decide what JAX computes, and the code's files."""
    config = jax.config
    settings = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion")
    versions = [str(getattr(sys.modules.get(top), "__version__", None)) for top in sorted(_BY_VERSION)]
    form.add((sys.version, *versions, *(str(getattr(config, name, None)) for name in settings)))
    # What the backend's compiler does with constants decides some analyses (``_backends``).
    form.add(("backend", jax.default_backend()))


def digest(classified: Classified) -> str | None:
    """The name of the file of this configuration's analyses, or None (off, no stable form, patched code)."""
    if directory() is None:
        return None
    form = _Form()
    try:
        form.add(("configuration", classified.analysis_key))
        tops = {"optax", "optax_pytree"} | {m.partition(".")[0] for m in form.modules if m}
        program = _program_tops()
        for top in sorted(tops | set(program)):
            kind = _kind_of(top)
            if kind == "version":
                continue
            # An installed package (or this one) holding the program's functions is patched.
            if (kind == "installed" or top == "optax_pytree") and _patched(top, frozenset(program)):
                return None
            form.out.write(f"files:{top}:{_files(top)!r};")  # module names and integers
        _environment(form)
    except _Unstable:
        return None
    return hashlib.sha256(form.out.getvalue().encode()).hexdigest()


# --------------------------------------------------------------------------
# Reading and writing.


def _path(name: str) -> str | None:
    folder = directory()
    return None if folder is None else os.path.join(folder, name[:2], name + ".pkl")


_ALLOWED = {
    "builtins": frozenset(
        {"int", "float", "complex", "bool", "str", "bytes", "tuple", "list", "dict", "set", "frozenset"}
    ),
    "optax_pytree._vocabulary": frozenset({"Kind", "Level", "Mode", "Role"}),
    "optax_pytree._expr": frozenset({"Compare", "Truth", "Fits"}),
}


class _Unpickler(pickle.Unpickler):
    """Admits the types an analysis is made of, nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get(module)
        if allowed is not None and name in allowed:
            return super().find_class(module, name)
        if module.partition(".")[0] == "numpy":
            found = super().find_class(module, name)
            # dtypes and NumPy scalars (a static value's key), and how NumPy rebuilds them
            if found is np.dtype or (isinstance(found, type) and issubclass(found, (np.generic, np.dtype))):
                return found
            if name in ("scalar", "_reconstruct") and module.endswith("multiarray"):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of an analysis")


_STAND_IN = "ShapeDtypeStruct"


def _is_stand_in(x: Any) -> bool:
    return type(x) is tuple and len(x) == 3 and x[0] == _STAND_IN


def _record(analysis: Analysis) -> dict[str, Any]:
    record = {name: getattr(analysis, name) for name in _FIELDS}
    # The stand-in parameters as (marker, shape, dtype): a jax.ShapeDtypeStruct
    # pickles differently from one JAX to another.
    record["params"] = jax.tree_util.tree_map(
        lambda x: (
            (_STAND_IN, tuple(x.shape), np.dtype(x.dtype).str) if isinstance(x, jax.ShapeDtypeStruct) else x
        ),
        record["params"],
    )
    return record


def _analysis(record: dict[str, Any]) -> Analysis:
    params = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x[1], np.dtype(x[2])) if _is_stand_in(x) else x,
        record["params"],
        is_leaf=_is_stand_in,
    )
    return Analysis(**{**record, "params": params})


def _read(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            records = _Unpickler(f).load()
    except Exception:  # noqa: BLE001 - missing, partial or foreign: a miss
        return []
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and set(r) == set(_FIELDS) for r in records
    ):
        return []
    return records


def load(name: str) -> list[Analysis]:
    """The analyses kept under ``name`` (one per branch seen), or none."""
    path = _path(name)
    if path is None:
        return []
    try:
        return [_analysis(r) for r in _read(path)]
    except Exception:  # noqa: BLE001 - a record of another shape: a miss
        return []


def store(name: str, analysis: Analysis) -> None:
    """Keeps ``analysis`` under ``name`` with the branches already there (best effort)."""
    path = _path(name)
    if path is None:
        return
    try:
        record = _record(analysis)
        data = pickle.dumps(record, protocol=4)
        records = [r for r in _read(path) if pickle.dumps(r, protocol=4) != data]
        records = [*records, record][-_MAX_PER_FILE:]
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        import tempfile  # here: not a cost of the first wrap that reads

        fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(records, f, protocol=4)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except Exception:  # noqa: BLE001 - a read-only home, a full disk: the next process analyses again
        return
