"""shard_dataset on one machine: exactly once, weighted updates, files, determinism, errors.

The session has four logical CPUs. Expected shares are worked out by hand in the
comments; training is compared with plain Keras under the default strategy on the
same global batches (tests/support/sharding_problem.py).
"""

import collections
import logging
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.compat import versions
from support import sharding_problem
from support import compare
from support import tolerance

# The longest fit here: 997 examples in global batches of 12.
TOLERANCE = tolerance.training(84, sharding_problem.TERMS + 12)


def _strategy(name):
    kind, _, devices = name.partition("-")
    if kind == "mirrored":
        return mgpu_tf.make_strategy("mirrored", devices=int(devices))
    return mgpu_tf.make_strategy(kind)


def _ids(count):
    return tf.data.Dataset.from_tensor_slices(
        (np.arange(count, dtype="int64"), np.zeros(count, "float32")))


def _seen(data, strategy):
    """Per replica, the ids of each step's batch, by iterating what shard_dataset gave."""
    steps = []
    for batch in data:
        ids = batch[0]
        parts = (strategy.experimental_local_results(ids)
                 if isinstance(ids, tf.distribute.DistributedValues) else [ids])
        steps.append([part.numpy().tolist() for part in parts])
    return [list(replica) for replica in zip(*steps)]


def _flatten(per_replica):
    return [i for replica in per_replica for batch in replica for i in batch]


# ------------------------------------------------------------------ exactly once


@pytest.mark.parametrize("name", ["default", "one_device"])
def test_one_replica_reads_in_order(name):
    seen = _seen(mgpu_tf.shard_dataset(_ids(997), _strategy(name), 12), None)
    assert [len(b) for b in seen[0]] == [12] * 83 + [1]
    assert _flatten(seen) == list(range(997))


@pytest.mark.parametrize("seed", [None, 5])
def test_997_over_4_devices_each_example_once(seed):
    strategy = _strategy("mirrored-4")
    data = mgpu_tf.shard_dataset(_ids(997), strategy, 12, shuffle_seed=seed)
    seen, again = _seen(data, strategy), _seen(data, strategy)
    assert sorted(_flatten(seen)) == sorted(_flatten(again)) == list(range(997))
    assert (_flatten(seen) == _flatten(again)) == (seed is None)  # a new order each epoch
    # 83 full steps of 3; the 997th example is the first of its step: replica 0's.
    assert [sum(map(len, r)) for r in seen] == [250, 249, 249, 249]
    assert [len(r) for r in seen] == [84] * 4
    assert [len(r[-1]) for r in seen] == [1, 0, 0, 0]


def test_weighted_replicas_get_their_share():
    strategy = _strategy("mirrored-2")
    seen = _seen(mgpu_tf.shard_dataset(_ids(100), strategy, 12, weights=[2, 1]), strategy)
    # Each block of 12 goes 0 1 0 0 1 0 0 1 0 0 1 0 (replica 0 twice as often);
    # the last block, 96..99, goes 0 1 0 0.
    assert seen[0][0] == [0, 2, 3, 5, 6, 8, 9, 11] and seen[1][0] == [1, 4, 7, 10]
    assert seen[0][-1] == [96, 98, 99] and seen[1][-1] == [97]
    assert [sum(map(len, r)) for r in seen] == [67, 33]


def test_drop_remainder_keeps_full_steps_only():
    strategy = _strategy("mirrored-4")
    seen = _seen(mgpu_tf.shard_dataset(_ids(997), strategy, 12, drop_remainder=True), strategy)
    assert sorted(_flatten(seen)) == list(range(996))
    assert {len(b) for r in seen for b in r} == {3}


def test_describe_sharding_prints_the_table(capsys):
    plan = mgpu_tf.describe_sharding(_ids(997), _strategy("mirrored-4"), 12)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("policy=data (auto: the source is a data set, not files)")
    assert lines[1].split() == ["worker", "replica", "batch", "examples", "batches", "last",
                                "batch", "empty", "steps"]
    assert [line.split()[3] for line in lines[2:]] == ["250", "249", "249", "249"]
    assert plan.steps == 84


def test_auto_says_which_policy(caplog, tmp_path):
    x, y, _ = sharding_problem.problem(20)
    files = sharding_problem.write_records(tmp_path, x, y, [10, 10])
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        mgpu_tf.shard_dataset(files, _strategy("mirrored-2"), 4, parse=sharding_problem.parse_xy)
    assert "sharding policy 'auto' chose 'file': 2 files for 1 worker(s)" in caplog.text


def test_auto_says_it_once_per_strategy_and_choice(caplog, tmp_path):
    x, y, _ = sharding_problem.problem(20)
    files = sharding_problem.write_records(tmp_path, x, y, [10, 10])
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    strategy = _strategy("mirrored-2")
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        # Training and test data of one run, then files: a different choice, said again.
        mgpu_tf.shard_dataset(examples, strategy, 4)
        mgpu_tf.shard_dataset(examples.take(8), strategy, 4, training=False)
        mgpu_tf.shard_dataset(files, strategy, 4, parse=sharding_problem.parse_xy)
        # A new strategy is a new run.
        mgpu_tf.shard_dataset(examples, _strategy("mirrored-2"), 4)
    chose = [r.getMessage() for r in caplog.records if "sharding policy 'auto'" in r.getMessage()]
    assert chose == ["mgpu_tf: sharding policy 'auto' chose 'data': the source is a data set, "
                     "not files.",
                     "mgpu_tf: sharding policy 'auto' chose 'file': 2 files for 1 worker(s).",
                     "mgpu_tf: sharding policy 'auto' chose 'data': the source is a data set, "
                     "not files."], chose


@pytest.mark.parametrize("name", ["default", "mirrored-2"])
def test_fit_on_sharded_data_warns_nothing(name):
    x, y, initial = sharding_problem.problem(24)
    strategy = _strategy(name)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Keras' fit defaults to shuffle=True, which a data set cannot take.
        model.fit(mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 8),
                  epochs=1, verbose=0)


def test_keras_still_warns_that_it_cannot_shuffle_another_data_set():
    # Why mgpu_tf patches Keras' get_data_adapter: Keras 3.15 on warn (3.8-3.14 say nothing);
    # when this fails there, Keras no longer warns and compat/shuffle_hook.py's part can go.
    x, y, initial = sharding_problem.problem(24)
    mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), _strategy("default"), 8)
    model = sharding_problem.build_model(initial)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    if versions.release_in(keras.__version__, (3, 0), (3, 14)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(data, epochs=1, verbose=0)
        assert not [w for w in caught if "`shuffle=True` was passed" in str(w.message)]
        return
    with pytest.warns(UserWarning, match="`shuffle=True` was passed, but will be ignored"):
        model.fit(data, epochs=1, verbose=0)


def test_function_source_is_called_with_the_input_context():
    contexts = []

    def examples(context):
        contexts.append((context.num_input_pipelines, context.input_pipeline_id,
                         context.num_replicas_in_sync))
        return _ids(30)

    strategy = _strategy("mirrored-2")
    plan = mgpu_tf.describe_sharding(examples, strategy, 4, print_table=False)
    assert (plan.policy, plan.reason) == ("off", "auto: the input function shards by worker")
    assert set(contexts) == {(1, 0, 2)}
    seen = _seen(mgpu_tf.shard_dataset(examples, strategy, 4, policy="data"), strategy)
    assert sorted(_flatten(seen)) == list(range(30))


# ------------------------------------------------------------------ determinism


def test_same_seed_same_order_and_a_new_order_each_epoch():
    strategy = _strategy("default")
    first = mgpu_tf.shard_dataset(_ids(50), strategy, 5, shuffle_seed=11)
    second = mgpu_tf.shard_dataset(_ids(50), strategy, 5, shuffle_seed=11)
    epochs_a = [_flatten(_seen(first, strategy)) for _ in range(2)]
    epochs_b = [_flatten(_seen(second, strategy)) for _ in range(2)]
    assert epochs_a == epochs_b
    assert epochs_a[0] != epochs_a[1] and sorted(epochs_a[1]) == list(range(50))
    other = _flatten(_seen(mgpu_tf.shard_dataset(_ids(50), strategy, 5, shuffle_seed=12),
                           strategy))
    assert other != epochs_a[0]


# ------------------------------------------------------------------ training


def _train_steps(model, data, steps):
    """Runs Keras' own train function for `steps` steps, as fit does after building."""
    model.make_train_function()
    iterator = iter(data)
    for _ in range(steps):
        model.train_function(iterator)


@pytest.mark.parametrize("devices, weights", [(2, [2, 1]), (4, [1, 2, 3, 4]), (4, None)])
def test_weighted_update_equals_single_device(devices, weights):
    # 100 examples, global batch 12: 9 steps, the last of 4 examples.
    x, y, initial = sharding_problem.problem(100)
    reference = sharding_problem.reference_weights(x, y, initial, sharding_problem.blocks(100, 12))
    strategy = _strategy(f"mirrored-{devices}")
    with strategy.scope():
        model = sharding_problem.build_model(initial)
        model.optimizer.build(model.trainable_variables)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 12,
                                 weights=weights)
    _train_steps(model, data, 9)
    assert compare.relative_difference(model.get_weights(), reference) < TOLERANCE
    assert compare.relative_difference(reference, initial) > 1e-2


@pytest.mark.parametrize("name", ["default", "one_device", "mirrored-2", "mirrored-4"])
def test_fit_with_an_uneven_tail_equals_single_device(name):
    # 997 examples, global batch 12: the last step has 1 example, on one replica only.
    x, y, initial = sharding_problem.problem(997)
    reference = sharding_problem.reference_weights(x, y, initial, sharding_problem.blocks(997, 12))
    strategy = _strategy(name)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 12)
    history = model.fit(data, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert compare.relative_difference(model.get_weights(), reference) < TOLERANCE


def test_fit_with_weights_on_one_machine():
    x, y, initial = sharding_problem.problem(100)
    reference = sharding_problem.reference_weights(x, y, initial, sharding_problem.blocks(100, 12))
    strategy = _strategy("mirrored-2")
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    model.fit(mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 12,
                                    weights=[2, 1]), epochs=1, shuffle=False, verbose=0)
    assert compare.relative_difference(model.get_weights(), reference) < TOLERANCE


@pytest.mark.parametrize("name, weights", [("mirrored-4", None), ("mirrored-2", [2, 1])])
def test_evaluate_data_shows_the_mean_over_its_examples(name, weights):
    # 270 examples, global batch 64: the last step's 14 split 4, 4, 3, 3 over four
    # replicas; with weights [2, 1] every step is uneven. The mean squared error
    # is worked out with numpy.
    x, y, initial = sharding_problem.problem(270)
    expected = float(np.mean((x @ initial[0] + initial[1] - y) ** 2))
    strategy = _strategy(name)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 64,
                                 weights=weights, training=False)
    assert abs(model.evaluate(data, verbose=0) - expected) <= 1e-5 * expected


def _interleaved(sizes):
    """The order one worker reads files in: one record of each file in turn."""
    runs = [list(range(sum(sizes[:i]), sum(sizes[:i + 1]))) for i in range(len(sizes))]
    order = []
    for position in range(max(sizes)):
        order += [run[position] for run in runs if position < len(run)]
    return order


@pytest.mark.parametrize("name", ["default", "one_device", "mirrored-2", "mirrored-4"])
def test_fit_from_tfrecord_files(tmp_path, name):
    sizes = [40, 33, 27]
    x, y, initial = sharding_problem.problem(sum(sizes))
    files = sharding_problem.write_records(tmp_path, x, y, sizes)
    order = _interleaved(sizes)
    steps = [order[s:s + 12] for s in range(0, 100, 12)]
    reference = sharding_problem.reference_weights(x, y, initial, steps)
    strategy = _strategy(name)
    seen = _seen(mgpu_tf.shard_dataset([str(tmp_path / "part-*.tfrecord")], strategy, 12,
                                       parse=sharding_problem.parse_id), strategy)
    assert sorted(_flatten(seen)) == list(range(100))
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    model.fit(mgpu_tf.shard_dataset(files, strategy, 12, parse=sharding_problem.parse_xy),
              epochs=1, shuffle=False, verbose=0)
    assert compare.relative_difference(model.get_weights(), reference) < TOLERANCE


# ------------------------------------------------------------------ bad input


class _CountingSource:
    """A data set of single examples that counts how many were read."""

    def __init__(self, count=10):
        self.read = 0
        self.count = count

    def _generate(self):
        for i in range(self.count):
            self.read += 1
            yield np.float32(i), np.float32(0)

    def dataset(self):
        spec = (tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32))
        return tf.data.Dataset.from_generator(self._generate, output_signature=spec)


@pytest.mark.parametrize("options, message", [
    (dict(weights=[1, 2, 3]), r"`weights` must have one entry per replica \(2 replica\(s\) "
                              r"of this machine\)\. Received: weights=\[1\.0, 2\.0, 3\.0\]"),
    (dict(weights=[1, -1]), r"`weights` must be finite and not negative"),
    (dict(weights=[0, 0]), r"`weights` must not all be zero"),
    (dict(global_batch_size=1), r"`global_batch_size` must be at least the number of "
                                r"replicas \(2\), so that each replica gets an example per step\. "
                                r"Received: global_batch_size=1"),
    (dict(global_batch_size=7), r"`global_batch_size` must be divisible by the number of "
                                r"replicas \(2\)\. Received: global_batch_size=7\. Use 6 or 8"),
    (dict(policy="file"), r"`policy='file'` needs a list of TFRecord file patterns"),
    (dict(policy="shards"), r"`policy` must be one of auto, file, data, off\. "
                            r"Received: policy='shards'"),
    (dict(batched=True), r"`source` must be a data set of single examples, but it is already "
                         r"batched \(it applies BatchDataset\)"),
])
def test_bad_input_fails_before_reading(options, message):
    source = _CountingSource()
    dataset = source.dataset().batch(2) if options.pop("batched", False) else source.dataset()
    arguments = {"global_batch_size": 4, **options}
    with pytest.raises(ValueError, match=message):
        mgpu_tf.shard_dataset(dataset, _strategy("mirrored-2"), **arguments)
    assert source.read == 0


def test_global_batch_below_replicas_suggests_the_replica_count():
    with pytest.raises(ValueError, match=r"`global_batch_size` must be at least the number of "
                                         r"replicas \(4\).*Use global_batch_size=4 or more"):
        mgpu_tf.shard_dataset(_ids(10), _strategy("mirrored-4"), 3)


def test_uneven_batch_suggests_the_nearest_sizes():
    with pytest.raises(ValueError, match=r"`global_batch_size` must be divisible by the number "
                                         r"of replicas \(4\)\. Received: global_batch_size=30\. "
                                         r"Use 28 or 32, or pass weights=\[1, 1, 1, 1\]"):
        mgpu_tf.shard_dataset(_ids(10), _strategy("mirrored-4"), 30)


def test_empty_data_set():
    with pytest.raises(ValueError, match=r"`source` is an empty data set"):
        mgpu_tf.shard_dataset(_ids(0), _strategy("default"), 4)
    with pytest.raises(ValueError, match=r"`source` holds no examples"):
        mgpu_tf.shard_dataset(_ids(5).filter(lambda i, y: i < 0), _strategy("default"), 4)


def test_infinite_data_set():
    with pytest.raises(ValueError, match=r"`source` repeats forever"):
        mgpu_tf.shard_dataset(_ids(5).repeat(), _strategy("default"), 4)


def test_pattern_that_matches_nothing_is_named(tmp_path):
    x, y, _ = sharding_problem.problem(8)
    files = sharding_problem.write_records(tmp_path, x, y, [8])
    missing = str(tmp_path / "nothing-*.tfrecord")
    with pytest.raises(ValueError, match=r"The file pattern '.*nothing-\*\.tfrecord' matches "
                                         r"no file"):
        mgpu_tf.shard_dataset(files + [missing], _strategy("default"), 4,
                              parse=sharding_problem.parse_xy)


def test_wrong_types():
    with pytest.raises(TypeError, match=r"`source` must be a tf\.data\.Dataset of single "
                                        r"examples"):
        mgpu_tf.shard_dataset(np.zeros(4), _strategy("default"), 4)
    with pytest.raises(TypeError,
                       match=r"`strategy` must be a strategy, such as mgpu_tf\.make_strategy"):
        mgpu_tf.shard_dataset(_ids(4), "mirrored", 4)
    with pytest.raises(TypeError, match=r"`global_batch_size` must be an integer"):
        mgpu_tf.shard_dataset(_ids(4), _strategy("default"), 4.0)
    with pytest.raises(TypeError, match=r"`training` must be True or False. Received: "
                                        r"training='no'"):
        mgpu_tf.shard_dataset(_ids(4), _strategy("default"), 4, training="no")


def test_weights_need_x_y_examples():
    with pytest.raises(ValueError, match=r"`weights` need examples of the form \(x, y\)"):
        mgpu_tf.shard_dataset(tf.data.Dataset.range(10), _strategy("mirrored-2"), 4,
                              weights=[1, 1])


def test_off_on_one_worker_reads_everything_once():
    strategy = _strategy("mirrored-2")
    seen = _seen(mgpu_tf.shard_dataset(_ids(10), strategy, 4, policy="off"), strategy)
    assert sorted(_flatten(seen)) == list(range(10))


def test_counts_of_each_replica_are_equal_steps():
    strategy = _strategy("mirrored-4")
    data = mgpu_tf.shard_dataset(_ids(997), strategy, 12)
    assert data.cardinality == 84
    assert collections.Counter(len(r) for r in _seen(data, strategy)) == {84: 4}


def test_model_parallel_gets_whole_global_batches_through_one_pipeline():
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2)
    batches = [ids.numpy().tolist() for ids, _ in mgpu_tf.shard_dataset(_ids(10), strategy, 4)]
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
