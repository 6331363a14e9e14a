"""The marks on a data set `shard_dataset` made: it orders its own examples, and its shares.

Keras' `fit` leaves its `shuffle` to such a data set (`mgpu_tf.compat.shuffle_hook`),
checks that something steers an adaptive one's shares (`mgpu_tf.compat.fit_hook`), and a
KerasHub task model puts its preprocessing into its pipelines (`mgpu_tf.compat.keras_hub`).
"""

from mgpu_tf.compat.keras_hub import PREPROCESSABLE_ATTRIBUTE
from mgpu_tf.compat.shuffle_hook import SHARDED_ATTRIBUTE

__all__ = ["mark_sharded", "is_sharded", "mark_adaptive", "adaptive_of", "mark_preprocessable"]

# The `AdaptiveShares` of a data set sharded with weights="adaptive".
_ADAPTIVE_ATTRIBUTE = "_mgpu_tf_adaptive_shares"


def mark_sharded(data):
    """Marks `data` as made by `shard_dataset`; returns it."""
    object.__setattr__(data, SHARDED_ATTRIBUTE, True)
    return data


def is_sharded(data):
    """True for a data set `mark_sharded` marked."""
    return getattr(data, SHARDED_ATTRIBUTE, False) is True


def mark_adaptive(data, shares):
    """Marks `data` as reading `shares` (`mgpu_tf.data.adaptive.AdaptiveShares`); returns it."""
    object.__setattr__(data, _ADAPTIVE_ATTRIBUTE, shares)
    return data


def adaptive_of(data):
    """The `AdaptiveShares` `data` reads, or `None`."""
    return getattr(data, _ADAPTIVE_ATTRIBUTE, None)


def mark_preprocessable(data, preprocessable):
    """Marks `data` as one that `preprocessable` (`mgpu_tf.data.preprocessing.Preprocessable`)
    makes again with a preprocessing step; returns it."""
    object.__setattr__(data, PREPROCESSABLE_ATTRIBUTE, preprocessable)
    return data
