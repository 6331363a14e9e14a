"""A fit with validation data from `shard_dataset`, and its one-device reference, for the
validation and empty-replica tests and their workers."""

import json

import numpy as np
import tensorflow as tf

from support import sharding_problem

__all__ = ["Case", "CASES", "TERMS", "reference", "sharded", "to_json", "from_json"]

# The sums behind one gradient of sharding_problem.build_model(), batch rows aside.
TERMS = sharding_problem.TERMS


class Case:
    """A run: `train` examples at `batch`, validated on `validation` examples at
    `validation_batch`, for `epochs` epochs."""

    def __init__(self, train, batch, validation, validation_batch, epochs):
        self.train, self.batch = train, batch
        self.validation, self.validation_batch = validation, validation_batch
        self.epochs = epochs

    @property
    def steps(self):
        """Training steps of the whole run."""
        return self.epochs * -(-self.train // self.batch)

    def data(self):
        """`(x, y, initial weights, validation x, validation y)`."""
        x, y, weights = sharding_problem.problem(self.train, seed=0)
        vx, vy, _ = sharding_problem.problem(self.validation, seed=1)
        return x, y, weights, vx, vy


CASES = {
    # 8 steps an epoch, validated in 5: no steps_per_execution from 2 to 4 divides both.
    "validation": Case(64, 8, 20, 4, epochs=4),
    # One step of 1 example: one of 2 replicas (or workers) gets none, in training and in
    # validation.
    "one example, 2 replicas": Case(1, 2, 1, 2, epochs=2),
    # One step of 3 examples on 4 replicas.
    "three examples, 4 replicas": Case(3, 4, 3, 4, epochs=2),
}


def _results(model, history, evaluated):
    return {"val_loss": [float(v) for v in history.history.get("val_loss", [])],
            "evaluate": float(evaluated),
            "weights": model.get_weights()}


def reference(case):
    """What one device without `steps_per_execution` gives: plain Keras, batches in order.

    Returns:
        `{"val_loss": one per epoch, "evaluate": the validation loss after training,
        "weights": the trained weights}`.
    """
    assert not tf.distribute.has_strategy()
    x, y, weights, vx, vy = case.data()
    model = sharding_problem.build_model(weights)
    validation = tf.data.Dataset.from_tensor_slices((vx, vy)).batch(case.validation_batch)
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(case.batch),
                        validation_data=validation, epochs=case.epochs, shuffle=False,
                        verbose=0)
    return _results(model, history, model.evaluate(validation, verbose=0))


def sharded(case, strategy, steps_per_execution=1):
    """The same run under `strategy`, from `shard_dataset` (the validation data with
    `training=False`), with `DataOrder` and `steps_per_execution`.

    Returns:
        `(results as reference() gives them, the training data set)`.
    """
    import keras

    import mgpu_tf

    x, y, weights, vx, vy = case.data()
    with strategy.scope():
        model = keras.Sequential([keras.Input((sharding_problem.FEATURES,)),
                                  keras.layers.Dense(1)])
        model.set_weights(weights)
        model.compile(keras.optimizers.SGD(0.1), "mse", steps_per_execution=steps_per_execution)
    train = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                  case.batch)
    validation = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((vx, vy)), strategy,
                                       case.validation_batch, training=False)
    history = model.fit(train, validation_data=validation, epochs=case.epochs, verbose=0,
                        callbacks=[mgpu_tf.callbacks.DataOrder()])
    return _results(model, history, model.evaluate(validation, verbose=0)), train


def to_json(results):
    """`results` as one line of JSON, for a worker to print."""
    return json.dumps(dict(results, weights=[w.tolist() for w in results["weights"]]))


def from_json(text):
    """The `results` that `to_json` printed."""
    results = json.loads(text)
    results["weights"] = [np.array(w, "float32") for w in results["weights"]]
    return results
