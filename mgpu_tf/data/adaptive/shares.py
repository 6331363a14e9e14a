"""The shares of one adaptive data set: each unit's part of the global batch, epoch by epoch.

Pipelines read the shares of each epoch; a steering callback decides them from measured
speeds (`steering`), moving sizes in grains (`mgpu_tf.data.split.grain`) when `settle` says
a move pays.

Design: docs/design.md#adaptive-shard-weights
"""

import logging
import math
import threading
import time

import numpy as np

from mgpu_tf.data import marks
from mgpu_tf.data import split
from mgpu_tf.data.adaptive import compute_curve
from mgpu_tf.data.adaptive import settle
from mgpu_tf.data.adaptive.settle import DEFAULT_MAX_CHANGE, DEFAULT_TOLERANCE

__all__ = ["AdaptiveShares", "DECISION_TIMEOUT_SECONDS", "STEERS_ATTRIBUTE"]

logger = logging.getLogger("mgpu_tf")

# How long a pipeline reading the next epoch's shares waits for the decision. The decision
# comes at the end of the epoch before, after every worker's figures are exchanged (and the
# compute probe ran), which a slow worker's checkpoint or evaluation can hold up for minutes;
# past this the fit is taken to be stuck elsewhere and the pipeline keeps the latest shares.
# A fit that ends or fails releases its waiters at once (`release`).
DECISION_TIMEOUT_SECONDS = 600.0

# True on a callback that decides the shares of the data sets it trains on
# (`mgpu_tf.callbacks.TrainingMonitor`).
STEERS_ATTRIBUTE = "steers_adaptive_shares"


def _normalised(values):
    total = float(sum(values))
    return tuple(float(v) / total for v in values)


class AdaptiveShares:
    """The shares of one adaptive data set, epoch by epoch.

    Args:
        global_batch_size: examples per step over all replicas.
        num_workers: workers in the cluster.
        replicas_per_worker: replicas on each worker.
        initial: starting weights, one per unit (worker, or replica on one
            machine). Defaults to `None` (even).
        max_change: largest relative move of a share in one epoch (`next_shares`).
            Defaults to `0.5`.
        tolerance: predicted step gain (relative) below which settled shares stay.
            Defaults to `0.1`.
    """

    def __init__(self, global_batch_size, num_workers, replicas_per_worker, initial=None, *,
                 max_change=DEFAULT_MAX_CHANGE, tolerance=DEFAULT_TOLERANCE):
        self.units = num_workers if num_workers > 1 else replicas_per_worker
        start = _normalised(initial if initial is not None else [1.0] * self.units)
        # Epoch 0's split, which also checks that the replicas can share the batch.
        self.first_batch_sizes = split.replica_batch_sizes(
            global_batch_size, num_workers, replicas_per_worker, list(start))
        self.global_batch_size = int(global_batch_size)
        self.num_workers = num_workers
        self.replicas_per_worker = replicas_per_worker
        self.max_change, self.tolerance = max_change, tolerance
        # Sizes move in whole grains (the same few sizes, so each compiles once); every unit
        # keeps one.
        self._per_unit = replicas_per_worker if num_workers > 1 else 1
        self.grain = split.grain(self.global_batch_size, self.units, self._per_unit)
        self.grain_count = self.global_batch_size // self.grain
        self._settle = settle.Settle(start_band=tolerance)
        self._last_step = (None, None)  # the latest measured epoch and its step seconds
        self._probed = None  # the last epoch whose figures had speeds
        self._kept = 0  # decisions in a row that had speeds and kept the shares
        self._logged = False
        self._schedule = {0: start}
        self.changes = []
        self._driven = False
        self._cond = threading.Condition()
        self.last_read = None  # when a pipeline last read the shares (time.monotonic())

    # ------------------------------------------------------------------ reading

    def shares_for(self, epoch, *, wait=True):
        """The shares in force for `epoch` (waits for a pending decision when driven)."""
        epoch = int(epoch)
        with self._cond:
            if wait:  # a pipeline's read (the others look without waiting)
                self.last_read = time.monotonic()
            if wait and self._driven and epoch == max(self._schedule) + 1:
                if not self._cond.wait_for(
                        lambda: epoch in self._schedule or not self._driven,
                        DECISION_TIMEOUT_SECONDS):
                    logger.warning("mgpu_tf: no adaptive shares were decided for epoch %d "
                                   "within %.0f s; it keeps the latest.", epoch,
                                   DECISION_TIMEOUT_SECONDS)
            known = [e for e in self._schedule if e <= epoch]
            return self._schedule[max(known) if known else min(self._schedule)]

    def decided(self, epoch):
        """True when the shares of `epoch` are known."""
        with self._cond:
            return int(epoch) in self._schedule

    def batch_sizes(self, epoch, *, wait=True):
        """Per-replica batch sizes for `epoch`, in global replica order."""
        return split.replica_batch_sizes(self.global_batch_size, self.num_workers,
                                         self.replicas_per_worker,
                                         list(self.shares_for(epoch, wait=wait)))

    def unit_batch_sizes(self, epoch, *, wait=True):
        """Examples per step of each unit (worker, or replica on one machine)."""
        sizes = self.batch_sizes(epoch, wait=wait)
        if self.num_workers > 1:
            return split.worker_batch_sizes(sizes, self.replicas_per_worker)
        return tuple(sizes)

    def size_set(self):
        """Every per-replica batch size a decision can give (the start's sizes aside)."""
        sizes = set()
        rest = self.global_batch_size - self.grain * self.grain_count
        for k in range(1, self.grain_count - self.units + 2):
            for extra in {0, rest}:
                total, per = k * self.grain + extra, self._per_unit
                sizes |= {total // per, -(-total // per)}
        return sorted(sizes)

    def positions(self, epoch, worker, replica):
        """Where one replica's examples sit in each block of `global_batch_size`.

        Blocks go to workers by the weighted round robin of `mgpu_tf.data.split.smooth_pattern`,
        and a worker's part to its replicas the same way, as `mgpu_tf.data.plan` lays out
        weighted shards.
        """
        sizes = self.batch_sizes(epoch)
        per = self.replicas_per_worker
        pattern = split.smooth_pattern(split.worker_batch_sizes(sizes, per))
        mine = [p for p, owner in enumerate(pattern) if owner == worker]
        local = split.smooth_pattern(tuple(sizes[worker * per:(worker + 1) * per]))
        return np.array([p for j, p in enumerate(mine) if local[j] == replica], np.int64)

    # ------------------------------------------------------------------ deciding

    def drive(self):
        """A monitor decides the shares from now on: pipelines wait for its decisions."""
        with self._cond:
            self._driven = True
        if not self._logged:
            self._logged = True
            logger.info("mgpu_tf: adaptive shards move in grains of %d examples per unit; "
                        "per-replica batch sizes from %s.", self.grain, self.size_set())

    def release(self):
        """Nothing decides any more: waiting pipelines take the latest shares at once."""
        with self._cond:
            self._driven = False
            self._cond.notify_all()

    def check_fit(self, data, callbacks):
        """`ValueError` when `fit` trains on this data set (`data`) and nothing drives its
        shares nor does one of `callbacks` steer them (`STEERS_ATTRIBUTE`)."""
        if marks.adaptive_of(data) is not self:
            return
        given = getattr(callbacks, "callbacks", callbacks) or []
        with self._cond:
            driven = self._driven
        if driven or any(getattr(c, STEERS_ATTRIBUTE, False) is True for c in given):
            return
        raise ValueError(
            "weights='adaptive' needs mgpu_tf.callbacks.TrainingMonitor() in fit's callbacks. "
            f"Received: callbacks={list(given)!r}")

    def wants_speeds(self, epoch):
        """Whether the figures of `epoch` should bring speeds (the compute probe's).

        Always while the shares move or have not settled; once a decision kept them,
        after 2, 4, 8 and at most 16 epochs (`epoch_ended` also asks for them when the
        step time jumps). Every worker answers the same.
        """
        if self._probed is None or self._kept == 0 or self._settle.moving:
            return True
        return int(epoch) - self._probed >= 2 ** min(self._kept, settle.LONGEST_BACKOFF)

    def jumped(self, epoch, step_seconds):
        """True when `epoch`'s step time moved clearly from the epoch before's, under the
        same sizes: something other than the shares changed a unit's speed."""
        epoch = int(epoch)
        measured, before = self._last_step
        if (measured != epoch - 1 or before is None or step_seconds is None or not before > 0
                or self.batch_sizes(epoch, wait=False) != self.batch_sizes(epoch - 1,
                                                                           wait=False)):
            return False
        return abs(step_seconds - before) > settle.CLEAR_CHANGE * before

    def next_open(self, epoch):
        """The epoch that the figures of `epoch` decide (`epoch_ended`)."""
        return int(epoch) + 1 if not self.decided(int(epoch) + 1) else int(epoch) + 2

    def epoch_ended(self, epoch, speeds, figures=None, *, steps=None, step_seconds=None,
                    first_step_seconds=None, jit_compile=False, jumped=False):
        """Decides from the figures of `epoch` the shares of the first epoch not yet read.

        That is `epoch + 1` only after epoch 0; its shares then also hold for `epoch + 2`,
        and from there on the figures of `epoch` decide `epoch + 2`, so that no pipeline
        waits at an epoch's end for a decision. `jumped` (see `jumped`) drops the speeds
        measured before the jump. Arguments as `decide`'s.

        Returns:
            The epoch decided.
        """
        epoch = int(epoch)
        target = self.next_open(epoch)
        self.decide(target, speeds, figures, steps=steps, step_seconds=step_seconds,
                    first_step_seconds=first_step_seconds, jit_compile=jit_compile,
                    measured=epoch, restart=jumped)
        if target == epoch + 1:
            with self._cond:
                self._schedule[epoch + 2] = self._schedule[target]
                self._cond.notify_all()
        return target

    def decide(self, epoch, speeds, figures=None, *, steps=None, step_seconds=None,
               first_step_seconds=None, jit_compile=False, measured=None, restart=False):
        """Sets the shares of `epoch` from the speeds measured in the epochs before.

        The speeds are smoothed over epochs; the shares move, in whole grains, when the
        move is predicted to make the step `tolerance` faster and to pay back what it
        costs within `steps` (`mgpu_tf.data.settle`). Every worker must pass the same
        figures, so that all decide the same.

        Args:
            epoch: the epoch the new shares are for.
            speeds: each unit's examples per second of compute.
            figures: what else to log beside the change (a dict).
            steps: steps of an epoch. Defaults to `None` (a move need not pay back).
            step_seconds: the last epoch's step time. Defaults to `None`.
            first_step_seconds: the last epoch's first step time, which holds any compile
                of new sizes. Defaults to `None`.
            jit_compile: whether the step is compiled by XLA, once per new size.
                Defaults to `False`.
            measured: the epoch the figures are of. Defaults to `epoch - 1`.
            restart: forget the speeds of earlier epochs. Defaults to `False`.

        Returns:
            The shares in force for `epoch`.
        """
        epoch = int(epoch)
        measured = epoch - 1 if measured is None else int(measured)
        before = self.shares_for(epoch - 1, wait=False)
        self._last_step = (measured, step_seconds)
        self._settle.observe(self.batch_sizes(measured, wait=False), first_step_seconds,
                             step_seconds)
        fresh = settle.usable(speeds, self.units)
        if fresh:
            if restart:
                self._settle.window.restart()
                self._kept = 0
            self._probed = measured
        after = self._proposal(epoch, before, speeds, steps, jit_compile, measured)
        if fresh:
            self._kept = self._kept + 1 if after == before and not self._settle.moving else 0
        with self._cond:
            self._schedule[epoch] = after
            self._cond.notify_all()
        if after != before:
            old = self.unit_batch_sizes(epoch - 1, wait=False)
            new = self.unit_batch_sizes(epoch, wait=False)
            change = {"epoch": epoch, "batch_sizes_before": list(old),
                      "batch_sizes_after": list(new),
                      "speeds": [round(float(s), 1) for s in speeds],
                      "shares": list(after), **(figures or {})}
            self.changes.append(change)
            logger.info("mgpu_tf: adaptive shards for epoch %d: batch sizes %s -> %s "
                        "(measured examples/s of compute %s%s)", epoch, list(old), list(new),
                        change["speeds"], "".join(f", {k} {v}" for k, v in (figures or {})
                                                  .items()))
        return after

    def _proposal(self, epoch, before, speeds, steps, jit_compile, measured):
        """The shares `decide` sets: `before`, or the best sizes by the curves when they pay."""
        if not settle.usable(speeds, self.units):
            return before
        self._settle.window.add(speeds, self.unit_batch_sizes(measured, wait=False))
        curves = self._settle.window.curves()
        now = self.unit_batch_sizes(epoch - 1, wait=False)
        grains, target = (compute_curve.best_grains(
            curves, self._unit_sizes, self.grain_count,
            *compute_curve.bounds(before, self.grain_count, change), now=before)
            for change in (self.max_change, math.inf))
        proposed = self._unit_sizes(grains)
        shares = tuple(size / self.global_batch_size for size in proposed)
        per_replica = split.replica_batch_sizes(self.global_batch_size, self.num_workers,
                                                self.replicas_per_worker, list(shares))
        cost = self._settle.cost(per_replica, jit_compile, planned=self.batch_sizes(
            epoch - 1, wait=False))
        # The latest figure must agree: one figure timed beside a busy neighbour moves a
        # median of two.
        if proposed == now or not all(
                self._settle.worth(now, proposed, each, cost=cost, steps=steps)
                for each in (curves, self._settle.window.curves(latest=True))):
            self._settle.moving = False
            return before
        self._settle.moving = grains != target
        return shares

    def _unit_sizes(self, grains):
        return split.grain_sizes(grains, self.grain, self.global_batch_size)

    # ------------------------------------------------------------------ backups

    def state(self):
        """The shares decided so far, as JSON-ready data (for a backup)."""
        with self._cond:
            return {"schedule": {str(e): list(s) for e, s in self._schedule.items()}}

    def start_at(self, epoch):
        """A fit resumed at `epoch` trains it on the latest shares known for it.

        No epoch before it runs in this fit to decide them, so no pipeline may wait for
        that decision (it would wait `DECISION_TIMEOUT_SECONDS`). Shares a backup kept for
        `epoch` stay; without them (another number of replicas), those the start had.
        """
        epoch = int(epoch)
        with self._cond:
            self._schedule.setdefault(epoch, self.shares_for(epoch, wait=False))
            self._cond.notify_all()

    def restore(self, state):
        """Takes back the shares of a backup, so a resumed epoch has the shares it had."""
        schedule = {int(e): tuple(float(v) for v in s)
                    for e, s in state["schedule"].items()}
        if any(len(s) != self.units for s in schedule.values()):
            raise ValueError(
                f"The backup's adaptive shares are for {len(next(iter(schedule.values())))} "
                f"units; this data set has {self.units}. Resume with the cluster that wrote "
                "the backup, or remove the backup directory to start again.")
        with self._cond:
            self._schedule = schedule
            self._cond.notify_all()
