"""Before a multi-worker strategy is made: wait in Python until every peer's port answers,
saying whom this worker waits for, and ending on SIGTERM or Ctrl-C.

TensorFlow's coordination service waits for every task (up to an hour) in one C++ call that
holds the GIL, prints nothing and ignores Ctrl-C and SIGTERM; waiting here first leaves it
only the moments between the last peer's start and its registration.

Design: docs/reliability.md#a-worker-waiting-for-its-peers
"""

import signal
import socket
import sys
import time

from mgpu_tf.cluster import tf_config

__all__ = ["EVERY_SECONDS", "MOST_EVERY_SECONDS", "REGISTER_TIMEOUT_SECONDS",
           "PeersMissingError", "line_delays", "peer_states", "probe_tasks", "wait_for_peers"]

# The waiting line repeats after this, then twice as long each time, up to once a minute:
# an hour's wait says so about 60 times, not 720.
EVERY_SECONDS = 5.0
MOST_EVERY_SECONDS = 60.0
# How long a worker waits for its peers without `timeout_seconds`, as TensorFlow's
# coordination service does (its default `cluster_register_timeout`).
REGISTER_TIMEOUT_SECONDS = 3600.0

_POLL_SECONDS = 0.2
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The tasks TensorFlow's coordination service waits for.
_ROLES = ("chief", "worker")


class PeersMissingError(RuntimeError):
    """Some workers of the cluster did not start within the time to wait for them."""


def probe_tasks(config, *, timeout, roles=None):
    """`[(role, index, address, listening)]` of the other tasks of `config` (of `roles`, or
    every role), each port tried once: whether it accepts a connection within `timeout`."""
    probed = []
    for role, addresses in config.cluster.items():
        if roles is not None and role not in roles:
            continue
        for index, address in enumerate(addresses):
            if (role, index) == (config.task_type, config.task_index):
                continue
            host, port = tf_config.parse_address(address)
            try:
                with socket.create_connection((host, port), timeout=timeout):
                    listening = True
            except OSError:
                listening = False
            probed.append((role, index, address, listening))
    return probed


def peer_states(config, *, timeout=0.3):
    """`[(name, address, listening)]` of the tasks TensorFlow waits for, each probed once."""
    return [(f"{role} {index}", address, listening) for role, index, address, listening
            in probe_tasks(config, timeout=timeout, roles=_ROLES)]


def _missing(states):
    return ", ".join(f"{name} ({address}: nothing listens there yet)"
                     for name, address, listening in states if not listening)


def _listen(config):
    """Listens at this task's port on every interface, as its TensorFlow server will, so
    that peers see it started; None when the port cannot be bound here."""
    _, port = tf_config.parse_address(config.cluster[config.task_type][config.task_index])
    dual = socket.has_dualstack_ipv6()
    try:
        return socket.create_server(("", port), family=socket.AF_INET6 if dual
                                    else socket.AF_INET, dualstack_ipv6=dual)
    except OSError:
        return None


def line_delays(every_seconds=EVERY_SECONDS, most_seconds=MOST_EVERY_SECONDS):
    """Yields the seconds before each waiting line: `1, 5, 10, 20, 40, 60, 60, ...` by default."""
    yield min(every_seconds, 1.0)
    delay = every_seconds
    while True:
        yield min(delay, most_seconds)
        delay *= 2


def wait_for_peers(config, *, timeout_seconds=None, every_seconds=EVERY_SECONDS, output=None):
    """Returns once every other task of `config` accepts connections at its address.

    Meanwhile this task listens at its own address (as its TensorFlow server soon will),
    says on `output` which tasks it waits for and until when (after 1 s, then
    `every_seconds`, doubling up to once a minute), and ends the process on SIGTERM or
    SIGINT with one line (exit code 128 + the signal).

    Args:
        config: this process' `ClusterConfig`.
        timeout_seconds: how long to wait: `make_strategy`'s `timeout_seconds`. Defaults
            to `REGISTER_TIMEOUT_SECONDS`, an hour, TensorFlow's own wait.
        every_seconds: the time between the first two lines. Defaults to `5`.
        output: stream for the lines. Defaults to `sys.stderr`.

    Raises:
        PeersMissingError: when a task has not started within `timeout_seconds`.
    """
    output = output or sys.stderr
    if timeout_seconds is None:
        timeout_seconds = REGISTER_TIMEOUT_SECONDS
    me = f"{config.task_type} {config.task_index}"
    states = peer_states(config)
    if all(listening for *_, listening in states):
        return
    started = time.monotonic()
    deadline = time.time() + timeout_seconds

    def stop(signum, frame):
        output.write(f"mgpu_tf: {me} stopped on {signal.Signals(signum).name} while "
                     f"waiting for {_missing(peer_states(config)) or 'its peers'} to start.\n")
        output.flush()
        raise SystemExit(128 + signum)

    sock = _listen(config)
    if sock is None:  # peers could not see this task: TensorFlow's own wait does
        return
    previous = ({s: signal.signal(s, stop) for s in _SIGNALS}
                if _in_main_thread() else {})
    try:
        delays = line_delays(every_seconds)
        next_line = started + next(delays)
        while not all(listening for *_, listening in states):
            now = time.monotonic()
            if now - started > timeout_seconds:
                raise PeersMissingError(
                    f"{me} waited {timeout_seconds:g} s for the other workers; these never "
                    f"started: {_missing(states)}. Received: TF_CONFIG's cluster "
                    f"{dict(config.cluster)!r}. Start every worker of the cluster, or give "
                    "a cluster of the workers there are.")
            if now >= next_line:
                until = time.strftime("%H:%M:%S UTC", time.gmtime(deadline))
                output.write(f"mgpu_tf: {me} waits for {_missing(states)}; gives up at "
                             f"{until} (in {deadline - time.time():.0f} s). Ctrl-C or "
                             "SIGTERM ends the wait.\n")
                output.flush()
                next_line = now + next(delays)
            time.sleep(_POLL_SECONDS)
            states = peer_states(config)
    finally:
        sock.close()
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _in_main_thread():
    import threading

    return threading.current_thread() is threading.main_thread()
