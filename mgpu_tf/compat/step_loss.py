"""A model's own `train_step` or `test_step` logs the loss `compute_loss` gave it as on one device.

Under a strategy of N replicas Keras' `compute_loss` returns each replica's loss divided by
N, so that the replicas' gradients add up to the whole batch's. Keras' own steps log it
multiplied back; a step of the model's own that returns it logs the mean of the divided
values, 1/N of the loss. The step function logs that exact tensor multiplied back (its
gradient is unchanged); a loss the step computes itself is logged as it is.

Design: docs/design.md#a-custom-steps-loss
"""

import functools
import threading

from mgpu_tf.compat import private_trainer

__all__ = ["install", "installed", "logged_as_one_device"]

_MARK = "_mgpu_tf_step_loss"
# Kept on the model, past Keras' attribute tracking: {thread: the losses Keras returned to the
# step it traces}. MirroredStrategy traces each replica's step in a thread of its own, at once.
_RECORD = "_mgpu_tf_computed_losses"


def installed():
    """True when Keras' `Trainer.compute_loss` tells the step function what it returned."""
    return private_trainer.patched_by("Trainer.compute_loss", _MARK)


def install():
    """Patches Keras' `Trainer.compute_loss` to record its loss while a step is traced;
    again changes nothing."""
    if installed():
        return
    original = private_trainer.trainer_function("Trainer.compute_loss")

    @functools.wraps(original)
    def compute_loss(model, *args, **kwargs):
        loss = original(model, *args, **kwargs)
        record = vars(model).get(_RECORD, {}).get(threading.get_ident())
        if record is not None and loss is not None:
            record.append(loss)
        return loss

    setattr(compute_loss, _MARK, True)
    private_trainer.set_trainer_function("Trainer.compute_loss", compute_loss)


def logged_as_one_device(model, step_function):
    """`step_function` (one replica's step of `model`'s own), with each log that is a loss
    Keras' `compute_loss` returned multiplied by the replicas in sync."""
    import tensorflow as tf

    def step(data):
        # setdefault: one dictionary, whichever replica's thread comes first.
        records, thread = vars(model).setdefault(_RECORD, {}), threading.get_ident()
        records[thread] = record = []
        try:
            logs = step_function(data)
        finally:
            del records[thread]
        if not record:
            return logs
        return tf.nest.map_structure(
            lambda value: (private_trainer.unscale_loss(value)
                           if any(value is loss for loss in record) else value), logs)

    return step
