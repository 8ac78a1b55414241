"""Analyse: detaching the stand-ins from what a factory returned.

The probe and every rebuild call the factory with :class:`~optax_pytree._guard.Guarded`
stand-ins. What it returns closes over them (the cells of ``init`` and
``update``, a schedule's closure, partials, plain objects holding them), and
a stand-in must not outlive the call: it would reach ``jnp`` at call time.
:func:`detach` copies what was returned with each stand-in replaced by its
leaf, keeping those compared at call time (``keep``). Nothing is mutated: the
factory's objects may be shared (a module-level default, a cached optax
object). Each limit of the copier below says why it is there.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import copy
import functools
import types
from typing import Any

import jax
import numpy as np

from . import _closures
from ._guard import Context, Guarded

# Values that cannot hold a stand-in: immutable scalars and strings, arrays
# (``np.asarray`` of a stand-in asks for a concrete value, which makes its
# argument static, so no array ever holds one) and classes (shared code).
_ATOMS = (int, float, complex, str, bytes, bool, type(None), np.generic, np.ndarray, jax.Array, type)

# Objects of these libraries are never a factory's container of
# hyperparameters, and copying them is wrong or costly: a logger or a lock
# must stay the one object its users share (``copy.copy`` of a
# ``threading.Lock`` fails), a NumPy ``RandomState`` would fork its stream,
# a JAX ``Mesh`` or sharding is compared by identity in caches. Their
# ``__dict__`` is not walked. (optax's objects are not listed: optax keeps
# hyperparameters in them.)
_LIBRARIES = ("jax", "jaxlib", "numpy", "builtins", "logging", "typing", "functools", "abc", "threading")

# How deep the copier follows references. optax's deepest nesting
# (``chain`` -> ``inject_hyperparams`` -> a closure -> a partial -> a
# schedule's closure) is about 6; what a closure reaches past 12 is a user's
# object graph (a model, a data set) that the copier would walk at every
# rebuild, in every traced call. A stand-in left deeper than this is not
# silently kept: at call time it reaches JAX through ``__jax_array__``,
# which the probe records as an escape, and its argument goes down a mode
# (a traced leaf, never a wrong value).
_MAX_DEPTH = 12


class _Detacher:
    """Copies what a factory returned, with ``Guarded`` values replaced by their leaves.

    Keeps those whose arguments are all in ``keep`` (compared at call time).
    Functions are copied with new closure cells (cells shared by several
    closures stay shared, so ``nonlocal`` writes still reach all of them),
    partials, bound methods, tuples, lists, dicts and plain objects are
    copied; nothing is mutated.
    """

    def __init__(self, ctx: Context, keep: frozenset[str]):
        self.ctx = ctx
        self.keep = keep
        self.memo: dict[int, Any] = {}
        self.cells: dict[int, Any] = {}

    def __call__(self, x: Any, depth: int = 0) -> Any:
        if isinstance(x, Guarded):
            # Another context's stand-ins are a wrapped child's, kept in its
            # closures for call time: the child's, not to be touched here.
            if x.ctx is not self.ctx or x.names <= self.keep:
                return x
            return x.exact()
        if isinstance(x, _ATOMS) or depth > _MAX_DEPTH or _is_wrapped_object(x):
            return x
        key = id(x)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = x  # cycles: a node being copied stands for itself
        new = self._copy(x, depth + 1)
        self.memo[key] = new
        return new

    def _copy(self, x: Any, depth: int) -> Any:
        if isinstance(x, types.FunctionType):
            return self._function(x, depth)
        if isinstance(x, functools.partial):
            func = self(x.func, depth)
            args = tuple(self(a, depth) for a in x.args)
            kwargs = {k: self(v, depth) for k, v in x.keywords.items()}
            if (
                func is x.func
                and all(a is b for a, b in zip(args, x.args))
                and all(kwargs[k] is v for k, v in x.keywords.items())
            ):
                return x
            return functools.partial(func, *args, **kwargs)
        if isinstance(x, types.MethodType):
            owner = self(x.__self__, depth)
            return x if owner is x.__self__ else types.MethodType(x.__func__, owner)
        if type(x) in (list, tuple) or (isinstance(x, tuple) and hasattr(x, "_fields")):
            items = [self(v, depth) for v in x]
            if all(a is b for a, b in zip(items, x)):
                return x
            if type(x) is list:
                return items
            return tuple(items) if type(x) is tuple else type(x)(*items)
        if type(x) is dict:
            items = {k: self(v, depth) for k, v in x.items()}
            return x if all(items[k] is v for k, v in x.items()) else items
        # Modules, builtins and code are shared, never a factory's own. A
        # descriptor (its type has ``__get__``: a property, a ``jax.jit``
        # function, ``functools.cached_property``) is code that binds to an
        # owner: a copy would bind differently, and a jitted function's copy
        # would start with an empty compilation cache at every rebuild.
        if isinstance(x, (types.ModuleType, types.BuiltinFunctionType, types.CodeType)) or callable(
            getattr(type(x), "__get__", None)
        ):
            return x
        module = getattr(type(x), "__module__", "") or ""
        attrs = getattr(x, "__dict__", None)
        if not isinstance(attrs, dict) or module.split(".")[0] in _LIBRARIES:
            return x
        changed = {k: self(v, depth) for k, v in attrs.items()}
        if all(changed[k] is v for k, v in attrs.items()):
            return x
        clone = copy.copy(x)
        clone.__dict__.update(changed)
        return clone

    def _function(self, fn: types.FunctionType, depth: int) -> Any:
        closure = fn.__closure__ or ()
        new_cells = tuple(self._cell(c, depth) for c in closure)
        defaults = fn.__defaults__
        new_defaults = None if defaults is None else tuple(self(d, depth) for d in defaults)
        kwdefaults = fn.__kwdefaults__
        new_kwdefaults = None if kwdefaults is None else {k: self(v, depth) for k, v in kwdefaults.items()}
        same = all(a is b for a, b in zip(new_cells, closure))
        same = same and (defaults is None or all(a is b for a, b in zip(new_defaults or (), defaults)))
        same = same and (
            kwdefaults is None or all((new_kwdefaults or {})[k] is v for k, v in kwdefaults.items())
        )
        if same:
            return fn
        return _closures.with_cells(fn, new_cells, new_defaults, new_kwdefaults)

    def _cell(self, cell: Any, depth: int) -> Any:
        key = id(cell)
        if key in self.cells:
            return self.cells[key]
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell (a name not yet assigned)
            self.cells[key] = cell
            return cell
        self.cells[key] = cell
        new = self(contents, depth)
        result = cell if new is contents else types.CellType(new)
        self.cells[key] = result
        return result


def _is_wrapped_object(x: Any) -> bool:
    # A wrapped object (a factory may return one) holds leaves, never stand-ins.
    return "_core" in getattr(x, "__dict__", ())


def detach(built: Any, ctx: Context, keep: frozenset[str] = frozenset()) -> Any:
    """What the factory returned, with the ``Guarded`` values of ``ctx`` replaced by their leaves."""
    return _Detacher(ctx, keep)(built)
