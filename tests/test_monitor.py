"""TrainingMonitor on one machine: its figures against independent readings.

The compute figure is checked on a model that sleeps a known time per example, the
memory against /proc/self/statm, the step time against the epoch's wall time; the
figures reach Keras' History and the chief's TensorBoard files. Across real workers
the monitor is checked in tests/test_adaptive_shards.py.
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

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
    monitor = mgpu_tf.callbacks.TrainingMonitor(global_batch_size=32, log_dir=tmp_path,
                                                probe_budget=None)
    history = model.fit(data, epochs=2, callbacks=[monitor], verbose=0, shuffle=False)
    logs = history.history
    for name in ("step_ms", "compute_ms", "wait_ms", "examples_per_sec", "memory_mb",
                 "peak_memory_mb", "straggler_ratio"):
        assert len(logs[name]) == 2 and all(np.isfinite(logs[name])), name
    assert logs["step_ms"][1] > 0
    assert logs["examples_per_sec"][1] == pytest.approx(16 * 1000.0 / logs["step_ms"][1])
    assert logs["straggler_ratio"][1] >= 1.0
    # The step clocked its own wait in the all-reduce: nothing was probed.
    assert monitor.run.compute.probe_seconds == 0
    table = capsys.readouterr().out
    assert "worker  examples/step  step ms" in table and "straggler ratio" in table
    assert monitor.own_seconds > 0 and monitor.train_seconds > 0
    files = sorted(tmp_path.glob("events.out.tfevents.*"))
    assert len(files) == 2 and not list(tmp_path.glob(".tmp-*"))
    tags = {value.tag for event in tf.compat.v1.train.summary_iterator(str(files[0]))
            for value in event.summary.value}
    assert {"monitor/worker_0/step_ms", "monitor/worker_1/peak_memory_mb"} <= tags
    # TensorBoard's own reader shows each epoch's scalar, as History holds it.
    events = event_accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    shown = events.Scalars("monitor/worker_0/step_ms")
    assert [e.step for e in shown] == [8, 16]
    np.testing.assert_allclose([e.value for e in shown], logs["step_ms"], rtol=1e-6)


def _fit_mirrored(epochs=2, **options):
    x, y, initial = sharding_problem.problem(256)
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 32)
    monitor = mgpu_tf.callbacks.TrainingMonitor(global_batch_size=32, probe_budget=None)
    history = model.fit(data, epochs=epochs, callbacks=[monitor], **options)
    return monitor, history


def test_the_progress_bar_keeps_to_one_line(capsys):
    _, history = _fit_mirrored(verbose=1)
    shown = re.sub(r"\x1b\[[0-9;]*m|\x08", "", capsys.readouterr().out)
    # What stays on screen: each line's last redraw (Keras may draw "8/8" before the epoch
    # ends and again, with the epoch's figures, at its end).
    seen = [line.split("\r")[-1].rstrip() for line in shown.split("\n")]
    ends = [line for line in seen if line.startswith("8/8")]
    assert ends and all("step_ms" in line and "wait_ms" in line for line in ends), ends
    # Keras' own bar with the loss is about 60 characters; the monitor adds two figures.
    assert max(len(line) for line in ends) <= 100, ends
    assert all("compute_ms" not in line and "memory" not in line for line in ends), ends
    # The figures the bar leaves out are in History, at full precision.
    for name in ("compute_ms", "examples_per_sec", "memory_mb", "straggler_ratio"):
        assert len(history.history[name]) == 2, name


def test_history_holds_the_monitors_own_figures_unrounded():
    monitor, history = _fit_mirrored(verbose=0)
    own = [record["units"][0] for record in monitor.history]
    for name in ("step_ms", "compute_ms", "wait_ms", "examples_per_sec", "peak_memory_mb"):
        assert history.history[name] == [unit[name] for unit in own], name


def test_the_table_says_what_its_figures_are(capsys):
    _fit_mirrored(epochs=3, verbose=0)
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:2] == ["worker", "examples/step"]
    assert "means over epochs 2-3 (epoch 1 traces)" in table[3], table


def test_one_worker_is_not_probed():
    # Nothing waits for another worker, so the probe's trace would buy nothing.
    x, y, initial = sharding_problem.problem(64)
    model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)),
                                 mgpu_tf.make_strategy("default"), 16)
    monitor = mgpu_tf.callbacks.TrainingMonitor(global_batch_size=16, print_table=False)
    history = model.fit(data, epochs=2, callbacks=[monitor], verbose=0)
    unit = monitor.history[-1]["units"][0]
    assert np.isnan(unit["compute_ms"]) and np.isnan(unit["wait_ms"]), unit
    assert np.isnan(history.history["compute_ms"]).all() and history.history["step_ms"][1] > 0
    assert monitor.table().splitlines()[1].split()[3:5] == ["-", "-"]


def test_the_probe_keeps_within_its_budget():
    # The probe runs where the step's clock does not: a train step traced before the monitor
    # came. A 2% budget: the probe's first pass counts as Keras' first step, so a short fit
    # never probes; at 100% it probes once the first step's time has passed.
    for budget, probed in ((0.02, False), (1.0, True)):
        x, y, initial = sharding_problem.problem(256)
        strategy = mgpu_tf.make_strategy("mirrored", devices=2)
        with strategy.scope():
            model = sharding_problem.build_model(initial)
        data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 32)
        model.fit(data, epochs=1, verbose=0)
        monitor = mgpu_tf.callbacks.TrainingMonitor(print_table=False, probe_budget=budget)
        model.fit(data, epochs=3, callbacks=[monitor], verbose=0)
        computes = [record["units"][0]["compute_ms"] for record in monitor.history]
        assert np.isfinite(computes[-1]) == probed, (budget, computes)
        assert (monitor.run.compute.probe_seconds > 0) == probed
        if probed:
            assert monitor.own_seconds > 0 and np.isfinite(monitor.train_seconds)


@pytest.mark.parametrize("arguments, message", [
    ({"every_n_steps": 0}, "`every_n_steps` must be a positive number of steps or None"),
    ({"global_batch_size": 2.5}, "`global_batch_size` must be a positive integer or None"),
    ({"probe_budget": 0}, "`probe_budget` must be a share of the training time in"),
])
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        mgpu_tf.callbacks.TrainingMonitor(**arguments)


def test_the_clock_leaves_out_an_epochs_first_step_as_the_step_time_does():
    # The step time runs from the first step's end; a peer still tracing that step made its
    # wait seconds long, which counted over the epoch left a compute of 0 (adaptive shares
    # then did not move after epoch 0).
    import keras

    from mgpu_tf.base import kind as kind_lib
    from mgpu_tf.callbacks import compute

    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    kind = kind_lib.kind_of(strategy)
    times = compute.ComputeTimes(model, strategy, {0: list(kind.worker_devices)}, kind,
                                 repeats=1, budget=None, start=0.0, wanted=True)

    def wait(seconds, steps):  # each replica's wait, as the traced step adds it
        for variable, add in ((times.clock.seconds, seconds), (times.clock.count, steps)):
            for local in strategy.experimental_local_results(variable):
                local.assign_add(tf.cast(add, local.dtype))

    wait(5.0, 1)  # the epoch's first step
    times.first_step_ended()
    wait(0.03 * 9, 9)  # nine more, 30 ms each
    # 100 ms a step from the first step's end: 70 ms of compute.
    assert times.clocked(0.1, 10) == {0: pytest.approx(0.07)}
    wait(0.02 * 4, 4)  # the next window's steps, from the last read: none left out
    assert times.clocked(0.1, 14) == {0: pytest.approx(0.08)}
