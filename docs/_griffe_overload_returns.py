"""Griffe extension for the docs build: an overloaded function's return type, from its overloads.

``wrap`` is typed by ``typing.overload`` signatures, one per kind of factory
(a transformation factory gives a ``PyTreeTransformation``, a schedule
factory a ``PyTreeSchedule``); its implementation is annotated ``-> Any``, as
the implementation of overloads usually is. Rendered, the signature would
say ``-> Any``, and showing all the overloads instead (mkdocstrings'
``show_overloads``) prints eight near-identical signatures. This extension
(loaded by ``mkdocs.yml``, never imported by the library) shows the union of
the overloads' distinct return types in the implementation's signature:
``-> PyTreeTransformation | PyTreeSchedule``, each part a cross-reference.

Only functions annotated ``-> Any`` whose overloads all name a return type are
changed, and only where the overloads' returns mention no ``ParamSpec`` or
other name that the implementation's signature does not bind (a
``Callable[P, ...]`` would print an unbound ``P``).
"""

from __future__ import annotations

from typing import Any

import griffe


class OverloadReturns(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for function in _functions(pkg):
            returns = _union_of_overload_returns(function, pkg)
            if returns is not None:
                function.returns = returns


def _functions(obj: griffe.Object) -> list[griffe.Function]:
    out: list[griffe.Function] = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Function):
            out.append(member)
        elif isinstance(member, (griffe.Module, griffe.Class)):
            out.extend(_functions(member))
    return out


def _union_of_overload_returns(function: griffe.Function, pkg: griffe.Module) -> griffe.Expr | None:
    if not function.overloads or str(function.returns) != "Any":
        return None
    distinct: dict[str, Any] = {}
    for overload in function.overloads:
        if overload.returns is None or isinstance(overload.returns, str):
            return None
        if any(str(name) == "P" or str(name).endswith(".P") for name in _names(overload.returns)):
            return None  # a ParamSpec: unbound in the implementation's signature
        distinct.setdefault(str(overload.returns), _public(overload.returns, pkg))
    union: Any = None
    for expr in distinct.values():
        union = expr if union is None else griffe.ExprBinOp(union, "|", expr)
    return union


def _public(expr: griffe.Expr, pkg: griffe.Module) -> griffe.Expr:
    """A bare name the package exports, looked up from the package: a link to its documentation.

    (``_wrap`` names the classes by module attributes, ``PyTreeTransformation =
    _tree.PyTreeTransformation``, which the docs do not document.)
    """
    if isinstance(expr, griffe.ExprName) and "." not in expr.name and expr.name in pkg.members:
        return griffe.ExprName(expr.name, parent=pkg)
    return expr


def _names(expr: griffe.Expr) -> list[griffe.ExprName]:
    """Every name in an annotation expression."""
    if isinstance(expr, griffe.ExprName):
        return [expr]
    return [part for part in expr.iterate(flat=True) if isinstance(part, griffe.ExprName)]
