"""Deferred batch normalisation: per-micro-batch statistics, one moving update per step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare
from support import tolerance

DEVICES = ["CPU:0", "CPU:1"]
# The sums behind a gradient of _bn_first() on 10 rows: widths 6, 12, 12 forward, 1, 12
# back, the batch (support.tolerance); statistics are sums over the batch's rows.
TERMS = 6 + 12 + 12 + 1 + 12 + 10
STEP = tolerance.training(1, TERMS)
FIT = tolerance.training(3, TERMS)


def _relative(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _bn_first(seed=0):
    """BatchNorm on the inputs (its statistics do not depend on training), and one deeper."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((6,)), keras.layers.BatchNormalization(momentum=0.8, name="bn_in"),
        keras.layers.Dense(12, activation="tanh", name="d0"),
        keras.layers.BatchNormalization(momentum=0.8, name="bn_deep"),
        keras.layers.Dense(1, name="d1")])


def _data(rows, seed=1):
    rng = np.random.default_rng(seed)
    # Rows of different scales, so each micro-batch's statistics differ from the batch's.
    x = rng.normal(size=(rows, 6)) * np.linspace(0.5, 4, rows)[:, None] + 2
    return x.astype("float32"), rng.normal(size=(rows, 1)).astype("float32")


@pytest.mark.parametrize("recompute", ["never", "except_last"])
def test_moving_statistics_follow_the_unsplit_model_over_steps(recompute):
    x, y = _data(30)  # batches of 10 in micro-batches of 3, 3, 3 and 1 rows
    reference = _bn_first()
    model = mgpu_tf.ModelParallel(_bn_first(), DEVICES, balance=[2, 2], microbatches=4,
                                  deferred_batch_norm=True, recompute=recompute)
    for m in (reference, model):
        m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        m.fit(x, y, batch_size=10, epochs=1, shuffle=False, verbose=0)  # 3 steps
    got, want = model.model.get_layer("bn_in"), reference.get_layer("bn_in")
    assert _relative(got.moving_mean.numpy(), want.moving_mean.numpy()) < FIT
    assert _relative(got.moving_variance.numpy(), want.moving_variance.numpy()) < FIT
    # Inference normalises with the moving statistics, as the unwrapped model does.
    assert _relative(model(x[:13]).numpy(), model.model(x[:13], training=False).numpy()) < STEP
    # Averaging the micro-batch variances, or updating once per micro-batch, is far off.
    mean_of_variances = np.mean([np.var(p, 0) for p in np.array_split(x[:10], [3, 6, 9])], 0)
    assert _relative(mean_of_variances, np.var(x[:10], 0)) > 0.05


def test_each_microbatch_is_normalised_with_its_own_statistics():
    x, y = _data(10)
    model = mgpu_tf.ModelParallel(_bn_first(), DEVICES, balance=[2, 2], microbatches=4,
                                  deferred_batch_norm=True)
    reference = _bn_first()  # the same initial weights, unsplit
    pieces = np.array_split(x, [3, 6, 9])
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    got = tape.gradient(loss, model.trainable_variables)
    with tf.GradientTape() as tape:
        out = tf.concat([reference(p, training=True) for p in pieces], 0)
        want_loss = tf.reduce_mean(tf.square(out - y))
    want = tape.gradient(want_loss, reference.trainable_variables)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=STEP)
    # On the model's scale: the bias before bn_deep has a zero gradient in exact
    # arithmetic, so its elements hold rounding only.
    assert compare.relative_difference(got, want) < STEP
    # One update from the whole batch: the deeper layer's input, micro-batch by micro-batch.
    below = keras.Sequential(_bn_first().layers[:2])  # bn_in and d0, initial weights
    inputs = np.concatenate([below(p, training=True).numpy() for p in pieces])
    bn = model.model.get_layer("bn_deep")
    assert _relative(bn.moving_mean.numpy(), 0.2 * inputs.mean(0)) < STEP
    assert _relative(bn.moving_variance.numpy(), 0.8 + 0.2 * inputs.var(0)) < STEP


def test_options_pass_through_make_strategy():
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2, microbatches=4,
                                     deferred_batch_norm=True)
    model = mgpu_tf.prepare_model(_bn_first(), strategy)
    assert model.deferred_batch_norm
    with pytest.raises(TypeError, match=r"`deferred_batch_norm` must be True or False\. "
                                        r"Received: deferred_batch_norm='yes'"):
        mgpu_tf.make_strategy("model_parallel", devices=2, deferred_batch_norm="yes")


def test_renorm_and_xla_are_refused():
    keras.utils.set_random_seed(0)
    renorm = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="d"),
                               keras.layers.BatchNormalization(renorm=True, name="rn"),
                               keras.layers.Dense(1, name="o")])
    with pytest.raises(ValueError, match=r"deferred_batch_norm=True cannot defer batch "
                                         r"renormalization.*\['rn'\]"):
        mgpu_tf.ModelParallel(renorm, DEVICES, microbatches=2, deferred_batch_norm=True)
    model = mgpu_tf.ModelParallel(_bn_first(), DEVICES, microbatches=2, deferred_batch_norm=True)
    with pytest.raises(ValueError, match=r"deferred_batch_norm=True records .* Received: "
                                         r"jit_compile=True"):
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
