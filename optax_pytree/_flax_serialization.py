"""Feature: flax's serialization (``flax.serialization``, ``flax.training.checkpoints``) of wrapped objects.

flax serializes any tuple with ``_fields`` as a NamedTuple, field by field,
and restores it with ``type(target)(**fields)``: that cannot rebuild a
wrapped transformation, whose static configuration is in the target, not in
its class. flax's registry holds one handler for all NamedTuples, so it is
replaced by one that restores wrapped objects into the target's static
configuration and hands every other NamedTuple to flax's own handler.

Registered once, when first needed: ``optax_pytree.linen``/``nnx`` register at
import; otherwise the first time a wrapped object's ``_fields`` is read with
flax loaded (``_tree.register_with_flax``). Importing optax_pytree does not
import flax. ``_tree`` imports this module and hands :func:`register` what the
handlers make wrapped objects with (a :class:`Tree`), so this module does not
import ``_tree``.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from . import _leaves
from ._bind import is_wrapped
from ._vocabulary import Role


class Tree(NamedTuple):
    """What the handlers make wrapped objects with, handed by ``_tree`` (``_tree._FOR_FLAX``)."""

    classes: tuple[type, ...]  # the wrapped classes (transformation, schedule)
    new: Callable[..., Any]  # ``_tree.new``: an object of a spec, its leaves and carried values
    with_exact: Callable[[Any, Any], Any]  # ``_tree.with_exact``: with the carried values saved


registered = False  # read by ``_tree`` on every ``_fields``: nothing more to do once True
# More wrapped classes, subclasses of those of ``Tree.classes`` (``_watch``'s), and the
# handler that restores them once registered.
_more: list[type] = []
_restore_handler: list[Callable[[Any, Any], Any]] = []


def also(cls: type) -> None:
    """Serializes ``cls``, a subclass of a wrapped class (``_watch``), as the wrapped classes are."""
    _more.append(cls)
    if _restore_handler:
        from flax import serialization

        serialization.register_serialization_state(cls, _state_dict, _restore_handler[0], override=True)


def register(tree: Tree, only_if_loaded: bool = False) -> None:
    """Teaches ``flax.serialization`` wrapped transformations and schedules (once)."""
    global registered
    if registered:
        return
    if only_if_loaded and "flax.serialization" not in sys.modules:
        return
    registered = True
    from flax import serialization

    restore = functools.partial(_restore, tree)
    _restore_handler.append(restore)
    # Looked up by type (schedules; transformations in other flax versions).
    for cls in (*tree.classes, *_more):
        serialization.register_serialization_state(cls, _state_dict, restore, override=True)
    named_tuple = getattr(serialization, "_NamedTuple", None)
    registry = getattr(serialization, "_STATE_DICT_REGISTRY", None)
    if named_tuple is None or registry is None or named_tuple not in registry:  # pragma: no cover
        return  # a flax that no longer looks NamedTuples up under one key: the types above suffice
    to_state_dict, from_state_dict = registry[named_tuple]

    def named_tuple_state_dict(x: Any) -> Any:
        return _state_dict(x) if is_wrapped(x) else to_state_dict(x)

    def restore_named_tuple(x: Any, state_dict: Any) -> Any:
        return restore(x, state_dict) if is_wrapped(x) else from_state_dict(x, state_dict)

    serialization.register_serialization_state(
        named_tuple, named_tuple_state_dict, restore_named_tuple, override=True
    )


def _state_dict(w: Any) -> dict[str, Any]:
    """The dynamic arguments by name (leaves and children), as a NamedTuple's fields."""
    from flax import serialization

    core = w._core
    out = {n: serialization.to_state_dict(x) for n, x in zip(core.spec.leaf_names, core.leaves)}
    if core.exact is not None:  # the carried host values (see Guarded.exact)
        out[_EXACT] = {str(i): serialization.to_state_dict(x) for i, x in enumerate(core.exact)}
    return out


_EXACT = "exact"


def _like(target: Any, restored: Any) -> Any:
    """``restored`` (of the target's spec) of the target's class, where that is a subclass (``_watch``)."""
    if type(restored) is type(target):
        return restored
    structure = jax.tree_util.tree_structure(target)
    return jax.tree_util.tree_unflatten(structure, jax.tree_util.tree_leaves(restored))


def _restore(tree: Tree, target: Any, state_dict: Any) -> Any:
    """``target``'s static configuration with the saved dynamic arguments.

    As flax restores everything: the target gives the structure, the state
    dict the values. Restored arrays take the target's weak types and
    placement (``jit`` keys its cache on both: no retrace after a restore).
    Saved values that take another branch of the factory than the target's
    (a guarded argument) make another static configuration, as ``replace``
    would; a batch of values (a population) keeps the target's.
    """
    from flax import serialization

    core = target._core
    spec = core.spec
    saved_exact = state_dict.get(_EXACT) if isinstance(state_dict, dict) else None
    if saved_exact is not None:
        state_dict = {k: v for k, v in state_dict.items() if k != _EXACT}
    if not isinstance(state_dict, dict) or set(state_dict) != set(spec.leaf_names):
        got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
        raise ValueError(
            f"The dynamic arguments of {spec.info.name} and the state dict do not match: got {got}, "
            f"expected {sorted(spec.leaf_names)} at path {serialization.current_path()}; restore into "
            "a target wrapped from the same factory with the same static arguments"
        )
    leaves = []
    for name, old in zip(spec.leaf_names, core.leaves):
        value = serialization.from_state_dict(old, state_dict[name], name=name)
        if spec.roles[name] == Role.DYNAMIC:
            value = _leaves.restored_leaf(old, value)
        leaves.append(value)
    exact = None
    if core.exact is not None and isinstance(saved_exact, dict) and len(saved_exact) == len(core.exact):
        exact = tuple(
            _leaves.restored_leaf(old, serialization.from_state_dict(old, saved_exact[str(i)], name=str(i)))
            for i, old in enumerate(core.exact)
        )
    restored = _like(target, tree.new(spec, tuple(leaves), exact))
    if spec.guarded and all(np.ndim(leaves[spec.leaf_index[n]]) == 0 for n in spec.guarded):
        # Re-checked: another branch is another configuration.
        return tree.with_exact(restored.replace(), exact)
    if spec.carried_dtypes and exact is None:
        return restored.replace()  # saved without carried values: computed again
    return restored
