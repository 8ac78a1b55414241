"""Feature: a wrapped transformation and its optimizer state, as one functional pytree.

``wrap`` makes the optimizer a pytree, but the training loop still carries two
things, the transformation and its state, and keeps them in step by hand. This
module folds them together (the idea of treex's ``Optimizer``), without
mutation: every method returns a new object.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, overload

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _bind, _leaves, _quiet
from ._bind import is_wrapped
from ._tree import PyTreeTransformation, argument_names, name_of
from ._value import ValueObject
from ._wrap import Names, P, Transformation, wrap_transformation_as_pytree


class _ParamsSpec(ValueObject):
    """Structure, shapes and dtypes of the parameters given to ``init`` (aux data).

    Kept so that ``replace`` can check that a new static configuration still
    fits the state (``jax.eval_shape`` of the new ``init``) without the
    parameters themselves.
    """

    __slots__ = ("avals", "treedef")

    def __init__(self, treedef: Any, avals: tuple[tuple[tuple[int, ...], np.dtype[Any]], ...]):
        self.treedef = treedef
        self.avals = avals
        self.key = (treedef, avals)
        self.cache_hash()

    @classmethod
    def of(cls, params: Any) -> _ParamsSpec | None:
        leaves, treedef = jax.tree_util.tree_flatten(params)
        try:
            avals = tuple((tuple(jnp.shape(x)), np.dtype(jnp.result_type(x))) for x in leaves)
        except TypeError:  # a leaf that is not an array: no check possible
            return None
        return cls(treedef, avals)

    def abstract(self) -> Any:
        leaves = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in self.avals]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def __repr__(self) -> str:
        shapes = ", ".join(_leaves.aval_text(s, d) for s, d in self.avals)
        return f"params({shapes})"


class _Aux(ValueObject):
    """The aux data: whether the state exists, and what it was made for."""

    # Compared on the dispatch path (jit compares the carried object's treedef
    # with the compiled one's): the same object, as JAX hands it on, at once
    # (ValueObject's equality is identity first).
    __slots__ = ("initialized", "params")

    def __init__(self, initialized: bool, params: _ParamsSpec | None):
        self.initialized = initialized
        self.params = params
        self.key = (initialized, params)
        self.cache_hash()

    def __repr__(self) -> str:  # shown in treedefs: stable across processes
        return f"initialized={self.initialized}, {self.params!r}" if self.initialized else "uninitialized"


_UNINITIALIZED = _Aux(False, None)


class PyTreeTransformationWithState:
    """A wrapped optax transformation together with its optimizer state.

    Made by :func:`wrap_transformation_as_pytree_with_state`. A pytree whose
    children are the wrapped transformation (its dynamic hyperparameters) and
    the optimizer state; nothing is mutated, every method returns a new
    object. Hyperparameters are read as attributes (``opt.learning_rate``).
    Annotate with it. Made directly from a wrapped transformation and a state
    (one from raw optax's ``init``, say), it trusts that state.

    Examples:
        >>> import jax.numpy as jnp, optax, optax_pytree as opx
        >>> opt: opx.PyTreeTransformationWithState = opx.wrap_transformation_as_pytree_with_state(
        ...     optax.sgd, learning_rate=0.1)
        >>> opt = opt.init({"w": jnp.ones(2)})
        >>> params, opt = opt.apply_gradients({"w": jnp.ones(2)}, {"w": jnp.ones(2)})
        >>> params["w"]
        Array([0.9, 0.9], dtype=float32)
        >>> opt.initialized, float(opt.learning_rate)
        (True, 0.10000000149011612)
    """

    # One slot, ``((transformation, state), aux)``: exactly what flattening
    # returns, so that JAX's flatten on the dispatch path of every jitted call
    # is a C-level attribute read (``operator.attrgetter``), no Python frame.
    __slots__ = ("_flat",)

    _flat: tuple[tuple[PyTreeTransformation, Any], _Aux]

    @property
    def _transformation(self) -> PyTreeTransformation:
        return self._flat[0][0]

    @property
    def _state(self) -> Any:
        return self._flat[0][1]

    @property
    def _aux(self) -> _Aux:
        return self._flat[1]

    def __init__(self, transformation: PyTreeTransformation, state: Any = None):
        if not isinstance(transformation, PyTreeTransformation):
            how = f"; {_bind.HOW_TO_WRAP}" if _bind.is_plain_transformation(transformation) else ""
            raise TypeError(
                "PyTreeTransformationWithState: expected a wrapped transformation "
                f"(optax_pytree.wrap(...)), got {transformation!r}{how}"
            )
        # A state given here (from raw optax, say): the params it fits are unknown.
        aux = _UNINITIALIZED if state is None else _Aux(True, None)
        _set_flat(self, ((transformation, state), aux))

    # -- what it holds -----------------------------------------------------

    @property
    def transformation(self) -> PyTreeTransformation:
        """The wrapped transformation (a pytree of the hyperparameters)."""
        return self._transformation

    @property
    def initialized(self) -> bool:
        """Whether ``init`` has been called (and so ``state`` exists)."""
        return self._aux.initialized

    @property
    def state(self) -> Any:
        """The optimizer state (what the factory's ``init`` returned and ``update`` carries)."""
        self._require_state("state")
        return self._state

    @property
    def factory(self) -> Callable[..., Any]:
        """The factory of the wrapped transformation."""
        return self._transformation.factory

    @property
    def hyperparams(self) -> dict[str, Any]:
        """Argument name -> value, as ``transformation.hyperparams``."""
        return self._transformation.hyperparams

    def _name(self) -> str:
        return name_of(self._transformation)

    def _require_state(self, what: str) -> None:
        if not self._aux.initialized:
            raise ValueError(
                f"{self._name()}: {what} used before init(params): this optimizer has no state yet; "
                "call `opt = opt.init(params)` first"
            )

    # -- the optimizer -----------------------------------------------------

    def init(self, params: Any) -> PyTreeTransformationWithState:
        """A copy holding a fresh state: exactly the factory's ``init(params)``.

        Args:
            params: the parameters to optimize (abstract ones are enough under
                ``jax.eval_shape``).

        Returns:
            A new optimizer with the state; this one is unchanged.
        """
        state = self._transformation.init(params)
        return _made(self._transformation, state, _Aux(True, _ParamsSpec.of(params)))

    def update(
        self, updates: Any, params: Any = None, **extra_args: Any
    ) -> tuple[Any, PyTreeTransformationWithState]:
        """One step of the transformation: exactly the factory's ``update``.

        Args:
            updates: the gradients (or updates from a previous transformation).
            params: the current parameters, when the transformation needs them.
            **extra_args: forwarded to ``update`` (``value``, ``grad``,
                ``value_fn`` for line searches, ...).

        Returns:
            ``(updates, opt)``: the transformed updates and a new optimizer
            holding the next state.

        Raises:
            ValueError: before ``init``.
        """
        self._require_state("update()")
        updates, state = self._transformation.update(updates, self._state, params, **extra_args)
        return updates, _made(self._transformation, state, self._aux)

    def apply_gradients(
        self, grads: Any, params: Any, **extra_args: Any
    ) -> tuple[Any, PyTreeTransformationWithState]:
        """``update`` followed by ``optax.apply_updates``.

        Args:
            grads: the gradients of the loss w.r.t. ``params``.
            params: the current parameters.
            **extra_args: forwarded to ``update``.

        Returns:
            ``(params, opt)``: the new parameters and the new optimizer.

        Raises:
            ValueError: before ``init``.
        """
        self._require_state("apply_gradients()")
        updates, opt = self.update(grads, params, **extra_args)
        return optax.apply_updates(params, updates), opt

    def replace(self, **changes: Any) -> PyTreeTransformationWithState:
        """A copy with some hyperparameters changed and the same state.

        Validated and classified like ``wrap`` (an unknown name is an error).
        Changing a dynamic value (a learning rate) is a new leaf value: a
        jitted step taking the optimizer does not recompile. The new value
        is placed as the old one was (a hyperparameter replicated over a
        mesh stays so), since ``jit`` retraces when the placement of an
        argument changes. Changing the
        static configuration is allowed when the state still fits it (same
        structure and dtypes, checked with ``jax.eval_shape``); otherwise call
        ``init`` again.

        Args:
            **changes: argument name -> new value.

        Returns:
            A new optimizer; this one is unchanged.

        Raises:
            ValueError: an unknown argument, or a change after which the state
                no longer fits the transformation.
        """
        old = self._transformation
        new = old.replace(**changes)  # keeps the placement of replaced values
        if self._aux.initialized and jax.tree_util.tree_structure(new) != jax.tree_util.tree_structure(old):
            self._check_state_fits(new, changes)
        return _made(new, self._state, self._aux)

    def _check_state_fits(self, new: PyTreeTransformation, changes: dict[str, Any]) -> None:
        params = self._aux.params
        if params is None:
            return
        with _quiet.quietly():  # the library's check, not the user's init: nothing shows
            expected = jax.eval_shape(new.init, params.abstract())
        same_structure = jax.tree_util.tree_structure(self._state) == jax.tree_util.tree_structure(expected)
        if not same_structure or _dtypes(self._state) != _dtypes(expected):
            changed = ", ".join(f"{k}={v!r}" for k, v in changes.items())
            raise ValueError(
                f"{self._name()}: replace({changed}) changes the structure or dtypes of the optimizer "
                f"state, so the current state no longer fits it:\n  state:    {_avals(self._state)}\n"
                f"  expected: {_avals(expected)}\ncall `opt.replace(...).init(params)` to start afresh"
            )

    # -- Python protocol ---------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # private names, also while unpickling: never arguments
            raise AttributeError(name)
        tx = self._transformation
        if name in argument_names(tx):
            return getattr(tx, name)
        raise AttributeError(
            f"PyTreeTransformationWithState of {self._name()} has no attribute or argument {name!r}"
        )

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *argument_names(self._transformation)]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"PyTreeTransformationWithState is immutable; use opt.replace({name}=...) "
            "or the optimizer returned by init/update"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError("PyTreeTransformationWithState is immutable")

    def __reduce__(self) -> Any:
        params = None if self._aux.params is None else self._aux.params.abstract()
        return (_rebuild, (self._transformation, self._state, self._aux.initialized, params))

    def __repr__(self) -> str:
        if not self._aux.initialized:
            state = "<uninitialized>"
        else:
            state = repr(jax.tree_util.tree_map(_AvalRepr, self._state))
        return f"with_state({self._transformation!r}, state={state})"


def _made(transformation: PyTreeTransformation, state: Any, aux: _Aux) -> PyTreeTransformationWithState:
    """A new optimizer from its parts (no validation: they come from another one), as JAX rebuilds one."""
    return _unflatten(aux, (transformation, state))


def _dtypes(tree: Any) -> list[Any]:
    return [jnp.result_type(x) for x in jax.tree_util.tree_leaves(tree)]


def _avals(tree: Any) -> str:
    return repr(jax.tree_util.tree_map(lambda x: _AvalRepr(x, values=False), tree))


class _AvalRepr:
    """Stands for an array in a repr: its dtype and shape (and value, for a scalar)."""

    __slots__ = ("text",)

    def __init__(self, x: Any, values: bool = True):
        if _leaves.is_tracer(x):
            self.text = f"<{x.aval.str_short()}>"
        elif isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)):
            aval = _leaves.aval_text(x.shape, x.dtype)
            if values and x.size == 1 and not (isinstance(x, jax.Array) and x.is_deleted()):
                self.text = f"{aval}({np.asarray(x).reshape(())[()]!s})"
            else:
                self.text = aval
        else:
            self.text = repr(x)

    def __repr__(self) -> str:
        return self.text


def _rebuild(
    transformation: Any, state: Any, initialized: bool, params: Any
) -> PyTreeTransformationWithState:
    aux = _Aux(True, None if params is None else _ParamsSpec.of(params)) if initialized else _UNINITIALIZED
    return _made(transformation, state, aux)


_KEYS = (jax.tree_util.GetAttrKey("transformation"), jax.tree_util.GetAttrKey("state"))


_flatten = operator.attrgetter("_flat")
_set_flat = PyTreeTransformationWithState._flat.__set__  # pyright: ignore[reportAttributeAccessIssue]
_new = object.__new__


def _flatten_with_keys(opt: PyTreeTransformationWithState) -> tuple[tuple[tuple[Any, Any], ...], _Aux]:
    children, aux = _flatten(opt)
    return tuple(zip(_KEYS, children)), aux


def _unflatten(aux: _Aux, children: Any) -> PyTreeTransformationWithState:
    obj = _new(PyTreeTransformationWithState)
    # No validation: JAX unflattens with placeholders (shardings, None, object()).
    _set_flat(obj, (tuple(children), aux))
    return obj


jax.tree_util.register_pytree_with_keys(
    PyTreeTransformationWithState, _flatten_with_keys, _unflatten, _flatten
)


@overload
def wrap_transformation_as_pytree_with_state(
    tx: PyTreeTransformation, /
) -> PyTreeTransformationWithState: ...
@overload
def wrap_transformation_as_pytree_with_state(
    factory: Callable[P, Transformation], /, *args: P.args, **kwargs: P.kwargs
) -> PyTreeTransformationWithState: ...
@overload
def wrap_transformation_as_pytree_with_state(
    factory: Callable[..., Transformation],
    /,
    *args: Any,
    static_argnames: Names,
    dynamic_argnames: Names = (),
    dynamic_only: Names | None = None,
    **kwargs: Any,
) -> PyTreeTransformationWithState: ...
@overload
def wrap_transformation_as_pytree_with_state(
    factory: Callable[..., Transformation],
    /,
    *args: Any,
    dynamic_argnames: Names,
    dynamic_only: Names | None = None,
    **kwargs: Any,
) -> PyTreeTransformationWithState: ...
@overload
def wrap_transformation_as_pytree_with_state(
    factory: Callable[..., Transformation], /, *args: Any, dynamic_only: Names, **kwargs: Any
) -> PyTreeTransformationWithState: ...
def wrap_transformation_as_pytree_with_state(
    factory: Callable[..., Any] | PyTreeTransformation, /, *args: Any, **kwargs: Any
) -> PyTreeTransformationWithState:
    """Wraps an optax factory's result and its optimizer state as one pytree.

    With :func:`wrap` the training loop carries the transformation and its
    state side by side. This folds them into one functional object: ``init``
    returns an optimizer holding the state, ``update`` and
    ``apply_gradients`` return the next optimizer along with their result,
    and nothing is mutated, so the object goes through ``jax.jit`` (as an
    argument and a result; donate it to reuse the state buffers),
    ``jax.lax.scan`` carries and checkpoints as any pytree does.

    The hyperparameters stay dynamic leaves (under ``.transformation``), the
    state's arrays are leaves too (under ``.state``); key paths name them all.
    A new learning rate (``opt.replace(learning_rate=...)``) keeps the state
    and does not recompile.

    Args:
        factory: an optax factory, as for :func:`wrap`; or an already wrapped
            transformation, given alone.
        *args: positional arguments of ``factory``.
        **kwargs: keyword arguments of ``factory`` (``static_argnames`` and
            ``dynamic_argnames`` included, as for :func:`wrap`).

    Returns:
        A :class:`PyTreeTransformationWithState`, not yet initialized: call
        ``opt = opt.init(params)`` before ``update``.

    Raises:
        TypeError: as :func:`wrap`; or the factory returns a schedule, or a
            wrapped transformation is given with further arguments.

    Examples:
        >>> import jax, jax.numpy as jnp, optax
        >>> import optax_pytree as opx
        >>> params = {"w": jnp.ones(3)}
        >>> opt = opx.wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=0.1)
        >>> opt = opt.init(params)
        >>> traces = 0
        >>> @jax.jit
        ... def step(opt, params):
        ...     global traces
        ...     traces += 1
        ...     grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
        ...     return opt.apply_gradients(grads, params)
        >>> params, opt = step(opt, params)
        >>> opt = opt.replace(learning_rate=0.01)  # same state, new value
        >>> params, opt = step(opt, params)
        >>> traces, int(opt.state[0].count)
        (1, 2)
        >>> [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(opt)[0]][:2]
        ['.transformation.learning_rate', '.transformation.b1']
    """
    tx: Any
    if is_wrapped(factory):
        if args or kwargs:
            raise TypeError(
                "wrap_transformation_as_pytree_with_state: a wrapped transformation is given alone; "
                f"got further arguments {list(kwargs) or list(args)!r} (use tx.replace(...) first)"
            )
        tx = factory
    elif _bind.is_plain_transformation(factory):
        raise TypeError(
            "wrap_transformation_as_pytree_with_state: got a plain optax transformation, whose "
            "hyperparameters are hidden in its closures; pass the factory and its arguments instead, "
            "e.g. wrap_transformation_as_pytree_with_state(optax.adam, learning_rate=1e-3)"
        )
    else:
        tx = wrap_transformation_as_pytree(factory, *args, **kwargs)  # pyright: ignore[reportCallIssue, reportArgumentType]
    if not isinstance(tx, PyTreeTransformation):
        raise TypeError(
            f"wrap_transformation_as_pytree_with_state: {name_of(tx)} gives a schedule, "
            "not a transformation; a schedule has no optimizer state (use wrap)"
        )
    return PyTreeTransformationWithState(tx)
