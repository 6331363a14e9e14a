"""TensorFlow's distributed custom training loop (its tutorial's) under make_strategy.

The loop applies gradients with an Adam nobody built; Keras makes its slots in the first
traced step, which under MirroredStrategy fails (keras-team/keras#23085; Keras 3.16 makes
them there, but a checkpoint restored before the first step reaches one device's copy)
unless `compat.custom_loop` is in place; the tutorial's model, a Sequential without an Input,
fails the same way at its first call unless `compat.lazy_build` is. Under mirrored and
multi_worker the loop must give the weights the same loop gives on one device without a
strategy, and its `tf.train.Checkpoint` must resume to them.
"""

import inspect
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.optimizers.base_optimizer import BaseOptimizer

import mgpu_tf
from mgpu_tf.compat import custom_loop, lazy_build, patches, versions
from support import compare
from support import mw_custom_loop as loop
from support import tolerance
from support import tutorial_loop
from support import workers

TOLERANCE = tolerance.training(loop.STEPS, loop.TERMS + loop.GLOBAL_BATCH, optimizer="adam")

in_range = pytest.mark.skipif(
    not custom_loop.custom_loop_fix_applies(keras.__version__),
    reason=f"the fix is not applied to Keras {keras.__version__}")


@pytest.fixture(scope="module")
def problem():
    return loop.problem()


@pytest.fixture(scope="module")
def reference(problem):
    """`(weights, losses, accuracy)` of the loop on one device, without a strategy.

    Its optimizer is built before the first step, eagerly, as Keras' own code would.
    """
    x, y, weights = problem
    single = loop.Loop(tf.distribute.get_strategy(), weights)
    single.optimizer.build(single.model.trainable_variables)
    losses = single.train(loop.global_batches(x, y))
    trained = single.model.get_weights()
    assert compare.relative_difference(trained, weights) > 1e-3, "the reference did not train"
    return trained, losses, float(single.accuracy.result())


@pytest.fixture
def keras_own_build(monkeypatch):
    """Puts Keras' own `Layer._maybe_build` back for one test."""
    monkeypatch.setattr(keras.layers.Layer, "_maybe_build",
                        inspect.unwrap(keras.layers.Layer._maybe_build))
    monkeypatch.setattr(versions, "_logged", set())


@pytest.fixture
def keras_own_apply(monkeypatch):
    """Puts Keras' own `apply` back for one test; the patches (if any) return after it."""
    monkeypatch.setattr(BaseOptimizer, "apply", inspect.unwrap(BaseOptimizer.apply))
    monkeypatch.setattr(versions, "_logged", set())


@pytest.mark.parametrize("devices", [2, 4])
def test_mirrored_loop_matches_one_device(problem, reference, devices):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices)
    run = loop.Loop(strategy, weights)
    losses = run.train(loop.global_batches(x, y))
    expected, expected_losses, expected_accuracy = reference
    assert compare.relative_difference(run.model.get_weights(), expected) < TOLERANCE
    np.testing.assert_allclose(losses, expected_losses, rtol=TOLERANCE)
    assert float(run.accuracy.result()) == expected_accuracy
    # Adam's step, learning rate and two moments for each weight, a copy on each device.
    assert len(run.optimizer.variables) == 2 + 2 * len(weights)
    assert all(len(strategy.experimental_local_results(v.value)) == devices
               for v in run.optimizer.variables)


def test_mirrored_checkpoint_resumes_to_the_uninterrupted_weights(problem, reference, tmp_path):
    x, y, weights = problem
    half = loop.STEPS // 2 * loop.GLOBAL_BATCH
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    first = loop.Loop(strategy, weights)
    first.train(loop.global_batches(x[:half], y[:half]))
    path = first.checkpoint.save(tmp_path / "ckpt")
    saved = dict(tf.train.list_variables(path))
    moments = [name for name in saved if name.startswith("optimizer/_variables/")]
    assert len(moments) == 2 * len(weights), sorted(saved)  # Adam's two for each weight

    resumed = loop.Loop(strategy, [np.zeros_like(w) for w in weights])
    resumed.checkpoint.restore(path).assert_existing_objects_matched()
    resumed.train(loop.global_batches(x[half:], y[half:]))
    assert int(resumed.optimizer.iterations.numpy()) == loop.STEPS
    assert compare.relative_difference(resumed.model.get_weights(), reference[0]) < TOLERANCE


@pytest.mark.multiworker
def test_multi_worker_loop_matches_one_device(problem, reference, tmp_path):
    x, y, weights = problem
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=y, **{f"w{i}": w for i, w in enumerate(weights)})
    code, outputs = workers.run_workers("-m", 2, "support.mw_custom_loop", data, tmp_path)
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')}"
    expected, expected_losses, _ = reference
    for index in (0, 1):
        assert f"worker {index} of 2 replicas: done" in outputs[index]
        trained = compare.saved_weights(tmp_path / f"worker{index}.npz")
        assert compare.relative_difference(trained, expected) < TOLERANCE, f"worker {index}"
        [line] = [line for line in outputs[index].splitlines() if line.startswith("losses: ")]
        losses = [float(v) for v in line.split()[1:]]
        np.testing.assert_allclose(losses, expected_losses, rtol=TOLERANCE)


def test_the_tutorial_verbatim_trains_to_the_one_device_reference():
    # Its model is built at its first call inside strategy.run, its Adam at its first step.
    expected_losses, expected, expected_accuracy = tutorial_loop.train(tf.distribute.get_strategy())
    losses, weights, accuracy = tutorial_loop.train(mgpu_tf.make_strategy("mirrored", devices=2))
    bound = tolerance.training(tutorial_loop.STEPS,
                               tutorial_loop.TERMS + tutorial_loop.GLOBAL_BATCH_SIZE,
                               optimizer="adam")
    assert compare.relative_difference(weights, expected) < bound
    np.testing.assert_allclose(losses, expected_losses, rtol=bound)
    assert accuracy == expected_accuracy


# ------------------------------------------------------------------ the upstream bug


def _first_call_inside_run(strategy):
    """One SGD step of a Sequential without an Input, first called inside `strategy.run`."""
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(2)])
        optimizer = keras.optimizers.SGD(0.1)

    def replica_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    @tf.function
    def step(x):
        return strategy.run(replica_step, args=(x,))

    return step(tf.ones((2, 3)))


def test_keras_own_lazy_build_fails_exactly_in_the_fixed_releases(keras_own_build):
    custom_loop.apply_custom_loop_fix()  # the optimizer half fixed: only the model's build fails
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    try:
        _first_call_inside_run(strategy)
    except tf.errors.InvalidArgumentError as error:
        assert "You must feed a value for placeholder tensor" in str(error)
        assert lazy_build.lazy_build_fix_applies(keras.__version__), (
            f"Keras {keras.__version__} still builds a layer inside the replica's trace but is "
            "outside lazy_build.KERAS_LAZY_BUILD_VERSIONS: widen the range in "
            "mgpu_tf/compat/lazy_build.py.")
    else:
        assert not lazy_build.lazy_build_fix_applies(keras.__version__), (
            f"Keras {keras.__version__} builds a layer inside strategy.run on its own: end "
            "lazy_build.KERAS_LAZY_BUILD_VERSIONS before it in mgpu_tf/compat/lazy_build.py.")


def _keras_own_loop_fails(problem, tmp_path):
    """How Keras' own optimizer fares in the loop under MirroredStrategy: the error of its
    first step, or, when it trains, whether a checkpoint restored before the first step
    reaches each device's copy of the optimizer's slots."""
    x, y, weights = problem
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    run = loop.Loop(strategy, weights)
    try:
        run.train(loop.global_batches(x, y))
    except tf.errors.InvalidArgumentError as error:
        assert "You must feed a value for placeholder tensor" in str(error)
        return "keras-team/keras#23085"
    path = run.checkpoint.save(tmp_path / "ckpt")
    saved = run.optimizer.variables[-1].numpy()
    resumed = loop.Loop(strategy, weights)
    resumed.checkpoint.restore(path)

    @tf.function
    def build():  # built by its first use inside a replica's trace, as in a step
        strategy.run(lambda: resumed.optimizer.build(resumed.model.trainable_variables))

    build()
    copies = strategy.experimental_local_results(resumed.optimizer.variables[-1].value)
    if not all(np.array_equal(copy.numpy(), saved) for copy in copies):
        return "a restored checkpoint reaches one device's copy"
    return None


def test_keras_own_code_fails_exactly_in_the_fixed_releases(problem, keras_own_apply, tmp_path):
    # Up to Keras 3.15 the first step fails (keras-team/keras#23085); 3.16 makes the
    # variables under tf.init_scope in the trace (keras-team/keras#23087), where a pending
    # checkpoint restore reaches only the first device's copy of each slot.
    failure = _keras_own_loop_fails(problem, tmp_path)
    applies = custom_loop.custom_loop_fix_applies(keras.__version__)
    if failure is not None:
        assert applies, (
            f"Keras {keras.__version__} still fails the loop ({failure}) but is outside "
            "custom_loop.KERAS_23085_VERSIONS: widen the range in mgpu_tf/compat/custom_loop.py.")
    else:
        assert not applies, (
            f"Keras {keras.__version__} trains the loop and restores every device's copy: end "
            "custom_loop.KERAS_23085_VERSIONS before it in mgpu_tf/compat/custom_loop.py.")


# ------------------------------------------------------------------ the version guard


@pytest.mark.parametrize("version, applies", [
    ("3.0.0", True), ("3.8.0", True), ("3.15.1", True), ("3.16.0.dev2026102704", True),
    ("2.15.0", False), ("3.17.0", False)])
def test_version_range(version, applies):
    assert custom_loop.custom_loop_fix_applies(version) is applies


@pytest.mark.parametrize("version, error", [("three", ValueError), (3.15, TypeError)])
def test_version_must_be_a_version_string(version, error):
    with pytest.raises(error, match="`keras_version` must"):
        custom_loop.apply_custom_loop_fix(keras_version=version)


@pytest.mark.parametrize("version", ["2.15.0", "3.17.0"])
def test_outside_range_changes_nothing(keras_own_apply, caplog, version):
    before = BaseOptimizer.apply
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        assert custom_loop.apply_custom_loop_fix(keras_version=version) is False
    assert BaseOptimizer.apply is before
    assert not custom_loop.installed()
    assert [r.getMessage() for r in caplog.records] == [
        "mgpu_tf: not patching Keras for keras-team/keras#23085: "
        f"Keras {version} is outside 3.0-3.16, the versions it is for."]


@in_range
def test_making_a_mirrored_strategy_installs_it_once(keras_own_apply):
    original = BaseOptimizer.apply
    assert not custom_loop.installed()
    mgpu_tf.make_strategy("mirrored", devices=2)
    patched = BaseOptimizer.apply
    mgpu_tf.make_strategy("mirrored", devices=2)
    assert BaseOptimizer.apply is patched is not original
    assert inspect.unwrap(patched) is original
    assert "custom_loop" in patches.installed()


@pytest.mark.parametrize("version", ["2.15.0", "3.17.0"])
def test_lazy_build_outside_range_changes_nothing(keras_own_build, caplog, version):
    before = keras.layers.Layer._maybe_build
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        assert lazy_build.apply_lazy_build_fix(keras_version=version) is False
    assert keras.layers.Layer._maybe_build is before
    assert not lazy_build.installed()
    assert [r.getMessage() for r in caplog.records] == [
        "mgpu_tf: not patching Keras for layers built inside strategy.run: "
        f"Keras {version} is outside 3.0-3.16, the versions it is for."]


def test_making_a_mirrored_strategy_installs_the_lazy_build_fix(keras_own_build):
    original = keras.layers.Layer._maybe_build
    assert not lazy_build.installed()
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    _first_call_inside_run(strategy)  # as in Keras' own failure above, now built and run
    assert inspect.unwrap(keras.layers.Layer._maybe_build) is original
    assert lazy_build.installed() is lazy_build.lazy_build_fix_applies(keras.__version__)
    assert ("lazy_build" in patches.installed()) is lazy_build.installed()
