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


class _ShortEpoch:
    """Ends a resumed epoch's steps, but not training (another callback may set `True`)."""

    def __bool__(self):
        return True


_SHORT_EPOCH = _ShortEpoch()


class DataOrder(keras.callbacks.Callback):
    """Tells `mgpu_tf.shard_dataset`'s pipelines which epoch and step `fit` is at.

    Without it each new iterator of a sharded data set starts the next epoch's
    order, as `tf.data` does; Keras makes one more iterator under a strategy (to
    build the model) than without, so the orders would differ.

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

    def __init__(self):
        super().__init__()
        self._epoch, self._offset, self._done = 0, 0, 0

    def steps_done(self):
        """`(epoch, steps of it done)`: where training is now."""
        return self._epoch, self._done

    def on_epoch_begin(self, epoch, logs=None):
        order.set_epoch(epoch)
        self._epoch = epoch
        self._offset = self._done = order.position()[1]

    def on_train_batch_end(self, batch, logs=None):
        # Keras numbers a resumed epoch's batches from 0.
        self._done = self._offset + batch + 1
        steps = (self.params or {}).get("steps")
        if steps and self._done >= steps:
            order.finish_epoch(self._epoch)
            if self._offset:
                # A resumed epoch is short. Ending it here keeps Keras from asking for
                # one more step, whose failed read would still count an optimizer
                # iteration; `on_epoch_end` lets training go on.
                self.model.stop_training = _SHORT_EPOCH

    def on_epoch_end(self, epoch, logs=None):
        order.finish_epoch(epoch)
        if self.model.stop_training is _SHORT_EPOCH:
            self.model.stop_training = False

    def on_train_end(self, logs=None):
        order.release()
