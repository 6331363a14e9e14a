"""Each unit's compute per step, as `TrainingMonitor` reports it and adaptive shares weigh it.

On CPUs the train step times its own wait in the all-reduce (`wait_clock`): compute is the
step less that wait, at no cost. Elsewhere (a GPU's kernels run after the host's clock
reads), or while the clock has not run, `measure.ComputeProbe` times a pass alone, within a
share of the training time.

Design: docs/design.md#training-monitor
"""

import logging
import time

import tensorflow as tf

from mgpu_tf.callbacks import measure
from mgpu_tf.callbacks import wait_clock

__all__ = ["ComputeTimes"]

logger = logging.getLogger("mgpu_tf")


class ComputeTimes:
    """The compute seconds of this process' units (`local`, `{unit: devices}`), clocked
    or probed; `wanted` is false where no unit can hold another back."""

    def __init__(self, model, strategy, local, kind, *, repeats, budget, start, wanted):
        self.local, self.repeats, self.budget, self.start = local, repeats, budget, start
        self.wanted = wanted
        self._probe = measure.ComputeProbe(model, repeats)
        self.clock = None
        sums_in_optimizer = kind is not None and kind.sums_in_optimizer
        if (wanted and sums_in_optimizer and model.optimizer is not None
                and not tf.config.list_logical_devices("GPU")):
            self.clock = wait_clock.attach(model.optimizer, strategy)
        self.last = {}  # unit: its last measured compute seconds
        self.probe_seconds = 0.0  # spent probing so far
        self._probe_cost = None  # what the next probe may cost
        self._steps_read = 0  # steps done when the clock was last read
        self._first = None  # the clock after an epoch's first step, which it leaves out

    def first_step_ended(self):
        """An epoch's first step has ended: its wait is left out, as the step time leaves
        out its time (a peer still tracing the step would count as this one's wait)."""
        if self.clock is not None:
            self._first = self.clock.peek()

    def clocked(self, step_seconds, steps_done):
        """`{unit: the step less its shortest replica wait}` since the last call; empty
        where the clock did not run (a train step traced before it was made)."""
        steps, self._steps_read = steps_done - self._steps_read, steps_done
        first, self._first = self._first, None
        if self.clock is None:
            return {}
        figures = self.clock.read()
        if first is not None and steps > 1:  # as `_step_seconds`, from the first step's end
            steps -= 1
            figures = [(s - s0, c - c0) for (s, c), (s0, c0) in zip(figures, first)]
        figures = iter(figures)
        found = {}
        for unit in sorted(self.local):
            mine = [next(figures) for _ in self.local[unit]]
            if steps <= 0 or any(count == 0 for _, count in mine):
                return {}
            # Per step, not per all-reduce: with accumulation, fewer steps all-reduce.
            found[unit] = max(0.0, step_seconds - min(s for s, _ in mine) / steps)
        self.last.update(found)
        return found

    def probe_affordable(self, first_end):
        """Whether a probe keeps within the budget; the first costs Keras' first step
        (ended at `first_end`), whose trace it repeats."""
        if not self.wanted or self.budget is None:
            return self.wanted
        if self._probe_cost is None:
            self._probe_cost = first_end - self.start if first_end else float("inf")
        elapsed = time.perf_counter() - self.start
        return self.probe_seconds + self._probe_cost <= self.budget * elapsed

    def probe(self, unit_batches, repeats=None):
        """Probes every local unit at its examples per step (`{unit: examples}`)."""
        begin = time.perf_counter()
        for unit, devices in self.local.items():
            self.last[unit] = self._probed(unit_batches[unit], devices, repeats)
        self.probe_seconds += time.perf_counter() - begin
        # Warm, a probe takes `repeats` samples of at least the shortest per device.
        self._probe_cost = sum(
            len(devices) * self.repeats * max(measure.SHORTEST_SAMPLE, self.last.get(unit) or 0.0)
            for unit, devices in self.local.items())

    def _probed(self, unit_batch, devices, repeats):
        """This unit's compute per step: its slowest replica's probe, or nan."""
        if not self.wanted:
            return float("nan")
        try:
            per_replica = max(1, round(unit_batch / len(devices)))
            return max(self._probe.seconds(per_replica, d, repeats) for d in devices)
        except (ValueError, TypeError, tf.errors.OpError) as error:
            self.wanted = False
            logger.warning("mgpu_tf: TrainingMonitor cannot time the compute alone (%s); "
                           "compute and wait are left out.", error)
            return float("nan")
