"""The epoch layout of mgpu_tf.data.plan against shares worked out by hand."""

import pytest

from mgpu_tf.data import plan as shard_plan
from mgpu_tf.data import split


def _examples(plan):
    return [share.examples for share in plan.shares]


def test_equal_batches():
    assert split.replica_batch_sizes(12, 3, 1) == (4, 4, 4)
    assert split.replica_batch_sizes(12, 1, 4) == (3, 3, 3, 3)


def test_weights_split_the_global_batch():
    assert split.replica_batch_sizes(12, 1, 2, [2, 1]) == (8, 4)
    assert split.replica_batch_sizes(12, 2, 2, [2, 1]) == (4, 4, 2, 2)
    # 1.2, 2.4, 3.6, 4.8: the two largest fractions get the two left-over examples.
    assert split.replica_batch_sizes(12, 1, 4, [1, 2, 3, 4]) == (1, 2, 4, 5)


def test_zero_weight_is_an_idle_replica():
    assert split.replica_batch_sizes(6, 1, 3, [1, 0, 1]) == (3, 0, 3)


def test_too_small_a_batch_for_the_weights():
    with pytest.raises(ValueError, match=r"`global_batch_size` is too small for these weights"
                                         r".*Use global_batch_size=4 or more"):
        split.replica_batch_sizes(3, 1, 2, [6, 1])  # 2.57 + 0.43 rounds to 3 + 0


def test_smooth_pattern_is_round_robin_for_equal_shares():
    assert split.smooth_pattern([4, 4, 4]) == (0, 1, 2) * 4
    assert split.smooth_pattern([2, 1]) == (0, 1, 0)


def test_997_examples_over_3_workers():
    # 83 full steps of 4 each; the 997th example is the first of a block: worker 0's.
    plan = shard_plan.plan_data(997, (4, 4, 4), 3, 1)
    assert (plan.steps, plan.full_steps, plan.tail_totals) == (84, 83, (1,))
    assert _examples(plan) == [333, 332, 332]
    assert [s.last_batch for s in plan.shares] == [1, 4, 4]
    assert [s.empty_steps for s in plan.shares] == [0, 1, 1]
    assert plan.uneven


def test_997_examples_over_4_replicas_of_one_worker():
    # Round robin inside the worker too: the 1-example last batch goes to replica 0.
    plan = shard_plan.plan_data(997, (3, 3, 3, 3), 1, 4)
    assert _examples(plan) == [250, 249, 249, 249]
    assert [s.batches for s in plan.shares] == [84, 83, 83, 83]


def test_weighted_replicas_share_a_short_batch_by_weight():
    # Pattern 0 1 0 0 1 0 ...: a last batch of 4 gives 3 to replica 0 and 1 to replica 1.
    plan = shard_plan.plan_data(100, (8, 4), 1, 2)
    assert [s.last_batch for s in plan.shares] == [3, 1]
    assert _examples(plan) == [67, 33]


def test_drop_remainder_drops_the_short_step():
    plan = shard_plan.plan_data(997, (4, 4, 4), 3, 1, drop_remainder=True)
    assert (plan.steps, plan.dropped, _examples(plan)) == (83, 1, [332, 332, 332])
    assert not plan.uneven


def test_even_tail_needs_no_correction():
    plan = shard_plan.plan_data(100, (6, 6), 1, 2)  # 8 full steps, then 2 + 2
    assert _examples(plan) == [50, 50] and not plan.uneven


def test_files_go_largest_first_to_the_least_loaded_worker():
    # 300 -> w0, 250 -> w1, 247 -> w2, then 200 -> w2 (447 < 450 < 500).
    assert split.assign_files([300, 250, 247, 200], [4, 4, 4]) == ((0,), (1,), (2, 3))
    # A worker with twice the batch takes twice the examples.
    assert split.assign_files([10, 10, 10], [8, 4]) == ((0, 1), (2,))


def test_streams_of_unequal_length_end_in_empty_batches():
    plan = shard_plan.plan_streams([300, 250, 447], (4, 4, 4), 3, 1, policy="file")
    assert plan.steps == 112  # ceil(447 / 4)
    assert [s.empty_steps for s in plan.shares] == [112 - 75, 112 - 63, 0]
    assert plan.tail_totals[0] == 4 + 4 + 4 - 2  # step 62: worker 1 has 250 - 248 left
    assert sum(plan.tail_totals) + plan.full_steps * 12 == 997


def test_weight_zero_worker_with_data_is_an_error():
    with pytest.raises(ValueError, match=r"Worker 1 has weight 0 but its input has 5 examples"):
        shard_plan.plan_streams([5, 5], (4, 0), 2, 1, policy="off")


def test_table_names_every_replica():
    table = shard_plan.plan_data(997, (3, 3, 3, 3), 1, 4).table()
    assert table.splitlines()[0].startswith("policy=data (requested); 1 worker(s) x 4 replica(s)")
    assert table.splitlines()[-1].split() == ["0", "3", "3", "249", "83", "3", "1"]
