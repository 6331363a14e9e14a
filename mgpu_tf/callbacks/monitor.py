"""A training monitor for mixed hardware: who holds the others back, and how full each is.

Design: docs/design.md#training-monitor
"""

import os
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from mgpu_tf.callbacks import chief as chief_lib
from mgpu_tf.callbacks import compute as compute_lib
from mgpu_tf.callbacks import figures as figures_lib
from mgpu_tf.callbacks import measure
from mgpu_tf.callbacks import metrics as metrics_lib
from mgpu_tf.callbacks import scalars
from mgpu_tf.callbacks import utilization
from mgpu_tf.data import order
from mgpu_tf.data.adaptive import steering
from mgpu_tf.strategies import kinds

__all__ = ["TrainingMonitor", "FIGURES", "LOGGED", "SHOWN"]

# Names of the figures each worker exchanges; of this worker's figures in `History` each epoch
# (besides the straggler ratio); of those the progress bar shows, so that it keeps to one line.
FIGURES = figures_lib.names(figures_lib.Source.ROW)
LOGGED = figures_lib.names(figures_lib.Source.ROW, figures_lib.Source.UNIT, logged=True)
SHOWN = figures_lib.names(shown=True)
# Each worker's figures in `TrainingMonitor.history`, and the chief's table of their means.
_UNIT = figures_lib.names(figures_lib.Source.ROW, figures_lib.Source.UNIT)
_TABLE = tuple(f for f in figures_lib.FIGURES if f.table is not None)
_MB = 1024.0 * 1024.0


class TrainingMonitor(keras.callbacks.Callback):
    """Per-worker step, compute and wait times, examples/s, memory and the straggler ratio.

    Example:

    ```python
    import keras, numpy as np, tensorflow as tf
    import mgpu_tf
    strategy = mgpu_tf.make_strategy("default")
    examples = tf.data.Dataset.from_tensor_slices(
        (np.ones((64, 4), "float32"), np.zeros((64, 1), "float32")))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    monitor = mgpu_tf.callbacks.TrainingMonitor(global_batch_size=16)
    history = model.fit(mgpu_tf.shard_dataset(examples, strategy, 16), epochs=2,
                        callbacks=[monitor], verbose=0)
    history.history["step_ms"], history.history["straggler_ratio"]
    print(monitor.table())
    ```

    Args:
        every_n_steps: exchange figures every this many steps as well as at the
            end of each epoch; Keras then runs batch callbacks in step, which
            costs a little speed. Defaults to `None` (each epoch).
        global_batch_size: examples per step, for examples/s and the size of the
            compute probe; an adaptive data set's own sizes take precedence.
            Defaults to `None` (examples/s left out; probe batches of 32).
        log_dir: TensorBoard directory for the chief's scalars. Defaults to `None`.
        print_table: the chief prints the summary table when training ends.
            Defaults to `True`.
        probe_repeats: timed compute passes per interval. Defaults to `1`: the
            bounded, dead-banded share moves of adaptive shards absorb its noise.
        probe_budget: the share of the training time the compute probe may take.
            Its first pass traces, and counts as long as Keras' first step, which
            traced the train step the probe's pass is a part of; until the budget
            allows it, and between probes, compute and wait are left out or last
            measured. Adaptive shares probe at the epochs whose speeds they ask
            for, one worker never.
            Defaults to `0.02`; `None` probes at every interval.
        metrics_port: serve the figures for Prometheus, worker `i` of a host on this port
            plus `i`. Defaults to `None` (none). `metrics_host` (`"127.0.0.1"`) is the
            address it binds, `job_name` (`"mgpu-tf"`) its `job_name` label.

    Attributes:
        history: one dict per interval: `epoch`, `step`, `units` (one dict of
            `FIGURES` plus `wait_ms` and `examples_per_sec` per worker) and
            `straggler_ratio`.
        metrics: the `MetricsExporter` once training began with a `metrics_port`.
        own_seconds: time the monitor spent in its epoch and interval hooks (the
            batch hook only notes the time).
        train_seconds: wall time of the training it watched.
    """

    # Decides the shares of the adaptive data sets it trains on (`mgpu_tf.data.adaptive`).
    steers_adaptive_shares = True

    def __init__(self, every_n_steps=None, *, global_batch_size=None, log_dir=None,
                 print_table=True, probe_repeats=1, probe_budget=0.02, metrics_port=None,
                 metrics_host="127.0.0.1", job_name="mgpu-tf"):
        super().__init__()
        self.metrics_port = metrics_lib.check_port(metrics_port)
        self.metrics_host, self.job_name = metrics_host, job_name
        self.metrics = None
        if every_n_steps is not None and (isinstance(every_n_steps, bool) or not isinstance(
                every_n_steps, int) or every_n_steps < 1):
            raise ValueError(
                "`every_n_steps` must be a positive number of steps or None. Received: "
                f"every_n_steps={every_n_steps!r}. Use None to exchange once per epoch.")
        if global_batch_size is not None and (isinstance(global_batch_size, bool) or not
                                              isinstance(global_batch_size, int)
                                              or global_batch_size < 1):
            raise ValueError(
                "`global_batch_size` must be a positive integer or None. Received: "
                f"global_batch_size={global_batch_size!r}.")
        if probe_budget is not None and (isinstance(probe_budget, bool) or not isinstance(
                probe_budget, (int, float)) or not 0 < probe_budget <= 1):
            raise ValueError(
                "`probe_budget` must be a share of the training time in (0, 1] or None. "
                f"Received: probe_budget={probe_budget!r}. Use 0.02 for 2%.")
        self.every_n_steps = every_n_steps
        self.global_batch_size = global_batch_size
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.print_table = print_table
        # Without a per-step exchange, the batch hook only notes the time, from any thread.
        self.async_safe = every_n_steps is None
        self.probe_repeats = probe_repeats
        self.probe_budget = probe_budget
        self.run = None
        self.history = []
        self.own_seconds = 0.0
        self.train_seconds = 0.0

    # ------------------------------------------------------------------- hooks

    def on_train_begin(self, logs=None):
        begin = time.perf_counter()
        self.history, self.own_seconds = [], 0.0
        self.run = _Run(self, begin)
        if self.metrics_port is not None and self.metrics is None:
            self.metrics = metrics_lib.serve(self.metrics_port, self.run.strategy,
                                             host=self.metrics_host, job_name=self.job_name)
        self.own_seconds += time.perf_counter() - begin

    def on_epoch_begin(self, epoch, logs=None):
        self.run.begin_epoch(epoch)

    def on_train_batch_end(self, batch, logs=None):
        # Only the time, at every step; the rest waits for the interval's end.
        if not self.run.ends:
            self.run.compute.first_step_ended()
        self.run.ends.append((batch, time.perf_counter()))
        every = self.every_n_steps
        if every and (batch + 1) % every == 0:
            begin = time.perf_counter()
            self.run.interval_ended(logs)
            self.own_seconds += time.perf_counter() - begin

    def on_epoch_end(self, epoch, logs=None):
        begin = time.perf_counter()
        self.run.end_epoch(epoch, logs)
        self.own_seconds += time.perf_counter() - begin

    def on_train_end(self, logs=None):
        self.run.end()
        self.train_seconds = time.perf_counter() - self.run.start
        if self.print_table and self.history and chief_lib.is_chief(self.run.strategy):
            print(self.table(), flush=True)

    # -------------------------------------------------------------------- table

    def _summarised(self):
        """The epochs' records the summary averages: the first, which traces, is left out
        when there are others."""
        ends = [r for r in self.history if r.get("final", True)]
        return ends[1:] if len(ends) > 1 else ends

    def summary(self):
        """Each worker's figures, averaged over the epochs (the first, which traces,
        is left out when there are others)."""
        kept = self._summarised()
        if not kept:
            return []
        return [{name: _finite_mean([r["units"][u][name] for r in kept]) for name in _UNIT}
                for u in range(len(kept[0]["units"]))]

    def table(self):
        """The summary as text: one line per worker, then the straggler ratio and cost."""
        rows = self.summary()
        columns = ("worker", *(f.table for f in _TABLE))
        lines = [[str(u)] + [f"{row[f.name]:.1f}" if np.isfinite(row[f.name]) else "-"
                             for f in _TABLE] for u, row in enumerate(rows)]
        widths = [max(len(c), *(len(line[i]) for line in lines)) for i, c in enumerate(columns)]
        text = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
        text += ["  ".join(v.rjust(w) for v, w in zip(line, widths)) for line in lines]
        epochs = sorted({r["epoch"] + 1 for r in self._summarised()})
        if epochs:
            span = f"epoch {epochs[0]}" if len(epochs) == 1 else (
                f"epochs {epochs[0]}-{epochs[-1]}")
            text.append(f"means over {span}{' (epoch 1 traces)' if epochs[0] > 1 else ''}; "
                        "each epoch's figures: monitor.history, History, TensorBoard")
        computes = [row["compute_ms"] for row in rows]
        if rows and all(np.isfinite(computes)) and statistics.median(computes) > 0:
            text.append(f"straggler ratio {max(computes) / statistics.median(computes):.2f} "
                        "(slowest compute / median)")
        if self.train_seconds:
            text.append(f"monitor cost {100.0 * self.own_seconds / self.train_seconds:.2f}% "
                        "of training time")
        for shares in self.run.shares if self.run else ():
            for change in shares.changes:
                text.append(f"epoch {change['epoch']}: batch sizes "
                            f"{change['batch_sizes_before']} -> {change['batch_sizes_after']}")
        return "\n".join(text)


def _finite_mean(values):
    """The mean of the measured values (the probe skips intervals), or nan."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


class _Run:
    """One `fit` watched by a `TrainingMonitor`: what it measured so far."""

    def __init__(self, monitor, start):
        self.monitor, self.start = monitor, start
        self._started = time.monotonic()
        self._steps_done = 0
        self.strategy = chief_lib.strategy_of(monitor.model)
        (self._kind, self._units, self._per_unit,
         self._local) = measure.local_units(self.strategy)
        self._exchange = measure.Exchange(self.strategy, self._kind, self._units,
                                          self._per_unit)
        self._busy = utilization.make_reader(len(tf.config.list_physical_devices("GPU")))
        strategy = monitor.model.distribute_strategy
        self.shares = [s for s in kinds.kind_of_model(monitor.model).adaptive_shares()
                       if s.units == self._units]
        self.steering = steering.ShareSteering(
            self.shares, order.position_of(strategy), monitor.model) if self.shares else None
        # Compute is measured where a unit can hold others back, or adaptive shares need
        # the speeds.
        self.compute = compute_lib.ComputeTimes(
            monitor.model, self.strategy, self._local, self._kind,
            repeats=monitor.probe_repeats, budget=monitor.probe_budget, start=start,
            wanted=self._units > 1 or bool(self.shares))

    def begin_epoch(self, epoch):
        if self.steering:
            self.steering.begin_epoch(epoch, (self.monitor.params or {}).get("epochs"))
        self._epoch = epoch
        self._epoch_base = self._steps_done
        # (batch, time) at each step's end, in the order Keras' batch hooks ran.
        self.ends = []
        self._window_start = time.perf_counter()

    def interval_ended(self, logs):
        """Measures and records an interval of `every_n_steps` steps within the epoch."""
        self._flush(logs, final=False)
        self.ends = self.ends[-1:]

    def end_epoch(self, epoch, logs):
        try:
            due = self._probe_due(final=True)
            measured, record = self._measured(
                due, self.steering and self.steering.repeats(epoch))
            jumped = bool(self.steering) and self.steering.jumped(epoch, record)
            if jumped and self.compute.wanted and not self.compute.clock:
                # A unit's speed changed: its new speed, now.
                measured, record = self._measured(True, steering.DECISIVE_REPEATS)
            self._publish(logs, record, final=True)
            if self.steering:
                # Clocked speeds of every epoch are published; the shares take them as
                # they take the probe's, so that settled shares stay settled.
                self.steering.decide(epoch, record, probed=measured and (due or jumped),
                                     jumped=jumped, steps=self._steps_done - self._epoch_base)
        finally:
            if self.steering:  # a pipeline may be waiting for the next epoch's shares
                self.steering.unblock(epoch)

    def end(self):
        if self.steering:
            self.steering.release()

    def _unit_batches(self):
        """Examples per step of each unit, or `None` when unknown."""
        # Older adaptive data sets may still be alive: the one in use was read since
        # training began.
        in_use = [s for s in self.shares
                  if s.last_read is not None and s.last_read >= self._started]
        if in_use:
            shares = max(in_use, key=lambda s: s.last_read)
            return list(shares.unit_batch_sizes(self._epoch, wait=False))
        if self.monitor.global_batch_size:
            return [self.monitor.global_batch_size / self._units] * self._units
        return None

    def _step_seconds(self):
        ends = sorted(self.ends)
        if len(ends) > 1 and ends[-1][0] > ends[0][0]:
            return (ends[-1][1] - ends[0][1]) / (ends[-1][0] - ends[0][0])
        steps = (ends[-1][0] + 1) if ends else 1
        return (time.perf_counter() - self._window_start) / max(steps, 1)

    def _probe_due(self, final):
        """Whether this interval's end probes, when the clock has no figures: as adaptive
        shares ask at an epoch's end, else as the budget allows."""
        if self.compute.wanted and final and self.steering:
            return self.steering.probe_due(self._epoch)
        return self.compute.probe_affordable(min(self.ends)[1] if self.ends else None)

    def _flush(self, logs, *, final):
        """Measures, exchanges and records one interval."""
        self._publish(logs, self._measured(self._probe_due(final))[1], final)

    def _measured(self, probe, repeats=None):
        """`(compute measured, record)`: this interval's figures of every unit, exchanged;
        compute from the clock, else from the probe when `probe`."""
        if self.ends:
            self._steps_done = max(self._steps_done,
                                   self._epoch_base + max(b for b, _ in self.ends) + 1)
        step = self._step_seconds()
        first = (self.ends[0][1] - self._window_start
                 if self.ends and self.ends[0][0] == 0 else float("nan"))
        batches = self._unit_batches()
        memory, peak = measure.memory_bytes()
        busy = 100.0 * self._busy.read()
        unit_batches = {unit: batches[unit] if batches else 32.0 * self._per_unit
                        for unit in self._local}
        clocked = bool(self.compute.clocked(step, self._steps_done))
        if probe and not clocked:
            self.compute.probe(unit_batches, repeats)
        rows = {unit: figures_lib.to_row({
            "step_ms": 1000.0 * step,
            "compute_ms": 1000.0 * self.compute.last.get(unit, float("nan")),
            "batch": batch, "memory_mb": memory / _MB, "peak_memory_mb": peak / _MB,
            "utilization_pct": busy, "first_step_ms": 1000.0 * first})
            for unit, batch in unit_batches.items()}
        table = self._exchange(rows)
        return clocked or probe, self._record(table, batches is not None)

    def _publish(self, logs, record, final):
        record["final"] = final
        self.monitor.history.append(record)
        self._log(logs, record, final)
        scalars.write(self.monitor.log_dir, self.strategy, record)
        if self.monitor.metrics is not None:
            self.monitor.metrics.publish(record, sorted(self._local), devices=self._busy.devices,
                                         share_changes=sum(len(s.changes) for s in self.shares))

    def _record(self, table, known_batches):
        units = []
        for row in table:
            unit = figures_lib.from_row([float(v) for v in row])
            unit["wait_ms"] = (max(0.0, unit["step_ms"] - unit["compute_ms"])
                               if np.isfinite(unit["compute_ms"]) else float("nan"))
            unit["examples_per_sec"] = (1000.0 * unit["batch"] / unit["step_ms"]
                                        if known_batches and unit["step_ms"] > 0 else
                                        float("nan"))
            units.append(unit)
        computes = [u["compute_ms"] for u in units]
        ratio = (max(computes) / statistics.median(computes)
                 if all(np.isfinite(computes)) and statistics.median(computes) > 0 else 1.0)
        return {"epoch": self._epoch, "step": self._steps_done, "final": None,
                "units": units, "straggler_ratio": ratio}

    def _log(self, logs, record, final):
        """This worker's figures: `SHOWN` into `logs`, the others into this fit's `History`.

        Keras' progress bar prints every key of `logs` with four decimals; `History` and
        the progress bar both read `logs`, so the others go to `History` directly.
        """
        own = min(self._local)
        figures = {f.name: f.value(record, own) for f in figures_lib.FIGURES if f.logged}
        shown = {name: figures[name] for name in SHOWN if np.isfinite(figures[name])}
        if logs is not None:
            logs.update(shown)
        history = getattr(self.monitor.model, "history", None)
        if final and isinstance(history, keras.callbacks.History):
            # One value per epoch, nan where not measured, as the lists of Keras' logs.
            for name, value in figures.items():
                if name not in shown:
                    history.history.setdefault(name, []).append(value)
