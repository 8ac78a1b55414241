"""Type stubs of the drop-in modules, written from optax's own signatures.

The drop-in modules (``optax_pytree.optax`` and its ``contrib`` and
``schedules``) are filled from optax at import time, which no type checker can
follow. Their ``.pyi`` stubs give every factory optax's parameters and
annotations and the wrapped return type, so an editor completes
``optax_pytree.optax.adam(learning_rate=...)`` and flags
``adam(learning_rat=...)``. Everything else is optax's, re-exported.

Regenerate after upgrading optax (a test fails when they drift)::

    python -m optax_pytree._stubs          # rewrites optax_pytree/optax/*.pyi
    python -m optax_pytree._stubs --check  # exit status 1 if they are stale
"""

from __future__ import annotations

import ast
import builtins
import collections.abc
import functools
import inspect
import operator
import sys
import types
import typing
from pathlib import Path
from typing import Any

from . import _bind, _catalog
from ._vocabulary import Kind

MODULES = {"optax": "__init__.pyi", "optax.contrib": "contrib.pyi", "optax.schedules": "schedules.pyi"}
HERE = Path(__file__).resolve().parent / "optax"
_RETURNS = {Kind.TRANSFORMATION: "PyTreeTransformation", Kind.SCHEDULE: "PyTreeSchedule"}


def _aliases() -> list[tuple[Any, str]]:
    """Type aliases optax annotates with, to print by name rather than expanded."""
    import jax
    import optax

    out = []
    for owner, text in ((jax.typing, "jax.typing"), (optax, "optax")):
        for name in (
            "ArrayLike",
            "DTypeLike",
            "ScalarOrSchedule",
            "Schedule",
            "Params",
            "Updates",
            "OptState",
        ):
            alias = getattr(owner, name, None)
            if alias is not None and typing.get_origin(alias) is not None:
                out.append((alias, f"{text}.{name}"))
    return out


class _Renderer:
    """Annotations as source text, collecting the modules they need."""

    def __init__(self) -> None:
        self.imports: set[str] = set()
        self.aliases = _aliases()

    def _alias(self, t: Any) -> str | None:
        for alias, text in self.aliases:
            try:
                if t == alias:
                    self.imports.add(text.rpartition(".")[0])
                    return text
            except Exception:  # noqa: BLE001 - typing objects that do not compare
                continue
        return None

    def __call__(self, t: Any) -> str:
        named = self._alias(t)
        if named is not None:
            return named
        if t is Any or isinstance(t, (typing.TypeVar, str, typing.ForwardRef)):
            return "typing.Any"  # unresolved or generic: Any is honest
        if t is None or t is type(None):
            return "None"
        if t is Ellipsis:
            return "..."
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Union or isinstance(t, types.UnionType):
            rest = tuple(a for a in args if a is not type(None))
            if len(rest) < len(args) and len(rest) > 1:  # Optional[alias]
                named = self._alias(functools.reduce(operator.or_, rest))
                if named is not None:
                    return f"{named} | None"
            return " | ".join(dict.fromkeys(self(a) for a in args))
        if origin is typing.Literal:
            return f"typing.Literal[{', '.join(repr(a) for a in args)}]"
        if origin is collections.abc.Callable:
            if not args:
                return "collections.abc.Callable[..., typing.Any]"
            params, result = args[:-1], args[-1]
            if len(params) == 1 and params[0] is Ellipsis:
                return f"collections.abc.Callable[..., {self(result)}]"
            return f"collections.abc.Callable[[{', '.join(self(a) for a in params)}], {self(result)}]"
        if origin is not None:
            inner = ", ".join(self(a) for a in args) if args else ""
            base = self(origin)
            return f"{base}[{inner}]" if inner and base != "typing.Any" else base
        if isinstance(t, type):
            return self._class(t)
        return "typing.Any"

    def _class(self, cls: type) -> str:
        if cls.__module__ == "builtins":
            return cls.__qualname__ if hasattr(builtins, cls.__qualname__) else "typing.Any"
        public = _bind.optax_name(cls)
        if public is not None:
            module, _, _ = public.rpartition(".")
            self.imports.add(module)
            return public
        module = cls.__module__
        top = sys.modules.get(module.split(".")[0])
        short = cls.__name__.rpartition(".")[2]
        if top is not None and getattr(top, short, None) is cls:  # jax.Array, not jaxlib's
            self.imports.add(top.__name__)
            return f"{top.__name__}.{short}"
        if "<locals>" in cls.__qualname__ or module == "__main__":
            return "typing.Any"
        self.imports.add(module)
        return f"{module}.{cls.__qualname__}"


def _hints(factory: Any) -> dict[str, Any]:
    target = factory
    if isinstance(factory, functools.partial):
        target = factory.func
    if inspect.isclass(factory):
        target = factory.__init__
    try:
        return typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - unresolvable annotations: the raw ones (rendered as Any)
        return {}


def _signature(name: str, factory: Any, kind: Kind, render: _Renderer) -> str:
    signature = inspect.signature(factory)
    hints = _hints(factory)
    parts: list[str] = []
    seen_keyword_only = False
    for i, p in enumerate(signature.parameters.values()):
        annotation = hints.get(p.name, p.annotation)
        text = "" if annotation is inspect.Parameter.empty else f": {render(annotation)}"
        default = "" if p.default is inspect.Parameter.empty else " = ..."
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}{text}")
            seen_keyword_only = True
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}{text}")
        else:
            if p.kind is p.KEYWORD_ONLY and not seen_keyword_only:
                parts.append("*")
                seen_keyword_only = True
            parts.append(f"{p.name}{text}{default}")
        last_positional_only = p.kind is p.POSITIONAL_ONLY and (
            i + 1 == len(signature.parameters)
            or list(signature.parameters.values())[i + 1].kind is not p.POSITIONAL_ONLY
        )
        if last_positional_only:
            parts.append("/")
    return f"def {name}({', '.join(parts)}) -> {_RETURNS[kind]}: ..."


def render(module_name: str) -> str:
    """The stub of the drop-in version of ``module_name``."""
    import optax

    module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
    r = _Renderer()
    defs, reexports, deprecated_names = [], [], []
    for name in _catalog.public_names(module):
        try:
            obj, deprecated = _catalog.get_quietly(module, name)
        except AttributeError:  # listed but removed
            continue
        if deprecated:
            if obj is not None:
                deprecated_names.append(name)
            continue
        kind = _catalog.factory_kind(obj)
        if kind is None:
            reexports.append(name)  # optax's own object, as the drop-in has it
        else:
            defs.append(_signature(name, obj, kind, r))
    submodules = sorted(
        n
        for n in dir(module)
        if not n.startswith("_")
        and inspect.ismodule(getattr(module, n, None))
        and getattr(module, n).__name__.startswith(module_name + ".")
        and n not in ("contrib", "schedules")
    )
    dropin = "optax_pytree." + module_name
    lines = [
        f'"""Stub of ``{dropin}``: optax {optax.__version__}\'s factories, returning pytrees."""',
        "",
        f"# Generated by `python -m optax_pytree._stubs` from optax {optax.__version__}; do not edit.",
        "# ruff: noqa",
        *(f"import {m}" for m in sorted({"collections.abc", "typing", *r.imports})),
        "",
        "from optax_pytree import PyTreeSchedule, PyTreeTransformation",
        *(f"from {module_name} import {n} as {n}" for n in [*submodules, *reexports]),
    ]
    if module_name == "optax":
        lines.append("from . import contrib as contrib, schedules as schedules")
        lines += ["", "__version__: str"]
    if deprecated_names:
        lines += ["", "# Deprecated by optax: using one warns as optax does."]
        lines += [f"{n}: typing.Any" for n in deprecated_names]
    lines += ["", *defs, ""]
    return "\n".join(lines)


def stub_version() -> str | None:
    """The optax version the stubs on disk were generated from."""
    path = HERE / MODULES["optax"]
    return _stub_version(path.read_text()) if path.exists() else None


def _stub_version(text: str) -> str | None:
    marker = "from optax "
    for line in text.splitlines():
        if line.startswith("# Generated by") and marker in line:
            return line.split(marker, 1)[1].split(";", 1)[0]
    return None


def _stub_parameters(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
            out[node.name] = set(names)
    return out


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


def problems() -> list[str]:
    """How the stubs on disk differ from what the installed optax gives (empty: current).

    With the optax they were generated from, they must be identical. With a
    newer optax, every factory and parameter it has must be in them (its
    additions need a regeneration). An older optax is not checked (see
    :func:`stub_version`): the stubs describe a newer optax, by design.
    """
    import optax

    out = []
    for module_name, filename in MODULES.items():
        path = HERE / filename
        fresh = render(module_name)
        if not path.exists():
            out.append(f"{path} is missing")
            continue
        text = path.read_text()
        generated = _stub_version(text) or "0"
        if generated == optax.__version__:
            if text != fresh:
                out.append(f"{path} differs from the stub of optax {optax.__version__}")
            continue
        if _version(optax.__version__) < _version(generated):
            continue
        have, want = _stub_parameters(text), _stub_parameters(fresh)
        for name, params in want.items():
            if name not in have:
                out.append(f"{path}: no stub for {module_name}.{name}")
            elif params - have[name]:
                out.append(f"{path}: {module_name}.{name} lacks parameters {sorted(params - have[name])}")
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = problems()
        for line in found:
            print(line)
        if found:
            print("regenerate with: python -m optax_pytree._stubs")
        return 1 if found else 0
    for module_name, filename in MODULES.items():
        (HERE / filename).write_text(render(module_name))
        print(f"wrote {HERE / filename}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
