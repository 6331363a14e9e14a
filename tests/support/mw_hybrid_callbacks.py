"""Worker script: the chief-only writers, validation metrics and a multi-worker fit's
callbacks under `make_strategy("hybrid", timeout_seconds=TIMEOUT)`.

Run by tests/test_hybrid.py as two workers of two simulated devices each, with one
argument: a directory both workers see. Each worker trains a two-stage pipeline with
validation data, `mgpu_tf.callbacks.TensorBoard` and `ModelCheckpoint` writing into
that directory, then evaluates; a plain copy of the trained model evaluated on one
device with the whole validation set is the reference. Prints `name: value` lines. Then
Keras' own `ModelCheckpoint` is given to `fit`, and worker 1 sleeps inside its second
call of steps while worker 0 trains on: worker 0 prints `aborted after S s: MESSAGE` and
exits 3 (the message on one line).
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
import mgpu_tf.callbacks
from support import silent_peer

TIMEOUT = 6
GLOBAL_BATCH = 16
EXAMPLES = 64
VALIDATION = 32


def build_model():
    return keras.Sequential([
        keras.Input((8,)),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(1),
    ])


def compile_model(model):
    # Two steps per call: the hybrid test step runs inline in Keras' loop of steps.
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"],
                  steps_per_execution=2)


def main(directory):
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2, microbatches=2,
                                     timeout_seconds=TIMEOUT)
    print("is_chief:", mgpu_tf.callbacks.is_chief(strategy))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build_model()
    model = mgpu_tf.prepare_model(model, strategy)
    compile_model(model)

    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES + VALIDATION, 8).astype("float32")
    y = np.sin(x).sum(axis=1, keepdims=True).astype("float32")
    train = tf.data.Dataset.from_tensor_slices((x[:EXAMPLES], y[:EXAMPLES]))
    validation = tf.data.Dataset.from_tensor_slices((x[EXAMPLES:], y[EXAMPLES:]))
    writers = [
        mgpu_tf.callbacks.TensorBoard(os.path.join(directory, "tb")),
        mgpu_tf.callbacks.ModelCheckpoint(os.path.join(directory, "best.weights.h5"),
                                          monitor="val_loss", save_best_only=True,
                                          save_weights_only=True),
    ]
    history = model.fit(mgpu_tf.shard_dataset(train, strategy, GLOBAL_BATCH), epochs=2,
                        validation_data=mgpu_tf.shard_dataset(validation, strategy,
                                                              GLOBAL_BATCH),
                        callbacks=writers, verbose=0)
    print("val_loss:", " ".join(f"{v:.7e}" for v in history.history["val_loss"]))
    print("val_mae:", " ".join(f"{v:.7e}" for v in history.history["val_mae"]))
    loss, mae = model.evaluate(mgpu_tf.shard_dataset(validation, strategy, GLOBAL_BATCH),
                               verbose=0)
    print(f"evaluate: {loss:.7e} {mae:.7e}")

    reference = build_model()
    reference.set_weights(model.model.get_weights())
    compile_model(reference)
    loss, mae = reference.evaluate(x[EXAMPLES:], y[EXAMPLES:], batch_size=GLOBAL_BATCH,
                                   verbose=0)
    print(f"reference: {loss:.7e} {mae:.7e}")
    print("done", flush=True)
    _refused_and_watched(model, strategy, directory,
                         mgpu_tf.shard_dataset(train, strategy, GLOBAL_BATCH))


def _refused_and_watched(model, strategy, directory, train):
    try:
        model.fit(train, epochs=1, verbose=0, callbacks=[keras.callbacks.ModelCheckpoint(
            os.path.join(directory, "keras.weights.h5"), save_weights_only=True)])
    except ValueError as error:
        print("keras ModelCheckpoint:", error, flush=True)
    silent_peer.fit_until_aborted(model, train, strategy.task_index, 2, epochs=1)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
