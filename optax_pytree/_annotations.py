"""Bind: type annotations as text, optax's aliases by name (``optax.ScalarOrSchedule``).

Used by the stub generator (``_stubs``) for the drop-in's signatures, and by
``_classify`` to name an argument's annotation in a message.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import builtins
import collections.abc
import functools
import operator
import sys
import types
import typing
from typing import Any

from . import _bind


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


class Renderer:
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
