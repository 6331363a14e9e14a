"""Keras' TensorFlow train step, for the steps that cannot be Keras' own.

The XLA-compiled step of `keras_steps` and `HybridParallel`'s step each change Keras'
`train_step` (Keras 3.12-3.15) in one place; both run this one copy.

Design: docs/design.md#keras-speed-switches
"""

from mgpu_tf.compat import private, private_trainer

__all__ = ["forward_backward", "require", "train_step"]

_NAMES = ("Layer._call_has_training_arg", "Trainer._compute_loss", "Trainer._loss_tracker")


def require(model):
    """Checks now that `model` has the private names `train_step` reads."""
    private.require(model, *_NAMES, argument="model")


def forward_backward(model, x, y, sample_weight):
    """Keras' forward pass, loss and gradients for one batch: `(y_pred, loss, gradients)`.

    The gradients are of `model.trainable_weights`, of the loss as the optimizer scales it.
    """
    import tensorflow as tf

    with tf.GradientTape() as tape:
        y_pred = model(x, training=True) if private.call_has_training_arg(model) else model(x)
        loss = private_trainer.compute_loss(model, x, y, y_pred, sample_weight, True)
        scaled = model.optimizer.scale_loss(loss) if model.optimizer is not None else loss
    return y_pred, loss, tape.gradient(scaled, model.trainable_weights)


def train_step(model, data, *, forward=None, reduce=None):
    """Runs Keras' TensorFlow `train_step` of `model` on one batch.

    docs/api/compat.md has an example.

    Args:
        model: a compiled Keras model, checked by `require` when it was set up.
        data: the batch, as Keras' `train_step` takes it.
        forward: replaces `forward_backward(model, x, y, sample_weight)`, returning the
            same (an XLA-compiled one, say). Defaults to `forward_backward`.
        reduce: called as `reduce(gradients, loss)` before the update and the loss's log,
            returning both (averaged over workers, say). Defaults to none.

    Returns:
        The metrics' results, as Keras' `train_step` returns them.
    """
    import keras
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    if forward is None:
        y_pred, loss, gradients = forward_backward(model, x, y, sample_weight)
    else:
        y_pred, loss, gradients = forward(x, y, sample_weight)
    if reduce is not None:
        gradients, loss = reduce(gradients, loss)
    # Only a strategy's replicas have a loss divided by their number (Keras 3.8 on).
    if tf.distribute.has_strategy():
        # Python that reads Keras, run as it is: AutoGraph cannot convert the import inside.
        loss = tf.autograph.experimental.do_not_convert(private_trainer.unscale_loss)(loss)
    batch = next(i for i in keras.tree.flatten(x) if i is not None)
    private_trainer.loss_tracker(model).update_state(loss, sample_weight=tf.shape(batch)[0])
    model.optimizer.apply_gradients(zip(gradients, model.trainable_weights))
    return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
