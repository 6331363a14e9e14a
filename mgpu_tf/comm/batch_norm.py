"""Batch normalisation with the global batch's statistics: `sync_batch_norm=True`.

Design: docs/design.md#batch-normalisation-statistics
"""

import keras

from mgpu_tf.compat import private

__all__ = ["synchronize"]


def synchronize(model):
    """Makes `model`'s BatchNormalization layers normalise with the global batch; returns it.

    Sets Keras' own `synchronized=True` on each layer (tf_keras' `SyncBatchNormalization`):
    in each training step the layer all-reduces its batch's sums over every replica of
    every worker, so that a step is the one-device step of the whole global batch, and the
    moving statistics move alike on every replica. Call it before the first `fit`.

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
