"""Feature: paths to a hyperparameter inside a configuration, for ``grid``: ``"args[1].learning_rate"``.

Written as ``jax.tree_util.keystr`` writes a leaf's key path, so a path
printed from ``jax.tree_util.tree_flatten_with_path(tx)`` is one ``grid``
takes; read here, and followed into wrapped objects (through ``replace``,
which re-checks every value), dicts, lists and tuples.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import ast
import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from . import _bind
from ._bind import is_wrapped
from ._tree import name_of

_NAME = re.compile(r"\.?([A-Za-z_]\w*)")
_INDEX = re.compile(r"\[\s*(-?\d+)\s*\]")
_KEY = re.compile(r"""\[\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*\]""")


def parse(path: str) -> tuple[tuple[str, Any], ...]:
    """``"args[1].learning_rate"`` -> ``(("name", "args"), ("index", 1), ("name", "learning_rate"))``."""
    if not isinstance(path, str):  # pyright: ignore[reportUnnecessaryIsInstance] - user data
        raise TypeError(f"optax_pytree.grid: a path must be a string, got {path!r}")
    tokens: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(path):
        if m := _NAME.match(path, pos):
            if m.group(0).startswith(".") or pos == 0:
                tokens.append(("name", m.group(1)))
                pos = m.end()
                continue
        if m := _INDEX.match(path, pos):
            tokens.append(("index", int(m.group(1))))
        elif m := _KEY.match(path, pos):
            tokens.append(("key", ast.literal_eval(m.group(1))))
        else:
            raise ValueError(
                f"optax_pytree.grid: cannot read the path {path!r} at position {pos}; write it as "
                "jax.tree_util.keystr writes the leaf's key path, e.g. 'learning_rate', "
                "'args[1].learning_rate' or \"transforms['fast'].learning_rate\""
            )
        pos = m.end()
    if not tokens:
        raise ValueError("optax_pytree.grid: empty path")
    return tuple(tokens)


def keystr(tokens: Sequence[tuple[str, Any]]) -> str:
    """The path as ``jax.tree_util.keystr`` writes it, to match leaf key paths."""
    return "".join(f".{v}" if kind == "name" else f"[{v!r}]" for kind, v in tokens)


def set_at(obj: Any, tokens: Sequence[tuple[str, Any]], value: Any, path: str) -> Any:
    """``obj`` with the value at ``tokens`` replaced; wrapped objects via ``replace``."""
    if not tokens:
        return value
    (kind, key), rest = tokens[0], tokens[1:]
    if is_wrapped(obj):
        hyperparams = obj.hyperparams
        if kind != "name" or key not in hyperparams:
            hint = _bind.did_you_mean(key, hyperparams) if kind == "name" else ""
            raise _bind.UnknownArgumentError(
                f"optax_pytree.grid: path {path!r}: {name_of(obj)} has no argument {key!r}; "
                f"its arguments are {list(hyperparams)}{hint}"
            )
        if key in obj.static_argnames:
            why = " (found by automatic detection)" if key in obj.detected_static_argnames else ""
            raise ValueError(
                f"optax_pytree.grid: path {path!r}: argument {key!r} of {name_of(obj)} is static{why}, "
                f"so its value is part of the compiled program and cannot vary across a batch; "
                "sweep it with a Python loop (one compilation per value)"
            )
        return obj.replace(**{key: set_at(hyperparams[key], rest, value, path)})
    if isinstance(obj, dict) and kind != "name" and key in obj:
        return {k: set_at(v, rest, value, path) if k == key else v for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and kind == "index" and -len(obj) <= key < len(obj):
        items = list(obj)
        items[key] = set_at(items[key], rest, value, path)
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    raise ValueError(f"optax_pytree.grid: path {path!r}: no {keystr([tokens[0]])!r} in {short(obj)}")


def short(x: Any) -> str:
    """A short description of a value for error messages."""
    if is_wrapped(x):
        return f"wrap({name_of(x)}, ...)"
    if isinstance(x, (jax.Array, np.ndarray)):
        return f"a dynamic {x.dtype.name}{list(x.shape)}"
    if isinstance(x, (list, tuple, dict)):
        return f"a {type(x).__name__} of {len(x)} items"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def owns(leaf_path: str, prefix: str) -> bool:
    """Whether ``leaf_path`` is a carried host value (``.exact[0]``) of an object on the way to ``prefix``.

    Those are computed from the object's arguments (see ``Guarded.exact``):
    a member's own, not the base's.
    """
    owner, found, _ = leaf_path.rpartition(".exact[")
    return bool(found) and (owner == "" or under(prefix, owner))


def under(leaf_path: str, prefix: str) -> bool:
    return leaf_path == prefix or (leaf_path.startswith(prefix) and leaf_path[len(prefix)] in ".[")
