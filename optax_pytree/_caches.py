"""Spec: every cache of the mechanism, listed here, with one policy and one way to forget them.

What is cached is a function of its key alone, so forgetting an entry costs
time, never a result: each cache is an :class:`LRU` of a stated size (the
least recently used entry goes first, a lock around each operation), made
by :func:`cache`, and :func:`clear_caches` forgets them all (tests,
benchmarks). ``tests/test_layout.py`` checks that every cache made with
:func:`cache` is in this list.

The caches a wrap consults, in the order it meets them. "Configuration key"
is ``Classified.key`` (the factory, each argument's role and static value
compared by value, the structure of its children, the options); "analysis
key" is ``Classified.analysis_key`` (that, and what a factory may decide
about a value besides comparing it: its Python type, whether it is the
default object).

1. ``_bind._INFOS``: the factory -> its ``FactoryInfo`` (signature, public
   name). Safe: a function's signature is fixed when it is defined; an
   unhashable factory is not cached.
2. ``_closures._FACTORIES``: a closure's recipe (its code, its globals by
   identity, its defaults and attributes by value, the shape of what it
   captures) -> its ``ClosureFactory``, one per recipe (builders make the
   closure anew). Safe: the key holds everything the rebuild reads but the
   captured values, which are its arguments.
3. ``_children._FLAT``: (a container's type, its keys or length) -> the
   template and treedef of its wrapped items. Safe: a function of that shape.
4. ``_spec._PLANNED``: analysis key -> its spec, where nothing of the values
   decides the analysis (no guards, static candidates or exponents). Safe:
   every value matches that analysis.
5. ``_spec._DEGRADED``: analysis key -> what the mechanism made static, why,
   and the arguments of children made static. Safe: found for the
   configuration, whatever its values (``remember``; a failure for some
   values only is not kept).
6. ``_spec._ANALYSES``: analysis key -> the analyses found, one per branch.
   Safe: an analysis is used for values only where ``Analysis.matches`` says
   they take its branches (its static values, exponents and guards).
7. The analyses on disk (``_disk``, files): a digest of the analysis key and
   of the code that runs -> the analyses, matched as in 6. Safe: another
   code is another digest; see ``_disk``.
8. ``_spec._VERIFIED_STATIC``: analysis key -> the arguments the
   verification found static for every value. Safe: found by bisection for
   the configuration, not for a value (a specialized exponent, static at
   its value only, is not kept here).
9. ``_spec._SPEC_OF`` and ``_spec._SPECS``: (configuration key, analysis)
   -> the interned spec; a spec -> the equal spec interned first. Safe: a
   spec is a function of both; equal specs are interchangeable.
10. ``_closures._SCHEDULE_LIKE``: the spec of a closure's child -> whether
    the callable gives a number (a schedule) or not (a mask function).
    Safe: the spec holds the code and every value the callable reads.
11. ``_checks._CHECKERS``: a branch's guards -> their compiled ``Checker``
    (``Analysis.checker`` keeps it once asked). Safe: a function of the guards.
12. ``_build._CARRIED``: (id(leaves), id(exact)) -> those objects and the
    carried host values. Safe: the entry keeps its key's objects alive, so
    an id is not reused while it is a key.
13. ``_spec._MADE_STATIC``: a spec -> the arguments the library made static
    and why, for ``explain`` only. Safe: nothing is computed from it.
14. ``_watch._STRUCTURES``: (a wrapped class, a spec) -> the one-level
    treedef of an object of that class and spec (a closure child's aux
    data). Safe: a function of both (the number of leaves is the spec's).
15. ``_staged._PROGRAMS``: (a spec, the method called, the structures and
    abstract types of the call's inputs, the backends' treatments, JAX's
    trace context) -> the call's program with XLA's rewrites redone (a
    jaxpr and its constants) and its output structure. Safe: the program is what the
    factory's call traced with those inputs gives, and a spec is the
    configuration (equal specs are interchangeable, as JAX's own ``jit``
    caches already treat them); only calls whose hyperparameters are all
    traced and whose arguments are all arrays are kept, and a program that
    captures a value of another trace is not.

Not caches in that sense, and not here: ``functools.lru_cache`` on pure
functions of hashable arguments (``_leaves``' compiled converters and dtype
keys, an expression's compiled evaluator in ``_expr``, ``_closures``'
reading of code and classes, ``_build``'s reading of an ``update``'s
signature, ``_bind``'s table of optax's public names), and the drop-in's
identity map (``_dropin._DROPINS``: one drop-in per optax object, so that
``is`` holds between optax's aliases; never forgotten).
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import collections
import threading
from typing import Any

_REGISTRY: list[LRU] = []


class LRU:
    """A small thread-safe LRU map."""

    def __init__(self, what: str, maxsize: int):
        self.what = what  # what it maps, for a reader
        self.maxsize = maxsize
        self.data: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        # On every wrap: no lock. Each OrderedDict operation is atomic; an
        # entry evicted by another thread between the two is a miss.
        data = self.data
        try:
            data.move_to_end(key)
            return data[key]
        except KeyError:
            return None

    def setdefault(self, key: Any, value: Any) -> Any:
        with self.lock:
            value = self.data.setdefault(key, value)
            self._keep(key)
            return value

    def set(self, key: Any, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            self._keep(key)

    def _keep(self, key: Any) -> None:
        self.data.move_to_end(key)
        while len(self.data) > self.maxsize:
            self.data.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.data.clear()


def cache(what: str, maxsize: int) -> LRU:
    """A new registered cache: ``what`` it maps, at most ``maxsize`` entries."""
    made = LRU(what, maxsize)
    _REGISTRY.append(made)
    return made


def clear_caches() -> None:
    """Forgets every cached result (for tests and benchmarks)."""
    for registered in _REGISTRY:
        registered.clear()


__all__ = ["LRU", "cache", "clear_caches"]
