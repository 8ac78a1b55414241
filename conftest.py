"""pytest at the repository root: what the doctests of the package can collect here.

``optax_pytree.nnx`` and ``optax_pytree.linen`` need flax, an optional
dependency; without it their doctest modules cannot be imported (by design:
an ImportError that says so, tested in tests/test_flax.py).
"""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("flax") is None:
    collect_ignore += ["optax_pytree/nnx.py", "optax_pytree/linen.py"]
