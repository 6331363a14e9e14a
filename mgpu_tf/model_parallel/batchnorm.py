"""Deferred batch normalisation: BatchNormalization in a pipeline of micro-batches.

Design: docs/design.md#deferred-batch-normalisation
"""

import contextlib

import keras
import tensorflow as tf

from mgpu_tf.compat import private
from mgpu_tf.model_parallel import placement

__all__ = ["batch_norm_layers", "DeferredBatchNorm"]


def batch_norm_layers(model):
    """The `BatchNormalization` layers of `model`, nested ones included."""
    return [layer for layer in private.nested_layers(model)
            if isinstance(layer, keras.layers.BatchNormalization)]


class DeferredBatchNorm:
    """Holds back the moving-statistics updates of BatchNormalization `layers` for one step.

    Raises `ValueError` for a layer with `renorm=True`, whose corrections depend on every update.

    Example:

    ```python
    deferred = DeferredBatchNorm(batch_norm_layers(model))
    with deferred.recording():
        y = pipelined_forward(x)  # each micro-batch normalised with its own statistics
    deferred.update()  # the moving statistics, once, from the whole batch
    ```
    """

    def __init__(self, layers):
        renorm = [layer.name for layer in layers if getattr(layer, "renorm", False)]
        if renorm:
            raise ValueError(
                "deferred_batch_norm=True cannot defer batch renormalization, whose "
                f"corrections follow every update. Received: renorm=True in {renorm!r}. "
                "Use renorm=False, or microbatches=1.")
        self._layers = list(layers)
        self._recorded = {}
        self._paused = False

    @contextlib.contextmanager
    def recording(self):
        """Within it, the layers record each call's statistics and leave their moving ones."""
        self._recorded = {id(layer): [] for layer in self._layers}
        saved = [(layer, layer.momentum) for layer in self._layers]
        for layer in self._layers:
            layer.call = self._recording_call(layer, layer.call, layer.momentum)
            layer.momentum = 1.0  # moving * 1 + mean * 0: the moving statistics stay as they are
        try:
            yield self
        finally:
            for layer, momentum in saved:
                del layer.call  # back to the class's call
                layer.momentum = momentum

    @contextlib.contextmanager
    def paused(self):
        """Within it (a recomputed forward), the layers record nothing."""
        self._paused, was = True, self._paused
        try:
            yield
        finally:
            self._paused = was

    def _recording_call(self, layer, call, momentum):
        def recording_call(inputs, training=None, mask=None):
            if training and layer.trainable and not self._paused:
                if mask is not None:
                    raise ValueError(
                        "deferred_batch_norm=True does not pool masked statistics. Received: "
                        f"a mask for {layer.name!r}. Use microbatches=1 for this model.")
                self._recorded[id(layer)].append(_moments(layer, inputs) + (momentum,))
            return call(inputs, training=training, mask=mask)

        return recording_call

    def update(self):
        """Updates each layer's moving statistics once, from the pooled statistics recorded."""
        for layer in self._layers:
            recorded = self._recorded.get(id(layer)) or []
            if not recorded:
                continue
            momentum = recorded[0][3]
            with tf.device(placement.device_of(layer.moving_mean)):
                mean, variance = pool([r[:3] for r in recorded])
                moving_mean = tf.cast(layer.moving_mean.value, mean.dtype)
                moving_variance = tf.cast(layer.moving_variance.value, mean.dtype)
                # Keras' own update, once.
                layer.moving_mean.assign(tf.cast(
                    moving_mean * momentum + mean * (1.0 - momentum), layer.moving_mean.dtype))
                layer.moving_variance.assign(tf.cast(
                    moving_variance * momentum + variance * (1.0 - momentum),
                    layer.moving_variance.dtype))
        self._recorded = {}


def _moments(layer, inputs):
    """(mean, biased variance, count of values reduced) of a call's inputs, as Keras takes them."""
    x = tf.stop_gradient(tf.cast(inputs, keras.backend.result_type(inputs.dtype, "float32")))
    axes = [a for a in range(len(x.shape)) if a not in _channel_axes(layer, len(x.shape))]
    mean, variance = keras.ops.moments(x, axes)
    shape = tf.shape(x)
    count = tf.reduce_prod(tf.gather(shape, axes)) if axes else tf.constant(1)
    return mean, variance, tf.cast(count, mean.dtype)


def _channel_axes(layer, rank):
    axis = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    return {a % rank for a in axis}


def pool(statistics):
    """The mean and biased variance of the union of batches, each `(mean, variance, count)`."""
    total = tf.add_n([count for _, _, count in statistics])
    weights = [count / total for _, _, count in statistics]
    mean = tf.add_n([tf.math.multiply_no_nan(m, w) for (m, _, _), w in zip(statistics, weights)])
    variance = tf.add_n([tf.math.multiply_no_nan(v + tf.square(m - mean), w)
                         for (m, v, _), w in zip(statistics, weights)])
    return mean, variance
