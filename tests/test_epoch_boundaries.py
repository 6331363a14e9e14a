"""Epoch starts: a source read by index fills no shuffle buffer before the first batch."""

import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import order
from mgpu_tf.data import source as shard_source

N, BATCH = 512, 32


@pytest.fixture(autouse=True)
def _released():
    order.position_of(tf.distribute.get_strategy()).release()
    yield
    order.position_of(tf.distribute.get_strategy()).release()


def _counted(examples, reads):
    def count(x):
        reads.append(1)
        return x

    return examples.map(lambda x: tf.ensure_shape(tf.py_function(count, [x], tf.int64), []))


def _first_batch_reads(examples, reads):
    data = mgpu_tf.shard_dataset(examples, mgpu_tf.make_strategy("default"), BATCH,
                                 shuffle_seed=7)
    reads.clear()
    next(iter(data))
    return len(reads)


def test_a_source_read_by_index_gives_its_first_batch_without_reading_the_rest():
    reads = []
    examples = _counted(tf.data.Dataset.range(N), reads)
    assert shard_source.random_access(examples)
    # The batch, and what prefetching reads ahead: far from the whole source.
    assert _first_batch_reads(examples, reads) <= 4 * BATCH


def test_a_source_without_random_access_still_fills_a_buffer():
    reads = []
    examples = _counted(tf.data.Dataset.range(2 * N).filter(lambda x: x % 2 == 0), reads)
    assert not shard_source.random_access(examples)
    assert _first_batch_reads(examples, reads) == N


def test_each_epoch_read_by_index_is_a_new_permutation_of_the_source():
    strategy = mgpu_tf.make_strategy("default")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.range(N), strategy, BATCH, shuffle_seed=7)
    position = order.position_of(strategy)
    epochs = []
    for epoch in range(3):
        position.set_epoch(epoch)
        epochs.append(np.concatenate([b.numpy() for b in data]))
    for seen in epochs:
        np.testing.assert_array_equal(np.sort(seen), np.arange(N))
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])
    assert not np.array_equal(epochs[0], np.arange(N))
    # The same seed and epoch give the same order in a new data set.
    position.set_epoch(1)
    again = np.concatenate([b.numpy() for b in mgpu_tf.shard_dataset(
        tf.data.Dataset.range(N), strategy, BATCH, shuffle_seed=7)])
    np.testing.assert_array_equal(again, epochs[1])


def _sources():
    x = tf.data.Dataset.from_tensor_slices(np.arange(8, dtype="int64"))
    r = tf.data.Dataset.range(8)
    return {
        "range": r, "from_tensor_slices": x, "map": x.map(lambda a: a + 1),
        "parallel map": x.map(lambda a: a, num_parallel_calls=2),
        "zip": tf.data.Dataset.zip((x, r)), "take": x.take(5), "skip": x.skip(2),
        "concatenate": x.concatenate(r), "enumerate": x.enumerate(), "prefetch": x.prefetch(2),
        "repeat": x.repeat(2), "with_options": x.with_options(tf.data.Options()),
        "filter": x.filter(lambda a: a > 1), "shuffle": x.shuffle(4),
        "interleave": r.interleave(lambda i: tf.data.Dataset.range(i)),
        "cache": x.cache(), "map of filter": x.filter(lambda a: a > 1).map(lambda a: a),
    }


@pytest.mark.parametrize("name", sorted(_sources()))
def test_random_access_is_claimed_only_where_tensorflow_reads_by_index(name):
    # TensorFlow itself is the reference: an iterator of its index shuffle works or fails.
    from mgpu_tf.compat import private

    dataset = _sources()[name]
    try:
        list(private.global_shuffle(dataset, seed=1))
        works = True
    except tf.errors.OpError:
        works = False
    claimed = shard_source.random_access(dataset)
    assert not claimed or works, f"{name}: claimed, but TensorFlow cannot read it by index"
    if name in ("range", "from_tensor_slices", "map", "zip", "concatenate", "take"):
        assert claimed, f"{name}: TensorFlow reads it by index, yet it fills a buffer"
