"""Types an editor and pyright see (issue #9): the factory's own parameters, the public classes.

``wrap`` is typed with a ParamSpec of the factory, and the drop-in modules
have stubs written from optax's signatures (``python -m optax_pytree._stubs``),
so pyright in strict mode checks hyperparameter names and reveals the public
classes. The stubs must match the installed optax.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optax_pytree import _stubs

USER_SCRIPT = """
# pyright: strict, reportMissingTypeStubs=false
import optax

import optax_pytree as opx
import optax_pytree.optax as dropin

tx = opx.wrap(optax.adam, learning_rate=1e-3)
reveal_type(tx)  # wrap
schedule = opx.wrap(optax.warmup_cosine_decay_schedule, 0.0, 1e-3, 10, 100)
reveal_type(schedule)  # wrap schedule
reveal_type(opx.wrap(optax.MultiSteps, tx, every_k_schedule=4))  # class factory
reveal_type(opx.wrap(optax.adam, 1e-3, static_argnames=("b2",)))  # options
reveal_type(tx.replace(learning_rate=3e-4))  # replace
reveal_type(opx.pytree_transformation(optax.sgd)(0.1))  # decorator
reveal_type(opx.pytree_transformation(static_argnames="b2")(optax.adam)(0.1))  # decorator with options
reveal_type(opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=1e-3))  # stateful
reveal_type(dropin.adam(1e-3))  # drop-in
chained = dropin.chain(dropin.clip_by_global_norm(1.0), dropin.adamw(dropin.linear_schedule(1.0, 0.0, 9)))
reveal_type(chained)  # drop-in chain
reveal_type(dropin.schedules.linear_schedule(1.0, 0.0, 10))  # drop-in schedules
reveal_type(dropin.contrib.momo(learning_rate=0.1))  # drop-in contrib
reveal_type(dropin.adam(1e-3, b2=opx.static(0.999)))  # marker
x: opx.PyTreeTransformation = dropin.sgd(0.1)
y: opx.PyTreeSchedule = dropin.constant_schedule(0.1)
opx.wrap(optax.adam, learning_rat=1e-3)  # typo in wrap
dropin.adam(learning_rat=1e-3)  # typo in drop-in
opx.wrap(optax.adam, learning_rate="1e-3")  # a string
"""

EXPECTED_REVEALS = {
    "wrap": "PyTreeTransformation",
    "wrap schedule": "PyTreeSchedule",
    "class factory": "PyTreeTransformation",
    "options": "PyTreeTransformation",
    "replace": "PyTreeTransformation",
    "decorator": "PyTreeTransformation",
    "decorator with options": "PyTreeTransformation",
    "stateful": "PyTreeTransformationWithState",
    "drop-in": "PyTreeTransformation",
    "drop-in chain": "PyTreeTransformation",
    "drop-in schedules": "PyTreeSchedule",
    "drop-in contrib": "PyTreeTransformation",
    "marker": "PyTreeTransformation",
}


def test_drop_in_stubs_match_the_installed_optax() -> None:
    import optax

    generated = _stubs.stub_version()
    if generated and _stubs._version(optax.__version__) < _stubs._version(generated):  # pyright: ignore[reportPrivateUsage]
        pytest.skip(f"the stubs describe optax {generated}; optax {optax.__version__} is older (the floor)")
    assert _stubs.problems() == [], "stale stubs: run python -m optax_pytree._stubs"


@pytest.mark.skipif(
    importlib.util.find_spec("pyright") is None, reason="pyright (a test extra) is not installed"
)
def test_pyright_strict_checks_hyperparameter_names_and_reveals_public_classes(tmp_path: Path) -> None:
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(USER_SCRIPT))
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    report = json.loads(result.stdout)
    lines = script.read_text().splitlines()
    reveals, errors = {}, {}
    for d in report["generalDiagnostics"]:
        line = lines[d["range"]["start"]["line"]]
        label = line.split("#", 1)[1].strip() if "#" in line else line
        if d["severity"] == "information":
            reveals[label] = d["message"]
        elif d["severity"] == "error" and not d.get("rule", "").startswith("reportUnknown"):
            # Partially unknown types come from optax's own annotations (older
            # optax has more of them): optax's to fix, not what is tested here.
            errors.setdefault(label, []).append(d["message"])
    for label, expected in EXPECTED_REVEALS.items():
        assert reveals.get(label, "").endswith(f'is "{expected}"'), (label, reveals.get(label))
    assert any("learning_rat" in m for m in errors.pop("typo in wrap", [])), errors
    assert any("learning_rat" in m for m in errors.pop("typo in drop-in", [])), errors
    assert any("\"Literal['1e-3']\"" in m or "str" in m for m in errors.pop("a string", [])), errors
    assert not errors, errors
