"""Section 12's compile time on a TPU, measured on a machine without the chip.

A TPU's programs are compiled on its host's CPU: with libtpu installed, JAX
compiles for a deviceless TPU topology (``jax.experimental.topologies``), so
the trace, the lowering and XLA's compilation of a program for the TPU can be
timed here, the ratio wrapped over ``inject_hyperparams`` read without the
device time that the chip costs (its absolute times are this machine's). The
programs are section 12's (``scan_step.py``): 1,000 updates in a
``lax.scan``, the optimizer an argument (wrapped) or ``inject_hyperparams``
with its state an argument; and, for adamw with warmup-cosine, the wrapped
adamw with its schedule static (``opx.static``: its numbers constants, as
``inject_hyperparams``' are). Each round makes new functions (nothing of them
in JAX's caches), the kinds in turn, order reversed every round; medians::

    python benchmarks/tpu_compile_time.py                 # adam and adamw + warmup-cosine, 1,024 parameters
    python benchmarks/tpu_compile_time.py --size 101386 --rounds 9

Needs the libtpu that JAX's ``tpu`` extra names (``python benchmarks/tpu_programs.py --libtpu``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# A deviceless TPU: libtpu wants a chip type and a host list, and JAX runs on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")

import jax
import optax

import optax_pytree as opx
import scan_step
from tpu_programs import _abstract, _tpu_sharding, libtpu_requirement  # pyright: ignore[reportPrivateUsage]

PHASES = ("trace", "lower", "compile")


def _programs(name: str) -> dict[str, tuple[Callable[..., Any], Any]]:
    """kind -> (the function to jit, its optimizer argument or None); new functions each call."""
    programs, txs = scan_step._programs(name, 1000)  # pyright: ignore[reportPrivateUsage]
    out = {kind: (programs[kind][0], txs[kind]) for kind in ("inject", "wrapped")}
    if name.startswith("adamw"):
        schedule = opx.static(scan_step._schedule(lambda f, *a: f(*a)))  # pyright: ignore[reportPrivateUsage]
        static = opx.wrap(optax.adamw, schedule)
        out["wrapped, schedule static"] = (programs["wrapped"][0], static)
    return out


def measure(name: str, size: int, rounds: int, sharding: Any) -> dict[str, dict[str, list[float]]]:
    params = scan_step._params(size)  # pyright: ignore[reportPrivateUsage]
    times: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        programs = _programs(name)
        kinds = list(programs) if r % 2 == 0 else list(programs)[::-1]
        for kind in kinds:
            fn, tx = programs[kind]
            extra = () if kind == "inject" else (tx,)
            args = _abstract((params, tx.init(params), *extra), sharding)
            start = time.perf_counter()
            traced = jax.jit(fn).trace(*args)
            traced_at = time.perf_counter()
            lowered = traced.lower(lowering_platforms=("tpu",))
            lowered_at = time.perf_counter()
            lowered.compile()
            done = time.perf_counter()
            row = times.setdefault(kind, {phase: [] for phase in PHASES})
            row["trace"].append(traced_at - start)
            row["lower"].append(lowered_at - traced_at)
            row["compile"].append(done - lowered_at)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="parameters (default 1,024)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--optimizers", default="adam,adamw + warmup-cosine")
    options = parser.parse_args()

    from optax_pytree import _backends

    # As a TPU machine's process, which can lower for both: the TPU's treatment is staged.
    _backends._platforms = lambda: ("cpu", "tpu")  # pyright: ignore[reportPrivateUsage]
    try:
        sharding = _tpu_sharding("v5e:1x1")
    except Exception as error:  # noqa: BLE001 - no libtpu, or another JAX: say so
        needed = libtpu_requirement()
        sys.exit(f"cannot compile for a TPU here ({type(error).__name__}: {error}); pip install {needed!r}")
    rounds = f"median of {options.rounds} rounds"
    print(f"TPU v5e (deviceless), jax {jax.__version__}, {options.size:,} parameters, {rounds}")
    print("| optimizer | kind | trace ms | lower ms | compile ms | total ms | total / inject_hyperparams' |")
    print("|---|---|---|---|---|---|---|")
    for name in options.optimizers.split(","):
        times = measure(name, options.size, options.rounds, sharding)
        totals = {kind: [sum(parts) for parts in zip(*row.values())] for kind, row in times.items()}
        for kind, row in times.items():
            medians = [statistics.median(row[phase]) * 1e3 for phase in PHASES]
            total = statistics.median(totals[kind])
            # Paired: each round's total over inject_hyperparams' of the same round.
            ratio = statistics.median(a / b for a, b in zip(totals[kind], totals["inject"]))
            cells = " | ".join(f"{m:.1f}" for m in medians)
            print(f"| {name} | {kind} | {cells} | {total * 1e3:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
