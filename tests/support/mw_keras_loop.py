"""Worker script: Keras `fit`, `evaluate` and `predict` under make_strategy("multi_worker").

Run by tests/test_compat.py as two real workers. First it reports whether Keras'
own code, without mgpu_tf's patch, still has keras-team/keras#20585, by running
the functions mgpu_tf.compat wrapped; then it trains, evaluates and predicts with
the patch and checks the results against the model run on this worker alone.
Prints one `name: value` line per finding, for the test to read.
"""

import logging
import sys

import keras
import numpy as np
import tensorflow as tf
from keras.src.backend.tensorflow import trainer

import mgpu_tf
from mgpu_tf.compat import private_trainer

BATCH = 16


def build_model():
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def sharded(dataset):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    return dataset.with_options(options)


def symbolic_build_bug(strategy, dataset):
    """Runs `fit` with Keras' own `_maybe_symbolic_build`; True if it still fails."""
    cls = private_trainer.trainer_classes()[0]
    patched = cls._maybe_symbolic_build
    cls._maybe_symbolic_build = getattr(patched, "__wrapped__", patched)
    try:
        with strategy.scope():
            model = build_model()
        model.fit(dataset, epochs=1, shuffle=False, verbose=0)
    except ValueError as error:
        if "PerReplica" not in str(error):
            raise
        return True
    finally:
        cls._maybe_symbolic_build = patched
    return False


def log_reduction_bug(strategy):
    """Reduces scalar step logs with Keras' own `reduce_per_replica`; True if it still fails."""
    reduce = getattr(trainer.reduce_per_replica, "__wrapped__", trainer.reduce_per_replica)

    @tf.function
    def step():
        logs = strategy.run(lambda: {"loss": tf.constant(1.0)})
        return reduce(logs, strategy, "auto")

    try:
        step()
    except (ValueError, tf.errors.InvalidArgumentError) as error:
        if "Invalid reduction dimension" not in str(error):
            raise
        return True
    return False


def metric_reads(strategy, model):
    """Resets and reads the metrics 3 times between steps: "ok" when the resets read 0 and
    no collective took a new instance key (TensorFlow keeps a record of each)."""
    from mgpu_tf.compat import private_collectives

    launcher = private_collectives.collective_launchers(strategy)[0]
    before = private_collectives.next_instance_key(launcher)
    reads = []
    for _ in range(3):
        model.reset_metrics()
        reads.append(model.get_metrics_result())
    taken = private_collectives.next_instance_key(launcher) - before
    if taken or any(float(v) != 0.0 for r in reads for v in r.values()):
        return f"{taken} keys taken, reads {reads}"
    return "ok"


def main():
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    strategy = mgpu_tf.make_strategy("multi_worker")
    rng = np.random.RandomState(0)
    x = rng.randn(4 * BATCH, 4).astype("float32")
    y = np.sin(x).sum(axis=1, keepdims=True).astype("float32")
    data = sharded(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))
    inputs = sharded(tf.data.Dataset.from_tensor_slices(x).batch(BATCH))

    broken = {True: "broken", False: "fixed"}
    print("keras-20585 symbolic build:", broken[symbolic_build_bug(strategy, data)])
    print("keras-20585 log reduction:", broken[log_reduction_bug(strategy)])

    with strategy.scope():
        model = build_model()
    history = model.fit(data, epochs=2, shuffle=False, verbose=0)
    losses = history.history["loss"]
    print("fit: ok" if len(losses) == 2 and np.all(np.isfinite(losses)) else f"fit: {losses}")

    local = model(x).numpy()
    results = model.evaluate(data, verbose=0, return_dict=True)
    expected = float(np.mean((local - y) ** 2))
    error = abs(results["loss"] - expected) / expected
    print("evaluate: ok" if error < 1e-5 else
          f"evaluate: loss {results['loss']} but the local model gives {expected}")

    print("metric reads:", metric_reads(strategy, model))

    predictions = model.predict(inputs, verbose=0)
    if predictions.shape == local.shape and np.allclose(predictions, local, atol=1e-6):
        print("predict: ok")
    else:
        print(f"predict: shape {predictions.shape}, expected {local.shape} equal to model(x)")

    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    print("weights:", " ".join(f"{v:.6e}" for v in weights[:8]))
    print("done")


if __name__ == "__main__":
    sys.exit(main())
