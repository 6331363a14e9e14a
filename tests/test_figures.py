"""The monitor's table of figures: the names users' dashboards read, and every consumer reading it.

The names are checked against the spellings History, TensorBoard, Prometheus and `mgpu-tf top`
had before the table existed; a real monitored fit then shows each figure of the table in each
place the table says, and no other.
"""

import math
import pathlib
import re

import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.callbacks import figures
from mgpu_tf.callbacks import metrics
from mgpu_tf.cli import top
from support import sharding_problem

_LOGGED = {"step_ms", "compute_ms", "wait_ms", "examples_per_sec", "memory_mb", "peak_memory_mb",
           "utilization_pct", "straggler_ratio"}
_SCALARS = {"step_ms", "compute_ms", "wait_ms", "examples_per_sec", "memory_mb", "peak_memory_mb",
            "utilization_pct"}
_METRICS = {  # name: (figure, scale to base units)
    "mgpu_tf_step_seconds": ("step_ms", 1e-3),
    "mgpu_tf_compute_seconds": ("compute_ms", 1e-3),
    "mgpu_tf_wait_seconds": ("wait_ms", 1e-3),
    "mgpu_tf_examples_per_second": ("examples_per_sec", 1.0),
    "mgpu_tf_batch_examples": ("batch", 1.0),
    "mgpu_tf_utilization_ratio": ("utilization_pct", 0.01),
    "mgpu_tf_memory_bytes": ("memory_mb", 1024.0 * 1024.0),
    "mgpu_tf_peak_memory_bytes": ("peak_memory_mb", 1024.0 * 1024.0),
    "mgpu_tf_share_ratio": ("share", 1.0),
    "mgpu_tf_straggler_slowdown": ("straggler_ratio", 1.0),
    "mgpu_tf_epoch": ("epoch", 1.0),
}
_DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
_TOP = ("worker", "step ms", "compute ms", "wait %", "examples/s", "util %", "memory MB", "share",
        "target")
_TABLE = ("worker", "examples/step", "step ms", "compute ms", "wait ms", "examples/s", "util %",
          "memory MB", "peak MB")


def test_the_names_users_read_are_unchanged():
    assert set(figures.names(logged=True)) == _LOGGED
    tags = {f.tag(w) for f in figures.FIGURES if f.scalar for w in (0, 1)}
    assert tags == {"monitor/straggler_ratio"} | {f"monitor/worker_{w}/{name}"
                                                   for name in _SCALARS for w in (0, 1)}
    assert figures.names(shown=True) == ("step_ms", "wait_ms")
    assert {f.metric.name: (f.name, f.to_base) for f in figures.FIGURES if f.metric} == _METRICS
    assert {n: (f, s) for n, (_, f, s) in metrics.SERIES.items()} == _METRICS
    assert top._COLUMNS == _TOP


def test_a_row_is_built_and_read_by_name():
    values = {name: float(i) for i, name in enumerate(reversed(figures.names(figures.Source.ROW)))}
    assert figures.from_row(figures.to_row(values)) == values
    with pytest.raises(ValueError, match=r"^A row must hold every figure of `Source.ROW`"):
        figures.to_row(dict(values, extra=1.0))
    with pytest.raises(ValueError, match=r"^A row must hold every figure of `Source.ROW`"):
        figures.to_row({"step_ms": 1.0})
    with pytest.raises(ValueError, match=r"^`name` must be a figure of `FIGURES`"):
        figures.named("step_seconds")


def _tags(log_dir):
    return {value.tag for path in log_dir.glob("events.out.tfevents.*")
            for event in tf.compat.v1.train.summary_iterator(str(path))
            for value in event.summary.value}


def test_every_figure_reaches_each_place_the_table_names_and_no_other(tmp_path, capsys):
    x, y, initial = sharding_problem.problem(256)
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 32)
    monitor = mgpu_tf.callbacks.TrainingMonitor(global_batch_size=32, log_dir=tmp_path,
                                                probe_budget=None, metrics_port=0)
    try:
        history = model.fit(data, epochs=2, callbacks=[monitor], verbose=1)
        served = top.read_targets([f"127.0.0.1:{monitor.metrics.port}"])
    finally:
        if monitor.metrics is not None:
            monitor.metrics.close()
    table = figures.FIGURES
    # History: the logged figures, one value per epoch, besides Keras' loss.
    assert set(history.history) - {"loss"} == {f.name for f in table if f.logged}
    assert all(len(v) == 2 for v in history.history.values())
    # The progress bar: the shown figures only.
    bar = re.sub(r"\x1b\[[0-9;]*m|\x08", "", capsys.readouterr().out)
    ends = [line.split("\r")[-1] for line in bar.split("\n") if "8/8" in line]
    shown = set(re.findall(r"(\w+): ", ends[-1])) - {"loss"}
    assert shown == {f.name for f in table if f.shown}, ends
    # TensorBoard: each worker's scalar figures, and the interval's.
    expected = {f.tag(w) for f in table if f.scalar for w in (0, 1)}
    assert {t for t in _tags(tmp_path) if t.startswith("monitor/")} == expected
    # Prometheus: a gauge of each worker per metric figure, at History's last value.
    assert set(served) == {(f"127.0.0.1:{monitor.metrics.port}", w) for w in (0, 1)}
    row = served[f"127.0.0.1:{monitor.metrics.port}", 0]
    gauges = {name for name in row if not name.endswith("_total")}
    assert gauges == {f.metric.name for f in table if f.metric}
    for figure in table:
        if figure.metric and figure.logged:
            assert math.isclose(row[figure.metric.name],
                                history.history[figure.name][-1] * figure.to_base,
                                rel_tol=1e-9), figure.name
    # `mgpu-tf top` and the chief's table: a column per figure that has one.
    header = re.split(r"\s{2,}", top.render(served).splitlines()[0].strip())
    assert header == ["worker", *(f.top.header for f in table if f.top), "target"]
    header = re.split(r"\s{2,}", monitor.table().splitlines()[0].strip())
    assert header == ["worker", *(f.table for f in table if f.table)]
    assert tuple(header) == _TABLE


def test_a_figure_in_the_progress_bar_must_be_logged():
    with pytest.raises(ValueError, match=r"^A figure in the progress bar must be logged"):
        figures.Figure("lag_ms", "ms", figures.Source.UNIT, shown=True)


def test_the_series_the_deployment_guide_lists_are_those_served():
    text = (_DOCS / "deployment.md").read_text()
    section = text[text.index("### The series"):text.index("### Scraping the workers")]
    listed = {name for line in section.splitlines() if line.startswith("| `mgpu_tf_")
              for name in re.findall(r"`(mgpu_tf_\w+)`", line.split(" | ")[0])}
    served = ({f.metric.name for f in figures.FIGURES if f.metric}
              | {f"{name}_total" for name in metrics.COUNTERS} | set(metrics.DEVICE_SERIES))
    assert listed == served
