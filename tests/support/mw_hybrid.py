"""Worker script: `make_strategy("hybrid")` trained with Keras `fit` against one device.

Run by tests/test_hybrid.py as two workers of two simulated devices each, through
`mgpu-tf launch -- python -m support.mw_hybrid`. Each worker builds the model from
its own seed (so only the broadcast can make them equal), trains it as a two-stage
pipeline on its share of each global batch, and trains a plain copy of the
broadcast initial model on one device with the whole global batches as the
reference. Prints `name: value` lines for the test to read (`relative error` and
`moved` as `support.compare.relative_difference`).
"""

import sys

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from support import compare

GLOBAL_BATCH = 16
EXAMPLES = 64
EPOCHS = 2
# The sums behind one gradient of build_model(), batch rows aside (support.tolerance).
TERMS = 8 + 16 + 16 + 8 + 1 + 8 + 16 + 16


def build_model():
    return keras.Sequential([
        keras.Input((8,)),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(1),
    ])


def main():
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2, microbatches=2)
    task = strategy.task_index
    print("kind:", mgpu_tf.strategy_kind(strategy))
    keras.utils.set_random_seed(100 + task)
    with strategy.scope():
        model = build_model()
    model = mgpu_tf.prepare_model(model, strategy)
    initial = [w.copy() for w in model.model.get_weights()]
    print("initial:", " ".join(f"{v:.8e}" for v in np.concatenate(
        [w.ravel() for w in initial])[:6]))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")

    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, 8).astype("float32")
    y = np.sin(x).sum(axis=1, keepdims=True).astype("float32")
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    history = model.fit(mgpu_tf.shard_dataset(examples, strategy, GLOBAL_BATCH),
                        epochs=EPOCHS, verbose=0)

    for stage in model.plan:
        devices = {w.value.device for name in stage.layers
                   for w in model.model.get_layer(name).weights}
        print(f"stage {stage.index} devices:", " ".join(sorted(devices)))
    slots = {v.value.device for v in model.optimizer.variables if len(v.shape) > 0}
    print("slot devices:", " ".join(sorted(slots)))

    reference = build_model()
    reference.set_weights(initial)
    reference.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    expected = reference.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False,
                             verbose=0)
    error = compare.relative_difference(model.model.get_weights(), reference.get_weights())
    moved = compare.relative_difference(initial, reference.get_weights())
    print(f"steps: {EPOCHS * EXAMPLES // GLOBAL_BATCH}")
    print(f"moved: {moved:.3e}")
    print(f"relative error: {error:.3e}")
    print(f"loss: {history.history['loss'][-1]:.6e} reference {expected.history['loss'][-1]:.6e}")
    print("done")


if __name__ == "__main__":
    sys.exit(main())
