"""The speed side of a plan: one device's compute, and the step over 1, 2, 4, ... devices.

Design: docs/design.md#step-time-model
"""

import numbers
import os
import platform

from mgpu_tf.planner import step_model

__all__ = ["Compute", "check_compute", "resolve_compute", "device_counts", "scaling",
           "this_device"]


class Compute:
    """One device's step: `seconds`, and `source`, how it was obtained, in words."""

    def __init__(self, seconds, source, measured_here=False):
        self.seconds = seconds
        self.source = source
        self.measured_here = measured_here


def this_device():
    """This machine's device in words: its GPU's name, or its CPU's model and cores."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"GPU: {details.get('device_name', gpus[0].name)}"
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"CPU: {name}, {os.cpu_count()} cores"


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a number. Received: {name}={value!r}")
    if not value > 0:
        raise ValueError(f"`{name}` must be positive. Received: {name}={value!r}")
    return float(value)


def check_compute(compute_seconds=None, device_throughput=None):
    """Checks the two ways of giving the compute, before anything is traced."""
    if compute_seconds is not None and device_throughput is not None:
        raise ValueError(
            "Pass one of `compute_seconds` (one device's step) and `device_throughput` "
            "(examples per second on one device), not both. Received: "
            f"compute_seconds={compute_seconds!r}, device_throughput={device_throughput!r}")
    if compute_seconds is not None:
        _positive("compute_seconds", compute_seconds)
    if device_throughput is not None:
        _positive("device_throughput", device_throughput)


def resolve_compute(model, batch, optimizer, *, compute_seconds=None, device_throughput=None,
                    measure=True, sequence_length=None):
    """Returns the `Compute` of one device's step on `batch` examples, or `None`.

    `compute_seconds` (the step) or `device_throughput` (examples per second, the step being
    `batch / device_throughput`) are for the device planned for; without either, and with
    `measure`, the step is timed here on a copy of `model` with `optimizer` (its open input
    dimensions of `sequence_length`).
    """
    check_compute(compute_seconds, device_throughput)
    if compute_seconds is not None:
        return Compute(float(compute_seconds), f"given: {compute_seconds:g} s per step")
    if device_throughput is not None:
        return Compute(batch / float(device_throughput),
                       f"given: {device_throughput:g} examples/s per device")
    if not measure:
        return None
    from mgpu_tf.planner import timing

    seconds = timing.measure_step_seconds(model, batch, optimizer,
                                          sequence_length=sequence_length)
    return Compute(seconds, f"measured on this machine ({this_device()}), not on the devices "
                   "planned for: pass device_throughput= or compute_seconds= for theirs",
                   measured_here=True)


def device_counts(total):
    """1, 2, 4, ... up to `total`, and `total` itself when it is not a power of two."""
    counts, count = [], 1
    while count < total:
        counts.append(count)
        count *= 2
    return counts + [total]


def scaling(compute, gradient_bytes, total, link, batch, *, schedule="keras",
            jitter=step_model.DEFAULT_JITTER):
    """The predicted step (`step_model.StepPrediction`) at each of `device_counts(total)`.

    Every count keeps `batch` examples per device (weak scaling, as published tables measure).
    """
    return tuple(step_model.predict_step(compute, gradient_bytes, count, link, batch=batch,
                                         schedule=schedule, jitter=jitter)
                 for count in device_counts(total))
