"""Griffe extension for the docs build: Sphinx roles in docstrings as cross-references.

optax_pytree's docstrings follow optax's convention: Google style, with Sphinx
roles (``:func:`wrap```, ``:attr:`guards```, ``:class:`~optax_pytree.X```) and
the reStructuredText literal-block marker (``fails::``). mkdocstrings renders
Markdown, where a role shows as ``:func:wrap``. This extension (loaded by
``mkdocs.yml``, never imported by the library) rewrites, before the docstrings
are parsed:

- a role whose target is documented into an autorefs link,
  ``[`wrap`][optax_pytree.wrap]`` (a ``~`` shows the last name only, as in
  Sphinx); a role whose target is not documented (a private helper) into
  plain code, so that no link is left dangling (``mkdocs build --strict``
  fails on those);
- a trailing ``::`` into ``:`` (the indented block after it already renders
  as code in Markdown).

A target is looked up as Sphinx would: a dotted name from the package root;
a bare name among the package's public names, then among the members of the
public class that documents the docstring's object.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|data|obj|mod|exc):`(~?)([\w.]+)`")
_LITERAL_MARKER = re.compile(r"(?<=\S)::$")


class SphinxRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        targets = _documented(pkg)
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj.docstring.value, obj, pkg.name, targets)


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    """Every object defined in the package (aliases are their targets, visited where defined)."""
    out = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            out.extend(_objects(member))
    return out


def _documented(pkg: griffe.Module) -> dict[str, dict[str, Any]]:
    """Public name -> {"path": its path, "members": public member names, "mro": class paths}."""
    out: dict[str, dict[str, Any]] = {}
    for name, member in pkg.members.items():
        if name.startswith("_"):
            continue
        try:
            target = member.final_target if member.is_alias else member
        except griffe.AliasResolutionError:  # an import from outside the package
            continue
        if not target.path.startswith(pkg.name + "."):
            continue
        entry: dict[str, Any] = {"path": f"{pkg.name}.{name}", "members": set(), "mro": set()}
        if target.is_class:
            entry["members"] = {n for n in target.all_members if not n.startswith("_")}
            entry["mro"] = {target.path, *(c.path for c in _mro(target))}
        out[name] = entry
    return out


def _mro(cls: griffe.Class) -> list[griffe.Class]:
    try:
        return cls.mro()
    except (ValueError, griffe.AliasResolutionError):
        return []


def _link(target: str, obj: griffe.Object, root: str, documented: dict[str, Any]) -> str | None:
    """The autorefs identifier of a role's target, or None if it is not documented."""
    if "." in target:
        if not target.startswith(root + "."):  # another package's (optax.adam): no page here
            return None
        head, _, rest = target.removeprefix(root + ".").partition(".")
        entry = documented.get(head)
        if entry is None or (rest and rest not in entry["members"]):
            return None
        return f"{entry['path']}.{rest}" if rest else entry["path"]
    if target in documented:
        return documented[target]["path"]
    # A member of the class the object belongs to, documented on the public
    # class that has it (the one with the most members when several inherit
    # it); outside a class, on any public class that has it.
    cls = obj if obj.is_class else obj.parent
    owners = [e for e in documented.values() if target in e["members"]]
    if cls is not None and cls.is_class:
        owners = [e for e in owners if cls.path in e["mro"]]
    if not owners:
        return None
    return f"{max(owners, key=lambda e: len(e['members']))['path']}.{target}"


def _rewrite(text: str, obj: griffe.Object, root: str, documented: dict[str, Any]) -> str:
    def role(match: re.Match[str]) -> str:
        short, target = match.group(1) == "~", match.group(2)
        shown = target.rsplit(".", 1)[-1] if short else target
        identifier = _link(target, obj, root, documented)
        return f"[`{shown}`][{identifier}]" if identifier else f"`{shown}`"

    lines = []
    for line in text.split("\n"):
        if not line.lstrip().startswith((">>>", "...")):
            line = _LITERAL_MARKER.sub(":", _ROLE.sub(role, line))
        lines.append(line)
    return "\n".join(lines)
