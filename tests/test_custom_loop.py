"""TensorFlow's distributed custom training loop (its tutorial's) under make_strategy.

The loop applies gradients with an Adam nobody built; Keras makes its slots in the first
traced step, which under MirroredStrategy fails (keras-team/keras#23085; Keras 3.16 makes
them there, but a checkpoint restored before the first step reaches one device's copy)
unless `compat.custom_loop` is in place. Under mirrored and multi_worker the loop must give the
weights the same loop gives on one device without a strategy, and its `tf.train.Checkpoint`
must resume to them.
"""

import inspect
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.optimizers.base_optimizer import BaseOptimizer

import mgpu_tf
from mgpu_tf.compat import custom_loop, patches, versions
from support import compare
from support import mw_custom_loop as loop
from support import tolerance
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


# ------------------------------------------------------------------ the upstream bug


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
