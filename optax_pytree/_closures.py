"""Classify: captured values: what a function holds, what its code reads of it, how it is rebuilt.

Programs write their schedules as closures over the numbers they sweep, most
often read through the program's configuration object::

    def create_learning_rate_fn(config):
        def schedule(step):
            warmup = jnp.minimum(1.0, step / config.warmup_steps)
            return config.optim.lr * warmup
        return schedule

    tx = optax.adamw(create_learning_rate_fn(config))

(flax's examples, scenic's ``lr_fn`` over ``config.lr_configs``, cleanrl's
``linear_schedule`` over ``args``, Mava's over an OmegaConf ``DictConfig``,
``functools.partial(learning_rate_decay, lr_init=..., lr_final=...)``,
``self.lr`` in a trainer's method). A function compared by value is a new
static value for every rate: one compilation per rate. Here such a function
given as an argument becomes a child of the object: its captured numbers are
leaves (probed, guarded and verified like any factory's arguments; one the
function needs as a Python value is static), whether held directly in a
cell, given to a ``functools.partial``, held as a NumPy or JAX array, or read
through a captured object along attribute and item look-ups. This is
equinox's ``closure_to_pytree``, done by the one mechanism.

This module is the one home of captured values; what a function's code reads
of them, and which look-ups can be replaced safely, is read by ``_lookups``
(failing closed: the whole object counts):

- **what a callable holds** (:func:`capture`): a function's cells, a bound
  method's ``self`` (Python's, or an equinox module's), a
  ``functools.partial``'s arguments (over a function or a bound method), a
  callable object's ``self``, and the globals of its module that hold
  numbers (a config at the top of a script, cleanrl's ``args``, absl's
  ``FLAGS``), each held as itself, as a view of what is read of it, or, a
  list of numbers used whole, as its numbers (a new list of them).
- **the recipe** (:class:`ClosureFactory`): such a callable as a factory
  whose parameters are its captured values, named by their paths
  (``config.optim.lr``, ``rates[0]``); calling it rebuilds the callable,
  each captured object replaced by a view that answers exactly the look-ups
  read, with the values given; a module's globals read from a namespace of
  the rebuilt function's own (the module is never touched).
- **the source** (:class:`Source`): what the child was made from, read again
  at every eager build and every flatten (``_watch``): a config changed
  since is an error naming the value, never a silently old number. A
  function that stays static and reads a config it holds (a mask over
  ``config.threshold``) is read again the same way (:class:`StaticReads`).
- **why it stays static** (:func:`unproved`): the look-ups of the class's
  own code that were not proved to give what the object holds, named for
  the warning; and a child that differs from the one its code made before
  by a number it needs as a Python value is a recompilation, named
  (``_recompiled``).

Only where it is safe and useful: cells all assigned and never written
(``nonlocal``: a rebuilt closure has fresh cells); a module's globals held
only where the function writes none and no other function or class of the
module it reads reads them too (it would read the module's own); at least one number,
numeric array, wrapped object or convertible function among the values;
and a function that runs as a schedule with them (a mask or a label
function that reads a number stays static, compared by value).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dis
import functools
import inspect
import operator
import os
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _lookups, _recompiled, _static, _watch
from ._bind import is_wrapped
from ._caches import cache
from ._leaves import is_concrete_number
from ._lookups import Path
from ._value import ValueObject

# --------------------------------------------------------------------------
# Reading cells, and the recipe of a callable.

_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})


@functools.lru_cache(maxsize=1024)
def _writes_a_cell(code: types.CodeType, names: frozenset[str] | None = None) -> bool:
    """Whether ``code``, or a function it defines, assigns one of its free variables (``nonlocal``)."""
    names = frozenset(code.co_freevars) if names is None else names
    free = names & frozenset(code.co_freevars)
    if free and any(i.opname in _WRITES and i.argval in free for i in dis.get_instructions(code)):
        return True
    return any(isinstance(c, types.CodeType) and _writes_a_cell(c, names) for c in code.co_consts)


def _useful(value: Any, seen: frozenset[int]) -> bool:
    """A value that makes a child worth it: a number, a wrapped object, a convertible callable."""
    if is_concrete_number(value) or is_wrapped(value):
        return True
    return callable(value) and capture(value, seen) is not None


_MAX_ITEMS = 64  # a longer list of numbers is data, not hyperparameters: kept whole


class _Items(NamedTuple):
    """A list or tuple of numbers used whole (iterated, sliced, zipped): a new one of its items."""

    kind: type  # list or tuple
    length: int

    def names(self, name: str) -> list[str]:
        return [f"{name}[{i}]" for i in range(self.length)]


def _number_items(value: Any) -> _Items | None:
    if type(value) not in (list, tuple) or not 0 < len(value) <= _MAX_ITEMS:
        return None
    if not all(type(x) in (int, float) for x in value):  # Python numbers (no bool): leaves
        return None
    return _Items(type(value), len(value))


class _Held(NamedTuple):
    """How one captured value is handed to the rebuilt function."""

    name: str  # the cell's, parameter's or global's name
    # None: the value itself, a parameter of that name; a Node: a view of what is read of it;
    # _Items: a new list or tuple of its items, each a parameter (``rates[0]``, ...).
    plan: _lookups.Node | _Items | None


class Capture(NamedTuple):
    """A callable as a factory of its captured values: the recipe, and the values given."""

    kind: str  # "function", "method", "partial" or "object" (a callable object's __call__)
    function: Any  # the types.FunctionType that runs (typed Any: pyright would bind it as a method)
    cells: tuple[_Held, ...]  # the function's closure, in order
    bound: tuple[_Held, ...]  # the method's self; the partial's (its bound method's self first)
    positional: int  # how many of ``bound`` are a partial's positional arguments
    partial_type: type | None
    values: dict[str, Any]  # parameter name -> value
    source: Any  # the callable given
    # The module's globals the function reads that are held as its values (a config at the
    # top of a script, ``FLAGS``): the rebuilt function reads them from a namespace of its own.
    globals: tuple[_Held, ...] = ()
    self_bound: bool = False  # a partial of a bound method: ``bound[0]`` is its self
    # The values read that are static, not leaves: equinox fields marked ``eqx.field(static=True)``.
    static: frozenset[str] = frozenset()


def _held(
    read: Callable[[], tuple[Path, ...] | None],
    name: str,
    value: Any,
    values: dict[str, Any],
    seen: frozenset[int],
    static: set[str] | None = None,
) -> _Held:
    """A captured value as parameters: itself, the values read through it (a view), or its items.

    ``read``: the paths the code reads of it (``_lookups.paths_read``), asked only for an object;
    ``static`` gathers the names of the values read that are static (``Leaf.static``).
    """
    if is_concrete_number(value) or is_wrapped(value) or not _lookups.viewable(value):
        values[name] = value
        return _Held(name, None)
    paths = read()
    plan = _lookups.plan(value, paths, 0)
    if plan is not None:
        leaves = _lookups.leaves_of(plan, name)
        if any(_useful(leaf.value, seen) for leaf in leaves):
            for leaf in leaves:
                values[leaf.name] = leaf.value
                if leaf.static and static is not None:
                    static.add(leaf.name)
            return _Held(name, plan)
    items = _number_items(value) if paths is None else None
    if items is not None:  # used whole: the list is new, its numbers leaves
        values.update(zip(items.names(name), value))
        return _Held(name, items)
    values[name] = value
    return _Held(name, None)


def _bound_method(fn: Any) -> tuple[types.FunctionType, Any] | None:
    """A bound method's function and self: Python's, or equinox's (a module's method is a pytree)."""
    if type(fn) is types.MethodType or _lookups.is_equinox_bound_method(fn):
        function, this = getattr(fn, "__func__", None), getattr(fn, "__self__", None)
        # ``opt.init`` of a wrapped optimizer: its code is the library's, and the object
        # reaches a factory as plain optax's (a child), whose method is another: static.
        if type(function) is types.FunctionType and not is_wrapped(this):
            return function, this
    return None


def capture(fn: Any, seen: frozenset[int] = frozenset()) -> Capture | None:
    """The recipe of ``fn`` and its captured values, if it may become a child (see the module), else None."""
    if id(fn) in seen or len(seen) > 8:
        return None
    seen = seen | {id(fn)}
    given: Any = fn
    values: dict[str, Any] = {}
    bound: list[_Held] = []
    positional = 0
    partial_type = None
    self_bound = False
    this: Any = None
    function: types.FunctionType
    method = _bound_method(fn)
    if type(fn) is types.FunctionType:
        kind, function = "function", fn
    elif method is not None:
        kind, (function, this) = "method", method
    elif isinstance(fn, functools.partial) and type(fn.func) is types.FunctionType:
        kind, function, partial_type = "partial", fn.func, type(fn)
    elif isinstance(fn, functools.partial) and (of_method := _bound_method(fn.func)) is not None:
        kind, (function, this), partial_type = "partial", of_method, type(fn)
        self_bound = True
    elif (
        callable(fn)
        and not is_wrapped(fn)
        and hasattr(fn, "__dict__")
        and type(inspect.getattr_static(type(fn), "__call__", None)) is types.FunctionType
        and _lookups.plain_class(type(fn))
    ):
        kind, function, this = "object", inspect.getattr_static(type(fn), "__call__"), fn
    else:
        return None
    code = function.__code__
    if _writes_a_cell(code) or not _lookups.getattr_is_builtin(function):
        return None

    static: set[str] = set()

    def held(name: str, value: Any) -> _Held:
        return _held(lambda: _lookups.paths_read(code, name), name, value, values, seen, static)

    if kind in ("method", "object") or self_bound:
        if code.co_argcount == 0:
            return None
        bound.append(held(code.co_varnames[0], this))
    if kind == "partial":
        if getattr(given, "__dict__", None):
            return None
        names = code.co_varnames[int(self_bound) : code.co_argcount]
        if len(given.args) > len(names):
            return None
        positional = len(given.args)
        for name, value in (*zip(names, given.args), *given.keywords.items()):
            if name in values or any(h.name == name for h in bound):
                return None
            bound.append(held(name, value))
    cells: list[_Held] = []
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # not assigned yet
            return None
        if value is fn or value is function:  # it calls itself: rebuilt, it would call the old one
            return None
        cells.append(held(name, value))
    held_globals = _held_globals(function, values, seen, {h.name for h in (*cells, *bound)})
    if not any(_useful(v, seen) for v in values.values()):
        return None
    return Capture(
        kind,
        function,
        tuple(cells),
        tuple(bound),
        positional,
        partial_type,
        values,
        fn,
        held_globals,
        self_bound,
        frozenset(static),
    )


def _held_globals(
    function: types.FunctionType, values: dict[str, Any], seen: frozenset[int], taken: set[str]
) -> tuple[_Held, ...]:
    """The module's globals ``function`` reads that hold numbers (a config, a rate), held as its
    values; none where that is not safe (see :func:`_module_reads_them`)."""
    code, namespace = function.__code__, function.__globals__
    read = _lookups.globals_read(code)
    found: list[_Held] = []
    more: dict[str, Any] = {}
    for name in sorted(read.names - taken):
        value = namespace.get(name, _lookups.MISSING)
        if value is _lookups.MISSING or not (is_concrete_number(value) or _lookups.viewable(value)):
            continue
        if callable(value) or is_wrapped(value):
            continue  # a function, a class, an optimizer: the module's own, read as it is
        h = _held(lambda name=name: _lookups.global_paths_read(code, name), name, value, more, seen)
        if h.plan is not None or is_concrete_number(value):
            found.append(h)
        else:
            more.pop(name, None)
    if not found or read.writes or _module_reads_them(function, {h.name for h in found}):
        return ()
    values.update(more)
    return tuple(found)


def unproved(fn: Any) -> list[str]:
    """The look-ups of a callable's captured objects that are the class's own code and not proved
    to give what the object holds (``_lookups.why_not``), each named by its variable: why the
    callable stays static (what the warning says)."""
    held: list[tuple[str, Any]] = []
    method = _bound_method(fn)
    if type(fn) is types.FunctionType:
        function = fn
    elif method is not None:
        function, this = method
        if function.__code__.co_argcount:
            held.append((function.__code__.co_varnames[0], this))
    elif isinstance(fn, functools.partial) and type(fn.func) is types.FunctionType:
        function = fn.func
        code = function.__code__
        held += [*zip(code.co_varnames[: code.co_argcount], fn.args), *fn.keywords.items()]
    elif callable(fn) and type(inspect.getattr_static(type(fn), "__call__", None)) is types.FunctionType:
        function = inspect.getattr_static(type(fn), "__call__")
        if function.__code__.co_argcount:
            held.append((function.__code__.co_varnames[0], fn))
    else:
        return []
    code = function.__code__
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            held.append((name, cell.cell_contents))
        except ValueError:  # not assigned yet
            pass
    out: list[str] = []
    for name, value in held:
        if is_concrete_number(value) or is_wrapped(value) or not _lookups.viewable(value) or callable(value):
            continue
        out += [f"{name}: {why}" for why in _lookups.why_not(value, _lookups.paths_read(code, name))]
    return out


def reads_module_values(function: types.FunctionType) -> bool:
    """Whether ``function`` reads a global of its module that holds numbers (a number, a config
    object, a list): then it may be a child, its numbers read there leaves (:func:`capture`)."""
    namespace, code = function.__globals__, function.__code__
    for name in _lookups.globals_read(code).names:
        value = namespace.get(name)
        if is_concrete_number(value) or _number_items(value) is not None:
            return True
        if (
            _lookups.viewable(value)
            and not callable(value)
            and not is_wrapped(value)
            and _lookups.global_paths_read(code, name) is not None  # looked into, not used whole
        ):
            return True
    return False


def _module_reads_them(function: types.FunctionType, names: set[str]) -> bool:
    """Whether a function or class of the module that ``function`` reads (at any depth) also
    reads ``names``: it would read the module's own (the old values), not the rebuilt function's."""
    namespace = function.__globals__
    return any(
        f.__globals__ is namespace and names & _lookups.globals_read(f.__code__).names
        for f in _lookups.reachable([function])[1:]
    )


class _Baked(NamedTuple):
    """A value of a module's globals that the child's code reads from the module itself (a helper
    function of the module reads its config, a method reads ``FLAGS``): a constant of every
    trace. Part of the factory's key, so that another value is another compilation, never the
    first one's; and checked by the source, as the values held are."""

    label: str  # ``lr_helper reads CONFIG.lr``
    namespace: dict[str, Any]  # the module's globals
    name: str
    steps: Path  # read along these from the global; () for the global itself
    fast: _lookups.Fast  # how (``_lookups.read_again``)
    value: Any


def _baked(captured: Capture) -> list[_Baked]:
    """What the child's code reads of its modules' globals that it does not hold (see _Baked)."""
    plans = [h.plan for h in (*captured.cells, *captured.bound, *captured.globals)]
    methods = [f for p in plans if isinstance(p, _lookups.Node) for f in _lookups.functions_of(p)]
    held = {h.name for h in captured.globals}
    main = captured.function
    out: list[_Baked] = []
    for f in _lookups.reachable([main, *methods]):
        namespace = f.__globals__
        for name in sorted(_lookups.globals_read(f.__code__).names):
            if f is main and name in held:
                continue  # read from the rebuilt function's own namespace
            value = namespace.get(name, _lookups.MISSING)
            label = f"{f.__qualname__} reads {name}"
            if is_concrete_number(value):
                out.append(_Baked(label, namespace, name, (), (), value))
            elif _lookups.viewable(value) and not callable(value) and not is_wrapped(value):
                plan = _lookups.plan(value, _lookups.global_paths_read(f.__code__, name), 0)
                for leaf in [] if plan is None else _lookups.leaves_of(plan, name):
                    out.append(
                        _Baked(
                            f"{f.__qualname__} reads {leaf.name}",
                            namespace,
                            name,
                            leaf.steps,
                            leaf.fast,
                            leaf.value,
                        )
                    )
    return out


def _roots(captured: Capture) -> list[tuple[_Held, Callable[[], Any]]]:
    """Each captured value with how to read it again from the callable given."""
    fn = captured.source
    function = captured.function
    if captured.kind == "function":
        function = fn  # its own cells (the recipe's function is the first one made)
    out: list[tuple[_Held, Callable[[], Any]]] = [
        (h, lambda c=c: c.cell_contents) for h, c in zip(captured.cells, function.__closure__ or ())
    ]
    namespace = function.__globals__
    out += [(h, lambda n=h.name: namespace.get(n, _lookups.MISSING)) for h in captured.globals]
    if captured.kind in ("method", "object"):
        this = fn if captured.kind == "object" else fn.__self__
        out.append((captured.bound[0], lambda: this))
    elif captured.kind == "partial":
        bound = captured.bound
        if captured.self_bound:
            this = fn.func.__self__
            out.append((bound[0], lambda: this))
            bound = bound[1:]
        for i, h in enumerate(bound):
            if i < captured.positional:
                out.append((h, lambda i=i: fn.args[i]))
            else:
                out.append((h, lambda n=h.name: fn.keywords[n]))
    return out


def _same(old: Any, new: Any) -> bool:
    if old is new:
        return True
    if type(old) is not type(new):
        return False
    if isinstance(old, np.ndarray):
        return (
            old.shape == new.shape
            and old.dtype == new.dtype
            and bool(np.array_equal(old, new, equal_nan=True))
        )
    try:
        return bool(old == new) or (old != old and new != new)  # NaN is NaN
    except Exception:  # noqa: BLE001 - an object that cannot say: changed
        return False


def _itself(x: Any) -> Any:
    return x


def _readers(h: _Held, values: dict[str, Any]) -> list[tuple[str, Callable[[Any], Any], Any]]:
    """What a check reads again of one captured value: (name, how to read it from the root, the
    value then)."""
    plan = h.plan
    if plan is None:
        return [(h.name, lambda root: root, values[h.name])]
    if isinstance(plan, _Items):
        shape = (plan.kind, plan.length)
        out = [(f"the length of {h.name}", lambda root: (type(root), len(root)), shape)]
        for i, name in enumerate(plan.names(h.name)):
            out.append((name, lambda root, i=i: root[i], values[name]))
        return out
    out = [
        (
            leaf.name,
            functools.partial(_lookups.read_again, fast=leaf.fast, steps=leaf.steps),
            values[leaf.name],
        )
        for leaf in _lookups.leaves_of(plan, h.name)
    ]
    out += [
        (name, functools.partial(_lookups.resolve, steps=steps), _lookups.ABSENT)
        for name, steps in _lookups.absent_of(plan, h.name)
    ]
    return out


class Source:
    """What a child was made from: the callable given, and the values read through it then.

    A program may change its config after making the optimizer; plain optax
    reads the config whenever it runs the schedule (eagerly) or traces it
    (under ``jit``). :meth:`check` reads it again, at every eager build
    (``_core.Core.check_sources``) and every flatten, so at every jitted call
    (``_watch``), and raises, naming the value, where it changed: the object
    holds the values read when it was made, and a silently different number
    is never given.
    """

    __slots__ = ("baked", "captured", "factory", "made", "values")

    def __init__(self, captured: Capture, factory: ClosureFactory, baked: list[_Baked]):
        self.captured, self.factory, self.baked = captured, factory, baked
        # In-place changes of a NumPy array are changes too: a copy of each.
        self.values = {
            n: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for n, v in captured.values.items()
        }
        self.made: list[tuple[Callable[[], Any], list[tuple[str, Callable[[Any], Any], Any]]]] | None = None

    @property
    def reads(self) -> list[tuple[Callable[[], Any], list[tuple[str, Callable[[Any], Any], Any]]]]:
        """Each root (how to read it again) and what is read of it: made at the first check (a
        child made and never used costs none of it), from what was captured when it was made."""
        if self.made is None:
            values = self.values
            made = [(root, _readers(h, values)) for h, root in _roots(self.captured)]
            for b in self.baked:
                root = functools.partial(b.namespace.get, b.name, _lookups.MISSING)
                read = (
                    functools.partial(_lookups.read_again, fast=b.fast, steps=b.steps) if b.steps else _itself
                )
                made.append((root, [(b.label, read, b.value)]))
            self.made = made
        return self.made

    def check(self) -> None:
        for name, old, new in _changed(self.reads):
            shown = "no longer readable" if new is _lookups.MISSING else f"now {new!r}"
            raise ValueError(
                f"optax_pytree: the schedule {self.factory.__qualname__} ({self.factory.where()}) "
                f"read {name} = {old!r} when the optimizer was made, "
                f"and it is {shown}: the optimizer holds the values read then (plain optax "
                "would read the new one when it next runs or traces the schedule): make the "
                "optimizer again after changing the config"
            )


class StaticReads:
    """What a static function (a mask, a label function, a callable that stays static) read of
    the objects it holds when the optimizer was made, read again at every eager build and every
    flatten (``_watch``), as a child's :class:`Source` is: the function is compared by those
    values (``_static``), so the compiled program holds them; a config changed since is an error
    naming the value, never a program of the old one run on the new config."""

    __slots__ = ("label", "reads")

    def __init__(
        self, label: str, reads: list[tuple[Callable[[], Any], list[tuple[str, Callable[[Any], Any], Any]]]]
    ):
        self.label = label
        self.reads = reads

    def check(self) -> None:
        for name, old, new in _changed(self.reads):
            shown = "no longer readable" if new is _lookups.MISSING else f"now {new!r}"
            raise ValueError(
                f"optax_pytree: {self.label} read {name} = {old!r} when the optimizer was made, and it is "
                f"{shown}: the function is static, part of the compiled program with the value read then "
                "(plain optax would read the new one when it next runs or traces it): make the "
                "optimizer again after changing the config"
            )


def _changed(
    reads: list[tuple[Callable[[], Any], list[tuple[str, Callable[[Any], Any], Any]]]],
) -> list[tuple[str, Any, Any]]:
    """The first value read again that is not the one read then: (its name, then, now)."""
    for root_of, readers in reads:
        try:
            root = root_of()
        except ValueError:  # a cell emptied
            root = _lookups.MISSING
        for name, read, old in readers:
            try:
                new = read(root)
            except Exception:  # noqa: BLE001 - no longer readable as it was
                new = _lookups.MISSING
            if new is not old and not _same(old, new):
                return [(name, old, new)]
    return []


_Reads = list[tuple[Callable[[], Any], list[tuple[str, Callable[[Any], Any], Any]]]]
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), frozenset)


def _value_reads(name: str, value: Any, root: Callable[[], Any], code: types.CodeType | None) -> _Reads:
    """How a check reads again what a static function reads through an object it holds (a config:
    the values its plan reads), as its key compared them (``_static._function_key``). Numbers and
    other values held as they are, functions, wrapped objects and mutable values used whole: none
    (a config is what a program changes; a function may keep its own state in a list it appends to)."""
    if callable(value) or is_wrapped(value) or type(value) in _IMMUTABLE or is_concrete_number(value):
        return []
    if code is not None and _lookups.viewable(value):
        node = _lookups.plan(value, _lookups.paths_read(code, name), 0)
        if node is not None:
            readers = [
                (
                    leaf.name,
                    functools.partial(_lookups.read_again, fast=leaf.fast, steps=leaf.steps),
                    np.array(leaf.value, copy=True) if isinstance(leaf.value, np.ndarray) else leaf.value,
                )
                for leaf in _lookups.leaves_of(node, name)
            ]
            return [(root, readers)] if readers else []
    return []  # used whole (passed on, iterated): the function may keep its own state there


def _global_reads(function: types.FunctionType) -> _Reads:
    """What a static function, and the functions of its module it calls, read of the module's
    globals that its key holds (``_static._globals_key``): numbers, and values read through objects."""
    out: _Reads = []
    for f in _lookups.reachable([function]):
        namespace = f.__globals__
        for name in sorted(_lookups.globals_read(f.__code__).names):
            value = namespace.get(name, _lookups.MISSING)
            root = functools.partial(namespace.get, name, _lookups.MISSING)
            if _lookups.viewable(value) and not callable(value) and not is_wrapped(value):
                node = _lookups.plan(value, _lookups.global_paths_read(f.__code__, name), 0)
                if node is not None:
                    leaves = _lookups.leaves_of(node, name)
                    read = [
                        (
                            leaf.name,
                            functools.partial(_lookups.read_again, fast=leaf.fast, steps=leaf.steps),
                            leaf.value,
                        )
                        for leaf in leaves
                    ]
                    out += [(root, read)] if read else []
    return out


def static_reads(argument: str, fn: Any) -> StaticReads | None:
    """The check of a static function (a function, or a ``functools.partial`` of one) that holds
    values (its cells, the partial's arguments, the globals of its module it reads), or None
    where it holds none (see :class:`StaticReads`)."""
    if type(fn) is types.FunctionType:
        function, args, keywords = fn, (), {}
    elif type(fn) is functools.partial and type(fn.func) is types.FunctionType:
        function, args, keywords = fn.func, fn.args, fn.keywords
    else:
        return None
    code = function.__code__
    reads: _Reads = []
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        if _writes_a_cell(code, frozenset((name,))):
            continue  # its own state (``nonlocal``), as plain optax's function keeps it
        try:
            value = cell.cell_contents
        except ValueError:  # not assigned yet
            continue
        reads += _value_reads(name, value, functools.partial(getattr, cell, "cell_contents"), code)
    parameters = code.co_varnames[: code.co_argcount]
    for i, value in enumerate(args):
        name = parameters[i] if i < len(parameters) else f"args[{i}]"
        reads += _value_reads(name, value, functools.partial(operator.getitem, args, i), code)
    for name, value in keywords.items():
        reads += _value_reads(name, value, functools.partial(operator.getitem, keywords, name), code)
    if _lookups.globals_read(code).names:
        reads += _global_reads(function)
    if not reads:
        return None
    where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    return StaticReads(
        f"the static function {function.__qualname__} ({where}) of argument {argument!r}", reads
    )


def only_wrapped(values: dict[str, Any]) -> bool:
    """No number among the values (wrapped objects and functions): a child whatever it is."""
    return not any(is_concrete_number(v) for v in values.values())


def is_schedule_like(fn: Any) -> bool:
    """Whether ``fn`` of a step count gives a scalar number (a schedule), not a mask, a label or an error.

    What a callable returns, where ``_leaves``' predicates judge a value: a
    Python int or float, or a 0-d array or scalar of a numeric dtype; no bool.

    Traced abstractly (``jax.eval_shape``: what it gives under ``jit``, as optax
    calls it); a function only Python values can run (``if step < 10``) is
    called on step 0 instead.
    """
    from . import _quiet

    try:
        with _quiet.quietly():
            out = jax.eval_shape(fn, jax.ShapeDtypeStruct((), jnp.int32))
    except Exception:  # noqa: BLE001 - not traceable: try it on a number
        try:
            with _quiet.quietly():
                out = fn(jnp.zeros((), jnp.int32))
        except Exception:  # noqa: BLE001 - not a callable of the step count
            return False
    if isinstance(out, (bool, np.bool_)):
        return False
    if isinstance(out, (int, float)):
        return True
    if isinstance(out, (np.ndarray, np.generic, jax.Array, jax.ShapeDtypeStruct)):
        return len(out.shape) == 0 and bool(jnp.issubdtype(out.dtype, jnp.number))
    return False


def with_cells(
    fn: types.FunctionType,
    cells: tuple[Any, ...] | None,
    defaults: Any,
    kwdefaults: Any,
    namespace: dict[str, Any] | None = None,
) -> Any:
    """A function of ``fn``'s code, module, name and attributes with these cells and defaults (and
    ``namespace`` for its globals, where given)."""
    namespace = fn.__globals__ if namespace is None else namespace
    out = types.FunctionType(fn.__code__, namespace, fn.__name__, defaults, cells or None)
    out.__kwdefaults__ = kwdefaults
    out.__qualname__ = fn.__qualname__
    out.__module__ = fn.__module__
    out.__doc__ = fn.__doc__
    out.__dict__.update(fn.__dict__)
    return out


def _plan_shape(plan: _lookups.Node | _Items | None) -> Any:
    if plan is None or isinstance(plan, _Items):
        return plan
    return _lookups.shape(plan)


def _parameter(name: str) -> inspect.Parameter:
    """A keyword parameter named by a path (``config.optim.lr``): no identifier, so made, then named."""
    parameter = inspect.Parameter("_", inspect.Parameter.KEYWORD_ONLY)
    parameter._name = name  # pyright: ignore[reportAttributeAccessIssue] - inspect checks for identifiers
    return parameter


class ClosureFactory(ValueObject):
    """Makes a callable of one recipe from its captured values: a closure as a factory.

    Its parameters are the values the callable captures, named by their
    paths (``rate``, ``config.optim.lr``, ``self.lr``, ``kwargs['peak_value']``);
    calling it gives a new callable of the same code, module, name, defaults
    and attributes, over the values given (objects answered by views).
    Compared by ``key`` (made by the caller, see ``_classify``), so that
    every closure a builder makes is one factory.
    """

    def __init__(self, captured: Capture, key: Any):
        fn = captured.function
        self.captured = captured._replace(values={}, source=None)  # the recipe, not the values
        self.code = fn.__code__
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(captured.source, "__qualname__", fn.__qualname__)
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self.__signature__ = inspect.Signature([_parameter(n) for n in captured.values])
        self.static_names = captured.static  # made static, not leaves (``_tree.make_child``)
        self.key = key
        self.cache_hash()

    @staticmethod
    def shape(captured: Capture) -> Any:
        """What of a recipe its key is made of, besides the function (the caller freezes it)."""
        held = tuple(
            (h.name, _plan_shape(h.plan)) for h in (*captured.cells, *captured.bound, *captured.globals)
        )
        return (
            captured.kind,
            captured.positional,
            captured.partial_type,
            captured.self_bound,
            held,
            tuple(h.name for h in captured.globals),
            tuple(captured.values),
            tuple(sorted(captured.static)),
        )

    def __call__(self, /, **values: Any) -> Any:  # positional-only: a value may be named self
        c = self.captured

        def given(h: _Held) -> Any:
            plan = h.plan
            if plan is None:
                return values[h.name]
            if isinstance(plan, _Items):
                return plan.kind(values[n] for n in plan.names(h.name))
            return _lookups.View(plan, values)

        f = c.function
        fn: Any = f
        if c.cells or c.globals:
            cells = tuple(types.CellType(given(h)) for h in c.cells)
            fn = with_cells(f, cells, f.__defaults__, f.__kwdefaults__, self._namespace(given))
        if c.kind == "function":
            return fn
        if c.kind in ("method", "object"):
            return types.MethodType(fn, given(c.bound[0]))
        bound = c.bound
        if c.self_bound:
            fn, bound = types.MethodType(fn, given(bound[0])), bound[1:]
        args = [given(h) for h in bound[: c.positional]]
        keywords = {h.name: given(h) for h in bound[c.positional :]}
        assert c.partial_type is not None
        return c.partial_type(fn, *args, **keywords)

    def _namespace(self, given: Callable[[_Held], Any]) -> dict[str, Any] | None:
        """The rebuilt function's globals, where it reads the module's config: a namespace of its
        own, the module's globals it reads (as they are now) with those held replaced by their
        values; the module's own namespace is not touched. None: the module's."""
        c = self.captured
        if not c.globals:
            return None
        module = c.function.__globals__
        namespace = {n: module[n] for n in _lookups.globals_read(self.code).names if n in module}
        for name in ("__builtins__", "__name__"):
            if name in module:
                namespace[name] = module[name]
        namespace.update((h.name, given(h)) for h in c.globals)
        return namespace

    def __repr__(self) -> str:
        return f"<closure {self.__module__}.{self.__qualname__}>"

    def where(self) -> str:
        """``train.py:41``: where the function is written."""
        import os

        return f"{os.path.basename(self.code.co_filename)}:{self.code.co_firstlineno}"


def child(fn: Any, make: Callable[[Any, dict[str, Any]], Any], freeze: Callable[[Any], Any]) -> Any:
    """The wrapped child a callable given as an argument becomes, or None (see the module).

    ``make(factory, values)`` makes the wrapped object, or None
    (``_tree.make_child``, handed down through the pipeline and the
    classification); ``freeze`` keys a static value.
    """
    captured = capture(fn)
    if captured is None:
        return None
    f = captured.function
    defaults, kwdefaults, attributes = f.__defaults__, f.__kwdefaults__, f.__dict__
    baked = _baked(captured)
    key = (
        f.__code__,
        _Identity(f.__globals__),
        None if defaults is None else freeze(defaults),
        None if kwdefaults is None else freeze(kwdefaults),
        freeze(dict(attributes)) if attributes else None,
        ClosureFactory.shape(captured),
        tuple((b.label, freeze(b.value)) for b in baked),
    )
    factory = _FACTORIES.get(key)
    if factory is None:
        factory = ClosureFactory(captured, key)
        _FACTORIES.set(key, factory)
    wrapped = make(factory, captured.values)
    if wrapped is None:
        return None
    # Checked at every flatten (each jitted call) and eager build (``_watch``).
    source = Source(captured, factory, baked)
    wrapped = _watch.watch(wrapped, source)
    if only_wrapped(captured.values):
        return wrapped
    spec = wrapped._core.spec
    schedule_like = _SCHEDULE_LIKE.get(spec)
    if schedule_like is None:
        schedule_like = is_schedule_like(fn)
        _SCHEDULE_LIKE.set(spec, schedule_like)
    if not schedule_like:
        return None  # a mask, a label or skip function: static, by value
    _warn_recompiled(factory, spec)
    return wrapped


def _warn_recompiled(factory: ClosureFactory, spec: Any) -> None:
    """Warns, once per code location, where a child differs from the one its code made before by
    the numbers it holds static alone (``config.pieces`` in a ``range``): a recompilation
    (``_recompiled``)."""
    where = (factory.code.co_filename, factory.code.co_firstlineno)
    before = _recompiled.last(factory, spec)
    if before is None or before is spec or _recompiled.warned(where) or before.roles != spec.roles:
        return
    a, b = before.static, spec.static
    if list(a) != list(b):
        return
    found: list[tuple[str, Any, Any]] = []
    for name in a:
        differences = _static.number_differences(_static.freeze(a[name]), _static.freeze(b[name]), name)
        if differences is None or (differences and name not in spec.detected):
            return  # another static value, or one the program marked static (eqx.field(static=True))
        found += differences
    if found:
        _recompiled.warn(
            where,
            f"optax_pytree: the schedule {factory.__qualname__} ({factory.where()}) holds numbers static "
            f"(it needs them as Python values: {', '.join(sorted(spec.detected))}), "
            f"and this optimizer differs from one it made before only there ({_recompiled.shown(found)}): "
            "each value is a new compilation; optax_pytree.explain(a, b) says why",
        )


_SCHEDULE_LIKE = cache("spec of a closure's child -> whether the callable is a schedule", 1024)
_FACTORIES = cache("a recipe's key -> its ClosureFactory (one per recipe, as builders make it anew)", 1024)


class _Identity:
    """A key part compared by identity (a function's globals: its module)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.value is self.value
