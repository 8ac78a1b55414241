"""optax_pytree: any optax transformation as a JAX pytree of its hyperparameters.

How it works, step by step and module by module: ``optax_pytree/ARCHITECTURE.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what editors and type checkers see; at run time, imported at first use (below)
    from ._checkpoint import checkpoint_signature as checkpoint_signature
    from ._checkpoint import restore_checkpoint as restore_checkpoint
    from ._checkpoint import save_checkpoint as save_checkpoint
    from ._classify import dynamic as dynamic
    from ._classify import static as static
    from ._distributed import process_allgather as process_allgather
    from ._distributed import process_local_indices as process_local_indices
    from ._distributed import shard_process_local as shard_process_local
    from ._explain import explain as explain
    from ._population import map_population as map_population
    from ._stateful import PyTreeTransformationWithState as PyTreeTransformationWithState
    from ._stateful import (
        wrap_transformation_as_pytree_with_state as wrap_transformation_as_pytree_with_state,
    )
    from ._sweep import grid as grid
    from ._sweep import index as index
    from ._sweep import shard as shard
    from ._sweep import stack as stack
    from ._sweep import unstack as unstack
    from ._tree import PyTreeSchedule as PyTreeSchedule
    from ._tree import PyTreeTransformation as PyTreeTransformation
    from ._wrap import pytree_transformation as pytree_transformation
    from ._wrap import wrap as wrap
    from ._wrap import wrap_transformation_as_pytree as wrap_transformation_as_pytree

    __version__: str

# Each public name and the private module that defines it. ``import optax_pytree``
# imports none of them: a name is imported when first read (PEP 562), so that
# the package costs next to nothing over ``import optax`` (issue 43: at most
# +0.05 s; tests/test_import_time.py).
_WHERE = {
    "checkpoint_signature": "_checkpoint",
    "restore_checkpoint": "_checkpoint",
    "save_checkpoint": "_checkpoint",
    "dynamic": "_classify",
    "static": "_classify",
    "process_allgather": "_distributed",
    "process_local_indices": "_distributed",
    "shard_process_local": "_distributed",
    "explain": "_explain",
    "map_population": "_population",
    "PyTreeTransformationWithState": "_stateful",
    "wrap_transformation_as_pytree_with_state": "_stateful",
    "grid": "_sweep",
    "index": "_sweep",
    "shard": "_sweep",
    "stack": "_sweep",
    "unstack": "_sweep",
    "PyTreeSchedule": "_tree",
    "PyTreeTransformation": "_tree",
    "pytree_transformation": "_wrap",
    "wrap": "_wrap",
    "wrap_transformation_as_pytree": "_wrap",
}

__all__ = [  # noqa: RUF022 - as _WHERE, by module
    "checkpoint_signature",
    "restore_checkpoint",
    "save_checkpoint",
    "dynamic",
    "static",
    "process_allgather",
    "process_local_indices",
    "shard_process_local",
    "explain",
    "map_population",
    "PyTreeTransformationWithState",
    "wrap_transformation_as_pytree_with_state",
    "grid",
    "index",
    "shard",
    "stack",
    "unstack",
    "PyTreeSchedule",
    "PyTreeTransformation",
    "pytree_transformation",
    "wrap",
    "wrap_transformation_as_pytree",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # read once: later reads are a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, "__version__"})


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("optax_pytree")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "0+unknown"
