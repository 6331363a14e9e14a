"""The loop of TensorFlow's tutorial "Custom training with tf.distribute.Strategy"
(https://www.tensorflow.org/tutorials/distribute/custom_training), as it is written there.

Its model is a `Sequential` without an `Input`, built at its first call inside
`strategy.run`, and its Adam is built at its first step. Two changes: the strategy is given
(the tutorial makes `tf.distribute.MirroredStrategy()`), and the data are a few random
12 x 12 images in place of Fashion-MNIST's 28 x 28, which would be downloaded.
"""

import numpy as np
import tensorflow as tf

__all__ = ["GLOBAL_BATCH_SIZE", "STEPS", "TERMS", "train"]

GLOBAL_BATCH_SIZE = 16
STEPS = 2
SIZE = 12
# The sums behind one gradient of the tutorial's model, batch rows aside: each layer's inputs
# (3 x 3 x channels for a convolution, 1 x 1 x 64 flattened), forward and back (support.tolerance).
TERMS = 2 * (3 * 3 * 1 + 3 * 3 * 32 + 64 + 64 + 10)


def _data():
    rng = np.random.RandomState(0)
    images = rng.uniform(size=(STEPS * GLOBAL_BATCH_SIZE, SIZE, SIZE, 1)).astype("float32")
    return images, rng.randint(0, 10, size=STEPS * GLOBAL_BATCH_SIZE).astype("int64")


def train(strategy):
    """Runs the tutorial's loop for STEPS steps: `(losses, weights, accuracy)`."""
    train_images, train_labels = _data()
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (train_images, train_labels)).batch(GLOBAL_BATCH_SIZE)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)

    def create_model():
        regularizer = tf.keras.regularizers.L2(1e-5)
        model = tf.keras.Sequential([
            tf.keras.layers.Conv2D(32, 3, activation='relu', kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation='relu', kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation='relu', kernel_regularizer=regularizer),
            tf.keras.layers.Dense(10, kernel_regularizer=regularizer)
        ])
        return model

    with strategy.scope():
        # Set reduction to `NONE` so you can do the reduction yourself.
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True,
            reduction=tf.keras.losses.Reduction.NONE)

        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss)
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
            return loss

    with strategy.scope():
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='train_accuracy')

    # A model, an optimizer, and a checkpoint must be created under `strategy.scope`.
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)  # the same initial weights for every strategy
        model = create_model()
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)
        checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)  # noqa: F841

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss

    # `run` replicates the provided computation and runs it
    # with the distributed input.
    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    losses = [float(distributed_train_step(x)) for x in train_dist_dataset]
    return losses, model.get_weights(), float(train_accuracy.result())
