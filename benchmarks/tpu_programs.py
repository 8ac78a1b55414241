"""A TPU's compiled programs of plain and wrapped optax, compiled on a machine without the chip.

JAX compiles for a TPU without one when libtpu is installed (a deviceless
topology, ``jax.experimental.topologies``): the optimized HLO of a program is
then what the TPU's compiler makes of it, before its code generation. That
shows what XLA's passes (its algebraic simplifier, constant folding) did with
plain optax's constants and with the wrapped object's leaves, side by side,
without device time; a difference in the numbers that neither program shows
happens below HLO (the TPU's power of a constant base did) and needs the chip
(``benchmarks/constants_probe.py``). Install the libtpu that JAX's ``tpu``
extra names for the installed JAX (``--libtpu`` prints it; for jax 0.10.2,
``libtpu==0.0.42.*``), then run on the CPU machine::

    python benchmarks/tpu_programs.py --libtpu        # the libtpu for this JAX: pip install it
    python benchmarks/tpu_programs.py "optax.cosine_onecycle_schedule(100, 0.01)"
    python benchmarks/tpu_programs.py "optax.adam(1e-3)" --out DIR   # DIR/plain.hlo, DIR/wrapped.hlo

The expression is evaluated twice: with ``optax`` plain optax, and with
``optax`` the drop-in (``optax_pytree.optax``: every numeric argument a leaf).
A schedule is compiled as ``schedule(count)``, a count the argument; a
transformation as one ``update`` on a float32 vector, its state an argument
(and the wrapped object one). The wrapped build stages each backend's
treatment (``optax_pytree/_backends.py``) as on a TPU machine, whose process
can lower for the TPU and the CPU. Printed: each program's operations by
opcode and its floating-point constants; written with ``--out``: both
programs, without metadata, for a diff.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from typing import Any

# A deviceless TPU: libtpu wants a chip type and a host list, and JAX runs on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")

import jax
import jax.numpy as jnp
import numpy as np

_METADATA = (
    re.compile(r", metadata=\{[^}]*\}"),
    re.compile(r", backend_config=\{.*\}$"),
    re.compile(r", frontend_attributes=\{.*?\}(?=,|$)"),
    re.compile(r", sharding=\{[^}]*\}"),
    re.compile(r"\{[0-9,]*:T\([^}]*\}"),  # TPU layouts and memory spaces: {0:T(128)S(1)}
)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = \S+ ([\w\-]+)\(")
_CONSTANT = re.compile(r"\bconstant\(([^)]*)\)")


def compact(text: str) -> str:
    """The computations of an optimized HLO module's text, without metadata, layouts and the header."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(("%", "ENTRY"))), len(lines))
    out = []
    for line in lines[start:]:
        for pattern in _METADATA:
            line = pattern.sub("", line)
        out.append(line)
    return "\n".join(out).strip() + "\n"


def summary(text: str) -> tuple[dict[str, int], list[str]]:
    """Operations by opcode, and the floating-point constants, of a compacted program."""
    ops: collections.Counter[str] = collections.Counter()
    constants: set[str] = set()
    for line in text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            ops[match.group(1)] += 1
        if " f32" in line or " bf16" in line or " f64" in line:
            constants.update(_CONSTANT.findall(line))
    return dict(sorted(ops.items())), sorted(constants)


def libtpu_requirement() -> str:
    """The libtpu that JAX's ``tpu`` extra names for the installed JAX (``libtpu==0.0.42.*``)."""
    import importlib.metadata

    for requirement in importlib.metadata.requires("jax") or []:
        match = re.match(r"\s*(libtpu\s*[=<>~!][^;]*)", requirement)
        if match:
            return match.group(1).replace(" ", "")
    return "libtpu"


def _tpu_sharding(topology: str) -> Any:
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    described = topologies.get_topology_desc(topology, "tpu", chips_per_host_bounds=(1, 1, 1))
    return SingleDeviceSharding(described.devices[0])


def _abstract(tree: Any, sharding: Any) -> Any:
    def one(x: Any) -> Any:
        x = jnp.asarray(x)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding, weak_type=x.weak_type)

    return jax.tree.map(one, tree)


def compiled(fn: Any, args: tuple[Any, ...], sharding: Any) -> str:
    """``fn`` jitted and compiled for the TPU of ``sharding``, at the shapes of ``args``."""
    lowered = jax.jit(fn).trace(*_abstract(args, sharding)).lower(lowering_platforms=("tpu",))
    return compact(lowered.compile().as_text() or "")


def programs(expression: str, size: int, sharding: Any) -> dict[str, str]:
    """The plain and the wrapped program of ``expression``, compiled for the TPU."""
    import optax

    import optax_pytree.optax as dropin

    plain = eval(expression, {"optax": optax, "jnp": jnp, "np": np})
    wrapped = eval(expression, {"optax": dropin, "jnp": jnp, "np": np})
    if isinstance(plain, optax.GradientTransformation):
        params = jnp.linspace(-1.0, 1.0, size, dtype=jnp.float32)
        grads = jnp.cos(params)
        state, wrapped_state = plain.init(params), wrapped.init(params)
        return {
            "plain": compiled(lambda g, s, p: plain.update(g, s, p), (grads, state, params), sharding),
            "wrapped": compiled(
                lambda tx, g, s, p: tx.update(g, s, p), (wrapped, grads, wrapped_state, params), sharding
            ),
        }
    count = jnp.int32(0)
    return {
        "plain": compiled(lambda c: plain(c), (count,), sharding),
        "wrapped": compiled(lambda s, c: s(c), (wrapped, count), sharding),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("expression", nargs="?", default="", help='a call of optax, e.g. "optax.adam(1e-3)"')
    parser.add_argument("--size", type=int, default=256, help="a transformation's parameters (default 256)")
    parser.add_argument("--libtpu", action="store_true", help="print the libtpu requirement of this JAX")
    parser.add_argument("--topology", default="v5e:1x1", help="a TPU topology (default v5e:1x1)")
    parser.add_argument("--out", default=None, help="a folder for plain.hlo and wrapped.hlo")
    args = parser.parse_args()
    if args.libtpu:
        print(libtpu_requirement())
        return
    if not args.expression:
        parser.error('an expression, e.g. "optax.adam(1e-3)"')

    from optax_pytree import _backends

    # As a TPU machine's process, which can lower for both: the TPU's treatment is staged.
    _backends._platforms = lambda: ("cpu", "tpu")  # pyright: ignore[reportPrivateUsage]
    try:
        sharding = _tpu_sharding(args.topology)
    except Exception as error:  # noqa: BLE001 - no libtpu, or another JAX: say so
        needed = libtpu_requirement()
        sys.exit(f"cannot compile for a TPU here ({type(error).__name__}: {error}); pip install {needed!r}")
    found = programs(args.expression, args.size, sharding)
    for name, text in found.items():
        ops, constants = summary(text)
        print(f"== {name}: {sum(ops.values())} operations")
        print("   " + ", ".join(f"{op} {n}" for op, n in ops.items()))
        print("   float constants: " + ", ".join(constants))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"{name}.hlo"), "w") as f:
                f.write(text)
    if args.out:
        print(f"written: {args.out}/plain.hlo, {args.out}/wrapped.hlo (diff them)")


if __name__ == "__main__":
    main()
