"""shard_optimizer_state: training equals one device's, slots are cut per replica, checkpoints
are whole.

The reference is the same model trained without a strategy's replicas (one_device, unsharded
optimizer). Four logical CPU devices are the session's; two real workers run on loopback.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import sharded_state
from support import compare
from support import sharded_problem
from support import workers

# make_strategy refuses it before Keras 3.10 (test_compat_private checks the refusal).
pytestmark = pytest.mark.skipif(
    tuple(int(part) for part in keras.__version__.split(".")[:2]) < (3, 10),
    reason=f"shard_optimizer_state needs Keras 3.10 or later; Keras {keras.__version__} refuses it")

OPTIMIZERS = ("sgd", "adam", "adamw")
TOLERANCE = 1e-6


def _one_device():
    return mgpu_tf.make_strategy("one_device")


def _sharded(devices):
    return mgpu_tf.make_strategy("mirrored", devices=devices, shard_optimizer_state=True)


@pytest.fixture(scope="module")
def references():
    return {name: sharded_problem.train(_one_device(), name).get_weights()
            for name in OPTIMIZERS}


@pytest.fixture(scope="module")
def mirrored():
    strategy = _sharded(4)
    return strategy, {name: sharded_problem.train(strategy, name) for name in OPTIMIZERS}


# ------------------------------------------------------------------ the option's edge


def test_the_option_is_refused_where_it_does_not_apply():
    with pytest.raises(ValueError, match="`shard_optimizer_state` does not apply to strategy"):
        mgpu_tf.make_strategy("one_device", shard_optimizer_state=True)


def test_a_value_other_than_a_bool_is_refused():
    with pytest.raises(TypeError, match="`shard_optimizer_state` must be True or False"):
        mgpu_tf.make_strategy("mirrored", shard_optimizer_state="yes")


def test_an_optimizer_that_is_not_element_wise_is_refused_at_compile():
    strategy = _sharded(2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        with pytest.raises(ValueError, match="shard_optimizer_state needs an optimizer whose"):
            model.compile(keras.optimizers.Lamb(), "mse")


# ------------------------------------------------------------------ training


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_four_replicas_train_as_one_device(references, mirrored, name):
    _, models = mirrored
    assert sharded_state.is_sharded(models[name].optimizer)
    difference = compare.relative_difference(models[name].get_weights(), references[name])
    assert difference <= TOLERANCE, difference
    moved = compare.relative_difference(references[name],
                                        sharded_problem.build_model(name).get_weights())
    assert moved > 1e-3  # the steps changed the weights


def _train_with(strategy, **compile_options):
    x, y = sharded_problem.data()
    with strategy.scope():
        model = sharded_problem.build_model("adam")
        model.compile(model.optimizer, "mse", **compile_options)
    model.fit(sharded_problem.batches(x, y), epochs=1, shuffle=False, verbose=0)
    return model


def test_with_the_other_switches_it_trains_as_without_sharding():
    # No one-device reference takes float16 all-reduces: the reference is the same
    # options unsharded, whose update is Keras' own.
    options = {"compression": "float16", "steps_per_sync": 2}
    switches = {"jit_compile": True, "steps_per_execution": 2}
    sharded = _train_with(mgpu_tf.make_strategy("mirrored", devices=4, shard_optimizer_state=True,
                                                 **options), **switches)
    whole = _train_with(mgpu_tf.make_strategy("mirrored", devices=4, **options), **switches)
    assert sharded_state.is_sharded(sharded.optimizer)
    assert compare.relative_difference(sharded.get_weights(), whole.get_weights()) <= TOLERANCE


def test_under_mixed_precision_it_trains_as_without_sharding():
    # steps_per_sync without compression: the slices are reduced to their devices.
    options = {"precision": "mixed_float16", "steps_per_sync": 2}
    try:
        sharded = _train_with(_sharded_with(**options))
        whole = _train_with(mgpu_tf.make_strategy("mirrored", devices=4, **options))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")  # make_strategy set it process-wide
    inner = sharded.optimizer.inner_optimizer  # the LossScaleOptimizer's
    assert sharded_state.is_sharded(inner)
    assert compare.relative_difference(sharded.get_weights(), whole.get_weights()) <= TOLERANCE


def _sharded_with(**options):
    return mgpu_tf.make_strategy("mirrored", devices=4, shard_optimizer_state=True, **options)


def _slot_bytes_per_device(strategy, slots):
    per_device = {}
    for slot in slots:
        for part in strategy.experimental_local_results(slot.value):
            device = tf.DeviceSpec.from_string(part.device).to_string()
            per_device[device] = per_device.get(device, 0) + part.shape.num_elements() * 4
    return per_device


def test_each_device_holds_a_quarter_of_the_slots(mirrored):
    strategy, models = mirrored
    slots = sharded_state.slot_variables(models["adam"].optimizer)
    sharded = _slot_bytes_per_device(strategy, slots)
    unsharded_strategy = mgpu_tf.make_strategy("mirrored", devices=4)
    with unsharded_strategy.scope():
        model = sharded_problem.build_model("adam")
        model.optimizer.build(model.trainable_variables)
    whole = _slot_bytes_per_device(
        unsharded_strategy, [v for v in model.optimizer.variables
                             if v is not model.optimizer.iterations
                             and v is not model.optimizer.learning_rate])
    assert len(sharded) == 4 and sorted(sharded) == sorted(whole)
    kinds = 2  # Adam's momentum and velocity: each padded by under one number per slice
    for device, size in sharded.items():
        assert whole[device] == 2 * 66 * 4
        assert whole[device] / 4 <= size < whole[device] / 4 + kinds * 4, (device, size)


# ------------------------------------------------------------------ checkpoints


@pytest.fixture(scope="module")
def uninterrupted():
    return sharded_problem.train(_one_device(), "adamw", epochs=2).get_weights()


def _first_epoch(strategy, path):
    model = sharded_problem.train(strategy, "adamw")
    model.save_weights(path)
    return path


def _resumed(strategy, path):
    x, y = sharded_problem.data()
    with strategy.scope():
        model = sharded_problem.build_model("adamw")
        model.optimizer.build(model.trainable_variables)
    model.load_weights(path)
    model.fit(sharded_problem.batches(x, y), epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


@pytest.fixture(scope="module")
def sharded_checkpoint(tmp_path_factory):
    return _first_epoch(_sharded(4), tmp_path_factory.mktemp("ck") / "sharded.weights.h5")


@pytest.mark.parametrize("resume_on", ["one_device", "two_sharded"])
def test_a_sharded_checkpoint_resumes_elsewhere_as_if_uninterrupted(
        uninterrupted, sharded_checkpoint, resume_on):
    strategy = _one_device() if resume_on == "one_device" else _sharded(2)
    difference = compare.relative_difference(_resumed(strategy, sharded_checkpoint),
                                             uninterrupted)
    assert difference <= TOLERANCE, difference


def test_an_unsharded_checkpoint_resumes_sharded_as_if_uninterrupted(uninterrupted, tmp_path):
    path = _first_epoch(_one_device(), tmp_path / "whole.weights.h5")
    difference = compare.relative_difference(_resumed(_sharded(4), path), uninterrupted)
    assert difference <= TOLERANCE, difference


def _fit_with_backup(strategy, backup_dir, epochs):
    x, y = sharded_problem.data()
    with strategy.scope():
        model = sharded_problem.build_model("adamw")
        if epochs > 1:  # weights of its own: only what the backup restores can match
            model.set_weights([w * 0.5 for w in model.get_weights()])
    backup = mgpu_tf.callbacks.BackupAndRestore(str(backup_dir), delete_checkpoint=False)
    model.fit(sharded_problem.batches(x, y), epochs=epochs, shuffle=False, verbose=0,
              callbacks=[backup])
    return model.get_weights()


def test_backup_and_restore_resumes_on_another_replica_count(uninterrupted, tmp_path):
    _fit_with_backup(_sharded(4), tmp_path, epochs=1)
    resumed = _fit_with_backup(_sharded(2), tmp_path, epochs=2)
    difference = compare.relative_difference(resumed, uninterrupted)
    assert difference <= TOLERANCE, difference


# ------------------------------------------------------------------ two workers


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    out = tmp_path_factory.mktemp("mw_sharded")
    code, outputs = workers.run_workers("-m", 2, "support.mw_sharded", out)
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    return out


@pytest.fixture(scope="module")
def two_workers_tcp(tmp_path_factory):
    out = tmp_path_factory.mktemp("mw_sharded_tcp")
    code, outputs = workers.run_workers("-m", 2, "support.mw_sharded", out, "tcp")
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    return out


@pytest.mark.multiworker
@pytest.mark.parametrize("transport", ["tensorflow", "tcp"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_two_workers_train_as_one_device(request, references, transport, name):
    out = request.getfixturevalue("two_workers" if transport == "tensorflow" else "two_workers_tcp")
    for index in (0, 1):
        with np.load(out / f"worker{index}.npz") as saved:
            weights = [saved[f"{name}_{i}"] for i in range(len(references[name]))]
            assert list(saved[f"{name}_slot_sizes"]) == [33] * len(saved[f"{name}_slot_sizes"])
        difference = compare.relative_difference(weights, references[name])
        assert difference <= TOLERANCE, (index, difference)


@pytest.mark.multiworker
def test_two_workers_save_the_whole_state_that_one_device_resumes(two_workers):
    x, y = sharded_problem.data()
    expected = sharded_problem.train(_one_device(), "adam", epochs=2).get_weights()
    strategy = _one_device()
    with strategy.scope():
        model = sharded_problem.build_model("adam")
        model.optimizer.build(model.trainable_variables)
    model.load_weights(two_workers / "adam.weights.h5")
    assert int(model.optimizer.iterations.numpy()) == sharded_problem.STEPS
    model.fit(sharded_problem.batches(x, y), epochs=1, shuffle=False, verbose=0)
    difference = compare.relative_difference(model.get_weights(), expected)
    assert difference <= TOLERANCE, difference


def _saved(two_workers, index):
    with np.load(two_workers / f"worker{index}.npz") as saved:
        return dict(saved)


@pytest.mark.multiworker
def test_an_all_to_all_sends_row_j_to_replica_j(two_workers):
    # Replica r sends [10 r + j] to replica j: replica j receives [j, 10 + j], by rank.
    for index in (0, 1):
        received = _saved(two_workers, index)["exchanged"]
        np.testing.assert_array_equal(received, [[[index], [10 + index]]])


@pytest.mark.multiworker
@pytest.mark.parametrize("run", ["adam_sharded", "switches_sharded", "compressed_sharded"])
def test_two_workers_reduce_scatter_the_gradients_instead_of_all_reducing(two_workers, run):
    for index in (0, 1):
        saved = _saved(two_workers, index)
        assert saved[f"ops_{run}_CollectiveAllToAllV2"] == 1
        assert f"ops_{run}_CollectiveReduceV2" not in saved, saved.keys()
        # The same count sees the unsharded step's all-reduce of the gradients.
        assert saved["ops_switches_whole_CollectiveReduceV2"] >= 1
        assert "ops_switches_whole_CollectiveAllToAllV2" not in saved


@pytest.mark.multiworker
def test_over_tcp_both_halves_of_the_ring_replace_tensorflows_collectives(two_workers_tcp):
    for index in (0, 1):
        saved = _saved(two_workers_tcp, index)
        ops = {k.removeprefix("ops_adam_sharded_"): int(v) for k, v in saved.items()
               if k.startswith("ops_adam_sharded_")}
        # Two workers: one reduce step of the gradients, one gather step of the slices.
        assert ops == {"PyFunc": 2}, ops


@pytest.mark.multiworker
@pytest.mark.parametrize("variant", ["switches", "mixed", "compressed"])
def test_two_workers_with_other_options_train_as_without_sharding(two_workers, variant):
    # switches: steps_per_sync, jit_compile, steps_per_execution; mixed: mixed_float16 and
    # steps_per_sync; compressed: float16 all-to-all. Reference: the same unsharded.
    for index in (0, 1):
        saved = _saved(two_workers, index)
        count = len([k for k in saved if k.startswith(f"{variant}_whole_")])
        sharded = [saved[f"{variant}_sharded_{i}"] for i in range(count)]
        whole = [saved[f"{variant}_whole_{i}"] for i in range(count)]
        assert count == 4
        assert compare.relative_difference(sharded, whole) <= TOLERANCE, (index, variant)
