"""Shared: the library's own runs of a factory are invisible: no warning, log line or output.

The first wrap of a configuration runs the factory, its ``init`` and its
``update`` many times (the probe, the verification), and a stateful object
checks a new ``init`` against its state. Plain optax runs them once, when the
user does: ``optax.lookahead``'s ``init`` logs "``params`` has no attribute
``fast``" through absl at that moment, and only then. So while the library
runs them, in this thread only:

- warnings are ignored (``warnings.catch_warnings``);
- log records are dropped by a filter on every handler of Python's logging
  (absl's included), installed once per handler and doing nothing for other
  threads or outside these runs;
- what is written to ``sys.stdout`` and ``sys.stderr`` (``print``, a
  ``jax.debug.print`` evaluated by the verification) is dropped by a proxy
  put in their place for the duration, which passes other threads' writes on.

The user's own call of the factory (once per ``wrap``) and their ``init`` and
``update`` are not in here: what they print, log and warn reaches the user as
with optax.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import contextlib
import logging
import sys
import threading
import warnings
from collections.abc import Generator
from typing import Any, TextIO

_STATE = threading.local()  # .depth: how many quiet blocks this thread is in
_LOCK = threading.Lock()
_QUIET_THREADS = [0]  # threads inside a quiet block (the stream proxies stay while any is)


def _quiet_here() -> bool:
    return getattr(_STATE, "depth", 0) > 0


class _DropWhileQuiet(logging.Filter):
    """Drops the records of a thread inside :func:`quietly`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _quiet_here()


_FILTER = _DropWhileQuiet()


def _handlers() -> list[logging.Handler]:
    """Every handler Python's logging has now (the root's, each logger's, the last resort)."""
    found: list[logging.Handler] = list(logging.getLogger().handlers)
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            found.extend(logger.handlers)
    if logging.lastResort is not None:
        found.append(logging.lastResort)
    return found


# What the handlers were last filtered for: (number of loggers, the root's handlers).
# Checked on every quiet block (a rebuild of a transformation is one): a new
# logger or a new handler of the root's rescans them all. (A handler added
# later to a logger that already existed is filtered at the next rescan.)
_SEEN: list[Any] = [None]


def _filter_handlers() -> None:
    root = logging.getLogger().handlers
    now = (len(logging.Logger.manager.loggerDict), tuple(map(id, root)), id(logging.lastResort))
    if now == _SEEN[0]:
        return
    for handler in _handlers():
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
    _SEEN[0] = now


class _Stream:
    """A stand-in for ``sys.stdout``/``sys.stderr``: drops the writes of a quiet thread."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        if _quiet_here():
            return len(text)
        return self.stream.write(text)

    def writelines(self, lines: Any) -> None:
        if not _quiet_here():
            self.stream.writelines(lines)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _install_streams() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Stream):
            setattr(sys, name, _Stream(stream))


def _remove_streams() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Stream):  # not replaced by anyone since (else left alone)
            setattr(sys, name, stream.stream)


@contextlib.contextmanager
def quietly() -> Generator[None, None, None]:
    """Runs the block with this thread's warnings, log records and output dropped."""
    depth = getattr(_STATE, "depth", 0)
    if depth:
        _STATE.depth = depth + 1
        try:
            yield
        finally:
            _STATE.depth = depth
        return
    with _LOCK:
        _filter_handlers()
        _QUIET_THREADS[0] += 1
        _install_streams()
    _STATE.depth = 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _STATE.depth = 0
        with _LOCK:
            _QUIET_THREADS[0] -= 1
            if not _QUIET_THREADS[0]:
                _remove_streams()
