"""Local worker groups: N processes of one command, each with its own TF_CONFIG.

Multi-worker TensorFlow needs one process per worker, each told the whole cluster
and its own index. `launch` starts them on one machine (free ports on 127.0.0.1),
prefixes their output with the worker index, and treats them as one job: the first
failure stops the others, Ctrl-C stops all, and no process is left behind.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["LaunchError", "free_ports", "worker_tf_configs", "launch"]

# Set in each worker's environment: which start of the group this is (0 first).
RESTART_VARIABLE = "MGPU_TF_RESTART"

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class LaunchError(ValueError):
    """A launch request that cannot start (bad command, worker count or port)."""


def free_ports(count, host="127.0.0.1"):
    """Returns `count` distinct TCP ports that are free on `host` right now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def worker_tf_configs(workers, *, port=None, host="127.0.0.1"):
    """Returns one TF_CONFIG dictionary per worker of a local group.

    Args:
        workers: number of workers, at least 1.
        port: first port; workers use `port`, `port + 1`, ... Defaults to free ports.
        host: the address every worker listens on. Defaults to `"127.0.0.1"`.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise LaunchError(
            f"`workers` must be an integer of at least 1. Received: workers={workers!r}")
    if port is None:
        ports = free_ports(workers, host)
    else:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65536 - workers:
            raise LaunchError(
                f"`port` must be between 1 and {65536 - workers} so that {workers} workers fit "
                f"below 65536. Received: port={port!r}"
            )
        ports = [port + i for i in range(workers)]
    address = f"[{host}]" if ":" in host else host
    hosts = [f"{address}:{p}" for p in ports]
    return [
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        for i in range(workers)
    ]


def _pump(index, stream, output, lock):
    prefix = f"[{index}] "
    for line in iter(stream.readline, ""):
        with lock:
            output.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
            output.flush()
    stream.close()


def _stop(processes, grace_seconds):
    """SIGTERM every live process group, then SIGKILL what is left after the grace."""
    for p in processes:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_seconds
    for p in processes:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in processes:
        # Kill the whole group even after the leader exited: its children may live on.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()


def _exit_code(returncode):
    return 128 - returncode if returncode < 0 else returncode


def launch(command, workers, *, port=None, host="127.0.0.1", env=None, output=None,
           grace_seconds=10.0, max_restarts=0):
    """Runs `command` as `workers` local processes that form one TF_CONFIG cluster.

    Example:

    ```python
    code = launch([sys.executable, "-m", "mgpu_tf.train", "--strategy=multi_worker"], 2)
    ```

    Args:
        command: the program and its arguments, a list of strings (never a shell string).
        workers: number of worker processes.
        port: first port to use. Defaults to free ports.
        host: address the workers use. Defaults to `"127.0.0.1"`; anything else is
            reachable from the network, and TensorFlow's gRPC workers accept
            unauthenticated connections, so a warning is printed.
        env: base environment for the workers. Defaults to this process' environment.
        output: text stream for the prefixed output. Defaults to `sys.stdout`.
        grace_seconds: how long stopped workers get before SIGKILL. Defaults to `10`.
        max_restarts: how many times the whole group is started again after a
            failure. Each start gets `MGPU_TF_RESTART` (0, 1, ...) in its
            environment; resuming is the script's job (e.g. with
            `mgpu_tf.callbacks.BackupAndRestore`). Defaults to `0`.

    Returns:
        0 when every worker succeeded, else the first non-zero exit code of the
        last start (128 + signal number for a worker killed by a signal; 130 on
        Ctrl-C, which is never restarted).

    Raises:
        LaunchError: for an empty command, a bad worker count or a bad port.
    """
    if isinstance(command, str) or not isinstance(command, (list, tuple)) or not command:
        raise LaunchError(
            "`command` must be a non-empty list of program arguments (put it after `--` "
            f"on the command line). Received: command={command!r}"
        )
    if not all(isinstance(part, str) for part in command):
        raise LaunchError(f"`command` must hold strings only. Received: command={command!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise LaunchError(
            "`max_restarts` must be an integer of at least 0. "
            f"Received: max_restarts={max_restarts!r}")
    worker_tf_configs(workers, port=port, host=host)  # checks before anything starts
    output = sys.stdout if output is None else output
    if host not in _LOOPBACK:
        output.write(
            f"warning: workers use {host}: TensorFlow's gRPC workers accept "
            "unauthenticated connections; use this only on a trusted network.\n"
        )
    base = dict(os.environ if env is None else env)
    base["PYTHONUNBUFFERED"] = "1"
    for attempt in range(max_restarts + 1):
        configs = worker_tf_configs(workers, port=port, host=host)
        code = _run_group(command, configs, dict(base, **{RESTART_VARIABLE: str(attempt)}),
                          output, grace_seconds)
        if code in (0, 130) or attempt == max_restarts:
            return code
        output.write(f"mgpu-tf launch: a worker failed with exit code {code}; restarting "
                     f"all {workers} workers ({attempt + 1} of {max_restarts}).\n")
        output.flush()
    return code


def _run_group(command, configs, base, output, grace_seconds):
    """Runs one start of the group; returns its exit code."""
    lock = threading.Lock()
    processes, pumps = [], []
    first_failure = None
    try:
        for i, config in enumerate(configs):
            worker_env = dict(base, TF_CONFIG=json.dumps(config))
            process = subprocess.Popen(
                list(command), env=worker_env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, errors="replace",
                start_new_session=True,
            )
            processes.append(process)
            pump = threading.Thread(target=_pump, args=(i, process.stdout, output, lock),
                                    daemon=True)
            pump.start()
            pumps.append(pump)
        while any(p.poll() is None for p in processes):
            for p in processes:
                if first_failure is None and p.poll() not in (None, 0):
                    first_failure = _exit_code(p.returncode)
            if first_failure is not None:
                break
            time.sleep(0.05)
        for p in processes:
            if first_failure is None and p.poll() not in (None, 0):
                first_failure = _exit_code(p.returncode)
    except KeyboardInterrupt:
        first_failure = 130
    finally:
        _stop(processes, grace_seconds)
        for pump in pumps:
            pump.join(timeout=5)
    return first_failure or 0
