"""An epoch over N devices: its steps, plus what an epoch costs besides its steps.

Design: docs/design.md#the-planner
"""

import dataclasses
import math
import numbers

__all__ = ["EpochPrediction", "check_epoch", "predict_epochs"]


@dataclasses.dataclass(frozen=True)
class EpochPrediction:
    """One predicted epoch over `devices` devices (seconds).

    Attributes:
        steps: training steps in the epoch; `step`: one of them (`StepPrediction.step`).
        overhead: the epoch's time outside its steps.
        one_device: the epoch on one device, the reference of `efficiency`.
    """

    devices: int
    steps: int
    step: float
    overhead: float
    one_device: float

    @property
    def seconds(self):
        return self.steps * self.step + self.overhead

    @property
    def efficiency(self):
        """One device's epoch over `devices` times this one."""
        return self.one_device / (self.devices * self.seconds) if self.seconds else 1.0

    def as_dict(self):
        return dict(dataclasses.asdict(self), seconds=self.seconds, efficiency=self.efficiency)


def check_epoch(epoch_examples=None, epoch_overhead=0.0):
    """Checks the epoch arguments of `plan`, before anything is traced."""
    if epoch_examples is not None and (isinstance(epoch_examples, bool) or not isinstance(
            epoch_examples, numbers.Integral) or epoch_examples < 1):
        raise ValueError("`epoch_examples` must be the number of examples in an epoch, at "
                         f"least 1. Received: epoch_examples={epoch_examples!r}")
    if isinstance(epoch_overhead, bool) or not isinstance(epoch_overhead, numbers.Real) \
            or not epoch_overhead >= 0:
        raise ValueError("`epoch_overhead` must be the seconds an epoch spends outside its "
                         f"steps, 0 or more. Received: epoch_overhead={epoch_overhead!r}")
    if epoch_overhead and epoch_examples is None:
        raise ValueError("`epoch_overhead` needs `epoch_examples`, the examples in an epoch. "
                         f"Received: epoch_overhead={epoch_overhead!r}, epoch_examples=None")


def predict_epochs(scaling, examples, overhead=0.0):
    """The epoch (`EpochPrediction`) at each row of `scaling` (`StepPrediction`s, the
    first of them one device's)."""
    check_epoch(examples, overhead)

    def steps(row):
        return math.ceil(examples / (row.devices * row.batch))

    first = scaling[0]  # one device: `speed.device_counts` starts at 1
    one_device = steps(first) * first.step + overhead
    return tuple(EpochPrediction(row.devices, steps(row), row.step, float(overhead),
                                 one_device) for row in scaling)
