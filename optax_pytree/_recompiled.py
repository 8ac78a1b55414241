"""Classify: a recompilation is never silent: a number held static, another than the same code gave before.

What the mechanism cannot make dynamic is part of the program: a callable
argument that stays static (a mask that reads a number of the config, a
schedule over a config whose look-ups are not proved, ``_lookups``), a
number a closure's child needs as a Python value (``range(config.pieces)``),
and a number the factory itself needs as one (``lbfgs``' ``memory_size``,
found by the probe: ``_pipeline``, keyed by the line of the user's call).
Another value is another compilation, as it must be; a sweep a user believes
is one compilation must not be several in silence. So each place remembers
the key it was last given, by the code location of the function (a
builder's closure is made anew at every call, at the same place): where the
next one differs by numbers alone, a warning names each number's path and
both values, once per code location (``opx.explain`` says the same).
"""

from __future__ import annotations

# pyright: strict
import sys
import warnings
from typing import Any

_LAST: dict[Any, Any] = {}  # a place -> the key it was last given
_MAX_PLACES = 256  # the places remembered at most (the oldest forgotten first)
_WARNED: set[Any] = set()  # the code locations warned about, once each


def last(place: Any, key: Any) -> Any:
    """The key ``place`` was given before (None the first time), ``key`` remembered in its place."""
    before = _LAST.pop(place, None)
    if len(_LAST) >= _MAX_PLACES:
        _LAST.pop(next(iter(_LAST)))
    _LAST[place] = key
    return before


def warned(where: Any) -> bool:
    """Whether the code location ``where`` was warned about already."""
    return where in _WARNED


def warn(where: Any, text: str) -> None:
    """Warns ``text``, once for the code location ``where``, at the user's call."""
    if where in _WARNED:
        return
    _WARNED.add(where)
    warnings.warn(text, stacklevel=user_stacklevel())


def shown(differences: list[tuple[str, Any, Any]]) -> str:
    """``cfg.lr = 0.001, now 0.003``: the numbers a key differs by (at most four)."""
    return "; ".join(f"{path or 'its value'} = {a!r}, now {b!r}" for path, a, b in differences[:4])


def _user_frame() -> tuple[Any, int]:
    """The first frame outside optax_pytree, and its ``stacklevel`` as this module's caller sees it."""
    frame, level = sys._getframe(2), 1  # pyright: ignore[reportPrivateUsage] - the caller's caller
    while frame is not None and frame.f_globals.get("__name__", "").startswith("optax_pytree."):
        frame, level = frame.f_back, level + 1
    return frame, level


def user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside optax_pytree (the user's call)."""
    return _user_frame()[1]


def user_line() -> tuple[str, int]:
    """The file and line of the user's call (the first frame outside optax_pytree)."""
    frame = _user_frame()[0]
    return ("", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)
