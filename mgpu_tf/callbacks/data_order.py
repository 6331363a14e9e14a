"""Each epoch's data in an order that depends on the seed and the epoch only.

`mgpu_tf.shard_dataset(..., shuffle_seed=s)` shuffles epoch `e` from `(s, e)`,
reading the epoch when an iterator starts (`mgpu_tf.data.order`). This callback
tells it which epoch Keras is in, so that every strategy sees the order of the
default strategy whatever iterators Keras makes, and a resumed run sees the
order of an uninterrupted one. `mgpu_tf.callbacks.BackupAndRestore` does the
same and needs no `DataOrder` beside it.
"""

import keras

from mgpu_tf.data import order

__all__ = ["DataOrder"]


class DataOrder(keras.callbacks.Callback):
    """Tells `mgpu_tf.shard_dataset`'s pipelines which epoch `fit` is in.

    Without it each new iterator of a sharded data set starts the next epoch's
    order, as `tf.data` does; Keras makes one more iterator under a strategy (to
    build the model) than without, so the orders would differ. It has no per-step
    hook, so Keras still dispatches batch callbacks asynchronously.

    Example:

    ```python
    import keras, numpy as np, tensorflow as tf
    import mgpu_tf
    strategy = mgpu_tf.make_strategy("default")
    examples = tf.data.Dataset.from_tensor_slices(
        (np.ones((32, 4), "float32"), np.zeros((32, 1), "float32")))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(mgpu_tf.shard_dataset(examples, strategy, 8, shuffle_seed=1), epochs=2,
              callbacks=[mgpu_tf.callbacks.DataOrder()], verbose=0)
    ```
    """

    def on_epoch_begin(self, epoch, logs=None):
        order.set_epoch(epoch)

    def on_train_end(self, logs=None):
        order.release()
