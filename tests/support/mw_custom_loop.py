"""Worker script: TensorFlow's distributed custom training loop under make_strategy("multi_worker").

Usage: `python -m support.mw_custom_loop DATA.npz OUT_DIR`. DATA.npz holds `x`, `y` and the
initial weights `w0`, `w1`, ...; each worker writes its final weights to
OUT_DIR/worker<index>.npz and prints its loss. tests/test_custom_loop.py runs `train` in its
own process too, under mirrored and, as the reference, without a strategy.

`train` is the loop of https://www.tensorflow.org/tutorials/distribute/custom_training as the
tutorial writes it: `strategy.run(train_step)` inside a `tf.function`,
`tf.nn.compute_average_loss`, `optimizer.apply_gradients` on an optimizer nobody built, and
a Keras metric.
"""

import pathlib
import sys

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 8
STEPS = 4
LEARNING_RATE = 0.05
CLASSES = 3
# The sums behind one gradient of build_model(), batch rows aside: widths 5, 16, 3
# forward and 3, 16 back (support.tolerance).
TERMS = 5 + 16 + 3 + 3 + 16


def build_model(weights=None):
    """The classifier the loop trains, with the given initial weights."""
    model = keras.Sequential([
        keras.Input((5,)),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(CLASSES),
    ])
    if weights is not None:
        model.set_weights(weights)
    return model


def problem(seed=7):
    """`(x, y, weights)`: STEPS global batches of examples and initial weights."""
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, 5)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5).astype("int64")
    weights = [rng.normal(scale=0.5, size=w.shape).astype("float32")
               for w in build_model().get_weights()]
    return x, y, weights


def global_batches(x, y):
    """Batches of GLOBAL_BATCH consecutive examples; each worker takes its part of each."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    return dataset.with_options(options)


class Loop:
    """The tutorial's model, optimizer, metric, checkpoint and distributed step."""

    def __init__(self, strategy, weights):
        self.strategy = strategy
        with strategy.scope():
            self.model = build_model(weights)
            self.loss_object = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="none")
            self.optimizer = keras.optimizers.Adam(LEARNING_RATE)
            self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
            self.checkpoint = tf.train.Checkpoint(optimizer=self.optimizer, model=self.model)

    def compute_loss(self, labels, predictions):
        per_example_loss = self.loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)
        if self.model.losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        return loss

    def train_step(self, inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = self.model(images, training=True)
            loss = self.compute_loss(labels, predictions)
        gradients = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        self.accuracy.update_state(labels, predictions)
        return loss

    def train(self, dataset):
        """Runs one epoch over `dataset`; returns the loss of each step."""
        strategy = self.strategy

        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(self.train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

        return [float(distributed_train_step(batch))
                for batch in strategy.experimental_distribute_dataset(dataset)]


def main(data_path, out_dir):
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster

    strategy = mgpu_tf.make_strategy("multi_worker")
    data = np.load(data_path)
    weights = [data[f"w{i}"] for i in range(len(data.files) - 2)]
    loop = Loop(strategy, weights)
    losses = loop.train(global_batches(data["x"], data["y"]))
    index = cluster.detect_cluster().task_index
    np.savez(pathlib.Path(out_dir) / f"worker{index}.npz", *loop.model.get_weights())
    print("losses:", " ".join(f"{v:.9e}" for v in losses))
    print(f"worker {index} of {strategy.num_replicas_in_sync} replicas: done")


if __name__ == "__main__":
    main(*sys.argv[1:])
