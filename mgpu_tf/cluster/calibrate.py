"""Shard weights from measured speeds: how much of each batch each worker should get.

Runs the real job as each worker, alone and several times, reads the `examples_per_sec=X` it
prints, and proposes the weights of `mgpu_tf.shard_dataset`.

Design: docs/design.md#calibration
"""

import dataclasses
import io
import math
import numbers
import re
import statistics

from mgpu_tf.cluster import launcher

__all__ = ["CalibrationError", "Calibration", "SPEED_PATTERN", "SECONDS_PATTERN",
           "parse_speed", "parse_seconds", "propose_weights", "calibrate", "check_calibration"]

_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
SPEED_PATTERN = re.compile(r"\bexamples_per_sec=" + _NUMBER)
SECONDS_PATTERN = re.compile(r"\btimed_seconds=" + _NUMBER)
_WORKER_LINE = re.compile(r"^\[(\d+)\] (.*)$")


class CalibrationError(ValueError):
    """A calibration that measured no usable speed."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What `calibrate` measured: `runs`, for each worker, the examples per second of each run."""

    runs: tuple

    @property
    def speeds(self):
        """Each worker's median examples per second."""
        return [statistics.median(runs) for runs in self.runs]

    @property
    def spreads(self):
        """Each worker's (fastest - slowest run) / median: 0.05 is 5%."""
        return [(max(runs) - min(runs)) / statistics.median(runs) for runs in self.runs]


def parse_speed(text):
    """Returns the last `examples_per_sec=X` figure in `text`, or `None`."""
    found = SPEED_PATTERN.findall(text)
    return float(found[-1]) if found else None


def parse_seconds(text):
    """Returns the last `timed_seconds=Y` figure in `text`, or `None`."""
    found = SECONDS_PATTERN.findall(text)
    return float(found[-1]) if found else None


def propose_weights(speeds, *, digits=2):
    """Turns measured speeds (one per worker, in order) into shard weights, the slowest 1.

    `propose_weights([800.0, 400.0, 400.0])` is `[2.0, 1.0, 1.0]`, rounded to `digits`.
    Raises `CalibrationError` for an empty list or a speed that is not a positive number.
    """
    if isinstance(speeds, (str, bytes)) or not hasattr(speeds, "__len__") or not speeds:
        raise CalibrationError(
            f"`speeds` must list one speed per worker. Received: speeds={speeds!r}")
    for speed in speeds:
        if isinstance(speed, bool) or not isinstance(speed, numbers.Real) or not (
                math.isfinite(speed) and speed > 0):
            raise CalibrationError(
                "Every speed must be a positive number of examples per second. "
                f"Received: speeds={list(speeds)!r}")
    slowest = min(speeds)
    return [round(speed / slowest, digits) for speed in speeds]


def _check_number(name, value, *, least, integer=False, above=False):
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        raise launcher.LaunchError(f"`{name}` must be {'an integer' if integer else 'a number'}."
                                   f" Received: {name}={value!r}")
    if value < least or (above and value == least):
        raise launcher.LaunchError(
            f"`{name}` must be {'above' if above else 'at least'} {least}. "
            f"Received: {name}={value!r}")
    return value


def check_calibration(command, workers, *, repeats=3, max_spread=0.1, min_seconds=1.0,
                      env=None, grace_seconds=10.0, timeout_seconds=600.0):
    """Raises `launcher.LaunchError` for `calibrate`'s arguments that cannot run, before any run."""
    launcher.worker_tf_configs(workers)
    _check_number("repeats", repeats, least=2, integer=True)
    _check_number("max_spread", max_spread, least=0, above=True)
    _check_number("min_seconds", min_seconds, least=0)
    _check_number("timeout_seconds", timeout_seconds, least=0, above=True)
    launcher.check_request(command, workers, None, "127.0.0.1", env,
                           grace_seconds=grace_seconds)


def calibrate(command, workers, *, repeats=3, max_spread=0.1, min_seconds=1.0, env=None,
              output=None, progress=None, grace_seconds=10.0, timeout_seconds=600.0):
    """Runs `command` as each of `workers` local workers, alone, one after another, `repeats` times.

    Each run gets the TF_CONFIG `launch` would give it. The options are `mgpu-tf calibrate`'s
    (docs/cli.md); `output` and `progress` are streams for the workers' output and one line
    per run.

    Example:

    ```python
    result = calibrate(["python", "-m", "mgpu_tf.train", "--strategy=mirrored"], workers=2)
    propose_weights(result.speeds)  # near [1.0, 1.0] on identical workers
    ```

    Returns:
        A `Calibration`: `.speeds` (each worker's median) and `.spreads`.

    Raises:
        mgpu_tf.cluster.launcher.LaunchError: for a bad command or setting, before any run.
        CalibrationError: when a run fails, times out, reports no speed or too little
            timed work, or a worker's runs spread more than `max_spread`.
    """
    check_calibration(command, workers, repeats=repeats, max_spread=max_spread,
                      min_seconds=min_seconds, env=env, grace_seconds=grace_seconds,
                      timeout_seconds=timeout_seconds)
    runs = [[] for _ in range(workers)]
    total = repeats * workers
    for done in range(total):
        index = done % workers
        text = io.StringIO()
        code = launcher.run_alone(command, index, workers, env=env, output=text,
                                  grace_seconds=grace_seconds,
                                  timeout_seconds=timeout_seconds)
        if output is not None:
            output.write(text.getvalue())
        lines = [m.group(2) for m in map(_WORKER_LINE.match, text.getvalue().splitlines())
                 if m and int(m.group(1)) == index]
        runs[index].append(_speed(index, code, "\n".join(lines), min_seconds,
                                  timeout_seconds, f"run {done + 1} of {total}"))
        if progress is not None:
            progress.write(f"run {done + 1}/{total}: worker {index}: "
                           f"{runs[index][-1]:.1f} examples/s\n")
            progress.flush()
    result = Calibration(tuple(tuple(r) for r in runs))
    for index, spread in enumerate(result.spreads):
        if spread > max_spread:
            figures = ", ".join(f"{speed:.1f}" for speed in runs[index])
            raise CalibrationError(
                f"Calibration needs repeatable figures: each worker's runs may differ by at "
                f"most max_spread={max_spread:.0%} of their median. Received: worker {index} "
                f"ran at {figures} examples/s, a {spread:.0%} spread. Time more work per run "
                "(more epochs or steps), calibrate on a quieter machine, or accept the noise "
                "with a larger max_spread (--max_spread).")
    return result


def _speed(index, code, text, min_seconds, timeout_seconds, run):
    """The speed one run of worker `index` reported; raises when it is not usable."""
    speed, seconds = parse_speed(text), parse_seconds(text)
    tail = "\n".join(text.splitlines()[-15:])
    if code == launcher.TIMED_OUT:
        reason = (f"worker {index} did not finish in {timeout_seconds:g} seconds ({run}); "
                  "calibration runs each worker alone, so a job that waits for the others "
                  "(--strategy=multi_worker) never ends: use a local strategy such as "
                  "--strategy=mirrored")
    elif code:
        reason = f"worker {index} exited with code {code} ({run})"
    elif speed is None:
        reason = f"worker {index} printed no 'examples_per_sec=X' line ({run})"
    elif speed <= 0:
        reason = f"worker {index} reported examples_per_sec={speed} ({run})"
    else:
        if seconds is not None and seconds < min_seconds:
            raise CalibrationError(
                f"Calibration needs at least {min_seconds:g} s of timed work per run "
                f"(min_seconds={min_seconds:g}): shorter, the figures are mostly noise. "
                f"Received: worker {index} "
                f"timed {seconds:g} s (timed_seconds={seconds:g}, {run}). Time more work "
                "(more epochs or steps).")
        return speed
    raise CalibrationError(
        f"Calibration needs every run to finish and print 'examples_per_sec=X'; {reason}. "
        f"Received from worker {index}:\n{tail}")
