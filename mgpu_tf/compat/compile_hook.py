"""Keras' `compile`, patched once on `keras.Model`: the strategy may ready the optimizer it makes.

A strategy whose record has no `ready_optimizer` leaves `compile` as Keras wrote it.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import attached

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_compile_hook"


def installed():
    """True when `keras.Model.compile` runs the hook."""
    import keras

    return getattr(keras.Model.compile, _MARK, False)


def install():
    """Patches `keras.Model.compile`; again changes nothing."""
    import keras

    if installed():
        return
    original = keras.Model.compile

    @functools.wraps(original)
    def compile(model, *args, **kwargs):
        original(model, *args, **kwargs)
        strategy = model.distribute_strategy
        ready = attached.of_strategy(strategy).ready_optimizer
        if ready is not None and model.optimizer is not None:
            ready(model.optimizer, strategy)

    setattr(compile, _MARK, True)
    keras.Model.compile = compile
