"""Each epoch's data in an order that depends on the seed and the epoch only.

Design: docs/design.md#data-order-across-restarts
"""

import keras

from mgpu_tf.data import order

__all__ = ["DataOrder"]


class DataOrder(keras.callbacks.Callback):
    """Tells `mgpu_tf.shard_dataset`'s pipelines which epoch `fit` is in.

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

    def _position(self):
        """The `Position` of the model's strategy, which its pipelines read."""
        return order.position_of(self.model.distribute_strategy)

    def on_epoch_begin(self, epoch, logs=None):
        self._position().set_epoch(epoch, (self.params or {}).get("epochs"))

    def on_train_end(self, logs=None):
        self._position().release()
