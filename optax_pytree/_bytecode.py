"""Classify: reading code: the paths a function's code reads of a variable or a global, off its bytecode.

What ``_lookups`` plans its look-ups from (``config.optim.lr``,
``config["lr"]``, ``config.get("lr", 1e-3)``, ``getattr(config, "lr")``,
``self.helper()``). Fails closed: any other use of the variable (passed to a
call, returned, stored, an instruction this reader does not know, on any
Python version) gives ``None``, and the whole object counts.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import builtins
import dis
import functools
import sys
import types
from typing import Any, NamedTuple

# --------------------------------------------------------------------------
# Reading code: the paths a variable is read along.

# A step of a path: ("attr", name), ("item", key), ("call", name) (a method called),
# ("get", key) (``.get(key[, default])`` with constants: an item, or its default where the key
# is absent), ("getattr", name) (``getattr(x, "name")``, an attribute) or ("getattr?", name)
# (``getattr(x, "name", default)``: the attribute, or the default where it is absent).
Access = tuple[str, Any]
Path = tuple[Access, ...]

# Instructions that push a local or cell variable (Python 3.10 to 3.13).
_LOADS = frozenset({"LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CLOSURE"})
# Instructions that name a variable and do nothing with its value.
_HARMLESS = frozenset({"MAKE_CELL", "COPY_FREE_VARS"})
_ATTRIBUTE = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
# Every instruction that names a local or free variable, on this Python.
_NAMES_A_VARIABLE = frozenset(dis.opname[op] for op in (*dis.haslocal, *dis.hasfree))


def _names(instruction: dis.Instruction) -> tuple[Any, ...]:
    value = instruction.argval
    return value if isinstance(value, tuple) else (value,)


def _is_method_load(instruction: dis.Instruction) -> bool:
    if instruction.opname == "LOAD_METHOD":
        return True
    # Python 3.12+: LOAD_ATTR's low bit says it pushes a method for a call.
    return (
        sys.version_info >= (3, 12) and instruction.opname == "LOAD_ATTR" and bool((instruction.arg or 0) & 1)
    )


def _follow(instructions: list[dis.Instruction], j: int) -> Path:
    """The look-ups applied to the value pushed just before instruction ``j``."""
    path: list[Access] = []
    n = len(instructions)
    while j < n and not instructions[j].is_jump_target:
        ins = instructions[j]
        if ins.opname in _ATTRIBUTE:
            if _is_method_load(ins):
                call = _constant_call(instructions, j + 1, 1, 2) if ins.argval == "get" else None
                if call is None or type(call[0][0]) not in (str, int):
                    path.append(("call", ins.argval))
                    break
                path.append(("get", call[0][0]))  # ``.get(key)``, ``.get(key, default)``: constants
                j = call[1]
                continue
            path.append(("attr", ins.argval))
            j += 1
        elif (
            ins.opname == "LOAD_CONST"
            and type(ins.argval) in (str, int)
            and j + 1 < n
            and instructions[j + 1].opname == "BINARY_SUBSCR"
            and not instructions[j + 1].is_jump_target
        ):
            path.append(("item", ins.argval))
            j += 2
        else:
            break
    return tuple(path)


# The instructions of a call with its arguments on the stack: Python 3.10's two, 3.11's PRECALL
# then CALL, 3.12 and 3.13's CALL.
_CALLS = frozenset({"CALL", "CALL_METHOD", "CALL_FUNCTION"})


def _constant_call(
    instructions: list[dis.Instruction], j: int, least: int, most: int, before: int = 0
) -> tuple[tuple[Any, ...], int] | None:
    """The constant arguments of a call whose callable (and ``before`` arguments) are on the
    stack at instruction ``j``, and the instruction after the call; None where it is any other
    call (a keyword, an argument computed, a jump into it)."""
    args: list[Any] = []
    n = len(instructions)
    while j < n and instructions[j].opname == "LOAD_CONST" and not instructions[j].is_jump_target:
        args.append(instructions[j].argval)
        j += 1
    count = before + len(args)
    if j < n and instructions[j].opname == "PRECALL" and instructions[j].arg == count:
        j += 1
    if (
        not least <= len(args) <= most
        or j >= n
        or instructions[j].is_jump_target
        or instructions[j].opname not in _CALLS
        or instructions[j].arg != count
    ):
        return None
    return tuple(args), j + 1


def _path_at(instructions: list[dis.Instruction], k: int) -> Path:
    """The look-ups applied to the value instruction ``k`` pushes (a ``getattr`` call first)."""
    through_getattr = _getattr_call(instructions, k)
    if through_getattr is not None:
        step, after = through_getattr
        return (step, *_follow(instructions, after))
    return _follow(instructions, k + 1)


def _getattr_call(instructions: list[dis.Instruction], k: int) -> tuple[Access, int] | None:
    """``getattr(var, "name")`` or ``getattr(var, "name", default)``, ``var`` pushed by
    instruction ``k``: the look-up, and the instruction after the call."""
    if k == 0 or instructions[k].is_jump_target:
        return None
    callee = instructions[k - 1]
    if callee.opname != "LOAD_GLOBAL" or callee.argval != "getattr":
        return None
    call = _constant_call(instructions, k + 1, 1, 2, before=1)
    if call is None or type(call[0][0]) is not str:
        return None
    (name, *default), after = call
    return ("getattr?" if default else "getattr", name), after


@functools.lru_cache(maxsize=4096)
def paths_read(code: types.CodeType, var: str) -> tuple[Path, ...] | None:
    """The paths read of ``var`` in ``code`` and the functions it defines, in order, or None (see
    the module).

    Every path is non-empty: the variable is only ever looked into. Fails
    closed: an instruction that names the variable and is not a known load,
    or a load whose value is not looked into, gives None.
    """
    if "__class__" in code.co_freevars:
        return None  # zero-argument super() reads self implicitly (Python < 3.12: no instruction)
    instructions = list(dis.get_instructions(code))
    paths: set[Path] = set()
    for k, ins in enumerate(instructions):
        names = _names(ins)
        if var not in names:
            continue
        op = ins.opname
        if op in _HARMLESS:
            continue
        if op not in _LOADS:
            if op in _NAMES_A_VARIABLE:
                return None  # a store, a delete, or a load this reader does not know (LOAD_FAST_BORROW)
            continue  # an attribute, global or constant that happens to share the name
        if op == "LOAD_CLOSURE" or _closure_tuple(instructions, k):
            continue  # handed to a function defined here: read below
        if names[-1] != var or names.count(var) != 1:
            return None  # pushed below another value: what happens to it is not followed
        path = _path_at(instructions, k)
        if not path:
            return None
        paths.add(path)
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and var in const.co_freevars:
            inner = paths_read(const, var)
            if inner is None:
                return None
            paths.update(inner)
    return tuple(sorted(paths, key=repr))


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


# Globals that give a function another way to read or write its module's names than a load.
_NAMESPACE_BUILTINS = frozenset({"globals", "vars", "locals", "eval", "exec", "__import__"})


class GlobalsRead(NamedTuple):
    """What a function's code (and the functions it defines) does with its module's globals."""

    names: frozenset[str]  # every global it loads
    writes: bool  # it assigns or deletes a global, or reads the namespace whole (``globals()``)


@functools.lru_cache(maxsize=1024)
def globals_read(code: types.CodeType) -> GlobalsRead:
    """The globals ``code`` loads, and whether it writes one (see :class:`GlobalsRead`)."""
    names: set[str] = set()
    writes = False
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL":
            names.add(ins.argval)
        elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME"):
            writes = True
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = globals_read(const)
            names |= inner.names
            writes = writes or inner.writes
    return GlobalsRead(frozenset(names), writes or bool(names & _NAMESPACE_BUILTINS))


def _pushes_a_null(instruction: dis.Instruction) -> bool:
    # Python 3.11+: LOAD_GLOBAL's low bit says it pushes NULL first: the global is called.
    return sys.version_info >= (3, 11) and bool((instruction.arg or 0) & 1)


@functools.lru_cache(maxsize=4096)
def global_paths_read(code: types.CodeType, name: str) -> tuple[Path, ...] | None:
    """The paths read of the global ``name`` in ``code`` and the functions it defines, or None
    where it is used otherwise (as :func:`paths_read` for a local)."""
    instructions = list(dis.get_instructions(code))
    paths: set[Path] = set()
    for k, ins in enumerate(instructions):
        if ins.argval != name or ins.opname != "LOAD_GLOBAL":
            continue
        if _pushes_a_null(ins):
            return None  # called
        path = _path_at(instructions, k)
        if not path:
            return None
        paths.add(path)
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and name in globals_read(const).names:
            inner = global_paths_read(const, name)
            if inner is None:
                return None
            paths.update(inner)
    return tuple(sorted(paths, key=repr))


def reachable(functions: list[types.FunctionType]) -> list[types.FunctionType]:
    """``functions`` and the functions of their modules they read (functions, the methods of
    classes defined there), at any depth (a bounded walk)."""
    out: list[types.FunctionType] = []
    todo, seen = list(functions), set[int]()
    while todo and len(out) < 64:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        out.append(f)
        namespace = f.__globals__
        for name in globals_read(f.__code__).names:
            value = namespace.get(name)
            if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
                todo.append(value)
            elif isinstance(value, type) and value.__module__ == f.__module__:
                todo += [v for v in vars(value).values() if isinstance(v, types.FunctionType)]
    return out


def getattr_is_builtin(function: types.FunctionType) -> bool:
    """Whether ``getattr`` in ``function`` is Python's (a module may define its own): the reader
    takes ``getattr(x, "name")`` for an attribute look-up."""
    return function.__globals__.get("getattr", builtins.getattr) is builtins.getattr
