"""Shared: the words of the mechanism: each a closed set of values, named for what it tells.

One module for all of them, imported by the steps that share them, so that
two vocabularies never share a spelling by accident (a probe mode that gave
the concrete value used to be the string ``"static"``, as the role of an
argument in the treedef is). :class:`Role` and :class:`Kind` are strings as
well (``Role.STATIC == "static"``): they are shown to users and written
into checkpoint signatures. The others are plain enums: they never leave the
process's analysis, and a comparison with a stray string is always False,
which pyright reports.
"""

from __future__ import annotations

# pyright: strict, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportUnknownLambdaType=false, reportUnknownParameterType=false, reportMissingTypeStubs=false
import enum


class Role(str, enum.Enum):
    """What a bound argument is in the wrapped object (classify: ``_classify``)."""

    DYNAMIC = "dynamic"  # a leaf: a JAX array (or a Python number kept as one)
    CHILD = "child"  # a wrapped object (or a container of them): its leaves are leaves
    STATIC = "static"  # aux data of the treedef: compared by value, one compilation per value

    __hash__ = str.__hash__  # the value's: C speed in the configuration keys hashed on every wrap

    def __str__(self) -> str:
        return self.value


class Kind(str, enum.Enum):
    """What a factory returns."""

    TRANSFORMATION = "transformation"  # init/update: a PyTreeTransformation
    SCHEDULE = "schedule"  # a callable of the step count: a PyTreeSchedule

    __hash__ = str.__hash__  # the value's: C speed in the configuration keys hashed on every wrap

    def __str__(self) -> str:
        return self.value


class Mode(enum.Enum):
    """How the probe hands a candidate numeric argument to the factory (analyse: the probe, ``_detect``).

    From the most dynamic down; a candidate goes down a mode when it fails in
    the one above.
    """

    GUARDED = enum.auto()  # a stand-in, kept in the closures: guards at construction and call time
    GUARDED_WHILE_BUILT = enum.auto()  # a stand-in while the factory runs, its leaf afterwards
    LEAF = enum.auto()  # the abstract leaf itself: traced, no Python decisions on it
    PYTHON_VALUE = enum.auto()  # the concrete value: the argument is static

    @property
    def down(self) -> Mode:
        """The next mode when this one fails."""
        order = list(Mode)
        return order[min(order.index(self) + 1, len(order) - 1)]

    @property
    def guarded(self) -> bool:
        """Whether the factory sees a stand-in (its comparisons are guards)."""
        return self in (Mode.GUARDED, Mode.GUARDED_WHILE_BUILT)


class Phase(enum.Enum):
    """When a stand-in is used (``_guard.Context.phase``)."""

    CONSTRUCTION = enum.auto()  # while the factory runs
    CALL = enum.auto()  # inside init/update or the schedule, on a call's data


class Level(enum.Enum):
    """How far the probe drives what a factory returns, deepest first (``_detect``)."""

    UPDATE_ALL = "update with every extra argument"  # value, grad, value_fn, obj_fn, grad_fn
    UPDATE_LINESEARCH = "update with value, grad, value_fn"  # line searches, Polyak/plateau rules
    UPDATE_OBJ_FN = "update with obj_fn"  # Hessian estimators
    UPDATE_GRAD_FN = "update with grad_fn"  # SAM's opaque mode
    UPDATE = "update"
    INIT = "init"
    CALL = "the schedule at a step count"
    BUILD = "construction only"  # nothing to run: the factory's call alone


class Differs(enum.Enum):
    """How the wrapped build differs from the factory with the Python values (``_verify.Difference``).

    The pipeline branches on these, never on a message's words.
    """

    FAILS = enum.auto()  # the wrapped build raises where the factory runs
    ONLY_WRAPPED_RUNS = enum.auto()  # the factory raises with the Python values, the wrapped build runs
    SPECIALIZED_EXPONENT = enum.auto()  # a leaf is a power's exponent plain optax has as 2.0, 0.5, ...
    OPERATIONS = enum.auto()  # other not-correctly-rounded operations (exp, pow, ...)
    # Given a zero, the factory skips operations in Python that a leaf computes (optax's
    # ``isinstance(weight_decay, (int, float)) and weight_decay == 0.0``): static at zero only.
    SKIPPED_AT_ZERO = enum.auto()
    NUMBERS = enum.auto()  # another structure, dtype, shape or value


__all__ = ["Differs", "Kind", "Level", "Mode", "Phase", "Role"]
