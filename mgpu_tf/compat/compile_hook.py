"""Keras' `compile`, patched once on its trainer: the strategy may ready the optimizer it makes.

A strategy whose record has no `ready_optimizer` leaves `compile` as Keras wrote it.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import attached, private_trainer

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_compile_hook"


def installed():
    """True when Keras' `Trainer.compile` runs the hook."""
    try:
        return getattr(private_trainer.trainer_function("Trainer.compile"), _MARK, False)
    except private_trainer.PrivateNameError:
        return False


def install():
    """Patches Keras' `Trainer.compile`; again changes nothing."""
    if installed():
        return
    original = private_trainer.trainer_function("Trainer.compile")

    @functools.wraps(original)
    def compile(model, *args, **kwargs):
        original(model, *args, **kwargs)
        strategy = model.distribute_strategy
        ready = attached.of_strategy(strategy).ready_optimizer
        if ready is not None and model.optimizer is not None:
            ready(model.optimizer, strategy)

    setattr(compile, _MARK, True)
    private_trainer.set_trainer_function("Trainer.compile", compile)
