"""Keras' data adapter choice, patched once: fit's `shuffle` is off for `shard_dataset`'s data.

Keras' `fit` defaults to `shuffle=True` and warns that it cannot shuffle a `tf.data.Dataset`;
`shard_dataset` orders its examples itself (`shuffle_seed`), so for its data sets the warning
says nothing a user can act on. Every other data set keeps Keras' behaviour and warning.
Keras 3.8 also takes no data set from `distribute_datasets_from_function`, which 3.9 on
takes as a `tf.data` one: there the hook gives it Keras 3.9's test.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import private_trainer, versions

__all__ = ["SHARDED_ATTRIBUTE", "install", "installed"]

# True on a data set shard_dataset returned (mgpu_tf.data.marks), which orders its own examples.
SHARDED_ATTRIBUTE = "_mgpu_tf_sharded"

_MARK = "_mgpu_tf_shuffle_hook"
# The Keras releases whose `is_tf_dataset` refuses `distribute_datasets_from_function`'s data.
_NO_DISTRIBUTED_INPUT = ((3, 0), (3, 8))


def installed():
    """True when Keras' `get_data_adapter` runs the hook."""
    try:
        return getattr(private_trainer.get_data_adapter(), _MARK, False)
    except private_trainer.PrivateNameError:
        return False


def install():
    """Patches Keras' `get_data_adapter` (and `is_tf_dataset` on 3.8); again changes nothing."""
    import keras

    if installed():
        return
    if versions.release_in(keras.__version__, *_NO_DISTRIBUTED_INPUT):
        private_trainer.set_is_tf_dataset(_with_distributed_input(private_trainer.is_tf_dataset()))
    original = private_trainer.get_data_adapter()

    @functools.wraps(original)
    def get_data_adapter(x, *args, **kwargs):
        if kwargs.get("shuffle") and getattr(x, SHARDED_ATTRIBUTE, False) is True:
            kwargs["shuffle"] = False
        return original(x, *args, **kwargs)

    setattr(get_data_adapter, _MARK, True)
    private_trainer.set_get_data_adapter(get_data_adapter)


def _with_distributed_input(original):
    """Wraps `is_tf_dataset` to take any `tf.distribute.DistributedDataset`, as Keras 3.9 does."""
    import tensorflow as tf

    @functools.wraps(original)
    def is_tf_dataset(x):
        return isinstance(x, tf.distribute.DistributedDataset) or original(x)

    return is_tf_dataset
