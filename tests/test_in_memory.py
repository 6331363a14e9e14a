"""A shuffled source held in memory: each replica gathers its own rows of every block.

The default strategy's batches are the reference: each step's block, in the epoch's order.
Mirrored replicas, weighted shares and adaptive shares must hold exactly their places of
that block; every example comes once an epoch; the order moves with the epoch only.
"""

import numpy as np
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import in_memory, order

EXAMPLES, BATCH = 29, 8  # 3 full blocks and a short one of 5


def _source():
    x = np.arange(EXAMPLES, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    return tf.data.Dataset.from_tensor_slices((x, np.arange(EXAMPLES, dtype=np.int64)))


def _epoch(strategy, data, epoch):
    order.position_of(strategy).set_epoch(epoch)
    return [[p.numpy().tolist() for p in strategy.experimental_local_results(batch[1])]
            for batch in data]


def test_only_a_plain_in_memory_source_is_held(monkeypatch):
    x, y = in_memory.hold(_source())
    assert x.numpy()[:, 0].tolist() == list(range(EXAMPLES)) and y.numpy().tolist() == list(
        range(EXAMPLES))
    assert in_memory.hold(_source().map(lambda a, b: (a, b))) is None
    monkeypatch.setattr(in_memory, "LIMIT_BYTES", EXAMPLES * 4 * 3)
    assert in_memory.hold(_source()) is None


def test_replicas_hold_their_places_of_each_block_of_the_default_order():
    default = mgpu_tf.make_strategy("default")
    blocks = [step[0] for step in _epoch(
        default, mgpu_tf.shard_dataset(_source(), default, BATCH, shuffle_seed=5), 1)]
    flat = [e for block in blocks for e in block]
    assert sorted(flat) == list(range(EXAMPLES)) and flat != list(range(EXAMPLES))
    assert [len(b) for b in blocks] == [8, 8, 8, 5]
    mirrored = mgpu_tf.make_strategy("mirrored", devices=4)
    even = _epoch(mirrored, mgpu_tf.shard_dataset(_source(), mirrored, BATCH, shuffle_seed=5), 1)
    assert even == [[block[r::4] for r in range(4)] for block in blocks]
    adaptive = _epoch(mirrored, mgpu_tf.shard_dataset(_source(), mirrored, BATCH,
                                                      shuffle_seed=5, weights="adaptive"), 1)
    # Adaptive shares start even: the same places; the short block's tail reaches replica 0.
    assert adaptive == even and [len(p) for p in adaptive[-1]] == [2, 1, 1, 1]

def test_weighted_shares_hold_their_places_and_epochs_differ():
    mirrored = mgpu_tf.make_strategy("mirrored", devices=2)
    data = mgpu_tf.shard_dataset(_source(), mirrored, BATCH, shuffle_seed=5, weights=[3, 1])
    default = mgpu_tf.make_strategy("default")
    reference = mgpu_tf.shard_dataset(_source(), default, BATCH, shuffle_seed=5)
    for epoch in (0, 1):
        blocks = [step[0] for step in _epoch(default, reference, epoch)]
        got = _epoch(mirrored, data, epoch)
        # 6 and 2 of 8, spread evenly: replica 1 has the places 2 and 6 (0 0 1 0 0 0 1 0).
        assert [step[1] for step in got] == [[b[p] for p in (2, 6) if p < len(b)]
                                             for b in blocks]
        assert [sorted(step[0] + step[1]) for step in got] == [sorted(b) for b in blocks]
    assert _epoch(default, reference, 0) != _epoch(default, reference, 1)
