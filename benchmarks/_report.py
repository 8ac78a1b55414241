"""The report, shared by every section, ``run.py`` and ``versus.py``: figures, targets, markdown.

Formatting only: no measurement and no jax (``versus.py`` imports it in a
process that loads neither jax nor the package). A statistic is ``_common.summary``'s
dict (median, min, max, n, samples).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# --------------------------------------------------------------------------
# Figures.


def ratio(num: float, den: float) -> float:
    """``num / den``, NaN where ``den`` is zero: a ratio never raises.

    A statistic (``_common.summary``) leaves NaN samples out and counts them;
    one with no sample left reads n/a.
    """
    return num / den if den else float("nan")


def median_range(median: float, lo: float, hi: float, digits: int = 3) -> str:
    """``median [min-max]``."""
    return f"{median:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def fmt(stat: dict[str, Any], digits: int = 3, scale: float = 1.0) -> str:
    """A statistic as ``median [min-max]`` (the median alone for one sample, n/a for none), times
    ``scale``."""
    if stat["n"] == 0:
        return "n/a"
    m, lo, hi = (stat[k] * scale for k in ("median", "min", "max"))
    return f"{m:.{digits}f}" if stat["n"] == 1 else median_range(m, lo, hi, digits)


def us(stat: dict[str, Any], digits: int = 1) -> str:
    """``stat`` (seconds) in microseconds."""
    return fmt(stat, digits, 1e6)


def pct(x: float) -> str:
    """A relative difference, signed: ``+0.0123%``."""
    return f"{x:+.4%}"


def span(xs: Sequence[int]) -> str:
    """Counts as ``min-max``, or the one value when they agree."""
    lo, hi = min(xs), max(xs)
    return str(lo) if lo == hi else f"{lo}-{hi}"


# --------------------------------------------------------------------------
# Targets.


@dataclasses.dataclass
class Target:
    section: int
    what: str
    measured: str
    target: str
    status: str  # PASS, MISS or n/a
    note: str = ""

    def line(self, section: bool = True) -> str:
        """``PASS  §N what: measured (target ...)  [note]`` (without ``§N`` for ``section=False``)."""
        where = f"§{self.section} " if section else ""
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.status:4}  {where}{self.what}: {self.measured} (target {self.target}){note}"


def check(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def on_median(
    section: int,
    what: str,
    stat: dict[str, Any],
    target: str,
    limit: float,
    op: Callable[[float, float], bool] = operator.le,
    *,
    digits: int = 3,
    na: str = "",
) -> Target:
    """PASS when ``op(median of stat, limit)``; n/a, with ``na`` as the note, when ``na`` is given.

    Also n/a when the statistic holds no valid sample (every ratio had a zero denominator).
    """
    if not na and stat["n"] == 0:
        na = f"no valid sample ({stat.get('invalid', 0)} with a zero denominator)"
    status = "n/a" if na else check(op(stat["median"], limit))
    return Target(section, what, fmt(stat, digits), target, status, na)


def cost_targets(section: int, name: str, ref: str, cost: dict[str, Any]) -> list[Target]:
    """XLA flops within 0.2% and bytes accessed within 0.1% of the reference's."""
    df = cost.get("rel_diff_flops", float("nan"))
    db = cost.get("rel_diff_bytes accessed", float("nan"))
    return [
        Target(section, f"XLA flops, {name} vs {ref}", pct(df), "within 0.2%", check(abs(df) <= 0.002)),
        Target(
            section, f"XLA bytes accessed, {name} vs {ref}", pct(db), "within 0.1%", check(abs(db) <= 0.001)
        ),
    ]


# --------------------------------------------------------------------------
# Markdown.


def table(header: str, rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table: ``header`` (cells joined by `` | ``), its ``|---|`` separator, the rows."""
    lines = [f"| {header} |", "|" + "---|" * len(header.split(" | "))]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def section(heading: str, *parts: str | list[str]) -> list[str]:
    """A section of the report: a blank line before the heading and before each part.

    A part is a paragraph (a string) or a table (its lines).
    """
    lines: list[str] = []
    for part in (heading, *parts):
        lines += ["", *([part] if isinstance(part, str) else part)]
    return lines


def targets_table(tgts: Iterable[Target]) -> list[str]:
    return table(
        "§ | measurement | measured | target | result",
        [
            [t.section, t.what, t.measured, t.target, f"{t.status} ({t.note})" if t.note else t.status]
            for t in tgts
        ],
    )


def stateful_parts(rows: list[tuple[str, dict[str, Any]]]) -> list[str | list[str]]:
    """The paragraph and table of (e) carried through ``jax.jit`` (sections 3 and 6), for ``section``."""
    return [
        "(e) with its state carried through `jax.jit` (`params, opt = step(opt, params, grads)`), "
        "against the same loop carrying `(tuple of hyperparameter arrays, optax state)`, and that "
        "loop carrying one more array (the size of the object's carried exact values: what the "
        "exactness costs at dispatch, the floor of the ratio):",
        table(
            "parameters | step (us) | plain (us) | step ratio | plain + 1 array (us) | ratio to it | "
            "flatten (us) | flatten ratio | unflatten (us) | unflatten ratio",
            [
                [
                    name,
                    us(st["step_s"]),
                    us(st["step_plain_s"]),
                    fmt(st["step_ratio"]),
                    us(st["step_extra_s"]) if "step_extra_s" in st else "",
                    fmt(st["step_ratio_extra"]) if "step_ratio_extra" in st else "",
                    us(st["flatten_s"], 2),
                    fmt(st["flatten_ratio"], 2),
                    us(st["unflatten_s"], 2),
                    fmt(st["unflatten_ratio"], 2),
                ]
                for name, st in rows
            ],
        ),
    ]
