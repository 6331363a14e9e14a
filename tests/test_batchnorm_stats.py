"""BatchNormalization's moving statistics under data parallelism: the same on every replica
and worker, what `evaluate` measured and what is saved; `sync_batch_norm` trains as one device."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import batch_norm_problem as problem
from support import compare, tolerance, workers

# A loss over the 64 examples of the problem, computed in another order.
_EVALUATE_BOUND = tolerance.training(1, problem.TERMS + 4 * problem.GLOBAL_BATCH)
_STATISTICS_BOUND = tolerance.training(problem.EPOCHS * problem.STEPS, problem.TERMS)
_TRAINING_BOUND = tolerance.training(problem.EPOCHS * problem.STEPS,
                                     problem.TERMS + problem.GLOBAL_BATCH)


def _batches(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(problem.GLOBAL_BATCH)


def _fit(strategy, **build):
    x, y = problem.data()
    with strategy.scope():
        model = problem.build(**build)
    model.fit(_batches(x, y), epochs=problem.EPOCHS, shuffle=False, verbose=0)
    return model


def _one_device_loss(weights):
    """The loss of a model with `weights` on the whole data, on one device."""
    model = problem.build()
    model.set_weights(weights)
    x, y = problem.data()
    return model.evaluate(_batches(x, y), verbose=0)


@pytest.fixture(scope="module")
def mirrored():
    """`(strategy, model)`: the problem trained under mirrored x 2, its first layer frozen."""
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    return strategy, _fit(strategy, frozen_first=True)


def test_mirrored_replicas_hold_the_same_moving_statistics(mirrored):
    strategy, model = mirrored
    bn = model.get_layer("bn")
    for variable in (bn.moving_mean, bn.moving_variance):
        first, second = (c.numpy() for c in strategy.experimental_local_results(variable.value))
        np.testing.assert_array_equal(first, second, err_msg=variable.path)


def test_mirrored_moving_statistics_are_the_replicas_mean(mirrored):
    _, model = mirrored
    bn = model.get_layer("bn")
    d0 = model.get_layer("d0")
    expected = problem.averaged_statistics(problem.data()[0], d0.kernel.numpy(), d0.bias.numpy())
    got = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
    assert compare.relative_difference(got, expected) <= _STATISTICS_BOUND


def test_mirrored_evaluate_measures_the_saved_model(mirrored, tmp_path):
    _, model = mirrored
    x, y = problem.data()
    measured = model.evaluate(_batches(x, y), verbose=0)
    model.save(tmp_path / "model.keras")
    saved = keras.models.load_model(tmp_path / "model.keras")
    assert abs(_one_device_loss(saved.get_weights()) - measured) <= _EVALUATE_BOUND * measured


def test_sync_batch_norm_trains_as_one_device_on_the_global_batch():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, sync_batch_norm=True)
    model = _fit(strategy)
    assert model.get_layer("bn").synchronized  # compile switched it
    reference = _fit(tf.distribute.get_strategy())
    assert compare.relative_difference(model.get_weights(),
                                       reference.get_weights()) <= _TRAINING_BOUND


def test_prepare_model_synchronizes_a_model_compiled_before():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, sync_batch_norm=True)
    plain = mgpu_tf.make_strategy("mirrored", devices=2)
    with plain.scope():
        model = problem.build()
    assert not model.get_layer("bn").synchronized
    with strategy.scope():
        assert mgpu_tf.prepare_model(model, strategy).get_layer("bn").synchronized


def test_without_the_option_layers_stay_as_built():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        assert not mgpu_tf.prepare_model(problem.build(), strategy).get_layer("bn").synchronized


@pytest.mark.parametrize("kind, value, error, match", [
    ("mirrored", "yes", TypeError,
     "`sync_batch_norm` must be of type bool. Received: sync_batch_norm='yes'"),
    ("one_device", True, ValueError,
     "`sync_batch_norm` does not apply to strategy 'one_device'; it applies to "),
])
def test_sync_batch_norm_is_checked_when_the_strategy_is_made(kind, value, error, match):
    with pytest.raises(error, match=f"^{match}"):
        mgpu_tf.make_strategy(kind, sync_batch_norm=value)


# ------------------------------------------------------------------ real workers


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """Runs support/mw_batch_norm.py as two workers once: (exit code, {index: lines}, out dir)."""
    out = tmp_path_factory.mktemp("mw_batch_norm")
    code, outputs = workers.run_workers("-m", 2, "support.mw_batch_norm", out)
    return code, {i: text.splitlines() for i, text in outputs.items()}, out


def _finding(lines, name):
    found = [line.split(": ", 1)[1] for line in lines if line.startswith(name + ": ")]
    return found[-1] if found else None


def _floats(lines, name):
    return np.array([float(v) for v in _finding(lines, name).split()])


@pytest.mark.multiworker
def test_two_workers_hold_the_same_moving_statistics(two_workers):
    code, outputs, _ = two_workers
    assert code == 0, "\n".join(outputs.get(0, []))
    assert _finding(outputs[0], "statistics") == _finding(outputs[1], "statistics")


@pytest.mark.multiworker
def test_two_workers_moving_statistics_are_the_workers_mean(two_workers):
    _, outputs, out = two_workers
    weights = compare.saved_weights(out / "frozen.npz")
    expected = problem.averaged_statistics(problem.data()[0], weights[0], weights[1])
    got = np.split(_floats(outputs[0], "statistics"), 2)
    assert compare.relative_difference(got, expected) <= _STATISTICS_BOUND


@pytest.mark.multiworker
def test_two_workers_evaluate_measures_the_chiefs_saved_model(two_workers):
    _, outputs, out = two_workers
    measured = [float(_finding(lines, "evaluate")) for lines in outputs.values()]
    saved = _one_device_loss(compare.saved_weights(out / "frozen.npz"))
    for loss in measured:
        assert abs(saved - loss) <= _EVALUATE_BOUND * saved, (saved, measured)


@pytest.mark.multiworker
def test_two_workers_synchronized_train_as_one_device_on_the_global_batch(two_workers):
    _, _, out = two_workers
    reference = _fit(tf.distribute.get_strategy())
    assert compare.relative_difference(compare.saved_weights(out / "synchronized.npz"),
                                       reference.get_weights()) <= _TRAINING_BOUND


class _Halves(keras.Model):
    """The problem's layers, its BatchNormalization applied to each half of the batch on its
    own: what two replicas of Keras' default layer compute, on one device."""

    def __init__(self, base):
        super().__init__(name="halves")
        self.d0, self.bn, self.d1 = (base.get_layer(n) for n in ("d0", "bn", "d1"))

    def call(self, x, training=False):
        h = self.d0(x)
        half = problem.GLOBAL_BATCH // 2
        parts = [self.bn(h[:half], training=training), self.bn(h[half:], training=training)]
        return self.d1(keras.ops.concatenate(parts, axis=0))


def _per_replica_reference():
    x, y = problem.data()
    model = _Halves(problem.build())
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(_batches(x, y), epochs=problem.EPOCHS, shuffle=False, verbose=0)
    return model


def test_keras_default_batch_norm_normalises_each_replica_and_says_so(caplog):
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with caplog.at_level("WARNING", logger="mgpu_tf"):
        model = _fit(strategy)
    said = [r.getMessage() for r in caplog.records if "sync_batch_norm=True" in r.getMessage()]
    assert len(said) == 1 and "(bn) over 2 replicas" in said[0], said
    reference = _per_replica_reference()
    trained = [v.numpy() for v in model.trainable_weights]
    expected = [v.numpy() for v in reference.trainable_weights]
    assert compare.relative_difference(trained, expected) <= _TRAINING_BOUND
    # The global batch's statistics (one device) are another training.
    whole = _fit(tf.distribute.get_strategy())
    assert compare.relative_difference(
        trained, [v.numpy() for v in whole.trainable_weights]) > 100 * _TRAINING_BOUND
