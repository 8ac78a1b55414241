"""The code of the docs runs: every ```python block of docs/guide/*.md, docs/index.md and README.md.

Each page runs in a new Python process (forked from a server that imported
jax and optax already: tests/warm_python.py), its blocks in order in one
namespace, as a reader who pastes them one after another would; a failure
points at the page's line. Conventions of the pages:

- ``<!-- skip: reason -->`` on the line before a block: the block is shown,
  not run (a launch command, a cluster-only call); keep these few.
- ``<!-- requires: flax -->`` anywhere in a page: the page runs only where
  those modules are importable (flax needs Python >= 3.11), else it is
  skipped, saying so.
- A block in another language (```bash) is never run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import textwrap
from pathlib import Path

import pytest
import warm_python

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"  # the front page: its sweep runs, its sketches are marked skip
PAGES = [*sorted((DOCS / "guide").glob("*.md")), DOCS / "index.md", README]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>skip|requires)\s*:?\s*(?P<text>.*?)\s*-->\s*$")


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the block's first code line in the page
    language: str
    code: str
    skip: str | None  # the reason, for a block marked skip


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown page, with the skip marker before each."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if end == len(lines):
            raise ValueError(f"line {i + 1}: a code block that is never closed")
        code = "\n".join(
            line[len(indent) :] if line.startswith(indent) else line for line in lines[start:end]
        )
        previous = lines[i - 1] if i > 0 else ""
        marker = _MARKER.match(previous)
        skip = marker["text"] if marker is not None and marker["kind"] == "skip" else None
        out.append(Block(start + 1, match["lang"].lower(), textwrap.dedent(code), skip))
        i = end + 1
    return out


def requirements(text: str) -> list[str]:
    """The modules named by the page's ``<!-- requires: ... -->`` markers."""
    found: list[str] = []
    for line in text.splitlines():
        marker = _MARKER.match(line)
        if marker is not None and marker["kind"] == "requires":
            found += re.split(r"[\s,]+", marker["text"].strip())
    return [name for name in found if name]


# In the child process: run the blocks in order in one namespace, each
# compiled with the page's name and line numbers, so a traceback points there.
_RUNNER = """
import json, sys
page, blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for line, code in blocks:
    exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
"""


def _id(page: Path) -> str:
    return page.name if page == README else str(page.relative_to(DOCS))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_page_code_runs(page: Path, tmp_path: Path) -> None:
    text = page.read_text()
    missing = [name for name in requirements(text) if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{_id(page)} needs {', '.join(missing)}, not installed here")
    runnable = [(b.line, b.code) for b in blocks(text) if b.language == "python" and b.skip is None]
    if not runnable:
        pytest.skip(f"{_id(page)} has no Python to run")
    # Temporary files (checkpoints) under pytest's tmp_path, which pytest cleans up.
    env = {**os.environ, "MPLBACKEND": "Agg", "TMPDIR": str(tmp_path)}
    result = warm_python.run(
        ["-c", _RUNNER], input=json.dumps([str(page), runnable]), timeout=300, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, f"{_id(page)}: its code failed:\n{result.stdout}\n{result.stderr}"


def test_every_guide_page_runs_code_and_skips_few() -> None:
    for page in sorted((DOCS / "guide").glob("*.md")):
        found = [b for b in blocks(page.read_text()) if b.language == "python"]
        run = [b for b in found if b.skip is None]
        assert run, f"{_id(page)}: no Python block is run; a guide page's code must be tested"
        skipped = [b for b in found if b.skip is not None]
        assert len(skipped) <= 2, f"{_id(page)}: {len(skipped)} Python blocks skipped (at most 2)"
        for b in skipped:
            assert b.skip, f"{_id(page)}:{b.line}: a skip marker without a reason"


def test_block_extraction() -> None:
    page = textwrap.dedent(
        """\
        # Title

        ```python
        a = 1
        ```

        <!-- skip: needs a cluster -->
        ```python
        raise SystemExit
        ```

        - a list item:
          ```python
          b = a + 1
          ```

        ```bash
        echo no
        ```

        <!-- requires: flax, optuna -->
        """
    )
    found = blocks(page)
    assert [(b.line, b.language, b.code.strip(), b.skip) for b in found] == [
        (4, "python", "a = 1", None),
        (9, "python", "raise SystemExit", "needs a cluster"),
        (14, "python", "b = a + 1", None),
        (18, "bash", "echo no", None),
    ]
    assert requirements(page) == ["flax", "optuna"]
    with pytest.raises(ValueError, match="never closed"):
        blocks("```python\nx = 1\n")
