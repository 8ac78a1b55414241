"""The analyses kept on disk (``optax_pytree._disk``): read back by a second process, never stale.

Each test runs its program twice, in two new processes (as two runs of a
script are), with the cache in a folder of its own. The second process must
wrap without probing what the first analysed, and compute bit for bit what
the first computed and what plain optax computes; and where the code is not
what the first process ran (an edited file of the program, optax's internals
patched, a fault planted in optax_pytree itself), it must analyse again and
find what the verification finds.

The rest of the suite runs with the cache off (``conftest.py``).
"""

from __future__ import annotations

import json
import os
import pickle
import textwrap
from pathlib import Path
from typing import Any

import optax
import pytest
import warm_python

import optax_pytree as opx
from optax_pytree import _caches, _disk

# Counts the analyses the program's wraps run. The counter is given the home
# of the function it wraps: a function of the program's own in optax_pytree's
# modules is a patch, and a patched package is not read from disk.
PRELUDE = """
import json, sys
import jax, jax.numpy as jnp, numpy as np, optax
import optax_pytree as opx
import optax_pytree.optax as dropin
from optax_pytree import _detect

ANALYSES = []
_real_analyse = _detect.analyse


def _counting(info, *args, **kwargs):
    ANALYSES.append(info.name)
    return _real_analyse(info, *args, **kwargs)


_counting.__module__ = _real_analyse.__module__
_detect.analyse = _counting

PARAMS = {"w": jnp.arange(1.0, 7.0).reshape(2, 3), "b": jnp.array([0.5, -1.0, 2.0])}
GRADS = jax.tree.map(lambda x: 0.1 * x + 0.3, PARAMS)


def steps(tx):
    state = tx.init(PARAMS)
    out = []
    for _ in range(3):
        updates, state = tx.update(GRADS, state, PARAMS)
        out += [np.asarray(u).tobytes().hex() for u in jax.tree.leaves(updates)]
    return out


def report(**made):
    print(json.dumps({"analyses": ANALYSES, **made}))
"""

# The LLM-style builder of benchmarks/rebuild.py, written in the program (fresh lambdas).
LLM = """
def make_optimizer(ox, lr):
    mask = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)
    labels = lambda p: {k: "lion" if k == "b" else "adamw" for k in p}
    return ox.multi_transform(
        {
            "adamw": ox.chain(
                ox.clip_by_global_norm(1.0),
                ox.adamw(ox.warmup_cosine_decay_schedule(0, lr, 2, 10), weight_decay=0.1, mask=mask),
            ),
            "lion": ox.chain(ox.clip_by_global_norm(1.0), ox.lion(lr / 3)),
        },
        labels,
    )
"""


def _run(folder: Path, script: str, cache: Path | str, **env: str) -> dict[str, Any]:
    path = folder / "program.py"
    text = PRELUDE + LLM + textwrap.dedent(script)
    if not path.exists() or path.read_text() != text:  # a file written again is an edit of the program
        path.write_text(text)
    result = warm_python.run(
        [str(path)],
        env={**os.environ, "OPTAX_PYTREE_ANALYSIS_CACHE": str(cache), **env},
        cwd=folder,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.pkl"))


def test_a_second_process_reads_the_analyses_and_computes_the_same(tmp_path: Path) -> None:
    script = """
    made = {}
    for name, ox in (("wrapped", dropin), ("plain", optax)):
        made[name] = {
            "adam": steps(ox.adam(1e-3) if ox is optax else opx.wrap(optax.adam, learning_rate=1e-3)),
            "llm": steps(make_optimizer(ox, 3e-3)),
        }
    tx = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 100)
    made["schedule"] = [tx.guarded_argnames, tx.dynamic_argnames, float(tx(5))]
    report(**made)
    """
    cache = tmp_path / "cache"
    first = _run(tmp_path, script, cache)
    assert "optax.adam" in first["analyses"] and "optax.adamw" in first["analyses"]
    assert len(_files(cache)) >= 5  # adam, the schedule, clip, adamw, lion: what has numeric arguments
    second = _run(tmp_path, script, cache)
    assert second["analyses"] == []  # nothing probed or verified again
    assert second["wrapped"] == first["wrapped"] == first["plain"]  # bit for bit, and plain optax's
    assert second["schedule"] == first["schedule"]


@pytest.mark.parametrize("where", ["helper", "namespace.helper"], ids=["module", "namespace-package"])
def test_an_edit_of_the_program_is_analysed_again(tmp_path: Path, where: str) -> None:
    # The factory's decision is in a helper of another module of the program
    # (in a namespace package: a package without an __init__.py, no file of its own).
    helper = tmp_path.joinpath(*where.split(".")).with_suffix(".py")
    helper.parent.mkdir(exist_ok=True)
    helper.write_text("def scale(k):\n    return 2.0\n")
    script = f"""
    import {where} as helper

    def scaled_sgd(learning_rate, k=1.0):
        return optax.sgd(learning_rate * helper.scale(k))

    tx = opx.wrap(scaled_sgd, 0.1, k=1.0)
    report(wrapped=steps(tx), plain=steps(scaled_sgd(0.1, k=1.0)), static=tx.detected_static_argnames)
    """
    cache = tmp_path / "cache"
    first = _run(tmp_path, script, cache)
    assert first["analyses"] and _run(tmp_path, script, cache)["analyses"] == []
    # Now the helper decides in Python on the value (a leaf answers otherwise).
    helper.write_text("def scale(k):\n    return 4.0 if isinstance(k, float) else 3.0\n")
    os.utime(helper, ns=(helper.stat().st_atime_ns, helper.stat().st_mtime_ns + 10**9))
    edited = _run(tmp_path, script, cache)
    assert edited["analyses"]
    assert edited["wrapped"] == edited["plain"] and edited["wrapped"] != first["wrapped"]
    assert edited["static"] == ["k"]


def test_patched_optax_is_not_read_from_disk(tmp_path: Path) -> None:
    # A fault planted in optax's internals (what a test or a user's patch does):
    # sgd's learning rate doubled where it is a Python float.
    script = """
    import optax._src.alias as alias

    if "plant" in sys.argv[1:] or %r:
        real = alias.sgd

        def planted(learning_rate, *args, **kwargs):
            return real(learning_rate * (2 if isinstance(learning_rate, float) else 1), *args, **kwargs)

        alias.sgd = planted
    tx = opx.wrap(alias.sgd, 0.1)
    report(wrapped=steps(tx), plain=steps(alias.sgd(0.1)), static=tx.detected_static_argnames)
    """
    cache = tmp_path / "cache"
    clean = _run(tmp_path, script % False, cache)
    assert clean["analyses"] and clean["static"] == []
    planted = _run(tmp_path, script % True, cache)
    assert planted["analyses"]  # analysed: the verification finds the planted decision
    assert planted["static"] == ["learning_rate"]
    assert planted["wrapped"] == planted["plain"] != clean["plain"]


def test_a_fault_planted_in_optax_pytree_is_not_masked(tmp_path: Path) -> None:
    # tests/test_real_programs.py's planted difference, with the analysis on disk.
    script = """
    import warnings
    from optax_pytree import _verify
    from optax_pytree._vocabulary import Differs

    if %r:
        real = _verify.compare
        planted = _verify.Difference(Differs.NUMBERS, "planted")
        _verify.compare = lambda info, *a: planted if info.name == "optax.adam" else real(info, *a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tx = opx.wrap(optax.adam, 1e-3)
    report(warned=[str(w.message) for w in caught], static=list(tx.static_argnames))
    """
    cache = tmp_path / "cache"
    assert _run(tmp_path, script % False, cache)["warned"] == []
    planted = _run(tmp_path, script % True, cache)
    assert any("planted" in w for w in planted["warned"]), planted
    assert "learning_rate" in planted["static"]


def test_a_foreign_or_broken_file_is_a_miss(tmp_path: Path) -> None:
    script = """
    tx = opx.wrap(optax.adam, 1e-3)
    report(wrapped=steps(tx))
    """
    cache = tmp_path / "cache"
    first = _run(tmp_path, script, cache)
    [path] = _files(cache)
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> Any:
            return (open, (str(marker), "w"))

    for content in (b"not a pickle", pickle.dumps([Evil()]), pickle.dumps({"a": 1})):
        path.write_bytes(content)
        again = _run(tmp_path, script, cache)
        assert again["analyses"] == ["optax.adam"] and again["wrapped"] == first["wrapped"]
        assert not marker.exists()  # the unpickler admits only what an analysis is made of


def test_off_and_unwritable(tmp_path: Path) -> None:
    script = """
    report(wrapped=steps(opx.wrap(optax.adam, 1e-3)))
    """
    assert _run(tmp_path, script, "0")["analyses"] == ["optax.adam"]
    blocked = tmp_path / "a_file"
    blocked.write_text("")  # the cache's folder cannot be made under a file
    for _ in range(2):
        assert _run(tmp_path, script, blocked / "cache")["analyses"] == ["optax.adam"]
    assert not list(tmp_path.rglob("*.pkl"))


def test_what_has_no_stable_form_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPTAX_PYTREE_ANALYSIS_CACHE", str(tmp_path))

    class Config:  # an object of the program's, compared by identity
        __hash__ = None  # type: ignore[assignment]

    config = Config()

    def factory(learning_rate: float, config: Any = config) -> Any:
        del config
        return optax.sgd(learning_rate)

    _caches.clear_caches()
    opx.wrap(factory, 0.1)
    assert _files(tmp_path) == []
    opx.wrap(optax.sgd, 0.1)  # optax's own, Python numbers: kept
    assert len(_files(tmp_path)) == 1
    assert _disk.directory() == os.path.join(str(tmp_path), f"v{_disk.FORMAT}")
