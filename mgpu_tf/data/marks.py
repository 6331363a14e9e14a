"""The mark on a data set `shard_dataset` made, which orders its own examples.

Keras' `fit` leaves its `shuffle` to such a data set (`mgpu_tf.compat.shuffle_hook`).
"""

from mgpu_tf.compat.shuffle_hook import SHARDED_ATTRIBUTE

__all__ = ["mark_sharded", "is_sharded"]


def mark_sharded(data):
    """Marks `data` as made by `shard_dataset`; returns it."""
    object.__setattr__(data, SHARDED_ATTRIBUTE, True)
    return data


def is_sharded(data):
    """True for a data set `mark_sharded` marked."""
    return getattr(data, SHARDED_ATTRIBUTE, False) is True
