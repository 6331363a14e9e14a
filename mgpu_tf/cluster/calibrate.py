"""Shard weights from measured speeds: how much of each batch each worker should get.

Synchronous data parallelism waits for the slowest worker at every step. On a
heterogeneous cluster (an A100 node next to a T4 node) the fix is to give each
worker a share of the global batch in proportion to its speed (the `weights=` of
`mgpu_tf.shard_dataset`, `MGPU_TF_SHARD_WEIGHTS` in a pod). TensorFlow has no
measure of that speed; this module runs the real job on each worker, alone,
reads the speed it reports, and proposes the weights.

The contract with the job: each worker prints a line holding
`examples_per_sec=X` (the last one counts), measured on its own devices without
waiting for the others (a local strategy such as `--strategy=mirrored`, which
ignores TF_CONFIG). `python -m mgpu_tf.train` does, in its `done:` line; another
script prints, for instance, `calibrate: examples_per_sec=812.5`.

Example:

```python
speeds = calibrate(["python", "-m", "mgpu_tf.train", "--strategy=mirrored",
                    "--epochs=2"], workers=2)
propose_weights(speeds)  # e.g. [1.0, 1.0] on identical workers
```
"""

import io
import math
import numbers
import re

from mgpu_tf.cluster import launcher

__all__ = ["CalibrationError", "SPEED_PATTERN", "parse_speed", "propose_weights", "calibrate"]

SPEED_PATTERN = re.compile(r"\bexamples_per_sec=([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)")
_WORKER_LINE = re.compile(r"^\[(\d+)\] (.*)$")


class CalibrationError(ValueError):
    """A calibration that measured no usable speed."""


def parse_speed(text):
    """Returns the last `examples_per_sec=X` figure in `text`, or `None`."""
    found = SPEED_PATTERN.findall(text)
    return float(found[-1]) if found else None


def propose_weights(speeds, *, digits=2):
    """Turns measured speeds into shard weights, the slowest worker's weight being 1.

    Example:

    ```python
    propose_weights([800.0, 400.0, 400.0])  # [2.0, 1.0, 1.0]
    ```

    Args:
        speeds: examples per second of each worker, in the cluster's order.
        digits: decimals the weights are rounded to. Defaults to `2`.

    Returns:
        A list of floats, one per worker.

    Raises:
        CalibrationError: for an empty list or a speed that is not a positive number.
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


def calibrate(command, workers, *, env=None, output=None, grace_seconds=10.0):
    """Runs `command` as `workers` local workers and returns the speed each reports.

    The workers run together through `mgpu_tf.cluster.launcher.launch` (each with its
    TF_CONFIG, so a script can tell which worker it is), and must measure their
    speed on their own devices (see the module docstring).

    Args:
        command: the job and its arguments, a list of strings.
        workers: number of workers, at least 1.
        env: base environment of the workers. Defaults to this process' environment.
        output: a text stream that receives the workers' prefixed output.
            Defaults to none.
        grace_seconds: how long stopped workers get before SIGKILL. Defaults to `10`.

    Returns:
        A list of examples per second, one per worker.

    Raises:
        mgpu_tf.cluster.launcher.LaunchError: for a bad command or worker count.
        CalibrationError: when a worker fails or reports no speed; the message
            holds the end of its output.
    """
    text = io.StringIO()
    code = launcher.launch(command, workers, env=env, output=text,
                           grace_seconds=grace_seconds)
    lines = {i: [] for i in range(workers)}
    for line in text.getvalue().splitlines():
        match = _WORKER_LINE.match(line)
        if match and int(match.group(1)) in lines:
            lines[int(match.group(1))].append(match.group(2))
    if output is not None:
        output.write(text.getvalue())
    speeds = []
    for i in range(workers):
        speed = parse_speed("\n".join(lines[i]))
        if code or speed is None or speed <= 0:
            tail = "\n".join(lines[i][-15:])
            reason = f"the workers exited with code {code}" if code else (
                f"worker {i} printed no 'examples_per_sec=X' line" if speed is None else
                f"worker {i} reported examples_per_sec={speed}")
            raise CalibrationError(
                f"Calibration needs every worker to finish and print "
                f"'examples_per_sec=X'; {reason}. Received from worker {i}:\n{tail}")
        speeds.append(speed)
    return speeds
