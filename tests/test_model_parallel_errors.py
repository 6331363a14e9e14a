"""Bad input to ModelParallel and the model_parallel strategy fails at once, clearly."""

import keras
import pytest

import mgpu_tf
from support import models

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def test_more_stages_than_layers():
    with pytest.raises(ValueError, match=r"There are more stages \(3, one per device\) than "
                                         r"layers \(2\)"):
        mgpu_tf.ModelParallel(models.mlp((4, 1)), DEVICES[:3])


def test_device_that_does_not_exist_lists_the_ones_that_do():
    with pytest.raises(ValueError, match=r"`devices` names 'CPU:9', which does not exist\. "
                                         r"Devices here: /device:CPU:0, /device:CPU:1, "
                                         r"/device:CPU:2, /device:CPU:3"):
        mgpu_tf.ModelParallel(models.mlp(), ["CPU:0", "CPU:9"])


def test_device_named_twice():
    with pytest.raises(ValueError, match="`devices` names a device twice"):
        mgpu_tf.ModelParallel(models.mlp(), ["CPU:1", "/device:CPU:1"])


@pytest.mark.parametrize("counts", [[1, 1], [2, 3], [4]])
def test_explicit_balance_must_add_up_to_the_layers(counts):
    with pytest.raises(ValueError, match=r"`balance` must give a layer count for each of the 2 "
                                         r"stages, adding up to the model's 4 layers"):
        mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], balance=counts)


@pytest.mark.parametrize("value, error, message", [
    ("fastest", ValueError, "`balance` must be one of uniform, params, time"),
    ([2, 0, 2], ValueError, "Each stage in `balance` needs at least one layer"),
    (2.5, TypeError, "`balance` must be 'uniform', 'params', 'time' or a list"),
])
def test_bad_balance(value, error, message):
    with pytest.raises(error, match=message):
        mgpu_tf.ModelParallel(models.mlp(), DEVICES[:3], balance=value)


@pytest.mark.parametrize("value, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError),
                                          ("4", TypeError), (True, TypeError)])
def test_bad_microbatches(value, error):
    with pytest.raises(error, match="`microbatches` must be"):
        mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=value)


def test_unbuilt_model_without_input_shape():
    model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="ModelParallel needs a built model"):
        mgpu_tf.ModelParallel(model, DEVICES[:2])


def test_unbuilt_model_is_built_from_input_shape():
    model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])
    wrapped = mgpu_tf.ModelParallel(model, DEVICES[:2], input_shape=(None, 3))
    assert [len(s.layers) for s in wrapped.plan] == [1, 1]


def test_model_that_cannot_be_built():
    model = keras.Sequential([keras.layers.Dense(4), keras.layers.Reshape((3, 5))])
    with pytest.raises(ValueError, match=r"ModelParallel could not build the model with "
                                         r"input_shape=\(None, 3\)"):
        mgpu_tf.ModelParallel(model, DEVICES[:2], input_shape=(None, 3))


def test_subclassed_model_is_refused():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    model = Net()
    model(keras.ops.zeros((1, 3)))
    with pytest.raises(TypeError, match="ModelParallel cuts Sequential and functional"):
        mgpu_tf.ModelParallel(model, DEVICES[:2])


def test_batch_norm_with_microbatches_is_refused():
    with pytest.raises(ValueError, match=r"Batch-coupled layers compute statistics over the "
                                         r"whole batch.*'bn'.*Pass deferred_batch_norm=True"):
        mgpu_tf.ModelParallel(models.with_batch_norm(), DEVICES[:2], microbatches=2)


def test_many_batch_norm_layers_are_counted_not_listed():
    # A ResNet has dozens: the refusal gives their number, the first few, and the fix.
    layers = [keras.Input((4,))]
    for i in range(52):
        layers += [keras.layers.Dense(4, name=f"dense_{i}"),
                   keras.layers.BatchNormalization(name=f"bn_{i}")]
    with pytest.raises(ValueError) as refused:
        mgpu_tf.ModelParallel(keras.Sequential(layers), DEVICES[:2], microbatches=2)
    message = str(refused.value)
    assert "microbatches=2 with 52 BatchNormalization layers ('bn_0', 'bn_1', 'bn_2', ...)" in (
        message), message
    assert "'bn_3'" not in message and "Pass deferred_batch_norm=True" in message, message
    assert len(message) < 600, message


def test_batch_norm_without_microbatches_is_accepted():
    model = mgpu_tf.ModelParallel(models.with_batch_norm(), DEVICES[:2], microbatches=1)
    assert sum(len(s.layers) for s in model.plan) == 3


def test_not_a_model():
    with pytest.raises(TypeError, match="`model` must be a Keras model"):
        mgpu_tf.ModelParallel(keras.layers.Dense(2), DEVICES[:2])


@pytest.mark.parametrize("options, error, message", [
    ({"microbatches": 0}, ValueError, "`microbatches` must be at least 1"),
    ({"balance": "even"}, ValueError, "`balance` must be one of"),
    ({"devices": ["CPU:7"]}, ValueError, "`devices` names 'CPU:7', which does not exist"),
    ({"num_gpus": 1}, ValueError, "`num_gpus` does not apply to strategy 'model_parallel'"),
])
def test_make_strategy_checks_model_parallel_options(options, error, message):
    with pytest.raises(error, match=message):
        mgpu_tf.make_strategy("model_parallel", **options)


def test_model_parallel_options_do_not_apply_to_mirrored():
    with pytest.raises(ValueError, match="`microbatches` does not apply to strategy 'mirrored'"):
        mgpu_tf.make_strategy("mirrored", microbatches=2)


def test_balance_accepts_the_enum_and_any_case():
    from mgpu_tf.model_parallel import Balance

    strategy = mgpu_tf.make_strategy("model_parallel", devices=2, balance="UNIFORM")
    assert strategy.balance == Balance.UNIFORM == "uniform"
    assert "balance='uniform'" in repr(strategy)
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], balance=Balance.PARAMS)
    assert len(model.plan) == 2


def test_time_balance_needs_a_sample_when_the_input_shape_is_open():
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(10, 4),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="balance='time' times the layers on a sample batch"):
        mgpu_tf.ModelParallel(model, DEVICES[:2], balance="time")
