"""A source held in memory, read by index: each replica gathers only its own rows of a step.

Reading example by example costs about a microsecond each, for every example of every
step on every replica; gathering a step's own rows at once costs what they weigh.

Design: docs/design.md#input-pipelines
"""

import numpy as np
import tensorflow as tf

from mgpu_tf.data import order

__all__ = ["LIMIT_BYTES", "every", "hold", "rows"]

# Sources up to this size are copied into one tensor per component, beside the source.
LIMIT_BYTES = 1 << 30
_SALT = 3  # keeps this order's seeds apart from the shuffles of `mgpu_tf.data.pipeline`


def hold(source):
    """The components of `source` as whole tensors: only a `from_tensor_slices` data set of
    fixed-shape examples up to `LIMIT_BYTES`, which reading whole gives exactly; else None."""
    if type(source).__name__.strip("_") != "TensorSliceDataset":
        return None
    count = int(source.cardinality())
    specs = tf.nest.flatten(source.element_spec)
    if count <= 0 or not all(s.shape.is_fully_defined() for s in specs):
        return None
    size = sum(count * max(1, s.shape.num_elements()) * s.dtype.size for s in specs)
    if size > LIMIT_BYTES:
        return None
    with tf.device("/CPU:0"):  # read by the input pipelines, which run on the host
        return source.batch(count).get_single_element()


def rows(held, seed, epoch, global_batch_size, drop_remainder, positions):
    """Each step's rows at `positions` (sorted places within a block), gathered at once.

    The epoch's order is `tf.random.experimental.index_shuffle` of the example numbers,
    seeded by `(seed, epoch)` only (`epoch` a scalar tensor), so every replica, worker and
    resumed run agrees on it. One batch per block of `global_batch_size`; a short last
    block gives a short or empty batch, or none with `drop_remainder`.
    """
    count = int(tf.nest.flatten(held)[0].shape[0])
    blocks = count // global_batch_size if drop_remainder else -(-count // global_batch_size)
    key = tf.stack([order.epoch_seed(seed, epoch, _SALT), tf.constant(0, tf.int64)])
    last = tf.constant(count - 1, tf.int64)
    positions = tf.cast(positions, tf.int64)

    def gather(step):
        where = step * global_batch_size + positions
        where = tf.boolean_mask(where, where <= last)
        index = tf.random.experimental.index_shuffle(where, key, last)
        return tf.nest.map_structure(lambda t: tf.gather(t, index), held)

    return tf.data.Dataset.range(blocks).map(gather)


def every(start, step, global_batch_size):
    """`positions` of every `step`-th place of a block from `start`."""
    return tf.constant(np.arange(start, global_batch_size, step), tf.int64)
