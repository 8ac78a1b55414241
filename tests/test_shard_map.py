"""A wrapped optimizer through ``shard_map`` on 8 host devices (in a subprocess)."""

from __future__ import annotations

from helpers import run_with_8_host_devices

SCRIPT = """
    import jax, jax.numpy as jnp, numpy as np, optax
    from jax.sharding import Mesh, PartitionSpec as P
    import optax_pytree as opx
    from helpers import counting_jit, raw_adam

    assert jax.device_count() == 8, jax.devices()
    if hasattr(jax, "shard_map"):
        shard_map = jax.shard_map
    else:  # jax<0.6.1
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(np.array(jax.devices()), ("data",))
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 4))
    y = x @ jnp.arange(4.0)
    params = {"w": jnp.zeros(4), "b": jnp.zeros(())}

    def loss(params, x, y):
        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    def step(tx, params, state, x, y):
        grads = jax.lax.pmean(jax.grad(loss)(params, x, y), "data")
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    def train(tx, params, x, y):
        sharded = shard_map(
            step, mesh=mesh, in_specs=(P(), P(), P(), P("data"), P("data")), out_specs=(P(), P())
        )
        state = tx.init(params)
        for _ in range(3):
            params, state = sharded(tx, params, state, x, y)
        return params

    train, traces = counting_jit(train)
    for lr in (0.1, 0.05):
        got = train(opx.wrap(optax.adam, learning_rate=lr), params, x, y)
        raw = raw_adam([lr] * 3, params, lambda p: loss(p, x, y))
        for k in raw:
            np.testing.assert_allclose(got[k], raw[k], rtol=1e-4, atol=1e-6)
    assert traces == [1], traces
    print("ok")
"""


def test_shard_map_over_eight_host_devices() -> None:
    assert run_with_8_host_devices(SCRIPT).strip().endswith("ok")
