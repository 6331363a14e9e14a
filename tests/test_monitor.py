"""TrainingMonitor on one machine: its figures against independent readings.

The compute figure is checked on a model that sleeps a known time per example, the
memory against /proc/self/statm, the step time against the epoch's wall time; the
figures reach Keras' History and the chief's TensorBoard files. Across real workers
the monitor is checked in tests/test_adaptive_shards.py.
"""

import os
import time

import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.callbacks import measure
from support import adaptive_worker
from support import sharding_problem


def test_the_compute_probe_times_work_that_scales_with_the_batch():
    x, y, initial = sharding_problem.problem(8)
    model = adaptive_worker.build(initial, 0.01)
    probe = measure.ComputeProbe(model, repeats=3)
    # 10 ms of sleep per example: the sleep bounds each figure from below, and the 100 ms
    # it adds from 10 to 20 examples stands well above what a busy machine adds to a pass.
    ten, twenty = probe.seconds(10), probe.seconds(20)
    assert 0.100 <= ten < 0.5 and 0.200 <= twenty < 0.6, (ten, twenty)
    assert twenty - ten > 0.05, (ten, twenty)


def test_memory_is_the_resident_set():
    in_use, peak = measure.memory_bytes()
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert abs(in_use - resident) < 0.1 * resident and peak >= in_use


def test_figures_reach_history_tensorboard_and_the_table(tmp_path, capsys):
    x, y, initial = sharding_problem.problem(256)
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 32)
    monitor = mgpu_tf.callbacks.TrainingMonitor(global_batch_size=32, log_dir=tmp_path)
    begin = time.perf_counter()
    history = model.fit(data, epochs=2, callbacks=[monitor], verbose=0, shuffle=False)
    wall = time.perf_counter() - begin
    logs = history.history
    for name in ("step_ms", "compute_ms", "wait_ms", "examples_per_sec", "memory_mb",
                 "peak_memory_mb", "straggler_ratio"):
        assert len(logs[name]) == 2 and all(np.isfinite(logs[name])), name
    # 8 steps per epoch: the step time cannot exceed the epoch's share of the wall time.
    assert 0 < logs["step_ms"][1] < 1000.0 * wall / 8
    assert logs["examples_per_sec"][1] == pytest.approx(16 * 1000.0 / logs["step_ms"][1])
    assert logs["straggler_ratio"][1] >= 1.0
    table = capsys.readouterr().out
    assert "worker  batch  step ms" in table and "straggler ratio" in table
    assert 0 < monitor.own_seconds < monitor.train_seconds
    files = sorted(tmp_path.glob("events.out.tfevents.*"))
    assert len(files) == 2 and not list(tmp_path.glob(".tmp-*"))
    tags = {value.tag for event in tf.compat.v1.train.summary_iterator(str(files[0]))
            for value in event.summary.value}
    assert {"monitor/worker_0/step_ms", "monitor/worker_1/peak_memory_mb"} <= tags


@pytest.mark.parametrize("arguments, message", [
    ({"every_n_steps": 0}, "`every_n_steps` must be a positive number of steps or None"),
    ({"global_batch_size": 2.5}, "`global_batch_size` must be a positive integer or None"),
])
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        mgpu_tf.callbacks.TrainingMonitor(**arguments)
