"""Where a step's time goes on the device: the profiler's time per XLA operation of a scan.

``step_probe.py`` times whole programs; this one asks the device. Each variant of
``step_probe.py`` (section 12's cheap-gradient step, 1,000 updates in a ``lax.scan``) is
compiled, run under ``jax.profiler.trace`` three times, and the trace read back
(``jax.profiler.ProfileData``): the device time of each XLA operation a step, the
``while`` loop's own (its body's work outside the fusions: on a TPU the scalar unit's) and
each fusion's::

    python benchmarks/step_profile.py                        # adam, 1,024 parameters
    python benchmarks/step_profile.py adamw-wc 101386 raw,wrapped

Measured on a TPU v5e (jax 0.10.2, 2026-12-06), adam at 1,024 parameters, µs a step (the
profiler's clock, which adds its own time): raw optax 0.59 (the loop 0.35, its two vector
fusions 0.12 each); ``inject_hyperparams`` 6.98 (3.94, 1.52 each); wrapped 7.82 (4.77,
1.52 each). The vector fusions are the same operations in the three programs: a fusion
that reads a scalar of the loop's state (a hyperparameter, or what the hyperparameters
alone compute, which XLA moves out of the loop) runs 12x slower than one that reads
constants or scalars computed in the step, and the loop's scalar work waits on each such
scalar too. Two builds tried on that finding and not kept (wall time of ``step_probe.py``,
the same day): the values of the hyperparameters alone packed into one vector of the
loop's state, unpacked in the step through its count so that XLA cannot move the
unpacking out of the loop (as int32 bits: the fusions 0.12 µs each, the loop 7.80; the
step 8.83 µs against 5.88 unpacked; as float32, read so by the vector operations alone:
8.86 against 5.93); the general power in a ``lax.cond`` branch taken only for a base
outside the rule's range (5.71 against 5.86 µs; XLA's conditional simplifier makes two
cheap branches a select of both, unless one computes nothing).
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import tempfile

import jax
import jax.numpy as jnp
from jax.profiler import ProfileData

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _workload
import step_probe


def device_times(compiled: object, args: tuple[object, ...], calls: int = 3) -> collections.Counter[str]:
    """Device nanoseconds per XLA operation (summed over its runs), over ``calls`` calls."""
    folder = tempfile.mkdtemp(prefix="step_profile-")
    with jax.profiler.trace(folder):
        for _ in range(calls):
            jax.block_until_ready(compiled(*args))  # type: ignore[operator]
    path = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)[0]
    times: collections.Counter[str] = collections.Counter()
    for plane in ProfileData.from_file(path).planes:
        if not plane.name.startswith("/device:") or plane.name.startswith("/device:CPU"):
            continue
        for line in plane.lines:
            if line.name == "XLA Ops":
                for event in line.events:
                    times[event.name.split(" = ")[0]] += event.duration_ns
    return times


def main() -> None:
    optimizer = sys.argv[1] if len(sys.argv) > 1 else "adam"
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["raw", "inject", "wrapped"]
    step_probe._BATCH = _workload.Workload.make(1).batch  # pyright: ignore[reportPrivateUsage]
    half = size // 2
    params = {"w": jnp.linspace(-1.0, 1.0, half), "b": jnp.linspace(0.5, -0.5, size - half)}
    steps, calls = 1000, 3
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {optimizer}, {size:,} parameters")
    for name, (tx, kind) in step_probe.variants(optimizer).items():
        if name not in names:
            continue
        fn, args = step_probe.program(kind, tx, params, steps)
        compiled = jax.jit(fn).trace(*args).lower().compile()
        jax.block_until_ready(compiled(*args))
        times = device_times(compiled, args, calls)
        if not times:
            print(f"== {name}: the profile has no device operations (a CPU backend)")
            continue
        per_step = {op: ns / calls / steps / 1000 for op, ns in times.items()}
        print(f"== {name}: {sum(per_step.values()):.2f} µs a step of device time")
        for op, us in sorted(per_step.items(), key=lambda item: -item[1])[:8]:
            if us >= 0.001:
                print(f"   {us:8.3f} µs  {op}")


if __name__ == "__main__":
    main()
