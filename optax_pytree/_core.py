"""Tree: the core of a wrapped object: its spec and leaves, and its ``init``/``update``.

A wrapped transformation is a tuple ``(init, update)`` like every optax
transformation, and those two are bound methods of its :class:`Core`: no
reference cycle with the wrapped object, which JAX rebuilds at every
unflatten. Its leaves may still be pending (Python numbers not yet made into
arrays, see ``_leaves.Pending``): they are made when first read.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from typing import Any, TypeAlias

import jax

from . import _build, _leaves, _staged
from ._leaves import Exact, Leaves, Pending
from ._spec import Spec


class Core:
    """Spec and leaves of one wrapped object; owns ``init``/``update``.

    The wrapped transformation is a tuple ``(init, update)`` like every optax
    transformation, so that ``optax.chain`` and friends can unpack it. Its two
    elements are this core's bound methods: no reference cycle with the
    wrapped object, which JAX rebuilds at every unflatten.
    """

    # ``structure``: its treedef's make, once asked (``_children.structure``); unset until then.
    # ``source``: what a closure's child was made from (``_closures.Source``), unset for any other;
    # ``sources``: those of the object and its children, once asked (:meth:`check_sources`).
    __slots__ = (
        "pending",
        "plain",
        "python",
        "source",
        "sources",
        "spec",
        "stored_exact",
        "stored_leaves",
        "structure",
    )

    @classmethod
    def of(cls, spec: Spec, leaves: Leaves, exact: Exact) -> Core:
        """A core of these leaves alone (no Python values, no sources): what JAX rebuilds."""
        core = cls.__new__(cls)
        core.spec, core.stored_leaves, core.stored_exact = spec, leaves, exact
        core.pending, core.python, core.plain = None, {}, None
        return core

    spec: Spec
    stored_leaves: Leaves
    stored_exact: Exact
    # Leaves still to be made from Python numbers (``_leaves.Pending``), or None.
    pending: Pending | None

    @property
    def leaves(self) -> tuple[Any, ...]:
        """One per dynamic argument or child, in signature order."""
        if self.pending is not None:
            self.materialize()
        return self.stored_leaves

    @property
    def exact(self) -> Any:
        """The carried host values of the spec's expressions and the fingerprint of the
        leaves they were computed from (see ``_guard.Guarded.exact``); None when the
        factory does no Python arithmetic on its arguments."""
        if self.pending is not None:
            self.materialize()
        return self.stored_exact

    def materialize(self) -> None:
        pending = self.pending
        if pending is not None:
            self.stored_leaves, self.stored_exact = pending.make()
            self.pending = None

    # The Python values the object was made from (``wrap``, ``replace``), so
    # that a later ``replace`` computes the carried values from them, not
    # from float32 leaves; empty once JAX has rebuilt the object from leaves.
    python: dict[str, Any]
    # What the factory returned for those Python values (a parent's wrap takes
    # it as its argument); None once JAX has rebuilt the object from leaves.
    plain: Any

    def argument(self, name: str, build_children: bool = False) -> Any:
        return _build.argument(self.spec, self.leaves, name, build_children)

    def arguments(self, build_children: bool) -> dict[str, Any]:
        return _build.arguments(self.spec, self.leaves, build_children)

    def build_raw(self) -> Any:
        return _build.build_raw(self.spec, self.leaves, self.exact)

    def build(self) -> Any:
        return _build.build(self.spec, self.leaves, self.exact)

    def built_from(self, hyper: tuple[tuple[Any, ...], Any]) -> Any:
        return _build.build(self.spec, *hyper)

    def check_sources(self) -> None:
        """Raises where a config a closure child read was changed since (``_closures.Source``).

        Only the objects the program made hold their sources: one JAX rebuilt
        (inside ``jit``) holds its leaves alone.
        """
        try:
            sources = self.sources
        except AttributeError:
            sources = self.sources = _sources(self)
        for source in sources:
            source.check()

    def concrete_plain(self) -> Any:
        """What the factory returned for the object's Python values, where nothing of it is
        traced (the object made by ``wrap`` or ``replace``, its leaves concrete); else None
        (one rebuilt from leaves has no such object).

        It computes what plain optax computes for those numbers wherever it runs: eagerly,
        and staged into a program, where concrete leaves would be the program's operands or
        its constants as JAX lowers them (an eager ``lax.cond`` makes what its branches close
        over operands where plain optax's Python numbers are constants of the branch, and a
        TPU's compiler computes a power of a constant base otherwise than one of an operand:
        1 unit in the last place of ``0.8 ** 2``).
        """
        plain = self.plain
        if plain is None or self.pending is not None:
            return plain
        hyper = jax.tree_util.tree_leaves((self.stored_leaves, self.stored_exact))
        return None if any(_leaves.is_tracer(x) for x in hyper) else plain

    def init(self, params: Any) -> Any:
        self.check_sources()
        plain = self.concrete_plain()
        if plain is not None:
            return plain.init(params)
        try:
            return _staged.call(self, "init", params)
        except Exception as e:
            _build.raise_traced_failure(e, self.spec, self.leaves, "init", lambda tx: tx.init(params))
            raise

    def update(self, updates: Any, state: Any, params: Any = None, **extra_args: Any) -> tuple[Any, Any]:
        self.check_sources()
        plain = self.concrete_plain()
        if plain is not None:
            return plain.update(updates, state, params, **extra_args)
        try:
            return _staged.call(
                self,
                "update",
                updates,
                state,
                params,
                **extra_args,
            )
        except Exception as e:
            _build.raise_traced_failure(
                e,
                self.spec,
                self.leaves,
                "update",
                lambda tx: tx.update(updates, state, params, **extra_args),
            )
            raise


def _sources(core: Core) -> tuple[Any, ...]:
    """The sources of a core and of the wrapped objects among its leaves, at any depth."""
    import jax

    from ._bind import is_wrapped

    found: list[Any] = []
    own = getattr(core, "source", None)
    if own is not None:
        found.append(own)
    # Its children, without making its leaves (a wrap's init runs the object its factory
    # returned: it needs no leaf).
    pending = core.pending
    children = list(pending.children.values()) if pending is not None else core.leaves
    for w in jax.tree_util.tree_leaves(children, is_leaf=is_wrapped):
        if is_wrapped(w):
            found.extend(_sources(w._core))
    return tuple(found)


# For ``replace``: the replaced object's core and the names of the arguments changed (its
# carried values of unchanged arguments are kept, ``_carry.host_values``); None: none kept.
Kept: TypeAlias = tuple[Core, frozenset[str]] | None
