"""Automatic static detection: which numeric arguments a factory needs concrete.

Some numeric hyperparameters cannot be tracers: ``optax.lbfgs`` allocates
``memory_size`` rows, ``optax.adafactor`` compares ``min_dim_size_to_factor``
with parameter shapes in a Python ``if``, ``optax.lookahead`` checks
``sync_period`` in a Python ``if`` at construction. Annotations do not tell
(``sync_period`` is annotated array-like), so we ask the factory itself.

The probe runs the factory, then ``init`` and ``update`` of what it returns
(or the schedule at a step count), under ``jax.eval_shape`` with some numeric
arguments abstract. With every candidate concrete the run must succeed; with
all abstract, it usually does too, and then nothing is static. Otherwise a
bisection over the candidates finds, one at a time, an argument whose being
abstract breaks the run, makes it static, and starts again: a maximal set of
arguments stays dynamic. ``eval_shape`` compiles nothing; the result is cached
per factory and configuration by the caller.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax

# How far the probe drives what the factory returns, deepest first: update
# with the extra arguments of optax's line searches and Polyak/plateau rules,
# or of its Hessian estimators (transformations that need none ignore them),
# update alone, init, or construction only.
_LEVELS = {
    "transformation": ("update+linesearch", "update+obj_fn", "update", "init", "build"),
    "schedule": ("call", "build"),
}


def _sum_of_squares(params: Any) -> jax.Array:
    return sum((jnp.sum(x**2) for x in jax.tree_util.tree_leaves(params)), jnp.zeros(()))


def _default_param_shapes() -> list[Any]:
    f32 = jnp.float32
    return [
        {"b": jax.ShapeDtypeStruct((3,), f32), "w": jax.ShapeDtypeStruct((4, 3), f32)},
        {"w": jax.ShapeDtypeStruct((4, 3), f32)},
        jax.ShapeDtypeStruct((3,), f32),
    ]


def as_transformation(built: Any) -> optax.GradientTransformationExtraArgs:
    """The optax transformation behind what a factory returned."""
    if isinstance(built, optax.GradientTransformation):
        return optax.with_extra_args_support(built)
    to_tx = getattr(built, "gradient_transformation", None)
    if callable(to_tx):  # optax.MultiSteps and friends
        inner: Any = to_tx()
        return optax.with_extra_args_support(inner)
    return optax.GradientTransformationExtraArgs(built.init, built.update)


def _exercise(built: Any, kind: str, level: str, params: Any, count: Any, value: Any) -> Any:
    if level == "build":
        return None
    if kind == "schedule":
        return built(count)
    tx = as_transformation(built)
    state = tx.init(params)
    if level == "init":
        return state
    if level == "update+linesearch":
        return tx.update(params, state, params, value=value, grad=params, value_fn=_sum_of_squares)
    if level == "update+obj_fn":
        return tx.update(params, state, params, obj_fn=_sum_of_squares)
    return tx.update(params, state, params)


def _spec(x: Any) -> Any:
    return jax.ShapeDtypeStruct(
        jnp.shape(x), jnp.result_type(x), weak_type=bool(getattr(x, "weak_type", False))
    )


class Probe:
    """Runs a factory with a chosen subset of its numeric arguments abstract."""

    def __init__(
        self,
        make: Callable[[dict[str, Any]], Any],
        kind: str,
        concrete: dict[str, Any],
        abstract: dict[str, Any],
        param_shapes: Sequence[Any] = (),
    ):
        self.make = make  # dict of candidate values -> what the factory returns
        self.kind = kind
        self.concrete = concrete  # candidate name -> value as given (static form)
        self.abstract = {n: _spec(v) for n, v in abstract.items()}  # -> leaf spec
        self.param_shapes = [*param_shapes, *_default_param_shapes()]
        self.level: str | None = None
        self.params: Any = None

    def run(self, dynamic: Sequence[str], level: str, params: Any) -> BaseException | None:
        fixed = {n: v for n, v in self.concrete.items() if n not in dynamic}

        def fn(dyn: dict[str, Any], params: Any, count: Any, value: Any) -> Any:
            return _exercise(self.make({**fixed, **dyn}), self.kind, level, params, count, value)

        args = (
            {n: self.abstract[n] for n in dynamic},
            params,
            jax.ShapeDtypeStruct((), jnp.int32),
            jax.ShapeDtypeStruct((), jnp.float32),
        )
        absl = logging.getLogger("absl")
        absl_level = absl.level
        try:
            # The factory's warnings and log lines are the user's to see once,
            # when they use it, not once per probe run.
            absl.setLevel(logging.ERROR)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jax.eval_shape(fn, *args)
        except Exception as e:  # noqa: BLE001 - any failure counts: that is the point
            return e
        finally:
            absl.setLevel(absl_level)
        return None

    def baseline(self) -> bool:
        """Finds the deepest run that succeeds with every candidate concrete."""
        for level in _LEVELS[self.kind]:
            uses_params = level != "build"
            for params in self.param_shapes if uses_params else [None]:
                if self.run((), level, params) is None:
                    self.level, self.params = level, params
                    return True
        return False

    def ok(self, dynamic: Sequence[str]) -> bool:
        assert self.level is not None
        return self.run(dynamic, self.level, self.params) is None


def detect_static(probe: Probe, candidates: Sequence[str]) -> tuple[str, ...] | None:
    """The candidates that must be static, or None where the probe cannot decide.

    It cannot decide when the factory fails even with every argument concrete
    under the probe's stand-in parameters (a transformation that needs a
    particular parameter structure, say); then nothing is made static here and
    a failure at trace time says which argument to mark static.
    """
    dynamic = list(candidates)
    if not dynamic:
        return ()
    if not probe.baseline():
        return None
    static: list[str] = []
    while dynamic and not probe.ok(dynamic):
        # Invariant: dynamic[:lo] runs, dynamic[:hi] fails. The culprit is
        # dynamic[hi - 1]: abstract together with dynamic[:hi - 1], it breaks.
        lo, hi = 0, len(dynamic)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if probe.ok(dynamic[:mid]):
                lo = mid
            else:
                hi = mid
        static.append(dynamic.pop(hi - 1))
    return tuple(sorted(static, key=list(candidates).index))
