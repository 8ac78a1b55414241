"""Which attributes of a captured object a function can read: its part of a static value.

A builder method often closes over its whole config object::

    @dataclasses.dataclass
    class AdamConfig:
        learning_rate: float
        beta1: float = 0.9
        ...
        def build(self):
            def _optimizer(learning_rate):  # closes over self
                return optax.chain(optax.scale_by_adam(self.beta1), optax.scale(-learning_rate))
            return optax.inject_hyperparams(_optimizer)(learning_rate=self.learning_rate)

(levanter's optimizer configs). ``_optimizer`` is made anew for every config,
and each config holds another learning rate, which ``_optimizer`` never reads:
the rate reaches it as an argument. So a captured object is compared by the
attributes the function reads from it, read off its bytecode: the object's
variable must only ever be used as ``var.name`` (an attribute read, or a
method called on it, whose own reads of ``self`` count, recursively), in the
function and in the functions it defines. Any other use (the object passed to
a call, returned, stored, reassigned; a class with ``__getattr__``) gives
``None``: the whole object is compared.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import dis
import functools
import inspect
import types
from typing import Any

# Instructions that name a local or cell variable (Python 3.10 to 3.13).
_LOADS = frozenset(
    {
        "LOAD_FAST",
        "LOAD_DEREF",
        "LOAD_CLOSURE",
        "LOAD_FAST_CHECK",
        "LOAD_FAST_LOAD_FAST",
        "LOAD_FROM_DICT_OR_DEREF",
    }
)
_OTHERS = frozenset(
    {
        "STORE_FAST",
        "STORE_DEREF",
        "DELETE_FAST",
        "DELETE_DEREF",
        "LOAD_FAST_AND_CLEAR",
        "STORE_FAST_LOAD_FAST",
        "STORE_FAST_STORE_FAST",
    }
)
_ATTRIBUTE = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_MAX_DEPTH = 6


def _names(instruction: dis.Instruction) -> tuple[Any, ...]:
    value = instruction.argval
    return value if isinstance(value, tuple) else (value,)


@functools.lru_cache(maxsize=4096)
def _reads_in(code: types.CodeType, var: str) -> frozenset[str] | None:
    """The attributes read as ``var.name`` in ``code`` and the functions it defines, or None."""
    if "__class__" in code.co_freevars:
        return None  # zero-argument super() reads self implicitly (Python < 3.12: no instruction)
    instructions = list(dis.get_instructions(code))
    reads: set[str] = set()
    for k, instruction in enumerate(instructions):
        op = instruction.opname
        if op not in _LOADS and op not in _OTHERS:
            continue
        names = _names(instruction)
        if var not in names:
            continue
        if op in _OTHERS:
            return None
        after = instructions[k + 1] if k + 1 < len(instructions) else None
        if after is not None and after.opname in _ATTRIBUTE and names == (var,):
            reads.add(after.argval)
        elif not _closure_tuple(instructions, k):
            return None
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and var in const.co_freevars:
            inner = _reads_in(const, var)
            if inner is None:
                return None
            reads |= inner
    return frozenset(reads)


def _closure_tuple(instructions: list[dis.Instruction], k: int) -> bool:
    """Whether instruction ``k`` loads a cell into the closure of a function being made."""
    j = k
    while j < len(instructions) and instructions[j].opname in _LOADS:
        j += 1
    return (
        j + 1 < len(instructions)
        and instructions[j].opname == "BUILD_TUPLE"
        and isinstance(instructions[j + 1].argval, types.CodeType)
    )


def attributes_read(fn: types.FunctionType, var: str, obj: Any) -> frozenset[str] | None:
    """The data attributes of ``obj`` (held by ``fn``'s free variable ``var``) that ``fn`` can read.

    None where that cannot be told (see the module): the whole object counts.
    """
    cls = type(obj)
    if cls.__getattribute__ is not object.__getattribute__ or hasattr(cls, "__getattr__"):
        return None
    reads = _reads_in(fn.__code__, var)
    if reads is None:
        return None
    return _through_methods(cls, reads, 0, set())


def _through_methods(cls: type, reads: frozenset[str], depth: int, seen: set[Any]) -> frozenset[str] | None:
    """``reads`` with each method or property replaced by what it reads of ``self``."""
    data: set[str] = set()
    for name in reads:
        found = inspect.getattr_static(cls, name, None)
        if isinstance(found, property):
            found = found.fget
        if isinstance(found, (staticmethod, classmethod)):
            continue  # no self: the class counts (compared by identity)
        if isinstance(found, types.FunctionType):
            if depth >= _MAX_DEPTH:
                return None
            if found in seen:
                continue
            seen.add(found)
            code = found.__code__
            if code.co_argcount == 0:
                continue
            inner = _reads_in(code, code.co_varnames[0])
            inner = None if inner is None else _through_methods(cls, inner, depth + 1, seen)
            if inner is None:
                return None
            data |= inner
        elif found is None or not callable(found):
            data.add(name)  # an instance attribute (or a class constant: read as it is)
        else:
            return None  # another kind of callable attribute: what it reads is unknown
    return frozenset(data)
