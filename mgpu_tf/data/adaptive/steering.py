"""Adaptive shares steered through one `fit`: when to time the compute, what to decide.

A `TrainingMonitor` calls it at each epoch's end with the figures every worker exchanged,
so all decide alike.

Design: docs/design.md#adaptive-shard-weights
"""

import math

__all__ = ["ShareSteering", "DECISIVE_REPEATS"]

# Compute samples of speeds that decide alone (the first, or after a jump of the step).
DECISIVE_REPEATS = 3


class ShareSteering:
    """The adaptive shares of one `fit`, fed by a `TrainingMonitor`'s figures.

    Args:
        shares: the `AdaptiveShares` of the data sets in use (the strategy kind's).
        position: the strategy's data position, told each epoch and its count.
        model: the Keras model trained (for `jit_compile`).
    """

    def __init__(self, shares, position, model):
        self.shares, self.position, self.model = shares, position, model
        self.epochs = None  # of this `fit`, when Keras says
        for each in shares:
            each.drive()

    def begin_epoch(self, epoch, epochs):
        self.position.set_epoch(epoch, epochs)
        self.epochs = epochs

    def _useful(self, epoch):
        """Whether the figures of `epoch` decide an epoch this `fit` still trains."""
        return self.epochs is None or any(s.next_open(epoch) < self.epochs
                                          for s in self.shares)

    def probe_due(self, epoch):
        """Whether the end of `epoch` times the compute (`AdaptiveShares.wants_speeds`)."""
        return self._useful(epoch) and any(s.wants_speeds(epoch) for s in self.shares)

    def repeats(self, epoch):
        """Compute samples at the end of `epoch`: the first speeds decide alone."""
        return DECISIVE_REPEATS if epoch == 0 else None

    def jumped(self, epoch, record):
        """Whether the step time of `epoch` (the slowest unit's) jumped under the same sizes."""
        return self._useful(epoch) and any(s.jumped(epoch, _step_seconds(record))
                                           for s in self.shares)

    def decide(self, epoch, record, *, probed, jumped, steps):
        """The shares that the figures of `epoch` (a monitor record) decide."""
        units = record["units"]
        # The epoch's first step holds any compile of new sizes.
        firsts = [u["first_step_ms"] for u in units if math.isfinite(u["first_step_ms"])]
        speeds = [u["batch"] / (u["compute_ms"] / 1000.0) if probed and u["compute_ms"] > 0
                  else float("nan") for u in units]
        for shares in self.shares:
            shares.epoch_ended(
                epoch, speeds, {"straggler_ratio": round(record["straggler_ratio"], 3)},
                steps=steps, step_seconds=_step_seconds(record),
                first_step_seconds=max(firsts) / 1000.0 if firsts else None,
                jit_compile=bool(self.model.jit_compile and not self.model.run_eagerly),
                jumped=jumped)

    def unblock(self, epoch):
        """Pipelines waiting for the shares after `epoch` take the latest."""
        for shares in self.shares:
            if not shares.decided(epoch + 1):
                shares.decide(epoch + 1, [])

    def release(self):
        for shares in self.shares:
            shares.release()
        self.position.release()


def _step_seconds(record):
    return max(u["step_ms"] for u in record["units"]) / 1000.0
