"""A model's own `train_step` or `test_step` logs the loss Keras gave it as on one device.

Under N replicas Keras' `compute_loss`, and a `keras.losses.Loss` called in a replica, give the
replica's loss divided by N, so that the gradients add up. A step of the model's own that
returns it, or hands it to a `Mean` tracker (Keras' guide "Customizing what happens in fit()"),
logs 1/N of it. While such a step traces, the tensors Keras divided are recorded; a log that is
one, and a `Mean` or `Sum` updated with one, take it multiplied back; the gradient is unchanged.

Design: docs/design.md#a-custom-steps-loss
"""

import functools
import warnings

from mgpu_tf.compat import private_trainer

__all__ = ["install", "installed", "logged_as_one_device"]

_MARK = "_mgpu_tf_step_loss"
# Kept on the replica's context while it traces a step of the model's own: the losses Keras
# divided. MirroredStrategy traces its replicas at once, each in a thread and context of its own.
_RECORD = "_mgpu_tf_divided_losses"


def _targets():
    """`(owner, attribute, wrapper)` of each function the patch replaces."""
    import keras

    return ((keras.losses.Loss, "__call__", _recording),
            (keras.metrics.Mean, "update_state", _unscaling),
            (keras.metrics.Sum, "update_state", _unscaling))


def installed():
    """True when Keras tells the step function which losses it divided, and its `Mean` and
    `Sum` metrics take them multiplied back."""
    return private_trainer.patched_by("Trainer.compute_loss", _MARK) and all(
        getattr(getattr(owner, name), _MARK, False) for owner, name, _ in _targets())


def install():
    """Patches Keras' `Trainer.compute_loss`, `Loss.__call__`, `Mean.update_state` and
    `Sum.update_state`; again changes nothing."""
    if not private_trainer.patched_by("Trainer.compute_loss", _MARK):
        original = private_trainer.trainer_function("Trainer.compute_loss")
        private_trainer.set_trainer_function("Trainer.compute_loss", _recording(original))
    for owner, name, wrapper in _targets():
        if not getattr(getattr(owner, name), _MARK, False):
            setattr(owner, name, wrapper(getattr(owner, name)))


def _recording(original):
    """Wraps a function returning a loss Keras divides, to record it while a step traces."""

    @functools.wraps(original)
    def function(*args, **kwargs):
        loss = original(*args, **kwargs)
        losses = _divided_losses()
        if losses is not None and loss is not None:
            losses.append(loss)
        return loss

    setattr(function, _MARK, True)
    return function


def _unscaling(original):
    """Wraps a metric's `update_state(values, ...)` to take a recorded loss multiplied back."""

    @functools.wraps(original)
    def update_state(self, values, *args, **kwargs):
        if _divided(values):
            values = private_trainer.unscale_loss(values)
        elif _made_from_divided(values):
            _warn_divided(self)
        return original(self, values, *args, **kwargs)

    setattr(update_state, _MARK, True)
    return update_state


def _divided_losses():
    """The losses Keras divided in this replica's step of a model's own; None outside one."""
    import tensorflow as tf

    return getattr(tf.distribute.get_replica_context(), _RECORD, None)


def _divided(value):
    """True when `value` is a loss Keras divided by the replicas in this replica's step."""
    return any(value is loss for loss in _divided_losses() or ())


def _made_from_divided(value, depth=8):
    """True when the traced `value` is computed from a loss Keras divided (a few ops up)."""
    losses = _divided_losses()
    if not losses or not hasattr(value, "op"):
        return False
    frontier, seen = [value], set()
    for _ in range(depth):
        frontier = [t for v in frontier for t in v.op.inputs if id(t) not in seen]
        if any(t is loss for t in frontier for loss in losses):
            return True
        seen.update(id(t) for t in frontier)
    return False


def _warn_divided(metric):
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    warnings.warn(
        f"The metric {metric.name!r} is updated with a value computed from a loss Keras divided "
        f"by the {replicas} replicas, so it logs 1/{replicas} of the one-device value unless "
        "the step multiplies it back. Update it with the loss compute_loss or a keras.losses "
        "loss returned (mgpu_tf logs that one as on one device), or multiply the value by "
        "self.distribute_strategy.num_replicas_in_sync.", stacklevel=3)


def logged_as_one_device(model, step_function):
    """`step_function` (one replica's step of `model`'s own), with each log that is a loss
    Keras divided, and each `Mean` or `Sum` updated with one, multiplied by the replicas
    in sync."""
    import tensorflow as tf

    def step(data):
        context = tf.distribute.get_replica_context()
        outer = getattr(context, _RECORD, None)
        setattr(context, _RECORD, [])
        try:
            logs = step_function(data)
            return tf.nest.map_structure(
                lambda value: private_trainer.unscale_loss(value) if _divided(value) else value,
                logs)
        finally:
            setattr(context, _RECORD, outer)

    return step
