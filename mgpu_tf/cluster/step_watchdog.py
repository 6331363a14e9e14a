"""`timeout_seconds` for the collectives of a multi-worker step, kept by one thread.

TensorFlow's own per-collective timeout holds two threads per collective for the whole
timeout (a thread that sleeps it out), so short steps with `timeout_seconds=60` ran a worker
out of threads. `StepWatchdog` gives up on a step that has left this process idle for
`timeout_seconds` instead: waiting for a peer costs no CPU, computing or tracing does.

Design: docs/reliability.md#a-live-peer-that-never-joins
"""

import logging
import threading
import time

import keras

from mgpu_tf.cluster import tf_config
from mgpu_tf.compat import private_runtime

__all__ = ["ALIVE", "IDLE_CORE_SHARE", "StepWatchdog", "WatchSteps", "for_fit"]

logger = logging.getLogger("mgpu_tf")

# Below this share of one core, a process in a step is waiting, not working: a worker blocked
# in a collective used 0.000-0.003 of a core a second on this machine, a computing one 1.0.
IDLE_CORE_SHARE = 0.05

# In the message of a step given up while every peer still answered.
ALIVE = "alive but busy elsewhere"


class StepWatchdog:
    """Aborts this process' collectives once a step has waited `timeout_seconds` for a peer.

    A step waits when the process uses under `IDLE_CORE_SHARE` of a core, and it is given up
    once it has waited `timeout_seconds` longer than it worked: a peer doing the same work
    (tracing a new step function, say) may be that much slower. On GPU workers,
    whose CPU idles while their devices compute, the step must also have run
    `timeout_seconds` longer than the slowest step so far (none before the first has ended).
    The step then fails, naming a peer that fails TensorFlow's health check (as unhealthy,
    which `cluster.failures` reports as lost), or saying that every peer is `ALIVE`.

    Args:
        timeout_seconds: how long a step may wait.
        task: what the message calls this process, such as `"worker 0"`.
        peers: the other tasks, as `"/job:worker/replica:0/task:1"`.
        devices_compute: True when the steps' work runs on devices other than the CPU.
        check_seconds: how often the thread looks. Defaults to a tenth of the timeout, at
            most 1 s.
    """

    def __init__(self, timeout_seconds, task="this worker", peers=(), *,
                 devices_compute=False, check_seconds=None):
        self.timeout = float(timeout_seconds)
        self.task = task
        self.peers = tuple(peers)
        self.devices_compute = devices_compute
        self.check_seconds = check_seconds or min(1.0, self.timeout / 10)
        self.slowest = None  # seconds of the slowest step ended
        self.step = None  # (name, monotonic start) of the step in flight
        self.aborted = None  # the message the collectives were aborted with
        self._lock = threading.Lock()
        self._thread = None

    def began(self, name):
        """A step named `name` (for the message) starts."""
        with self._lock:
            self.step = (name, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="mgpu_tf-step-watchdog")
                self._thread.start()

    def ended(self):
        """The step in flight ends."""
        with self._lock:
            if self.step is not None:
                seconds = time.monotonic() - self.step[1]
                self.slowest = max(self.slowest or 0.0, seconds)
            self.step = None

    def _watch(self):
        cpu, at = time.process_time(), time.monotonic()
        busy_at = at
        while self.aborted is None:
            time.sleep(self.check_seconds)
            now_cpu, now = time.process_time(), time.monotonic()
            if (now_cpu - cpu) >= IDLE_CORE_SHARE * (now - at):
                busy_at = now
            cpu, at = now_cpu, now
            with self._lock:
                step, slowest = self.step, self.slowest
            if step is None:
                busy_at = now
                continue
            waited = now - max(busy_at, step[1])
            worked = max(0.0, busy_at - step[1])
            if waited < self.timeout + worked:
                continue
            if self.devices_compute and (slowest is None or
                                         now - step[1] < slowest + self.timeout):
                continue
            self._abort(step, waited)

    def _abort(self, step, waited):
        # The health checks run outside the lock: the step's own callbacks never wait on them.
        waiting = (f"{self.task} waited {waited:.1f} s in {step[0]} "
                   f"(timeout_seconds={self.timeout:g})")
        for peer in self.peers:
            failed = private_runtime.peer_health(peer, min(self.timeout, 10.0))
            if failed is not None:
                message = f"{waiting}: {peer} is unhealthy: {failed}"
                break
        else:
            message = (
                f"{waiting} for a peer that did not join its collectives. Every peer answers "
                f"its health check, so it is {ALIVE}: see what it runs (py-spy dump --pid "
                "PID) and raise timeout_seconds if its steps are that slow.")
        with self._lock:
            if self.step is not step:
                return  # the peer came during the checks, and the step ended
            self.aborted = message
        logger.error("mgpu_tf: %s", message)
        private_runtime.abort_collectives(message)


def for_fit(kind):
    """The `StepWatchdog` of a multi-worker strategy's `kind` for its fits: made at the first,
    kept on the kind; None without `timeout_seconds` or with one worker."""
    timeout = getattr(kind.settings, "timeout_seconds", None)
    if kind.watchdog is None and timeout and kind.num_workers > 1:
        resolver = kind.strategy.cluster_resolver
        me = (resolver.task_type, resolver.task_id)
        peers = [f"/job:{job}/replica:0/task:{index}" for job, index, _ in
                 tf_config.training_tasks(resolver.cluster_spec().as_dict())
                 if (job, index) != me]
        kind.watchdog = StepWatchdog(
            timeout, f"{me[0]} {me[1]}", peers,
            devices_compute=any("GPU" in d.upper() for d in kind.worker_devices))
    return kind.watchdog


class WatchSteps(keras.callbacks.Callback):
    """Tells `watchdog` (a `StepWatchdog`) when a fit's training and validation steps run.

    `edge="begin"` marks the starts and goes last in the fit's callbacks, `edge="end"` the
    ends and goes first, so that no other callback's time counts as the step's.
    """

    def __init__(self, watchdog, edge):
        super().__init__()
        self.watchdog = watchdog
        self.edge = edge
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.edge == "begin":
            self.watchdog.began(f"step {batch + 1} of epoch {self._epoch + 1}")

    def on_test_batch_begin(self, batch, logs=None):
        if self.edge == "begin":
            self.watchdog.began(f"validation step {batch + 1} of epoch {self._epoch + 1}")

    def on_train_batch_end(self, batch, logs=None):
        if self.edge == "end":
            self.watchdog.ended()

    on_test_batch_end = on_train_batch_end

    def on_train_end(self, logs=None):
        self.watchdog.ended()
