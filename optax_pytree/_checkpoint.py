"""Checkpoints of wrapped optimizers that refuse a template of another configuration.

Orbax saves a pytree's leaves by key path and restores them into the structure
of a template. The static configuration of a wrapped optimizer (``nesterov``,
a mask, the factory itself) is aux data, not a leaf, so orbax neither saves nor
checks it: restoring ``adam(nesterov=False)`` into an ``adam(nesterov=True)``
template succeeds silently. A *signature* (each wrapped object's static
configuration and each leaf's shape and dtype, by key path) is saved in the
checkpoint's metadata and compared with the template's before restoring.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _leaves, _trace_context  # noqa: F401 - _trace_context: imported for its effect
from ._bind import is_wrapped, public_name
from ._stateful import PyTreeTransformationWithState
from ._tree import spec_of
from ._vocabulary import Role

__all__ = ["checkpoint_signature", "restore_checkpoint", "save_checkpoint"]

# orbax is imported at the first save or restore; _trace_context says why
# JAX's trace context is set before that (imported here and by _tree).
_ocp: Any = None  # orbax.checkpoint, once imported by _orbax()

_METADATA_KEY = "optax_pytree"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _is_node(x: Any) -> bool:
    return is_wrapped(x) or isinstance(x, PyTreeTransformationWithState)


def _render(value: Any) -> str:
    """A static value as text that is the same in every process (no addresses)."""
    if is_wrapped(value):
        return _describe_node(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_render(k)}: {_render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_render(v) for v in value)
        if hasattr(value, "_fields"):
            return f"{type(value).__qualname__}({items})"
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, functools.partial):
        args = [_render(a) for a in value.args] + [f"{k}={_render(v)}" for k, v in value.keywords.items()]
        return f"partial({', '.join([_render(value.func), *args])})"
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        a = np.asarray(value)
        return f"array({a.tolist()!r}, dtype={a.dtype.name})"
    if isinstance(value, np.dtype):
        return f"dtype({value.name})"
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return public_name(value)
    return _ADDRESS.sub("", repr(value))


def _describe_node(x: Any) -> str:
    if isinstance(x, PyTreeTransformationWithState):
        return "with_state(initialized)" if x.initialized else "with_state(uninitialized)"
    spec = spec_of(x)
    parts = []
    for name, role in spec.roles.items():
        if role == Role.STATIC:
            parts.append(f"{name}={_render(spec.static[name])}")
        elif name in spec.templates:  # a container of wrapped values: its static part
            parts.append(f"{name}={_render(spec.templates[name].template)}")
    if spec.guards:  # the branches its guarded values take
        parts.append(f"guards=[{'; '.join(spec.guard_text())}]")
    return f"{spec.info.name}({', '.join(parts)})"


def _describe_leaf(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return _leaves.aval_text(x.shape, x.dtype)
    if isinstance(x, (bool, int, float, complex)):  # a Python number: its type, not its value
        return type(x).__name__
    return _render(x)


def _walk(tree: Any, prefix: str, out: dict[str, str]) -> None:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is not tree and _is_node(x))
    for path, x in flat:
        key = prefix + jax.tree_util.keystr(path)
        if _is_node(x):
            out[key] = _describe_node(x)
            _walk(x, key, out)
        else:
            out[key] = _describe_leaf(x)


def checkpoint_signature(tree: Any, *, expected: dict[str, str] | None = None) -> dict[str, str]:
    """The static configuration and leaf shapes of a pytree, by key path.

    For every wrapped transformation, schedule or stateful optimizer in
    ``tree`` (at any depth): its factory and static arguments; for every leaf:
    its dtype and shape. The result is JSON-compatible, to be saved with a
    checkpoint (``custom_metadata=``) and compared with a template's before
    restoring: orbax checks neither aux data nor, by itself, the factory.

    Args:
        tree: any pytree (a stateful optimizer, a train state holding one, a
            wrapped transformation); arrays or ``jax.ShapeDtypeStruct`` leaves.
        expected: a signature read from a checkpoint; if given, the two must
            be equal.

    Returns:
        Key path (``jax.tree_util.keystr``) -> description.

    Raises:
        ValueError: ``expected`` differs; the message lists what differs.

    Examples:
        >>> import optax, optax_pytree as opx
        >>> sig = opx.checkpoint_signature(opx.wrap(optax.adam, 1e-3))
        >>> sig[""], sig[".learning_rate"]
        ('optax.adam(mu_dtype=None, nesterov=False)', 'float32[]')
        >>> template = opx.wrap(optax.adam, 1e-3, nesterov=True)
        >>> opx.checkpoint_signature(template, expected=sig)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: optax_pytree: the static configuration differs from the checkpoint's:
          (root): saved optax.adam(..., nesterov=False), template optax.adam(..., nesterov=True)
    """
    out: dict[str, str] = {}
    if _is_node(tree):
        out[""] = _describe_node(tree)
    _walk(tree, "", out)
    if expected is not None and dict(expected) != out:
        raise ValueError(
            "optax_pytree: the static configuration differs from the checkpoint's:\n"
            + _differences(dict(expected), out)
        )
    return out


def _differences(saved: dict[str, str], template: dict[str, str], limit: int = 12) -> str:
    lines = []
    for key in [*saved, *(k for k in template if k not in saved)]:
        a, b = saved.get(key), template.get(key)
        where = key or "(root)"
        if a == b:
            continue
        if a is None:
            lines.append(f"  {where}: not in the checkpoint, template {b}")
        elif b is None:
            lines.append(f"  {where}: saved {a}, not in the template")
        else:
            lines.append(f"  {where}: saved {a}, template {b}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"  ... and {len(lines) - limit} more"]
    return "\n".join(lines)


def _directory(directory: str | os.PathLike[str]) -> Any:
    path = os.fspath(directory)
    return path if "://" in path else os.path.abspath(path)  # orbax wants absolute paths


def _orbax() -> Any:
    """``orbax.checkpoint``, imported at the first call (see the top of this module)."""
    global _ocp
    if _ocp is None:
        try:
            import orbax.checkpoint as ocp
        except Exception as e:  # not installed, or broken: only checkpoints need it
            raise ImportError(
                "optax_pytree checkpoints need orbax-checkpoint (pip install orbax-checkpoint); "
                f"importing it failed: {e!r}"
            ) from e
        _ocp = ocp
    return _ocp


def save_checkpoint(directory: str | os.PathLike[str], tree: Any, *, force: bool = False) -> None:
    """Saves a pytree holding wrapped optimizers with orbax, with its signature.

    A plain ``orbax.checkpoint.StandardCheckpointer`` save (so orbax can read
    it back by itself), plus :func:`checkpoint_signature` in the checkpoint's
    custom metadata, which :func:`restore_checkpoint` checks. Waits until the
    checkpoint is written.

    Args:
        directory: where to write (a new directory).
        tree: the pytree (stateful optimizer, train state, ...).
        force: overwrite an existing checkpoint.

    Examples:
        >>> import tempfile, os, jax.numpy as jnp, optax, optax_pytree as opx
        >>> opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, 1e-3)
        >>> opt = opt.init({"w": jnp.ones(3)})
        >>> tmp = tempfile.TemporaryDirectory()
        >>> path = os.path.join(tmp.name, "opt")
        >>> opx.save_checkpoint(path, opt)
        >>> restored = opx.restore_checkpoint(path, opt)
        >>> float(restored.learning_rate), restored.state[0].mu["w"].shape
        (0.0010000000474974513, (3,))
        >>> opx.restore_checkpoint(path, opt.replace(nesterov=True))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: optax_pytree.restore_checkpoint: the checkpoint ... than the template:
          .transformation: saved optax.adam(..., nesterov=False), template optax.adam(..., nesterov=True)
        build the template with the checkpoint's configuration
        >>> tmp.cleanup()
    """
    ocp = _orbax()
    signature = checkpoint_signature(tree)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(
            _directory(directory), tree, force=force, custom_metadata={_METADATA_KEY: signature}
        )
        checkpointer.wait_until_finished()


def _is_uncommitted(x: Any) -> bool:
    """An array on the default device, not placed with ``jax.device_put`` (keys stay with orbax)."""
    if not isinstance(x, jax.Array) or x.committed:
        return False
    return not jnp.issubdtype(x.dtype, jax.dtypes.extended)


def _abstract(x: Any) -> Any:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if _is_uncommitted(x):  # read to the host, then placed uncommitted (see _restore_leaf)
        return np.broadcast_to(np.zeros((), x.dtype), x.shape)
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x


def restore_checkpoint(directory: str | os.PathLike[str], template: Any) -> Any:
    """Restores what :func:`save_checkpoint` saved, into the structure of ``template``.

    The template gives the static configuration (it is built the same way as
    the saved object, values aside: ``opt.init(params)`` or its
    ``jax.eval_shape``), the placement of the restored arrays (its arrays'
    shardings; an array it did not place with ``jax.device_put``, such as a
    jitted function's constant outputs, is restored uncommitted too) and the
    weak types of the hyperparameters (which orbax does not keep). ``jit``
    keys its cache on both, so a jitted step traced and compiled for the
    template's arrays is reused after the restore. In a population sharded
    over several devices or processes, each process reads the shards of its
    own devices. Its
    signature must equal the saved one: a different factory, static argument,
    state structure, shape or dtype is an error, not a silent mix.

    Args:
        directory: the checkpoint written by :func:`save_checkpoint`.
        template: a pytree like the saved one (arrays or
            ``jax.ShapeDtypeStruct`` leaves).

    Returns:
        The restored pytree: ``template``'s structure, the saved values.

    Raises:
        ValueError: the static configuration differs, or the checkpoint has no
            signature (it was not saved by :func:`save_checkpoint`).

    Examples:
        >>> import tempfile, os, jax, jax.numpy as jnp, optax, optax_pytree as opx
        >>> opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, 1e-3)
        >>> opt = opt.init({"w": jnp.ones(3)})
        >>> tmp = tempfile.TemporaryDirectory()
        >>> opx.save_checkpoint(os.path.join(tmp.name, "opt"), opt)
        >>> template = jax.eval_shape(lambda: opt)  # shapes and dtypes are enough
        >>> restored = opx.restore_checkpoint(os.path.join(tmp.name, "opt"), template)
        >>> restored.state[0].count, restored.learning_rate.weak_type
        (Array(0, dtype=int32), True)
        >>> tmp.cleanup()
    """
    ocp = _orbax()
    path = _directory(directory)
    with ocp.StandardCheckpointer() as checkpointer:
        custom = checkpointer.metadata(path).custom_metadata or {}
        saved = custom.get(_METADATA_KEY)
        if saved is None:
            raise ValueError(
                f"optax_pytree.restore_checkpoint: the checkpoint {path} has no optax_pytree signature "
                "(it was not written by optax_pytree.save_checkpoint), so its static configuration "
                "cannot be checked; restore it with orbax directly if you are sure of it"
            )
        mine = checkpoint_signature(template)
        if dict(saved) != mine:
            raise ValueError(
                f"optax_pytree.restore_checkpoint: the checkpoint {path} was saved from another static "
                "configuration than the template:\n"
                + _differences(dict(saved), mine)
                + "\nbuild the template with the checkpoint's configuration"
            )
        restored = checkpointer.restore(path, jax.tree_util.tree_map(_abstract, template))
    return jax.tree_util.tree_map(_restore_leaf, restored, template)


def _restore_leaf(restored: Any, template: Any) -> Any:
    if _is_uncommitted(template) and isinstance(restored, np.ndarray):
        # Read to the host and put on the default device uncommitted, as the
        # template's array was: orbax places what it restores with device_put,
        # which commits it; jit compiles again (without retracing) for a
        # committed argument where it compiled for an uncommitted one, and one
        # committed to a single device cannot enter a step with sharded arrays.
        restored = jnp.asarray(restored)
    if getattr(template, "weak_type", False) and isinstance(restored, jax.Array):
        return _leaves.weak(restored)
    return restored
