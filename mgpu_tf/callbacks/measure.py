"""What `mgpu_tf.callbacks.TrainingMonitor` measures on each worker, and how it shares it.

Design: docs/design.md#training-monitor
"""

import math
import statistics
import time

import numpy as np
import tensorflow as tf

from mgpu_tf.compat import collective_keys
from mgpu_tf.strategies import kinds

__all__ = ["memory_bytes", "ComputeProbe", "Exchange", "local_units", "SHORTEST_SAMPLE"]

_PROC_STATUS = "/proc/self/status"
# Seconds: a timed sample of the probe repeats shorter passes up to this.
SHORTEST_SAMPLE = 0.002


def memory_bytes():
    """`(in use, peak)` bytes: of the process' GPUs when it has any, else its resident set."""
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        infos = [tf.config.experimental.get_memory_info(d.name) for d in gpus]
        return sum(i["current"] for i in infos), sum(i["peak"] for i in infos)
    fields = {}
    try:
        with open(_PROC_STATUS) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    fields[name] = int(value.split()[0]) * 1024
    except OSError:
        return float("nan"), float("nan")
    return fields.get("VmRSS", float("nan")), fields.get("VmHWM", float("nan"))


def local_units(strategy):
    """`(kind, units, replicas per unit, {this process' unit: its devices})`, `kind` the
    strategy's `StrategyKind` (`None` for what is not a strategy)."""
    try:
        kind = kinds.kind_of(strategy)
    except TypeError:  # a hybrid model's communicator: its worker is one unit
        return None, 1, 1, {0: [None]}
    return (kind, *kind.local_units())


class ComputeProbe:
    """Times `model`'s forward and backward pass on a batch of this worker, alone.

    The input is a constant batch of the model's input shape; the pass is the
    gradient of the summed outputs, in inference mode, so no state changes.

    Args:
        model: a built Keras model with `inputs`.
        repeats: timed passes per measurement; the median counts. Defaults to `1`.
    """

    def __init__(self, model, repeats=1):
        self.model, self.repeats = model, repeats
        self._warm = {}  # (batch, device): passes per timed sample
        self._step = None

    def _function(self):
        model = self.model

        # Eager: a trace costs several passes, and a probe takes a few passes at a time.
        def step(inputs):
            with tf.GradientTape() as tape:
                outputs = model(inputs, training=False)
                total = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32))
                                  for o in tf.nest.flatten(outputs)])
            grads = tape.gradient(total, model.trainable_variables)
            return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads
                             if g is not None] or [total])

        return step

    def _inputs(self, batch):
        inputs = getattr(self.model, "inputs", None)
        if not inputs:
            raise ValueError("the model has no `inputs` (build it with keras.Input)")
        made = []
        for tensor in inputs:
            shape = [batch] + [d or 1 for d in tuple(tensor.shape)[1:]]
            dtype = tf.as_dtype(tensor.dtype)
            # Constant input: a random draw would move TensorFlow's global generator.
            made.append(tf.fill(shape, tf.constant(0.5, dtype)) if dtype.is_floating
                        else tf.zeros(shape, dtype))
        return made[0] if len(made) == 1 else made

    def seconds(self, batch, device=None, repeats=None):
        """Median seconds of one forward and backward pass on `batch` examples, over
        `repeats` samples (defaults to the probe's `repeats`)."""
        if self._step is None:
            self._step = self._function()
        with tf.device(device):
            inputs = self._inputs(max(int(batch), 1))
            if (batch, device) not in self._warm:
                self._step(inputs).numpy()  # traces, or warms up a new batch size
                start = time.perf_counter()
                self._step(inputs).numpy()
                # A sample of a pass that short repeats it, so timer noise stays small.
                self._warm[batch, device] = max(
                    1, math.ceil(SHORTEST_SAMPLE / max(time.perf_counter() - start, 1e-6)))
            passes = self._warm[batch, device]
            times = []
            for _ in range(repeats or self.repeats):
                start = time.perf_counter()
                for _ in range(passes):
                    self._step(inputs).numpy()
                times.append((time.perf_counter() - start) / passes)
        return statistics.median(times)


class Exchange:
    """Every unit's row of figures, on every worker: `exchange(rows)`.

    Across processes one sum of the rows over the replicas, traced once, so that its
    collective keeps its instance key (TensorFlow keeps a record of each new one).

    Args:
        strategy: the training strategy.
        kind: its `StrategyKind` (`local_units`), or `None`.
        units: units in the cluster.
        replicas_per_unit: replicas of one unit.
    """

    def __init__(self, strategy, kind, units, replicas_per_unit):
        self.strategy, self.units, self.per_unit = strategy, units, replicas_per_unit
        self._sum = None
        if kind is not None and kind.spans_processes:
            self._sum = tf.function(collective_keys.keeping_keys(
                lambda values: strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None),
                strategy))

    def __call__(self, rows):
        """A float64 array of shape `[units, figures]` from this process' rows,
        `{unit: [figures]}`."""
        if self._sum is None:
            return np.array([rows[u] for u in range(self.units)], np.float64)
        width = len(next(iter(rows.values())))

        def value(context):
            replica = context.replica_id_in_sync_group
            table = np.zeros([self.units, width], np.float32)
            if replica % self.per_unit == 0 and replica // self.per_unit in rows:
                table[replica // self.per_unit] = rows[replica // self.per_unit]
            return tf.constant(table)

        values = self.strategy.experimental_distribute_values_from_function(value)
        return np.asarray(self._sum(values), np.float64)
