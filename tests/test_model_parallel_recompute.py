"""Re-materialisation: recomputed micro-batches train the same weights, on the same devices."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.planner import liveness
from support import models
from support import tolerance

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
MODES = ("never", "except_last", "always")
# 4 SGD steps of models.residual() on 12 rows: widths 8, 16, 16, 16 forward, 1, 16, 16
# back (support.tolerance). Against "never" the sums are the same but for the
# recomputed forward, which Grappler may fuse otherwise: one step's rounding.
FIT = tolerance.training(4, 8 + 16 * 3 + 1 + 16 * 2 + 12)
REPLAYED = tolerance.training(1, 8 + 16 * 3 + 1 + 16 * 2 + 12)


def _data(rows=24, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, 8)).astype("float32"), rng.normal(size=(rows, 1)).astype(
        "float32")


def _relative(got, want):
    """The largest difference over the largest value, per weight.

    A weight whose values are all below 0.01 is compared on that scale: a bias just
    before BatchNormalization gets a zero gradient in exact arithmetic, so it holds
    rounding noise, which differs between any two ways of computing it.
    """
    return max(float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 0.01))
               for g, w in zip(got, want))


def _with_dropout(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((8,)), keras.layers.Dense(16, activation="tanh", name="d0"),
        keras.layers.Dropout(0.4, name="drop"),
        keras.layers.Dense(16, activation="tanh", name="d1"),
        keras.layers.Dense(1, name="d2")])


def _fit(model, x, y, optimizer=None):
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)  # 4 steps
    return model


def test_recomputed_pipeline_trains_the_single_device_weights():
    x, y = _data()
    reference = _fit(models.residual(), x, y).get_weights()
    trained = {mode: _fit(mgpu_tf.ModelParallel(models.residual(), DEVICES[:2], microbatches=3,
                                                recompute=mode), x, y).get_weights()
               for mode in MODES}
    for mode in MODES:
        assert _relative(trained[mode], reference) < FIT, mode
        assert _relative(trained[mode], trained["never"]) < REPLAYED, mode


def test_fit_tolerance_rejects_a_wrong_update():
    x, y = _data()
    reference = _fit(models.residual(), x, y).get_weights()
    fast = _fit(models.residual(), x, y, keras.optimizers.SGD(0.101)).get_weights()
    short = models.residual()  # three steps: the first epoch, then the first batch
    short.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    short.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
    short.fit(x[:12], y[:12], batch_size=12, epochs=1, shuffle=False, verbose=0)
    wrong = {"learning rate 1% high": fast, "one step missing": short.get_weights()}
    for bound in (FIT, REPLAYED):
        assert tolerance.rejects(bound, reference, wrong, _relative) == []


def test_recomputed_dropout_draws_the_masks_of_the_forward_pass():
    x, y = _data()
    trained, seeds = {}, {}
    for mode in MODES:
        model = _fit(mgpu_tf.ModelParallel(_with_dropout(), DEVICES[:2], microbatches=3,
                                           recompute=mode), x, y)
        trained[mode] = model.get_weights()
        seeds[mode] = [v.numpy().tolist() for v in model.model.variables if not v.trainable]
    # Other masks move the weights by far more than rounding does.
    other = mgpu_tf.ModelParallel(_with_dropout(), DEVICES[:2], microbatches=3)
    for state in (v for v in other.model.variables if not v.trainable):
        state.assign(state + 1)
    assert _relative(_fit(other, x, y).get_weights(), trained["never"]) > 1e-3
    for mode in MODES:
        assert _relative(trained[mode], trained["never"]) < REPLAYED, mode
        assert seeds[mode] == seeds["never"], mode  # each draw advanced the seed once


def test_recomputed_batch_norm_updates_its_moving_statistics_once():
    x, y = _data()
    reference = _fit(models.with_batch_norm(), x, y)
    model = _fit(mgpu_tf.ModelParallel(models.with_batch_norm(), DEVICES[:2], microbatches=1,
                                       recompute="always"), x, y)
    bn, want = model.model.get_layer("bn"), reference.get_layer("bn")
    for got, expected in ((bn.moving_mean, want.moving_mean),
                          (bn.moving_variance, want.moving_variance)):
        assert _relative([got.numpy()], [expected.numpy()]) < REPLAYED
    assert _relative(model.get_weights(), reference.get_weights()) < FIT


def test_make_strategy_passes_recompute_through():
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2, microbatches=4,
                                     recompute="EXCEPT_LAST")
    model = mgpu_tf.prepare_model(models.mlp(), strategy)
    assert model.recompute == "except_last"
    assert "recompute='except_last'" in repr(strategy)


@pytest.mark.parametrize("value, error, message", [
    ("sometimes", ValueError, r"`recompute` must be one of never, except_last, always\. "
                              r"Received: recompute='sometimes'"),
    (True, TypeError, r"`recompute` must be one of 'never', 'except_last', 'always'\. "
                      r"Received: recompute=True"),
])
def test_bad_recompute(value, error, message):
    with pytest.raises(error, match=message):
        mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], recompute=value)
    with pytest.raises(error, match=message):
        mgpu_tf.make_strategy("model_parallel", devices=2, recompute=value)


def _allocator_peak(model, x, y):
    """Bytes the allocator's peak rises above its use before one traced step.

    None where TensorFlow's CPU allocator keeps no statistics (its default allocator,
    without oneDNN's, as on CPUs without AVX-512): `_saved_bytes` measures there.
    """
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.train_on_batch(x, y)  # traces, builds the optimizer
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
    except ValueError:
        return None
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    model.train_on_batch(x, y)
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


def _saved_bytes(model, x):
    """Bytes the traced step keeps from its forward pass for its backward pass.

    The planner's liveness walk of the step's graph, in the order its data and control
    dependencies allow: a recomputation waits for the backward work before it.
    """
    spec = tf.TensorSpec(x.shape, x.dtype)
    return liveness.segment_memory(model, spec, tf.TensorSpec((x.shape[0], 1))).saved


def test_except_last_keeps_a_fraction_of_the_activations():
    rows, width = 4096, 128
    x = np.ones((rows, width), "float32")
    y = np.ones((rows, 1), "float32")
    pipelines = {mode: mgpu_tf.ModelParallel(
        models.mlp((width,) * 8 + (1,), inputs=width), DEVICES[:1], microbatches=8,
        recompute=mode) for mode in ("never", "except_last")}
    activations = rows * width * 4 * 8  # at least one kept tensor per hidden layer
    saved = {mode: _saved_bytes(model, x) for mode, model in pipelines.items()}
    assert saved["never"] > activations, saved
    # The last micro-batch's share of them, and the stage's input of the seven others.
    assert saved["except_last"] <= saved["never"] / 8 + rows * width * 4, saved
    peaks = {mode: _allocator_peak(model, x, y) for mode, model in pipelines.items()}
    if None not in peaks.values():
        assert peaks["never"] > activations, peaks
        assert peaks["except_last"] < 0.5 * peaks["never"], peaks
