"""Keras' `compile`, patched once on its trainer: the strategy may ready the model it compiled.

It asks `kind_of_model(model).prepare_compiled`, which readies the optimizer
(`prepare_optimizer`) and, under `sync_batch_norm`, the layers; a kind without options
leaves the model as Keras compiled it.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.compat import private_trainer

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_compile_hook"


def installed():
    """True when Keras' `Trainer.compile` runs the hook."""
    return private_trainer.patched_by("Trainer.compile", _MARK)


def install():
    """Patches Keras' `Trainer.compile`; again changes nothing."""
    if installed():
        return
    original = private_trainer.trainer_function("Trainer.compile")

    @functools.wraps(original)
    def compile(model, *args, **kwargs):
        original(model, *args, **kwargs)
        kind_lib.kind_of_model(model).prepare_compiled(model)

    setattr(compile, _MARK, True)
    private_trainer.set_trainer_function("Trainer.compile", compile)
