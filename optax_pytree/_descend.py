"""Analyse: the smallest static part: arguments of a configuration's wrapped children, at any depth.

Where the verification of a configuration (``_pipeline._analyse``) finds a
difference that stays with every numeric argument of its own static, the
cause may be in one of its children: ``MultiSteps(adamw(schedule))`` whose
closure schedule computes ``shift ** 0.5``. Making the children static whole
would make every one of their numbers static (a sweep of the learning rate
recompiles); what must be static is the smallest part that needs it, so the
children's own arguments are bisected first (``_pipeline.make``), and only
those found are made static, in the children remade with them static.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax

from . import _quiet, _spec
from ._bind import is_wrapped
from ._classify import Roles
from ._vocabulary import Role


class Inner(NamedTuple):
    """An argument of a wrapped object inside a configuration's children, made static."""

    # From the configuration down to that object: (argument, key path inside
    # its value), one per level (``opt``, then ``learning_rate``).
    steps: tuple[tuple[str, Any], ...]
    name: str  # the argument of that object
    owner: str  # that object's factory, for the warning

    def text(self) -> str:
        where = ".".join(arg + jax.tree_util.keystr(path) for arg, path in self.steps)
        return f"argument {self.name!r} of {where} ({self.owner})"


def inner_arguments(arguments: dict[str, Any], roles: Roles) -> list[Inner]:
    """The dynamic arguments of the wrapped objects in the children of ``arguments``, at any
    depth, each object's before its own children's."""
    out: list[Inner] = []
    for arg, role in roles.items():
        if role != Role.CHILD:
            continue
        for path, w in jax.tree_util.tree_flatten_with_path(arguments[arg], is_leaf=is_wrapped)[0]:
            if not is_wrapped(w):
                continue
            spec = w._core.spec
            here = ((arg, path),)
            out += [Inner(here, n, spec.info.name) for n, r in spec.roles.items() if r == Role.DYNAMIC]
            nested = {n: w._core.argument(n) for n, r in spec.roles.items() if r == Role.CHILD}
            out += [Inner((*here, *i.steps), i.name, i.owner) for i in inner_arguments(nested, spec.roles)]
    return out


def with_inner_static(arguments: dict[str, Any], marks: Sequence[Inner], why: str = "") -> dict[str, Any]:
    """``arguments`` with the wrapped objects in their children remade with ``marks`` static;
    ``why`` (the verification's finding), where given, is remembered for ``explain``."""
    by_arg: dict[str, list[Inner]] = {}
    for mark in marks:
        by_arg.setdefault(mark.steps[0][0], []).append(mark)
    out = dict(arguments)
    for arg, group in by_arg.items():

        def remade(path: Any, w: Any, group: list[Inner] = group) -> Any:
            mine = [m for m in group if m.steps[0][1] == path]
            if not mine or not is_wrapped(w):
                return w
            own = [m.name for m in mine if len(m.steps) == 1]
            deeper = [m._replace(steps=m.steps[1:]) for m in mine if len(m.steps) > 1]
            changes = with_inner_static(w.hyperparams, deeper, why) if deeper else {}
            changes = {n: v for n, v in changes.items() if n in {m.steps[0][0] for m in deeper}}
            with _quiet.quietly():  # the user made it once already: its factory's warnings were given
                new = w._with_static(own, **changes)
            if own and why:  # static by the library's choice, not the user's
                _spec.remember_made_static(new._core.spec, (tuple(own), why))
            return new

        out[arg] = jax.tree_util.tree_map_with_path(remade, arguments[arg], is_leaf=is_wrapped)
    return out


def smallest(order: Sequence[Inner], works: Callable[[tuple[Inner, ...]], bool]) -> tuple[Inner, ...] | None:
    """The fewest of ``order`` with which ``works``; None if even all of them do not.

    Bisection, as for a configuration's own arguments (``_pipeline._analyse``):
    the shortest prefix of ``order`` that works; its last is static; again
    with that one static, until nothing else is needed.
    """
    if not order or not works(tuple(order)):
        return None
    fixed: tuple[Inner, ...] = ()
    rest = tuple(order)
    while not (fixed and works(fixed)):
        # Invariant: fixed + rest[:hi] works, fixed + rest[:lo] does not.
        lo, hi = 0, len(rest)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if works((*fixed, *rest[:mid])):
                hi = mid
            else:
                lo = mid
        fixed, rest = (*fixed, rest[hi - 1]), rest[: hi - 1]
    return fixed
