"""A wrapped optimizer through ``shard_map`` on 8 host devices (in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import functools
    import jax, jax.numpy as jnp, numpy as np, optax
    from jax.sharding import Mesh, PartitionSpec as P
    import optax_pytree as opx

    assert jax.device_count() == 8, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 4))
    y = x @ jnp.arange(4.0)
    params = {"w": jnp.zeros(4), "b": jnp.zeros(())}

    def loss(params, x, y):
        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    traces = 0

    def step(tx, params, state, x, y):
        grads = jax.lax.pmean(jax.grad(loss)(params, x, y), "data")
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    @jax.jit
    def train(tx, params, x, y):
        global traces
        traces += 1
        sharded = jax.shard_map(
            step, mesh=mesh, in_specs=(P(), P(), P(), P("data"), P("data")), out_specs=(P(), P())
        )
        state = tx.init(params)
        for _ in range(3):
            params, state = sharded(tx, params, state, x, y)
        return params

    for lr in (0.1, 0.05):
        got = train(opx.wrap(optax.adam, learning_rate=lr), params, x, y)
        raw, state = params, optax.adam(lr).init(params)
        for _ in range(3):
            updates, state = optax.adam(lr).update(jax.grad(loss)(raw, x, y), state, raw)
            raw = optax.apply_updates(raw, updates)
        for k in raw:
            np.testing.assert_allclose(got[k], raw[k], rtol=1e-4, atol=1e-6)
    assert traces == 1, traces
    print("ok")
    """
)


def test_shard_map_over_eight_host_devices() -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")
