"""Bind: a factory's signature, its public name, and calling it back.

``wrap(optax.sgd, 0.1, momentum=0.9)`` binds its arguments to the signature of
``optax.sgd``, defaults included, so that every argument has a name (the name
of its leaf, of its ``replace`` keyword, of its key path). What is read from a
factory once (its signature, how to call it back, its annotations, its public
name) is kept in a :class:`FactoryInfo`, one per factory.

Calling the factory back: ``wrap`` calls it once with the Python values, so
its own checks, exceptions and warnings happen as with optax; a wrapped object
calls it again at every ``init``/``update`` (and the probe runs it many times),
quietly.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import functools
import importlib
import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any

from ._caches import cache
from ._quiet import quietly

_EMPTY = inspect.Parameter.empty
MARK = "__optax_pytree_factory__"  # set by @pytree_transformation on its result


class UnknownArgumentError(TypeError, ValueError):
    """A name that is no argument of the factory: in ``wrap``, ``replace``, ``grid``, ``set_hyperparams``.

    Both a ``TypeError`` (what Python raises for an unexpected keyword
    argument, and what ``wrap`` raised) and a ``ValueError`` (what
    ``replace``, ``grid`` and ``set_hyperparams`` raised): code that catches
    either keeps working.
    """


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """``"; did you mean 'learning_rate'?"`` for a near miss (or optax's usual ``lr``), else ``""``."""
    import difflib

    names = [n for n in names if isinstance(n, str)]  # pyright: ignore[reportUnnecessaryIsInstance] - user data
    if name == "lr" and "learning_rate" in names:
        return "; did you mean 'learning_rate'?"
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class Wrapped:
    """Base of every wrapped object (transformations and schedules)."""

    __slots__ = ()


def is_wrapped(x: Any) -> bool:
    """Whether ``x`` is a wrapped object (a PyTreeTransformation or a PyTreeSchedule)."""
    return isinstance(x, Wrapped)


def is_plain_transformation(x: Any) -> bool:
    """An optax transformation as optax's factories return it (two closures), not a wrapped one."""
    return (
        isinstance(x, tuple)
        and callable(getattr(x, "init", None))
        and callable(getattr(x, "update", None))
        and not is_wrapped(x)
    )


def which(names: Iterable[str]) -> str:
    """``argument 'b1'`` or ``arguments ['b1', 'b2']``: arguments named in a message."""
    names = sorted(names)
    return f"argument {names[0]!r}" if len(names) == 1 else f"arguments {names}"


def mark_static(factory: str, names: Iterable[str]) -> str:
    """The advice every message gives for an argument that must be static: one wording, runnable."""
    names = sorted(names)
    listed = ", ".join(repr(n) for n in names) + ("," if len(names) == 1 else "")
    return (
        f"mark {'it' if len(names) == 1 else 'them'} static: optax_pytree.wrap({factory}, ..., "
        f"static_argnames=({listed})), or pass the value as optax_pytree.static(value)"
    )


HOW_TO_WRAP = (
    "pass the factory and its arguments instead, e.g. opx.wrap(optax.adam, learning_rate=1e-3) "
    "for optax.adam(1e-3), or use the drop-in `import optax_pytree.optax as optax`"
)


@functools.lru_cache(maxsize=1)
def _optax_names() -> dict[int, str]:
    import optax
    import optax.contrib
    import optax.schedules

    from . import _catalog

    names: dict[int, str] = {}
    for module in (optax.schedules, optax.contrib, optax):  # later wins: prefer optax.x
        for name in _catalog.public_names(module):
            obj, deprecated = _catalog.get_quietly(module, name)
            if obj is not None and not deprecated:
                names[id(obj)] = f"{module.__name__}.{name}"
    return names


def optax_name(obj: Any) -> str | None:
    """``"optax.adam"`` for an object optax exports under that name, else None."""
    return _optax_names().get(id(obj))


def public_name(factory: Any) -> str:
    """``optax.adam`` rather than ``optax._src.alias.adam`` where possible."""
    found = optax_name(factory)
    if found is not None:
        return found
    qualname = getattr(factory, "__qualname__", None) or repr(factory)
    module_name = getattr(factory, "__module__", None)
    return f"{module_name}.{qualname}" if module_name else qualname


class FactoryInfo:
    """What ``wrap`` needs to know about a factory, computed once per factory."""

    def __init__(self, public: Any, factory: Callable[..., Any]):
        self.public = public  # what the user sees (a decorated factory stays decorated)
        self.factory = factory  # what gets called
        try:
            self.signature = inspect.signature(factory)
        except (TypeError, ValueError) as e:
            raise TypeError(f"optax_pytree.wrap: cannot read the signature of {factory!r}: {e}") from None
        params = list(self.signature.parameters.values())
        self.var_positional = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
        self.var_keyword = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        self.named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        self.param_names = frozenset(p.name for p in params)
        self.defaults = {p.name: p.default for p in params if p.default is not _EMPTY}
        # (name, default, keyword-only) of the named parameters: read on every wrap.
        self.plain_params = [(p.name, p.default, p.kind is p.KEYWORD_ONLY) for p in self.named]
        self.simple = (
            self.var_positional is None
            and self.var_keyword is None
            and all(p.kind is not p.POSITIONAL_ONLY for p in params)
        )
        # The name of its one parameter, ``*args`` (optax.chain), else None.
        self.only_var_positional = self.var_positional if len(params) == 1 else None
        # How to call it back: positionally up to (and including) *args.
        self.positional: list[tuple[str, bool]] = []  # (name, is *args)
        self.keyword: list[str] = []
        for p in params:
            if p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and self.var_positional):
                self.positional.append((p.name, False))
            elif p.kind is p.VAR_POSITIONAL:
                self.positional.append((p.name, True))
            elif p.kind is not p.VAR_KEYWORD:
                self.keyword.append(p.name)
        self._name: str | None = None
        self._annotations: dict[str, Any] | None = None
        # The factory as part of a configuration's key: compared by what makes
        # it (``_static.freeze``), so that a builder's fresh closure is the same
        # factory; set by ``_classify.factory_key``.
        self.key: Any = None

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = public_name(self.public)
        return self._name

    def annotation(self, name: str) -> Any:
        """The annotation of argument ``name``, evaluated where possible (else as written)."""
        if self._annotations is None:
            found = {p.name: p.annotation for p in self.signature.parameters.values()}
            target = self.factory.func if isinstance(self.factory, functools.partial) else self.factory
            try:
                hints = typing.get_type_hints(target)
            except Exception:  # noqa: BLE001 - unresolvable forward references: keep the text
                hints = {}
            found.update((k, v) for k, v in hints.items() if k in found)
            self._annotations = found
        return self._annotations.get(name, _EMPTY)

    def check_names(self, names: Iterable[str], what: str) -> frozenset[str]:
        if isinstance(names, str):
            names = (names,)
        names = frozenset(names)
        for n in sorted(names, key=str):
            if not isinstance(n, str):  # pyright: ignore[reportUnnecessaryIsInstance] - user data
                raise TypeError(f"{self.name}: {what} must be argument names (str), got {n!r}")
            if n not in self.param_names and self.var_keyword is None:
                raise UnknownArgumentError(
                    f"{self.name}: {what} names {n!r}, which is not an argument of {self.name}; "
                    f"its arguments are {sorted(self.param_names)}{did_you_mean(n, self.param_names)}"
                )
        return names

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Argument name -> value, defaults included; ``**kwargs`` entries flattened."""
        if self.simple and len(args) <= len(self.named):
            if args:  # positional arguments fill the first parameters, in order
                given = {}
                for (name, _, keyword_only), value in zip(self.plain_params, args):
                    if keyword_only or name in kwargs:
                        return self._bind_slowly(args, kwargs)  # let inspect word the error
                    given[name] = value
                kwargs = {**given, **kwargs}
            for k in kwargs:
                if k not in self.param_names:
                    self._unknown(k)
            out = {}
            for name, default, _ in self.plain_params:
                if name in kwargs:
                    out[name] = kwargs[name]
                elif default is not _EMPTY:
                    out[name] = default
                else:
                    raise TypeError(f"{self.name}: missing required argument {name!r}")
            return out
        if self.only_var_positional and not kwargs:  # optax.chain(*transforms)
            return {self.only_var_positional: args}
        return self._bind_slowly(args, kwargs)

    def _bind_slowly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            if self.var_keyword is None:
                for k in kwargs:
                    if k not in self.param_names:
                        self._unknown(k)
            raise TypeError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        out = {}
        for name, value in bound.arguments.items():
            if name == self.var_keyword:
                out.update(value)
            else:
                out[name] = value
        return out

    def _unknown(self, name: str) -> typing.NoReturn:
        names = [p.name for p in self.named]
        if self.var_positional is not None:
            names.append(f"*{self.var_positional}")
        raise UnknownArgumentError(
            f"{self.name}: unknown argument {name!r}; its arguments are {names}{did_you_mean(name, names)}"
        )

    def call(self, values: dict[str, Any]) -> Any:
        args: list[Any] = []
        for name, star in self.positional:
            if star:
                args.extend(values[name])
            else:
                args.append(values[name])
        kwargs = {n: values[n] for n in self.keyword}
        if self.var_keyword is not None:
            kwargs.update((n, v) for n, v in values.items() if n not in self.param_names)
        return self.factory(*args, **kwargs)


_INFOS = cache("factory -> its FactoryInfo (signature, public name)", 4096)


def factory_info(factory: Any) -> FactoryInfo:
    try:
        found = _INFOS.get(factory)
    except TypeError:  # an unhashable callable: not cached
        found = None
    if found is not None:
        return found
    if is_plain_transformation(factory):
        raise TypeError(
            "optax_pytree.wrap: got a plain optax transformation (what a factory returns, such as "
            "optax.adam(1e-3)), whose hyperparameters are hidden in its closures; the factory must be "
            f"callable: {HOW_TO_WRAP}"
        )
    if not callable(factory):
        raise TypeError(f"optax_pytree.wrap: the factory must be callable, got {factory!r}")
    inner = getattr(factory, MARK, factory)
    info = FactoryInfo(factory, inner)
    try:
        _INFOS.set(factory, info)
    except TypeError:  # an unhashable callable: not cached
        pass
    return info


# --------------------------------------------------------------------------
# Calling the factory back.


def call_quietly(info: FactoryInfo, values: dict[str, Any]) -> Any:
    """``info.call(values)`` with its warnings, log lines and output dropped (a rebuild, a probe run).

    ``wrap`` itself calls the factory plainly, once per call: what it warns,
    logs or prints reaches the user as with optax (see ``_quiet``).
    """
    with quietly():
        return info.call(values)


# --------------------------------------------------------------------------
# Pickling a factory: by its public name where it has one.


class FactoryRef:
    """Pickles a factory by module and name, decorated or not."""

    def __init__(self, factory: Any):
        self.factory = factory

    def __reduce__(self) -> Any:
        f = self.factory
        public = optax_name(f)
        if public is not None:  # optax.nadam is a functools.partial: by its name
            module_name, _, name = public.rpartition(".")
            return (resolve_factory, (module_name, name))
        module, qualname = getattr(f, "__module__", None), getattr(f, "__qualname__", None)
        if module and qualname and "<locals>" not in qualname and _resolves(module, qualname, f):
            return (resolve_factory, (module, qualname))
        return (identity, (f,))  # pickled as itself (an object that pickles by its own __reduce__)


def _resolves(module: str, qualname: str, f: Any) -> bool:
    """Whether ``module.qualname`` is ``f`` (or ``f`` decorated by ``pytree_transformation``)."""
    try:
        found = resolve_factory(module, qualname)
    except Exception:  # noqa: BLE001 - any failure to import or look it up: not by name
        return False
    return found is f or getattr(found, MARK, None) is f


def identity(x: Any) -> Any:
    """``x``: what a pickled FactoryRef of an unnamed factory loads."""
    return x


def resolve_factory(module: str, qualname: str) -> Any:
    """The object named ``qualname`` in ``module`` (what a pickled FactoryRef loads)."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
