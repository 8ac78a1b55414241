"""Classify: containers of wrapped values, and a wrapped value's structure: a configuration's children.

``optax.chain(a, b)`` binds the tuple ``(a, b)``; ``optax.named_chain``
nests strings with them. A :class:`Template` is the static rest of such a
container (wrapped values replaced by ``SLOT``), split from it and merged
back (``_classify`` keys the configuration by it; ``_build`` rebuilds the
container around built children). :func:`structure` is what a wrapped
value's treedef is made of, read without flattening it (kept on its core:
the same for the object's life).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from . import _static
from ._bind import Wrapped, is_wrapped
from ._caches import cache
from ._vocabulary import Role


class _Slot:
    """Where a wrapped value sits in a container's template."""

    def __repr__(self) -> str:
        return "<wrapped>"

    def __reduce__(self) -> str:
        return "SLOT"


SLOT = _Slot()


def _split(value: Any) -> tuple[Any, Any]:
    """(template, child): the static rest of a container, and its wrapped values."""
    if is_wrapped(value):
        return SLOT, value
    if isinstance(value, dict):
        parts = {k: _split(v) for k, v in value.items()}
        return {k: t for k, (t, _) in parts.items()}, {k: c for k, (_, c) in parts.items()}
    if isinstance(value, (tuple, list)):
        parts = [_split(v) for v in value]
        templates, children = [t for t, _ in parts], [c for _, c in parts]
        if isinstance(value, list):
            return templates, children
        if hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*templates), type(value)(*children)
        return tuple(templates), tuple(children)
    return value, None


def _merge(template: Any, child: Any, fn: Callable[[Any], Any]) -> Any:
    if template is SLOT:
        return fn(child)
    if isinstance(template, dict):
        return {k: _merge(t, child[k], fn) for k, t in template.items()}
    if isinstance(template, (tuple, list)):
        items = [_merge(t, c, fn) for t, c in zip(template, child)]
        if isinstance(template, list):
            return items
        return type(template)(*items) if hasattr(template, "_fields") else tuple(items)
    return template


class Template:
    """The static part of a container that holds wrapped values.

    ``optax.named_chain(("clip", a), ("adam", b))`` binds ``(("clip", a),
    ("adam", b))``: the wrapped ``a`` and ``b`` are children, the strings and
    the nesting are static. The child handed to JAX is the container with
    every non-wrapped value replaced by ``None``, so key paths read naturally
    (``.transforms[1][1].learning_rate``). Dicts keep their order (JAX sorts
    keys; ``optax.monitor`` builds its state in the order given).
    """

    __slots__ = ("flat", "key", "template")

    def __init__(self, template: Any):
        self.template = template
        self.key = _static.freeze(template)
        # A plain tuple, list or dict of wrapped values only: merged item by item.
        kind = type(template)
        items = template.values() if kind is dict else template if kind in (tuple, list) else ()
        self.flat = kind if items and all(t is SLOT for t in items) else None

    @classmethod
    def split(cls, value: Any) -> tuple[Template, Any]:
        template, child = _split(value)
        return cls(template), child

    def merge(self, child: Any, fn: Callable[[Any], Any] = lambda w: w) -> Any:
        flat = self.flat
        if flat is dict:
            return {k: fn(child[k]) for k in self.template}
        if flat is not None:
            return flat([fn(c) for c in child])
        return _merge(self.template, child, fn)


def structure(w: Any) -> Any:
    """What a wrapped value's treedef is made of (its spec, its children's, its leaves'
    structures), read without flattening it: a parent's wrap does not make the leaves of
    a child whose leaves are still pending (``_leaves.Pending``)."""
    core = w._core
    try:
        return core.structure  # the same for the object's life: its leaves' structures do not change
    except AttributeError:
        pass
    spec = core.spec
    pending = core.pending
    parts: list[Any] = []
    if pending is not None:  # its dynamic leaves are Python numbers: one leaf each
        for name in spec.leaf_names:
            if spec.roles[name] != Role.DYNAMIC:
                parts.append(structure_of(pending.children[name]))
    else:
        for name, leaf in zip(spec.leaf_names, core.stored_leaves):
            if spec.roles[name] != Role.DYNAMIC:
                parts.append(structure_of(leaf))
            elif not isinstance(leaf, (jax.Array, np.ndarray)):  # a pytree forced dynamic
                parts.append(jax.tree_util.tree_structure(leaf))
    core.structure = found = (spec, tuple(parts))
    return found


def structure_of(value: Any) -> Any:
    """The structure of a child: a wrapped value's, or a container's holding wrapped values."""
    if is_wrapped(value):
        return structure(value)
    leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_wrapped)
    return (treedef, tuple(structure(x) if is_wrapped(x) else None for x in leaves))


def flat_container(value: Any) -> tuple[Template, Any] | None:
    """A tuple, list or dict of wrapped values only (``chain``'s, ``partition``'s): its
    template (interned per shape) and its structure (its treedef, its items'); else None.

    What ``Template.split`` and ``structure_of`` give it, without walking it:
    the template and treedef are one per shape (the keys, the length).
    """
    kind = type(value)
    if kind is dict:
        items = value.values()
        shape: Any = (dict, tuple(value))
    elif kind is tuple or kind is list:
        items = value
        shape = (kind, len(value))
    else:
        return None
    if not items:
        return None
    for x in items:
        if not isinstance(x, Wrapped):
            return None
    found = _FLAT.get(shape)
    if found is None:
        template, child = Template.split(value)
        found = (template, jax.tree_util.tree_structure(child, is_leaf=is_wrapped))
        _FLAT.setdefault(shape, found)
    return found[0], (found[1], tuple([structure(x) for x in items]))


# The templates and treedefs of containers of wrapped values only, per shape.
_FLAT = cache("(container type, keys or length) -> the template and treedef of its wrapped items", 1024)


def contains_wrapped(value: Any) -> bool:
    return any(is_wrapped(x) for x in jax.tree_util.tree_leaves(value, is_leaf=is_wrapped))
