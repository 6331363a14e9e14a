"""A model's preprocessing inside each replica's input pipeline of a sharded data set.

A KerasHub task model preprocesses what `fit` is given (strings to token ids, images to
the model's size); a data set from `shard_dataset` is already split between replicas, so
its pipelines are made again with the preprocessing as their last step, before the data
set is distributed. `mgpu_tf.compat.keras_hub` asks for that.

Design: docs/design.md#data-sharding
"""

import threading

import keras
import tensorflow as tf

__all__ = ["Preprocessable", "preprocess_batch"]


def preprocess_batch(preprocess, element):
    """`preprocess(x, y)` of one replica's batch `element`; the batch's sample weights (the
    examples' and `replica_weights`' correction) multiply those the preprocessing makes, such
    as a causal LM's padding mask."""
    x, y, weights = keras.utils.unpack_x_y_sample_weight(element)
    made = preprocess(x, y, None) if y is not None else preprocess(x)
    x, y, own = keras.utils.unpack_x_y_sample_weight(made)
    if weights is None:
        return keras.utils.pack_x_y_sample_weight(x, y, own)
    if own is None:
        return keras.utils.pack_x_y_sample_weight(x, y, weights)
    own = tf.convert_to_tensor(own)
    shape = tf.concat([tf.shape(weights), tf.ones([tf.rank(own) - 1], tf.int32)], 0)
    weights = tf.reshape(tf.cast(weights, own.dtype), shape)
    return keras.utils.pack_x_y_sample_weight(x, y, own * weights)


class Preprocessable:
    """Makes a sharded data set again (`remake(batch_function)`) with a preprocessing step in
    each replica's pipeline; one per function, kept, so a second `fit` reads the same one."""

    def __init__(self, remake):
        self._remake = remake
        self._made = {}
        self._lock = threading.Lock()

    def with_preprocessing(self, preprocess):
        """The data set with `preprocess` in each replica's pipeline."""
        with self._lock:
            if preprocess not in self._made:
                self._made[preprocess] = self._remake(
                    lambda *element: preprocess_batch(
                        preprocess, element[0] if len(element) == 1 else element))
            return self._made[preprocess]
