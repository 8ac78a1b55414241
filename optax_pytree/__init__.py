"""optax_pytree: any optax transformation as a JAX pytree of its hyperparameters.

How it works, step by step and module by module: ``optax_pytree/ARCHITECTURE.md``.
"""

import importlib.metadata

from ._checkpoint import checkpoint_signature as checkpoint_signature
from ._checkpoint import restore_checkpoint as restore_checkpoint
from ._checkpoint import save_checkpoint as save_checkpoint
from ._classify import dynamic as dynamic
from ._classify import static as static
from ._distributed import process_allgather as process_allgather
from ._distributed import process_local_indices as process_local_indices
from ._distributed import shard_process_local as shard_process_local
from ._explain import explain as explain
from ._stateful import PyTreeTransformationWithState as PyTreeTransformationWithState
from ._stateful import wrap_transformation_as_pytree_with_state as wrap_transformation_as_pytree_with_state
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

try:
    __version__ = importlib.metadata.version("optax_pytree")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
    __version__ = "0+unknown"
