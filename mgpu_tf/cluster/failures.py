"""Lost workers: detected within a bounded time, and reported by name.

Sets how long TensorFlow takes to notice a dead peer and turns its gRPC error into a
`WorkerLostError` naming the worker; uncaught, that ends the process in a few lines.

Design: docs/design.md#lost-workers
"""

import contextlib
import logging
import os
import re
import sys
import traceback

import tensorflow as tf

from mgpu_tf.cluster import step_watchdog
from mgpu_tf.compat import private_runtime

__all__ = [
    "DEFAULT_HEARTBEAT_SECONDS",
    "WorkerLostError",
    "as_worker_lost",
    "configure_failure_detection",
    "install_report",
    "lost_task",
    "unreachable_tasks",
    "worker_failures",
]

logger = logging.getLogger("mgpu_tf")

# TensorFlow's own heartbeat timeout, used when `timeout_seconds` is not given.
DEFAULT_HEARTBEAT_SECONDS = 10

_TASK = re.compile(r"/job:(chief|worker)(?:/replica:\d+)?/task:(\d+)")
_LOST_MARKERS = ("ring: lost", "stopped sending heartbeats", "unhealthy",
                 "Connection reset by peer", "Socket closed", "failed to connect",
                 "Connection refused", "has been disconnected", "DEADLINE_EXCEEDED",
                 "Deadline Exceeded", "timed out")


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker job stopped; the survivors cannot go on.

    `task_type` (`"worker"` or `"chief"`) and `task_index` name it, or are `None` when
    TensorFlow did not say.
    """

    def __init__(self, message, task_type=None, task_index=None):
        super().__init__(message)
        self.task_type = task_type
        self.task_index = task_index


def configure_failure_detection(config, timeout_seconds):
    """Sets the heartbeat and shutdown timeouts of TensorFlow's coordination service.

    Must run before the multi-worker strategy is made. `timeout_seconds` without a heartbeat
    make a worker lost. Returns False when this TensorFlow has no such setting.
    """
    jobs = {role: len(config.cluster[role]) for role in ("chief", "worker")
            if role in config.cluster}
    leader_role = "chief" if "chief" in config.cluster else "worker"
    try:
        return private_runtime.configure_coordination_service(
            f"/job:{leader_role}/replica:0/task:0", jobs, int(timeout_seconds * 1000))
    except private_runtime.PrivateNameError as error:
        logger.info("mgpu_tf: this TensorFlow cannot set heartbeat timeouts; keeping its "
                    "own: %s", error)
        return False


def lost_task(error):
    """Returns `(task_type, task_index)` of the worker an error says was lost, or None."""
    if not isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError,
                              tf.errors.DeadlineExceededError, tf.errors.InternalError,
                              tf.errors.CancelledError, tf.errors.UnknownError)):
        return None
    text = str(error)
    if not any(marker in text for marker in _LOST_MARKERS):
        return None
    # The lost task is the one named after the marker ("unhealthy ...: /job:worker/task:1"
    # or "remote target /job:worker/replica:0/task:0"); the reporter comes before it.
    for marker in ("ring: lost", "stopped sending heartbeats", "remote target", "unhealthy"):
        at = text.find(marker)
        if at >= 0:
            match = _TASK.search(text, at)
            if match:
                return match.group(1), int(match.group(2))
    match = _TASK.search(text)
    return (match.group(1), int(match.group(2))) if match else (None, None)


def unreachable_tasks(config, *, timeout=1.0):
    """Returns `[(task_type, index), ...]` of the other tasks that refuse connections (a
    timed-out collective does not name its peer; a dead worker's port refuses)."""
    from mgpu_tf.cluster import waiting

    return [(role, index) for role, index, _, listening
            in waiting.probe_tasks(config, timeout=timeout) if not listening]


def as_worker_lost(error, config=None):
    """The `WorkerLostError` naming the worker `error` says was lost (caused by `error`, or
    `error` itself), or None; `config`, as `worker_failures` takes it, names its address."""
    if isinstance(error, WorkerLostError):
        return error
    found = lost_task(error)
    if found is None or step_watchdog.ALIVE in str(error):
        return None
    task_type, task_index = found
    if config is None:
        from mgpu_tf.cluster import detect as cluster

        config = cluster.detect_cluster()
    if task_type is None and config is not None:
        lost = unreachable_tasks(config)
        if len(lost) == 1:
            task_type, task_index = lost[0]
    who = "a worker"
    if task_type is not None:
        who = f"{task_type} {task_index}"
        if config is not None and task_index < len(config.cluster.get(task_type, ())):
            who += f" ({config.cluster[task_type][task_index]})"
    lost = WorkerLostError(
        f"{who} was lost: it stopped answering, so this worker's collectives were "
        "aborted. Restart the group, on as many workers as remain if need be (mgpu-tf "
        "launch --max_restarts N, or --workers MIN:MAX --discovery_script S), and resume "
        "from a backup (mgpu_tf.callbacks.BackupAndRestore).",
        task_type, task_index,
    )
    lost.__cause__ = error
    return lost


@contextlib.contextmanager
def worker_failures(config=None):
    """Turns TensorFlow's lost-peer errors inside the block into `WorkerLostError`.

    `config` (this process' `ClusterConfig`, by default the detected one) names the lost
    worker's address; the original error is chained.

    Example:

    ```python
    with mgpu_tf.cluster.failures.worker_failures():
        model.fit(dataset, epochs=10)
    ```
    """
    try:
        yield
    except Exception as error:  # noqa: BLE001 - re-raised unchanged unless it is ours
        lost = as_worker_lost(error, config)
        if lost is None or lost is error:
            raise
        raise lost from error


_REPORTS = "_mgpu_tf_reports_lost_workers"


def install_report():
    """Makes a lost worker, uncaught, end this process with the script's own frames and the
    `WorkerLostError` line (who, what to do), not TensorFlow's ~70 lines of graph trace
    (`sys.excepthook`; other errors print as before). Installing it again changes nothing."""
    if not getattr(sys.excepthook, _REPORTS, False):
        sys.excepthook = _reporting(sys.excepthook)


def _reporting(previous):
    def hook(kind, error, tb):
        lost = as_worker_lost(error) if isinstance(error, Exception) else None
        if lost is None:
            return previous(kind, error, tb)
        frames = _script_frames(tb)
        lines = ["Traceback (most recent call last; TensorFlow's, Keras' and mgpu_tf's "
                 "frames left out):\n", *traceback.format_list(frames)] if frames else []
        sys.stderr.write("".join(lines) + f"mgpu_tf.cluster.failures.WorkerLostError: {lost}\n")
        sys.stderr.flush()
        return None

    setattr(hook, _REPORTS, True)
    return hook


def _script_frames(tb):
    """The frames of `tb` outside TensorFlow, Keras and mgpu_tf: the script's own."""
    libraries = tuple(os.path.dirname(module.__file__) + os.sep
                      for name in ("tensorflow", "keras", "mgpu_tf")
                      for module in [sys.modules.get(name)]
                      if getattr(module, "__file__", None))
    return [frame for frame in traceback.extract_tb(tb)
            if not frame.filename.startswith("<frozen ")  # runpy, for `python -m`
            and not os.path.abspath(frame.filename).startswith(libraries)]
