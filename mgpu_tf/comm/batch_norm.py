"""Batch normalisation with the global batch's statistics: `sync_batch_norm=True`.

Design: docs/design.md#batch-normalisation-statistics
"""

import logging

import keras

from mgpu_tf.comm import combinations
from mgpu_tf.compat import private

__all__ = ["synchronize", "per_replica_layers", "note_per_replica"]

logger = logging.getLogger("mgpu_tf")
# The mark of a model already told about: a warning once per model.
_NOTED = "_mgpu_tf_batch_norm_noted"


def synchronize(model):
    """Makes `model`'s BatchNormalization layers normalise with the global batch; returns it.

    Sets Keras' own `synchronized=True` on each (tf_keras' `SyncBatchNormalization`): each
    step all-reduces the batch's sums over every replica, as one device's step of the global
    batch. Call it before the first `fit`.

    Example:

    ```python
    strategy = mgpu_tf.make_strategy("mirrored", sync_batch_norm=True)
    with strategy.scope():
        model = build_model()  # with BatchNormalization layers
        model.compile(optimizer="sgd", loss="mse")  # compile synchronizes them
    ```

    Args:
        model: a Keras model.

    Returns:
        `model`.
    """
    for layer in private.nested_layers(model):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.synchronized = True
    return model


def per_replica_layers(model):
    """`model`'s trainable BatchNormalization layers' names that normalise per replica."""
    return [layer.name for layer in private.nested_layers(model)
            if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable
            and not layer.synchronized]


def note_per_replica(model, replicas):
    """Warns once per model of `combinations.PER_REPLICA_BATCH_NORM` over `replicas`."""
    names = per_replica_layers(model) if replicas > 1 else []
    if not names or getattr(model, _NOTED, False):
        return
    object.__setattr__(model, _NOTED, True)  # past Keras' attribute tracking
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    logger.warning("mgpu_tf: %d BatchNormalization layer(s) (%s) over %d replicas: %s.",
                   len(names), shown, replicas, combinations.PER_REPLICA_BATCH_NORM.reason)
