"""Keras' data adapter choice, patched once: fit's `shuffle` is off for `shard_dataset`'s data.

Keras' `fit` defaults to `shuffle=True` and warns that it cannot shuffle a `tf.data.Dataset`;
`shard_dataset` orders its examples itself (`shuffle_seed`), so for its data sets the warning
says nothing a user can act on. Every other data set keeps Keras' behaviour and warning.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import attached, private_trainer

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_shuffle_hook"


def installed():
    """True when Keras' `get_data_adapter` runs the hook."""
    try:
        return getattr(private_trainer.get_data_adapter(), _MARK, False)
    except private_trainer.PrivateNameError:
        return False


def install():
    """Patches Keras' `get_data_adapter`; again changes nothing."""
    if installed():
        return
    original = private_trainer.get_data_adapter()

    @functools.wraps(original)
    def get_data_adapter(x, *args, **kwargs):
        if kwargs.get("shuffle") and attached.is_sharded(x):
            kwargs["shuffle"] = False
        return original(x, *args, **kwargs)

    setattr(get_data_adapter, _MARK, True)
    private_trainer.set_get_data_adapter(get_data_adapter)
