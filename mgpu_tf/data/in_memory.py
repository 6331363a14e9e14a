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
    """The components of `source` as whole tensors, or None where it is not kept in memory.

    Only a `from_tensor_slices` data set of fixed-shape examples up to `LIMIT_BYTES` is
    held: reading it whole gives exactly its examples, once.
    """
    if type(source).__name__.strip("_") != "TensorSliceDataset":
        return None
    count = int(source.cardinality())
    specs = tf.nest.flatten(source.element_spec)
    if count <= 0 or not all(s.shape.is_fully_defined() for s in specs):
        return None
    size = sum(count * max(1, s.shape.num_elements()) * s.dtype.size for s in specs)
    if size > LIMIT_BYTES:
        return None
    return tf.data.experimental.get_single_element(source.batch(count))


def rows(held, seed, epoch, global_batch_size, drop_remainder, positions):
    """Each step's rows at `positions` of its block of the epoch's order, gathered at once.

    The epoch's order is `tf.random.experimental.index_shuffle` of the example numbers, seeded
    by `(seed, epoch)` only, so every replica, worker and resumed run agrees on it.

    Args:
        held: what `hold` returned.
        seed: the shuffle seed.
        epoch: the epoch, a scalar `tf.int64` tensor.
        global_batch_size: examples in a block (a step of every replica).
        drop_remainder: whether a last, short block is left out.
        positions: a sorted `tf.int64` vector of places within a block.

    Returns:
        A `tf.data.Dataset` of one batch per block; a block's tail past the last example
        gives a short or empty batch.
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
