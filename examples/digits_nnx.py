"""Real data with flax.nnx: a digits classifier, plain flax against the wrapped optimizer, and a sweep.

scikit-learn's digits (1,797 handwritten 8 x 8 digits, shipped with
scikit-learn, no download) train a small nnx MLP with AdamW, in three parts:

(a) ``nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)`` against the
    one-line replacement ``optax_pytree.nnx.Optimizer(model,
    opx.wrap(optax.adamw, lr), wrt=nnx.Param)``: the same training, the same
    test accuracies.
(b) An 8-value learning-rate sweep as a Python loop over ONE model and ONE
    optimizer: reset their state, ``optimizer.set_hyperparams(learning_rate=lr)``,
    train. The step compiles once for all 8 values. With plain flax, every
    value needs a new ``nnx.Optimizer`` (its ``tx`` is static), and every one
    is a new compilation.
(c) The same sweep as a population: ``opx.grid`` turns the optimizer's
    transformation into a batch of 8, ``nnx.split``/``nnx.merge`` under
    ``nnx.vmap`` makes 8 models and optimizers from the reset state, and
    ``nnx.vmap(train_step)`` trains them all in each call. Same numbers as the loop.

Writes ``examples/output/digits_nnx.png``: the test accuracy of every
learning rate, epoch by epoch (loop and population), and the final accuracy
against the learning rate.

Run:  python examples/digits_nnx.py      (OPTAX_PYTREE_SMOKE=1 or --smoke: a few steps)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _shared import SMOKE, log, phase, progress, pyplot, save
from flax import nnx
from sklearn.datasets import load_digits

import optax_pytree as opx
from optax_pytree.nnx import Optimizer

EPOCHS = 2 if SMOKE else 30
BATCH = 64
STEPS_PER_EPOCH = 4 if SMOKE else None  # None: every full batch of the training set
LEARNING_RATE = 3e-3  # part (a)
# Parts (b) and (c). Up to 1e-2: past it, training this MLP is chaotic, and the
# float32 round-off by which loop and population differ grows to O(1) (see main).
LEARNING_RATES = np.geomspace(1e-4, 1e-2, 8).tolist()
PLAIN_VALUES = LEARNING_RATES[:2] if SMOKE else LEARNING_RATES  # (b) with plain flax: a compilation each
WEIGHT_DECAY = 1e-4


# --------------------------------------------------------------------------
# Data, model, step.


def load() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Digits as 64 pixels in [0, 1]; 360 test images, the other 1,437 for training."""
    pixels, labels = load_digits(return_X_y=True)
    x = (np.asarray(pixels) / 16.0).astype(np.float32)
    y = np.asarray(labels).astype(np.int32)
    order = np.random.default_rng(0).permutation(len(y))
    test, train = order[:360], order[360:]
    return (x[train], y[train]), (x[test], y[test])


def batches(x: np.ndarray, y: np.ndarray, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The epoch's minibatches: a shuffle seeded by the epoch, so every run sees the same ones."""
    order = np.random.default_rng(1 + epoch).permutation(len(y))
    n = len(y) // BATCH if STEPS_PER_EPOCH is None else STEPS_PER_EPOCH
    return [(x[i], y[i]) for i in np.split(order[: n * BATCH], n)]


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(64, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(x)))


def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


def train_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def accuracy(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean(jnp.argmax(model(x), axis=-1) == y)


def counted(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """``fn`` and a one-element list counting its traces (a trace is a compilation)."""
    traces = [0]

    def traced(*args: Any) -> Any:
        traces[0] += 1  # runs when jit traces, not when the compiled step runs
        return fn(*args)

    return traced, traces


def params_of(model: Any) -> list[np.ndarray]:
    return [np.asarray(p) for p in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param))]


def fit(
    model: Any, optimizer: Any, step: Callable[..., Any], evaluate: Callable[..., Any], data: Any, desc: str
) -> np.ndarray:
    """``EPOCHS`` epochs of ``step``; the test accuracy after each (one row per epoch)."""
    (x_train, y_train), (x_test, y_test) = data
    curve = []
    with progress(range(EPOCHS), desc, unit="epoch") as bar:
        for epoch in bar:
            for xb, yb in batches(x_train, y_train, epoch):
                step(model, optimizer, xb, yb)
            curve.append(np.asarray(evaluate(model, x_test, y_test)))
            accuracies = " ".join(f"{v:.3f}" for v in np.atleast_1d(curve[-1]))
            bar.set_postfix(test_accuracy=accuracies, refresh=False)
    return np.stack(curve)


# --------------------------------------------------------------------------
# (a) plain flax/optax against the wrapped optimizer.


def plain_against_wrapped(data: Any) -> dict[str, Any]:
    step, traces = counted(train_step)
    step, evaluate = nnx.jit(step), nnx.jit(accuracy)
    plain_model, wrapped_model = MLP(nnx.Rngs(0)), MLP(nnx.Rngs(0))
    plain = nnx.Optimizer(plain_model, optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY), wrt=nnx.Param)
    wrapped = Optimizer(  # the one-line replacement
        wrapped_model, opx.wrap(optax.adamw, LEARNING_RATE, weight_decay=WEIGHT_DECAY), wrt=nnx.Param
    )
    curves = {
        "plain": fit(plain_model, plain, step, evaluate, data, "plain nnx.Optimizer"),
        "wrapped": fit(wrapped_model, wrapped, step, evaluate, data, "optax_pytree.nnx.Optimizer"),
    }
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(params_of(plain_model), params_of(wrapped_model)))
    print(f"(a) AdamW, lr={LEARNING_RATE:g}: test accuracy by epoch, plain flax/optax | optax_pytree")
    for epoch in sorted({0, *range(4, EPOCHS, 5), EPOCHS - 1}):
        print(f"    epoch {epoch + 1:3d}: {curves['plain'][epoch]:.4f} | {curves['wrapped'][epoch]:.4f}")
    print(f"    max |difference| of the final parameters: {diff:.3g}")
    print(f"    traces of the step: {traces[0]} (one per optimizer class: their graphs differ)")
    return {**curves, "param_diff": diff}


# --------------------------------------------------------------------------
# (b) the sweep as a loop: one model, one optimizer, one compilation.


def sweep_loop(data: Any) -> dict[str, Any]:
    step, traces = counted(train_step)
    step, evaluate = nnx.jit(step), nnx.jit(accuracy)
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(
        model, opx.wrap(optax.adamw, LEARNING_RATES[0], weight_decay=WEIGHT_DECAY), wrt=nnx.Param
    )
    # A snapshot to reset to. nnx.state returns the live variables, which
    # training updates in place: copy them (nnx.clone), or the "reset" is a no-op.
    initial = nnx.state(nnx.clone((model, optimizer)))
    curves, finals = [], []
    start = time.perf_counter()
    for lr in LEARNING_RATES:
        nnx.update((model, optimizer), initial)  # parameters, moments, step count back to the start
        optimizer.set_hyperparams(learning_rate=lr)  # a new value, the same compiled step
        curves.append(fit(model, optimizer, step, evaluate, data, f"loop, lr={lr:.2g}"))
        finals.append(params_of(model))
        log(f"lr={lr:.2g}: test accuracy {curves[-1][-1]:.4f}; traces of the step so far: {traces[0]}")
    seconds = time.perf_counter() - start
    print(f"(b) loop over {len(LEARNING_RATES)} learning rates, one model and one optimizer: {seconds:.1f} s")
    print(f"    traces (= compilations) of the step: {traces[0]}")
    return {"curves": np.stack(curves, axis=1), "params": finals, "traces": traces[0], "seconds": seconds}


def plain_flax_traces(data: Any) -> int:
    """What (b) costs with plain flax: a new nnx.Optimizer per value, one step each."""
    step, traces = counted(train_step)
    step = nnx.jit(step)
    (x_train, y_train), _ = data
    xb, yb = batches(x_train, y_train, 0)[0]
    model = MLP(nnx.Rngs(0))
    for lr in progress(PLAIN_VALUES, "plain flax, one step per value", unit="value"):
        step(model, nnx.Optimizer(model, optax.adamw(lr, weight_decay=WEIGHT_DECAY), wrt=nnx.Param), xb, yb)
    print(f"    plain flax, a new nnx.Optimizer per value: {traces[0]} traces for {len(PLAIN_VALUES)} values")
    return traces[0]


# --------------------------------------------------------------------------
# (c) the sweep as a vmapped population of nnx models.


def sweep_population(data: Any) -> dict[str, Any]:
    step, traces = counted(train_step)
    step = nnx.jit(nnx.vmap(step, in_axes=(0, 0, None, None)))  # every member, the same batch
    evaluate = nnx.jit(nnx.vmap(accuracy, in_axes=(0, None, None)))
    model = MLP(nnx.Rngs(0))
    optimizer = Optimizer(
        model, opx.wrap(optax.adamw, LEARNING_RATES[0], weight_decay=WEIGHT_DECAY), wrt=nnx.Param
    )
    start = time.perf_counter()
    graphdef, initial = nnx.split((model, optimizer))
    batched_tx, _ = opx.grid(optimizer.transformation, learning_rate=LEARNING_RATES)

    @nnx.vmap(in_axes=(0, None))
    def member(tx: Any, initial: Any) -> tuple[MLP, Optimizer]:
        # copy=True: each member gets its own variables. Without it they are the
        # broadcast input's, and nnx.vmap refuses them as outputs
        # ("Inconsistent aliasing detected").
        model, optimizer = nnx.merge(graphdef, initial, copy=True)
        optimizer.set_hyperparams(**tx.hyperparams)
        return model, optimizer

    models, optimizers = member(batched_tx, initial)
    lrs = ", ".join(f"{lr:.2g}" for lr in np.asarray(optimizers.tx.learning_rate[...]))
    log(f"population of {len(LEARNING_RATES)}: learning rates {lrs}")
    curves = fit(models, optimizers, step, evaluate, data, f"population of {len(LEARNING_RATES)}")
    stacked = params_of(models)
    finals = [[p[i] for p in stacked] for i in range(len(LEARNING_RATES))]
    seconds = time.perf_counter() - start
    print(
        f"(c) vmapped population of {len(LEARNING_RATES)} nnx models: {seconds:.1f} s; "
        f"traces of the step: {traces[0]}"
    )
    return {"curves": curves, "params": finals, "traces": traces[0], "seconds": seconds}


def plot(a: dict[str, Any], loop: dict[str, Any], population: dict[str, Any]) -> None:
    plt = pyplot()
    fig, (ax_curves, ax_final) = plt.subplots(1, 2, figsize=(11, 4.2))
    epochs = np.arange(1, EPOCHS + 1)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, len(LEARNING_RATES)))
    for i, (lr, color) in enumerate(zip(LEARNING_RATES, colors)):
        ax_curves.plot(epochs, loop["curves"][:, i], color=color, label=f"lr={lr:.2g}")
        ax_curves.plot(epochs, population["curves"][:, i], "o", color=color, markersize=3)
    ax_curves.set(
        xlabel="epoch", ylabel="test accuracy", title="Sweep: loop (lines), vmapped population (dots)"
    )
    ax_curves.legend(fontsize=7, loc="lower right")
    ax_final.plot(LEARNING_RATES, loop["curves"][-1], "-o", label="loop (1 compilation)")
    ax_final.plot(
        LEARNING_RATES, population["curves"][-1], "x", markersize=9, label="population (1 call a step)"
    )
    ax_final.plot([LEARNING_RATE], [a["plain"][-1]], "s", color="black", label="plain flax/optax, part (a)")
    ax_final.set(xscale="log", xlabel="learning rate", ylabel="final test accuracy", title="AdamW on digits")
    ax_final.legend(fontsize=8)
    save(fig, "digits_nnx.png")


def main() -> None:
    with phase("load scikit-learn's digits"):
        data = load()
        print(f"digits: {len(data[0][1])} training and {len(data[1][1])} test images, 64 pixels, 10 classes")
    start = time.perf_counter()
    with phase("(a) plain flax/optax against optax_pytree.nnx.Optimizer"):
        a = plain_against_wrapped(data)
    with phase(f"(b) a loop over {len(LEARNING_RATES)} learning rates"):
        loop = sweep_loop(data)
        plain_traces = plain_flax_traces(data)
    with phase(f"(c) a vmapped population of {len(LEARNING_RATES)}"):
        population = sweep_population(data)
    # Per member: the largest difference of a parameter, loop against population.
    diffs = [
        max(float(np.max(np.abs(p - q))) for p, q in zip(ps, qs))
        for ps, qs in zip(loop["params"], population["params"])
    ]
    print("final test accuracy by learning rate, loop | population | max |difference| of the parameters:")
    for lr, acc_loop, acc_pop, diff in zip(
        LEARNING_RATES, loop["curves"][-1], population["curves"][-1], diffs
    ):
        print(f"    lr={lr:<7.2g} {acc_loop:.4f} | {acc_pop:.4f} | {diff:.3g}")
    print("    (float32 round-off: XLA sums over a batch of models in another order than over one)")
    accuracy_diff = float(np.max(np.abs(loop["curves"] - population["curves"])))
    print(f"    max |difference| of the test accuracies, every epoch and value: {accuracy_diff:.3g}")
    print(
        f"compilations of the step: loop {loop['traces']} for {len(LEARNING_RATES)} values, population "
        f"{population['traces']}, plain flax {plain_traces} for {len(PLAIN_VALUES)} values"
    )
    print(
        f"time: loop {loop['seconds']:.1f} s, population {population['seconds']:.1f} s (compiling included); "
        f"{time.perf_counter() - start:.1f} s in all"
    )
    with phase("plot"):
        plot(a, loop, population)
    assert loop["traces"] == 1 and population["traces"] == 1 and plain_traces == len(PLAIN_VALUES)
    # Equal up to float32 round-off, which hundreds of training steps carry
    # into the parameters (XLA sums over a batch of models in another order
    # than over one; Adam, dividing by sqrt(v) + eps, enlarges a round-off
    # difference in a near-zero gradient). The test predictions stay the same.
    one_image = 1 / len(data[1][1])
    assert accuracy_diff <= one_image, accuracy_diff
    assert float(np.max(np.abs(a["plain"] - a["wrapped"]))) <= one_image


if __name__ == "__main__":
    main()
