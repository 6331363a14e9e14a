"""A pipeline's stages under XLA: one compiled function per stage, on the stage's device.

Design: docs/design.md#the-model-parallel-wrapper
"""

import tensorflow as tf

__all__ = ["compiled_stages"]


def compiled_stages(stages, devices):
    """Each of `stages` as one XLA-compiled function (its gradient compiled too).

    Raises:
        ValueError: when a layer is called by two stages (a tied weight): XLA cannot read
            its variable on the other stage's device.
    """
    _refuse_shared_layers(stages, devices)
    return [_compiled(stage) for stage in stages]


def _refuse_shared_layers(stages, devices):
    owner = {}
    for index, stage in enumerate(stages):
        for layer in stage.layers:
            first = owner.setdefault(id(layer), index)
            if first != index and getattr(layer, "variables", None):
                raise ValueError(
                    "jit_compile=True compiles each stage on its own device, and XLA cannot read "
                    f"a variable on another device: layer {layer.name!r} is called by stages "
                    f"{first} and {index} (a tied weight) and lives with stage {first} on "
                    f"{devices[first]}. Received: jit_compile=True. Use jit_compile=False, or "
                    f"a `balance` that keeps both calls of {layer.name!r} in one stage.")


def _compiled(stage):
    def call(entering, training):
        return stage(entering, training=training)

    return tf.function(call, jit_compile=True, reduce_retracing=True)
