"""The private name of Keras' trainer that `mgpu_tf.callbacks.BackupAndRestore` touches.

Keras' own BackupAndRestore resumes by setting the model's private `_initial_epoch`,
which `fit` reads after `on_train_begin`; the accessor works as `compat.private`'s do.
"""

from mgpu_tf.compat.versions import PrivateNameError, attribute, describe

__all__ = ["PrivateNameError", "require_initial_epoch", "set_initial_epoch"]


def require_initial_epoch(model):
    """Checks that Keras' `fit` of `model` reads `Trainer._initial_epoch` (Keras 3.8-3.16)."""
    attribute(model, "Trainer._initial_epoch", f"model={describe(model)}")


def set_initial_epoch(model, epoch):
    """Has the running `fit` of `model` start at `epoch` (call it from `on_train_begin`)."""
    require_initial_epoch(model)
    model._initial_epoch = int(epoch)
