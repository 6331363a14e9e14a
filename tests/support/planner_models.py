"""Models the planner is checked on; functions for `mgpu-tf plan --model support.planner_models:X`.

`lopsided` is for test_planner.py; `resnet50`, `transformer_encoder` and `dense_stack` are
the models whose training-step memory `support.planner_memory` measures.
"""

import keras

from support import models

NOT_CALLABLE = 3


def lopsided():
    """16 KiB, 4 MiB, 1 MiB and 516 B of float32 weights: stages cannot be even."""
    return models.mlp((512, 2048, 128, 1), inputs=7)


def failing():
    raise RuntimeError("no data")


def not_a_model():
    return 7


def resnet50(size=224):
    """Keras' ResNet50 (BatchNorm after every convolution), untrained, `size` x `size` images."""
    keras.utils.set_random_seed(0)
    return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))


def transformer_encoder(sequence=256, width=256, heads=4, blocks=4, classes=10):
    """A post-norm Transformer encoder over token embeddings, pooled into `classes` logits."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((sequence, width))
    x = inputs
    for _ in range(blocks):
        attended = keras.layers.MultiHeadAttention(heads, width // heads)(x, x)
        x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attended]))
        hidden = keras.layers.Dense(4 * width, activation="gelu")(x)
        x = keras.layers.LayerNormalization()(
            keras.layers.Add()([x, keras.layers.Dense(width)(hidden)]))
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(pooled))


def dense_stack(width=2048, depth=8):
    """`depth` square ReLU Dense layers of `width`, then one output."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((width,))]
                            + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
                            + [keras.layers.Dense(1)])


class FusedBatchNorm(keras.layers.Layer):
    """Batch normalisation by TensorFlow's fused kernel, as TF1 recipes (and tf.keras) ran it.

    Takes a `keras.layers.BatchNormalization` config; its backward pass reads only the
    input and the batch statistics, where Keras 3's unfused layer also keeps `x - mean`
    (in float32 under mixed precision).
    """

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k in ("name", "dtype", "trainable")}
        super().__init__(**kwargs)
        self.momentum, self.epsilon = momentum, epsilon

    def build(self, shape):
        channels = (shape[-1],)
        self.gamma = self.add_weight(shape=channels, initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=channels, initializer="zeros", name="beta")
        self.moving_mean = self.add_weight(shape=channels, initializer="zeros",
                                           trainable=False, name="moving_mean")
        self.moving_variance = self.add_weight(shape=channels, initializer="ones",
                                               trainable=False, name="moving_variance")

    def call(self, x, training=False, mask=None):
        import tensorflow as tf

        # The kernel takes float16 inputs with float32 statistics, under mixed precision too.
        gamma, beta, moving_mean, moving_variance = [tf.cast(v, "float32") for v in (
            self.gamma, self.beta, self.moving_mean, self.moving_variance)]
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            x, gamma, beta, moving_mean, moving_variance, epsilon=self.epsilon,
            is_training=bool(training))
        if training:
            keep = self.momentum
            self.moving_mean.assign(keep * moving_mean + (1 - keep) * mean)
            self.moving_variance.assign(keep * moving_variance + (1 - keep) * variance)
        return y


def resnet50_fused(size=224):
    """`resnet50` with every BatchNormalization layer replaced by `FusedBatchNorm`."""
    def swap(layer):
        if isinstance(layer, keras.layers.BatchNormalization):
            return FusedBatchNorm(**layer.get_config())
        return layer.__class__.from_config(layer.get_config())

    return keras.models.clone_model(resnet50(size), clone_function=swap)
