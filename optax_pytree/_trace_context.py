"""Shared: JAX's trace context set before the first trace of a wrapped optimizer.

orbax-checkpoint (with tensorstore and etils) is imported at the first save or
restore (``_checkpoint``), not with optax_pytree: it costs more than importing
optax itself. One thing that import does must happen before the user's first
trace, though: orbax imports ``jax.experimental.colocated_python``, which
imports ``jax.extend``, whose ``pallas`` module imports ``jax._src.pallas.core``;
since jax 0.12.0 that module defines two configuration states
(``pallas_grid_context``, ``pallas_dynamic_shapes_export``) that are part of
JAX's trace context. Every ``jit`` cache key holds the trace context, so each
function traced before a lazy import of orbax would retrace, and compile, once
after it. Importing that one module when the first wrapped object can be made
(``_tree`` imports this module) keeps the context the same (about 12 ms,
against about 200 ms for orbax); jax 0.11 and older define no such state in
orbax's imports, so there nothing is imported. ``import optax_pytree`` alone
imports none of this (the package's names are read lazily): a function traced
before the package's first use is retraced once, as after any import of a
module that defines configuration states. Fresh-process tests in
``tests/test_checkpoint.py`` check that orbax is not imported before the first
checkpoint and that its import then retraces nothing.
"""

from __future__ import annotations

import importlib
import re

import jax

JAX_VERSION = tuple(int(x) for x in re.findall(r"\d+", jax.__version__)[:2])

if JAX_VERSION >= (0, 12):
    try:
        importlib.import_module("jax._src.pallas.core")
    except Exception:  # noqa: BLE001 - pragma: no cover - moved or broken: only the retrace above is at stake
        pass
