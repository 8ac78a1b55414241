"""The analysis' records and caches, as a maintainer reads them (issue 37).

- every cache made with ``_caches.cache`` is listed, with its key and why it
  is safe, in ``_caches``' docstring: the one place that lists them;
- an ``Analysis`` is made whole and never changed: assigning a field raises,
  and what the verification learns is a new record.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import optax
import pytest

import optax_pytree as opx
from optax_pytree import _caches, _spec

PACKAGE = Path(opx.__file__).resolve().parent


def _caches_made() -> list[str]:
    """``_module.NAME`` of every module-level ``NAME = cache(...)`` in the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "cache"
            ):
                out += [f"{path.stem}.{t.id}" for t in node.targets if isinstance(t, ast.Name)]
    return out


def test_every_cache_is_listed_with_its_key_and_why_it_is_safe() -> None:
    made = _caches_made()
    assert len(made) >= 10  # the walk saw them
    doc = _caches.__doc__ or ""
    missing = [name for name in made if f"``{name}``" not in doc]
    assert not missing, f"caches not listed in optax_pytree/_caches.py's docstring: {missing}"
    for item in doc.split("\n\n"):
        if any(f"``{name}``" in item for name in made):
            assert "Safe:" in item, item


def test_an_analysis_is_never_changed() -> None:
    _spec.clear_caches()
    tx = opx.wrap(optax.cosine_decay_schedule, init_value=0.1, decay_steps=100, exponent=2.0)
    analysis = tx._core.spec.analysis  # pyright: ignore[reportPrivateUsage]
    assert analysis.static_names == ("exponent",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        analysis.exponents = ()  # type: ignore[misc]
    fields = {f.name for f in dataclasses.fields(_spec.Analysis)}
    assert "checker" not in fields  # a cache of the guards, not part of the record
