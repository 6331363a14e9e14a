"""Adaptive shards: shares that follow measured speeds, each example once, the exact update.

The rule is checked on hand-computed cases and on noisy speeds; one real run of two
local workers over each transport, TensorFlow's collectives and the TCP ring (worker 1
sleeps a fixed time per example, so its slowness scales with its share), is checked
several ways against a single-device reference; mirrored replicas start from the
deployment's weights.
"""

import json
import math
import re

import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import adaptive, order
from mgpu_tf.data.adaptive import settle
from support import adaptive_worker
from support import compare
from support import sharding_problem
from support import tolerance
from support import workers

TOLERANCE = tolerance.training(
    adaptive_worker.EXAMPLES // adaptive_worker.GLOBAL_BATCH * adaptive_worker.EPOCHS,
    sharding_problem.TERMS + adaptive_worker.GLOBAL_BATCH)


def test_next_shares_moves_toward_speed_by_a_bounded_factor():
    # Targets 2/3, 1/3 are within x1.5 of 1/2: reached in one move.
    assert adaptive.next_shares([1, 1], [200.0, 100.0]) == (0.666667, 0.333333)
    # Targets 0.8, 0.2: the second share may fall to 0.5 / 1.5 = 1/3 at most, 5/9 of the
    # way; the first moves as far, to 0.5 + 5/9 * 0.3 = 2/3 (within x1.5).
    assert adaptive.next_shares([1, 1], [400.0, 100.0]) == (0.666667, 0.333333)
    # Targets 0.9, 0.1 from 0.6, 0.4: 0.4 / 1.5 = 4/15 is 4/9 of the way; 0.6 + 4/9 * 0.3.
    assert adaptive.next_shares([3, 2], [900.0, 100.0]) == (0.733333, 0.266667)


def test_next_shares_never_moves_a_share_by_more_than_the_bound():
    rng = np.random.default_rng(1)
    for _ in range(200):
        shares = rng.uniform(0.05, 1.0, size=3)
        shares = shares / shares.sum()
        moved = adaptive.next_shares(list(shares), list(rng.uniform(1.0, 1000.0, size=3)))
        assert sum(moved) == pytest.approx(1.0, abs=1e-5)
        for before, after in zip(shares, moved):
            assert before / 1.5 - 1e-6 <= after <= before * 1.5 + 1e-6, (shares, moved)


def test_next_shares_stays_within_tolerance_and_without_figures():
    assert adaptive.next_shares([2, 1], [210.0, 100.0]) == (2 / 3, 1 / 3)
    assert adaptive.next_shares([1, 1], [float("nan"), 1.0]) == (0.5, 0.5)
    assert adaptive.next_shares([1, 1], []) == (0.5, 0.5)


def test_next_shares_keeps_a_minimum():
    # Targets 0.999, 0.001: the second is raised to the minimum 0.4, the first gives it up.
    assert adaptive.next_shares([1, 1], [1000.0, 1.0], minimum=0.4) == (0.6, 0.4)


def test_noisy_speeds_settle_without_swinging():
    rng = np.random.default_rng(0)
    shares, history = (0.5, 0.5), []
    for _ in range(30):
        speeds = [200.0 * rng.uniform(0.92, 1.08), 100.0 * rng.uniform(0.92, 1.08)]
        shares = adaptive.next_shares(shares, speeds)
        history.append(shares)
    assert abs(history[2][0] - 2 / 3) < 0.05
    assert len(set(history[3:])) == 1, history


def test_adaptive_needs_the_data_policy_and_a_known_word():
    strategy = mgpu_tf.make_strategy("default")
    examples = tf.data.Dataset.from_tensor_slices((np.zeros((8, 1), "float32"),) * 2)
    with pytest.raises(ValueError, match="`weights` must be a list of numbers, 'adaptive' or"):
        mgpu_tf.shard_dataset(examples, strategy, 4, weights="fast")
    with pytest.raises(ValueError, match="`weights='adaptive'` needs policy='data'"):
        mgpu_tf.shard_dataset(examples, strategy, 4, weights="adaptive", policy="off")


# ------------------------------------------------------------- two real workers


def _results(output):
    return {m.group(1): json.loads(m.group(2)) for m in
            re.finditer(r"^(WEIGHTS|SIZES|CHANGES|PROBE_SECONDS|HISTORY|SEEN) (.+)$", output, re.MULTILINE)}


@pytest.fixture(scope="module", params=["tensorflow", "tcp"])
def launch(tmp_path_factory, request):
    """One run of two workers per transport, each checked the ways below."""
    directory = tmp_path_factory.mktemp(f"adaptive-{request.param}")
    code, outputs = workers.run_workers("-m", 2, "support.adaptive_worker", directory,
                                        env={"MGPU_TF_TEST_TRANSPORT": request.param})
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-5000:]}"
    return directory, outputs, [_results(outputs[w]) for w in range(2)]


def _clean(results, epoch):
    """Whether `epoch`'s compute figures are what the sleeps make them: worker 1 within 60 ms
    over its sleep, worker 0 under that sleep. A process held off the CPU by a busy machine
    shows in its compute (its step, less its wait); shares decided from such a figure may
    rightly hold a move back."""
    least = 1000 * adaptive_worker.SLOW_SECONDS * results[0]["SIZES"][epoch][1]
    slow, fast = results[1]["HISTORY"]["compute_ms"], results[0]["HISTORY"]["compute_ms"]
    return least <= slow[epoch] < least + 60 and fast[epoch] < least


@pytest.mark.multiworker
def test_shares_move_toward_the_faster_worker_in_bounded_steps(launch):
    _, _, results = launch
    sizes = results[0]["SIZES"]
    assert results[1]["SIZES"] == sizes  # both workers decided the same shares
    figures = {"sizes": sizes, "changes": results[0]["CHANGES"],
               "compute_ms": [r["HISTORY"]["compute_ms"] for r in results]}
    # Worker 1 is far slower, so each move is cut by the bound: 12 / 1.5 = 8, then
    # 8 / 1.5 = 5.3, rounded to a grain of 2: 6. Epoch 0's figures decide epochs 1 and 2,
    # epoch 1's decide epoch 3, so that no pipeline waits for a decision.
    assert sizes[:3] == [[12, 12], [16, 8], [16, 8]], figures
    assert sizes[3] == [18, 6] or (sizes[3] == [16, 8] and not _clean(results, 1)), figures
    for change in results[0]["CHANGES"]:
        before, after = change["batch_sizes_before"], change["batch_sizes_after"]
        # x1.5 at most per epoch, give or take the rounding to whole examples.
        assert after[1] >= before[1] / 1.5 - 1, change
        assert all(math.isfinite(v) and v > 0 for v in change["speeds"]), change


@pytest.mark.multiworker
def test_every_example_once_in_every_epoch(launch):
    _, _, results = launch
    sizes = results[0]["SIZES"]
    steps = adaptive_worker.EXAMPLES // adaptive_worker.GLOBAL_BATCH
    for epoch in range(adaptive_worker.EPOCHS):
        seen = [results[w]["SEEN"][epoch] for w in range(2)]
        assert [len(s) for s in seen] == [steps, steps]
        for step in range(steps):
            # Each step is the next block of the source order, split by the epoch's shares.
            block = sorted(seen[0][step] + seen[1][step])
            start = step * adaptive_worker.GLOBAL_BATCH
            assert block == list(range(start, start + adaptive_worker.GLOBAL_BATCH))
            assert [len(seen[w][step]) for w in range(2)] == sizes[epoch]


@pytest.mark.multiworker
def test_update_equals_single_device(launch):
    _, _, results = launch
    x, y, initial = sharding_problem.problem(adaptive_worker.EXAMPLES, seed=3)
    steps = sharding_problem.blocks(adaptive_worker.EXAMPLES, adaptive_worker.GLOBAL_BATCH)
    reference = sharding_problem.reference_weights(x, y, initial,
                                                   steps * adaptive_worker.EPOCHS)
    for result in results:
        trained = sharding_problem.from_json(result["WEIGHTS"])
        assert compare.relative_difference(trained, reference) < TOLERANCE


@pytest.mark.multiworker
def test_monitor_names_the_slow_worker(launch):
    directory, outputs, results = launch
    slow, fast = results[1]["HISTORY"], results[0]["HISTORY"]
    # Worker 1 sleeps SLOW_SECONDS per example of its share; worker 0 waits for it in the
    # all-reduce (the two clock their own steps, a few ms apart). Each train step clocked
    # that wait: nothing was probed.
    sleep_ms = [1000 * adaptive_worker.SLOW_SECONDS * s[1] for s in results[0]["SIZES"]]
    for epoch, least in enumerate(sleep_ms):
        figures = {"epoch": epoch, "slow": slow, "fast": fast}
        # A sleep never ends early, so its milliseconds are in the slow worker's compute; how
        # much more a busy machine adds, and how the two workers' figures compare, is not
        # asserted here.
        assert slow["compute_ms"][epoch] >= least, figures
        for history in (slow, fast):
            assert all(math.isfinite(history[name][epoch]) and history[name][epoch] >= 0
                       for name in ("compute_ms", "wait_ms")), figures
    assert [r["PROBE_SECONDS"] for r in results] == [0, 0]
    assert fast["straggler_ratio"] == slow["straggler_ratio"]
    assert all(math.isfinite(v) and v >= 1.0 for v in fast["straggler_ratio"]), fast
    # The chief prints the table; the other worker does not.
    assert "straggler ratio" in outputs[0] and "straggler ratio" not in outputs[1]
    files = sorted((directory / "tb").glob("events.out.tfevents.*"))
    assert len(files) == adaptive_worker.EPOCHS
    tags = {value.tag for event in tf.compat.v1.train.summary_iterator(str(files[-1]))
            for value in event.summary.value}
    assert {"monitor/straggler_ratio", "monitor/worker_1/compute_ms"} <= tags


# --------------------------------------------------------- replicas, one machine


def test_the_monitor_reads_the_data_set_in_use_beside_an_older_one(monkeypatch):
    x, y, initial = sharding_problem.problem(48, seed=5)
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    monkeypatch.setenv("MGPU_TF_SHARD_WEIGHTS", "3,1")
    older = mgpu_tf.shard_dataset(examples, strategy, 24, weights="adaptive")  # noqa: F841
    monkeypatch.delenv("MGPU_TF_SHARD_WEIGHTS")
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    monitor = mgpu_tf.callbacks.TrainingMonitor(print_table=False)
    model.fit(mgpu_tf.shard_dataset(examples, strategy, 24, weights="adaptive"), epochs=1,
              callbacks=[monitor], verbose=0)
    # Even shares of 24 (the older data set's are 18 and 6).
    assert [unit["batch"] for unit in monitor.history[0]["units"]] == [12, 12]


def _mirrored_adaptive(x, y, initial, batch):
    """(strategy, model, adaptive data, its shares) on 2 mirrored replicas."""
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, batch,
                                 weights="adaptive")
    shares = [s for s in mgpu_tf.kind_of(strategy).adaptive_shares() if s.units == 2][-1]
    return strategy, model, data, shares


def test_mirrored_starts_from_the_deployment_weights(monkeypatch, tmp_path):
    monkeypatch.setenv("MGPU_TF_SHARD_WEIGHTS", "3,1")
    x, y, initial = sharding_problem.problem(96, seed=4)
    strategy, model, data, shares = _mirrored_adaptive(x, y, initial, 24)
    assert shares.batch_sizes(0, wait=False) == (18, 6)
    backup = mgpu_tf.callbacks.BackupAndRestore(tmp_path, delete_checkpoint=False)
    monitor = mgpu_tf.callbacks.TrainingMonitor(print_table=False)
    model.fit(data, epochs=2, callbacks=[monitor, backup], verbose=0)
    steps = sharding_problem.blocks(96, 24)
    reference = sharding_problem.reference_weights(x, y, initial, steps * 2)
    assert compare.relative_difference(model.get_weights(), reference) < TOLERANCE
    for epoch in range(2):
        order.position_of(strategy).set_epoch(epoch)
        seen = [np.concatenate([p.numpy()[:, 0] for p in strategy.experimental_local_results(
            batch[0])]) for batch in data]
        order.position_of(strategy).release()
        assert sorted(np.concatenate(seen).tolist()) == sorted(x[:, 0].tolist())
    # The backup holds the shares decided for the epoch it resumes at.
    saved = json.loads((tmp_path / "training_metadata.json").read_text())["adaptive"]
    assert any(s["schedule"].get("2") == list(shares.shares_for(2, wait=False)) for s in saved)


def test_clocked_speeds_reach_settled_shares_only_at_the_epochs_they_ask_for():
    x, y, initial = sharding_problem.problem(480, seed=6)
    _, model, data, shares = _mirrored_adaptive(x, y, initial, 32)
    monitor = mgpu_tf.callbacks.TrainingMonitor(print_table=False)
    fed, asked = [], []
    epoch_ended = shares.epoch_ended

    def observed(epoch, speeds, *args, jumped=False, **kwargs):
        fed.append(settle.usable(speeds, 2))
        asked.append(monitor.run.steering.probe_due(epoch) or jumped)
        return epoch_ended(epoch, speeds, *args, jumped=jumped, **kwargs)

    shares.epoch_ended = observed
    model.fit(data, epochs=8, callbacks=[monitor], verbose=0)
    # The step clocked compute in every epoch; the shares took it only where they asked
    # (epochs 0 and 2 while they stay settled; 6 and 7 decide no epoch of this fit).
    finals = [r for r in monitor.history if r["final"]]
    assert all(np.isfinite(u["compute_ms"]) for r in finals for u in r["units"])
    assert fed == asked and not all(asked)


@pytest.mark.parametrize("batch, error, match", [
    ("24", TypeError, "`global_batch_size` must be an integer"),
    (1, ValueError, "`global_batch_size` must be at least the number of replicas"),
])
def test_adaptive_shares_check_the_global_batch_first(batch, error, match):
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    examples = tf.data.Dataset.from_tensor_slices((np.ones((8, 2)), np.ones((8, 1))))
    with pytest.raises(error, match=match):
        mgpu_tf.shard_dataset(examples, strategy, batch, weights="adaptive")
    assert mgpu_tf.kind_of(strategy).adaptive_shares() == []


def test_equal_adaptive_shares_read_each_replicas_slots_of_every_block():
    # 19 examples in blocks of 8 on 4 replicas: the last block (16, 17, 18) does not reach
    # replicas 3, whose last step is empty all the same.
    strategy = mgpu_tf.make_strategy("mirrored", devices=4)
    examples = tf.data.Dataset.range(19).map(lambda i: (tf.cast([i], tf.float32), i))
    data = mgpu_tf.shard_dataset(examples, strategy, 8, weights="adaptive")
    got = [[p.numpy()[:, 0].astype(int).tolist()
            for p in strategy.experimental_local_results(batch[0])] for batch in data]
    assert got == [[[0, 4], [1, 5], [2, 6], [3, 7]], [[8, 12], [9, 13], [10, 14], [11, 15]],
                   [[16], [17], [18], []]]
