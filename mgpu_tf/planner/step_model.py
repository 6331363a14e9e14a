"""The data-parallel step on N devices: compute, the wait for the slowest, and the all-reduce.

Design: docs/design.md#step-time-model
"""

import dataclasses
import math
import numbers

from mgpu_tf.planner import cost_model

__all__ = ["Schedule", "SCHEDULES", "StepPrediction", "predict_step", "resolve_schedule",
           "DEFAULT_JITTER", "BACKWARD_FRACTION", "check_jitter"]

# Relative step-to-step variation of one device's compute (see docs/planner.md).
DEFAULT_JITTER = 0.02
# The backward pass's share of a training step's compute: two matrix products per
# forward one (the gradients of the input and of the weights).
BACKWARD_FRACTION = 2 / 3


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How a framework runs a step's all-reduce.

    Attributes:
        name: its name in `SCHEDULES`.
        overlap: whether buckets are all-reduced during the backward pass.
        bucket_bytes: bytes per all-reduce, or `None` for one all-reduce of everything.
        cycle_seconds: a fixed wait per step before the last all-reduce starts.
        description: what it stands for, and where its figures come from.
    """

    name: str
    overlap: bool
    bucket_bytes: float = None
    cycle_seconds: float = 0.0
    description: str = ""


SCHEDULES = {
    schedule.name: schedule for schedule in (
        Schedule("keras", False, None, 0.0,
                 "tf.distribute's strategies under Keras fit: every gradient in one "
                 "all-reduce after the backward pass"),
        Schedule("horovod", True, 64 * 2**20, 5e-3 / 2,
                 "Horovod before 0.21: 64 MB fusion buckets reduced during the backward "
                 "pass, a 5 ms background cycle (half of it waited on average)"),
        Schedule("horovod-0.21", True, 128 * 2**20, 1e-3 / 2,
                 "Horovod 0.21 and later: 128 MB fusion buckets, a 1 ms cycle"),
    )
}


def _non_negative(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise ValueError(f"`{name}` must be a non-negative number. Received: {name}={value!r}")
    return float(value)


def check_jitter(jitter, name="jitter"):
    """Returns `jitter` as a float: a relative standard deviation, at least 0 and below 1.

    At 1 and more a step would vary by its whole length, where the wait for the slowest
    device (`compute x jitter x sqrt(2 ln N)`) no longer describes one.
    """
    if isinstance(jitter, bool) or not isinstance(jitter, numbers.Real) or not 0 <= jitter < 1:
        hint = f" For {jitter:g}%, give {jitter / 100:g}." if (
            isinstance(jitter, numbers.Real) and 1 <= jitter < 100) else ""
        raise ValueError(
            f"`{name}` must be a fraction of the step, at least 0 and below 1 (the default "
            f"{DEFAULT_JITTER} is 2%). Received: {name}={jitter!r}.{hint}")
    return float(jitter)


def resolve_schedule(schedule):
    """Returns the `Schedule` named (or given)."""
    if isinstance(schedule, Schedule):
        return schedule
    name = str(schedule).strip().lower()
    if name not in SCHEDULES:
        raise ValueError(f"`schedule` must be one of {', '.join(SCHEDULES)}. "
                         f"Received: schedule={schedule!r}")
    return SCHEDULES[name]


@dataclasses.dataclass(frozen=True)
class StepPrediction:
    """One predicted data-parallel step of `devices` devices, `batch` examples each, in seconds.

    Attributes:
        compute: one device's step; `straggler`: the wait for the slowest device.
        cycle: the schedule's fixed wait.
        communication: all the all-reduces, as if nothing overlapped them.
        exposed: the part of `communication` the step waits for.
    """

    devices: int
    batch: int
    compute: float
    straggler: float
    cycle: float
    communication: float
    exposed: float

    @property
    def step(self):
        return self.compute + self.straggler + self.cycle + self.exposed

    @property
    def efficiency(self):
        """Throughput over `devices` times one device's: compute / step."""
        return self.compute / self.step if self.step else 1.0

    @property
    def throughput(self):
        """Examples per second over all devices."""
        return self.devices * self.batch / self.step if self.step else math.inf

    def as_dict(self):
        return dict(dataclasses.asdict(self), step=self.step, efficiency=self.efficiency,
                    throughput=self.throughput)


def predict_step(compute_seconds, gradient_bytes, devices, link, *, batch=1, schedule="keras",
                 jitter=DEFAULT_JITTER):
    """Predicts one data-parallel step over `devices` devices joined by `link`; a `StepPrediction`.

    Example:

    ```python
    from mgpu_tf.planner import interconnect, step_model
    prediction = step_model.predict_step(0.31, 102e6, 8, interconnect.resolve_interconnect(
        "nvlink2"), batch=128, schedule="horovod")
    prediction.efficiency  # about 0.95
    ```

    Args:
        compute_seconds: one device's step on its batch.
        gradient_bytes: bytes of one all-reduce of every gradient.
        link: an `mgpu_tf.planner.interconnect.Interconnect`.
        batch: examples per device, for the throughput. Defaults to `1`.
        schedule: a name from `SCHEDULES` or a `Schedule`. Defaults to `"keras"`.
        jitter: relative step-to-step variation of the compute. Defaults to `DEFAULT_JITTER`.
    """
    schedule = resolve_schedule(schedule)
    compute = _non_negative("compute_seconds", compute_seconds)
    jitter = check_jitter(jitter)
    if isinstance(devices, bool) or not isinstance(devices, numbers.Integral) or devices < 1:
        raise ValueError(f"`devices` must be an integer of at least 1. Received: "
                         f"devices={devices!r}")
    if devices == 1:
        return StepPrediction(1, batch, compute, 0.0, 0.0, 0.0, 0.0)
    size = float(gradient_bytes)
    bucket = size if schedule.bucket_bytes is None else min(size, schedule.bucket_bytes)
    buckets = max(1, math.ceil(size / bucket)) if bucket else 1
    hops = link.all_reduce_latency(devices)
    communication = buckets * hops + cost_model.ring_all_reduce_bytes(size, devices) \
        / link.bandwidth
    exposed = communication
    if schedule.overlap:
        last = hops + cost_model.ring_all_reduce_bytes(bucket, devices) / link.bandwidth
        exposed = max(last, communication - BACKWARD_FRACTION * compute)
    straggler = compute * jitter * math.sqrt(2 * math.log(devices))
    return StepPrediction(devices, batch, compute, straggler, schedule.cycle_seconds,
                          communication, exposed)
