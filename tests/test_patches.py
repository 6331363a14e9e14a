"""Keras patches: installed in one place, each once, listed; optimizers keep Keras' code
unless their record asks otherwise."""

import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import accumulation
from mgpu_tf.comm import optimizer_step
from mgpu_tf.compat import metric_sums, patches, private


def test_installing_twice_changes_nothing():
    patches.install()
    first = {name: private.optimizer_class_method(name)
             for name in ("build", "apply", "_all_reduce_sum_gradients")}
    assert patches.install() == patches.installed()
    assert {name: private.optimizer_class_method(name) for name in first} == first
    # The metric fix is for Keras 3.8-3.9 only.
    fixes_metrics = metric_sums.metric_sum_fix_applies(keras.__version__)
    assert set(patches.installed()) == {"multi_worker", "steps", "optimizer", "compile",
                                         "shuffle", "fit", "custom_loop", "lazy_build",
                                         "step_loss",
                                         "replica_seeds", "metric_reads"} | (
        {"metric_sums"} if fixes_metrics else set()) | (
        # KerasHub's hook goes in only where KerasHub is imported (a test of this process may have).
        {"keras_hub"} if "keras_hub" in sys.modules else set())


def test_an_unknown_patch_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="`names` must be among multi_worker, steps, optimizer"):
        patches.install("speed")


def test_an_optimizer_with_an_empty_record_takes_keras_update():
    patches.install("optimizer")
    variable = keras.Variable(np.array([1.0, 2.0], "float32"))
    optimizer = keras.optimizers.SGD(0.5)
    optimizer.apply([tf.constant([0.2, -0.4])], [variable])
    np.testing.assert_allclose(variable.numpy(), [0.9, 2.2], rtol=1e-6)
    assert optimizer_step.find(optimizer) is None


def test_accumulation_leaves_the_optimizers_own_methods_alone():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        optimizer = keras.optimizers.SGD(0.1)
    accumulation.accumulate(optimizer, strategy, 2)
    assert not {"build", "apply"} & set(vars(optimizer))
    assert optimizer_step.find(optimizer).accumulation is not None


def test_compile_readies_the_optimizer_only_under_a_strategy_with_communication_options():
    plain = mgpu_tf.make_strategy("mirrored", devices=2)
    summing = mgpu_tf.make_strategy("mirrored", devices=2, steps_per_sync=3)
    for strategy, expected in ((plain, None), (summing, 3)):
        with strategy.scope():
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
        record = optimizer_step.hook_of(model.optimizer)
        assert (record.accumulation and record.accumulation.steps) == expected


def test_a_saved_model_is_compiled_again_when_loaded_with_compile_patched(tmp_path):
    # Keras restores a model's compile config only when its class keeps Trainer.compile.
    patches.install("compile")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.save(tmp_path / "model.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = keras.models.load_model(tmp_path / "model.keras")
    assert loaded.compiled and isinstance(loaded.optimizer, keras.optimizers.SGD)


def _trained_dense(x, y, data, strategy):
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(
            1, kernel_initializer=keras.initializers.Constant(0.5), bias_initializer="zeros")])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(data if data is not None else x, None if data is not None else y,
              batch_size=None if data is not None else 8, epochs=2, shuffle=False, verbose=0)
    return [w.numpy() for w in model.weights]


# Its size is unknown to Keras, which ends the first epoch at the data's end and says so.
@pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning")
def test_fit_takes_a_data_set_from_distribute_datasets_from_function():
    # Keras 3.8 refused one ("Unrecognized data type"); the data hook gives it Keras 3.9's test.
    x = np.linspace(-1.0, 1.0, 32, dtype="float32").reshape(16, 2)
    y = (x @ np.array([[2.0], [-1.0]], "float32") + 0.5).astype("float32")
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    # One input pipeline: replica 0 takes the first 4 examples of each 8, replica 1 the next 4.
    data = strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensor_slices((x, y)).batch(
            context.get_per_replica_batch_size(8)))
    expected = _trained_dense(x, y, None, tf.distribute.get_strategy())
    for got, want in zip(_trained_dense(x, y, data, strategy), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
