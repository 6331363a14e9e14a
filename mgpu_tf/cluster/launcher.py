"""Local worker groups: N processes of one command, each with its own TF_CONFIG.

`launch` starts the processes on one machine and treats them as one job: the first failure stops
the others, Ctrl-C stops all, and no process is left behind.

Design: docs/design.md#local-launcher
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from mgpu_tf.cluster import interrupt
from mgpu_tf.cluster import job_secret
from mgpu_tf.cluster.launch_command import (LaunchError, check_command, check_grace,
                                            check_open_files)
from mgpu_tf.compat import native_logs

__all__ = ["LaunchError", "REGROUP", "TIMED_OUT", "base_environment", "check_request",
           "free_ports", "launch", "run_alone", "run_group", "streams", "warn_if_reachable",
           "worker_tf_configs"]

# Set in each worker's environment: which start of the group this is (0 first).
RESTART_VARIABLE = "MGPU_TF_RESTART"

# What `run_alone` returns for a worker stopped at its time limit (as GNU timeout does).
TIMED_OUT = 124
# What a group stopped by its `stop_when` returns: it is to start again, not a failure.
REGROUP = -1

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
# At the end of a good run TensorFlow's coordination service may take a worker that exited
# before its runtime said goodbye for one that crashed (its heartbeats stopped): the chief,
# still finishing, logs that every task "crashed". Held with native_logs' harmless errors:
# shown only when the run fails, where a worker did crash.
_CRASH_REPORT = re.compile(r"E\d{4} [\d:.]+\s+\d+ \S+\.cc:\d+\] (?:\S*StartAbort|Aborting "
                           r"\w+ with) UNAVAILABLE: .*unhealthy \(stopped sending heartbeats\)")
_CRASH_DETAIL = re.compile(r"/job:\w+/replica:\d+/task:\d+$|The tasks have crashed\. |The error "
                           r"could be from a previous operation\. ")
# Exit codes of a worker that our SIGTERM or SIGKILL ended (130: it raised KeyboardInterrupt).
_STOPPED_CODES = (128 + signal.SIGTERM, 128 + signal.SIGKILL, 130)


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
    """Returns one TF_CONFIG dictionary per worker of a local group of `workers`.

    Workers listen on `host` at `port`, `port + 1`, ... (free ports when `port` is None).
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


def _pump(index, stream, output, lock, held):
    """Relays a worker's lines, each prefixed, as they stay on screen: the last redraw of a
    progress bar. Errors TensorFlow logs in a good run go to `held`, shown if the run fails."""
    prefix, holding = f"[{index}] ", False
    for raw in iter(stream.readline, b""):
        line = _last_redraw(raw.decode(errors="replace").rstrip("\n"))
        holding = (native_logs.is_harmless_error(line, after=holding)
                   or bool(_CRASH_REPORT.match(line) or holding and _CRASH_DETAIL.match(line)))
        with lock:
            if holding:
                held.append((output, prefix + line + "\n"))
                continue
            output.write(prefix + line + "\n")
            output.flush()
    stream.close()


def _last_redraw(line):
    """What a terminal shows of `line`: its part after the last carriage return that redraws.

    Keras redraws its progress bar after `\\r` many times a second, and ends the line once an
    epoch: a bar's redraws become one line, not a line each.
    """
    return next((part for part in reversed(line.split("\r")) if part.strip()), "")


def _stop(processes, grace_seconds):
    """SIGTERM every live process group, then SIGKILL what is left after the grace.

    Returns the processes that were still running when signalled.
    """
    signalled = []
    for p in processes:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                signalled.append(p)
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
    return signalled


def _exit_code(returncode):
    return 128 - returncode if returncode < 0 else returncode


def _describe_exit(returncode):
    """`'exit code 7'`, or `'exit code 137 (killed by SIGKILL)'`."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"exit code {_exit_code(returncode)} (killed by {name})"


def check_request(command, workers, port, host, env, max_restarts=0, grace_seconds=10.0):
    """Raises `LaunchError` for a request that cannot start, before anything starts."""
    check_command(command, os.environ if env is None else env)
    if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0:
        check_open_files(workers)  # before `worker_tf_configs` opens a socket per worker
    check_grace(grace_seconds)
    worker_tf_configs(workers, port=port, host=host)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise LaunchError(
            "`max_restarts` must be an integer of at least 0. "
            f"Received: max_restarts={max_restarts!r}")


def base_environment(env):
    """The workers' environment before TF_CONFIG: `env` (or this process'), unbuffered,
    with the job's secret (a new one unless `env` holds one)."""
    base = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    base.setdefault(job_secret.SECRET_VARIABLE, job_secret.new_secret())
    return base


def launch(command, workers, *, port=None, host="127.0.0.1", env=None, output=None,
           grace_seconds=10.0, max_restarts=0, errors=None):
    """Runs `command` as `workers` local processes that form one TF_CONFIG cluster.

    When a worker fails, the others are stopped and one line on `output` says which worker
    failed, with what exit code, and which were stopped. The options are `mgpu-tf launch`'s
    (docs/cli.md).

    Example:

    ```python
    code = launch([sys.executable, "-m", "mgpu_tf.train", "--strategy=multi_worker"], 2)
    ```

    Args:
        command: the program and its arguments, a list of strings (never a shell string).
        workers: number of worker processes.
        port: first port to use. Defaults to free ports.
        host: address the workers use; any but loopback is warned about. Defaults to
            `"127.0.0.1"`.
        env: base environment for the workers. Defaults to this process' environment.
            A new `MGPU_TF_JOB_SECRET` is added unless it holds one.
        output: stream for the workers' stdout, each line prefixed `[index] `, and the
            launcher's lines. Defaults to `sys.stdout`.
        grace_seconds: how long stopped workers get before SIGKILL, 0 or more (a worker of
            `make_strategy("multi_worker")` exits about a second after SIGTERM). Defaults
            to `10`.
        errors: stream for the workers' stderr. Defaults to `sys.stderr` when `output`
            is not given, else to `output`.
        max_restarts: starts of the whole group after a failure, each with
            `MGPU_TF_RESTART` (0, 1, ...) set. Defaults to `0`.

    Returns:
        0 when every worker succeeded, else the first non-zero exit code of the last
        start (128 + signal for a killed worker; 130 on Ctrl-C and 143 on SIGTERM to the
        launcher, never restarted).

    Raises:
        LaunchError: for an empty or missing command, a bad worker count or a bad port,
            more workers than the open-file limit holds, or a bad `grace_seconds`.
    """
    check_request(command, workers, port, host, env, max_restarts, grace_seconds)
    output, errors = streams(output, errors)
    warn_if_reachable(host, output)
    base = base_environment(env)
    interrupted = interrupt.Interrupt()
    for attempt in range(max_restarts + 1):
        configs = worker_tf_configs(workers, port=port, host=host)
        code = run_group(command, configs, dict(base, **{RESTART_VARIABLE: str(attempt)}),
                          output, grace_seconds, errors=errors, interrupted=interrupted)
        if code == 0 or interrupted.is_set() or attempt == max_restarts:
            return code
        output.write(f"mgpu-tf launch: restarting all {workers} workers "
                     f"({attempt + 1} of {max_restarts}).\n")
        output.flush()
    return code


def run_alone(command, index, workers, *, env=None, output=None, grace_seconds=10.0,
              timeout_seconds=None, errors=None):
    """Runs worker `index` of a group of `workers` alone, with the TF_CONFIG `launch` gives it.

    Takes `launch`'s options, and `timeout_seconds`, after which the worker is stopped and
    `TIMED_OUT` returned. Returns the exit code; raises `LaunchError` as `launch` does, and
    for an index outside the group.
    """
    check_request(command, workers, None, "127.0.0.1", env, grace_seconds=grace_seconds)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < workers:
        raise LaunchError(f"`index` must be between 0 and {workers - 1}. "
                          f"Received: index={index!r}")
    config = worker_tf_configs(workers)[index]
    output, errors = streams(output, errors)
    return run_group(command, [config], base_environment(env), output, grace_seconds,
                      timeout_seconds=timeout_seconds, errors=errors)


def warn_if_reachable(host, output):
    """Warns on `output` when the workers' `host` is reachable from beyond this machine."""
    if host not in _LOOPBACK:
        output.write(
            f"warning: workers use {host}: TensorFlow's gRPC workers accept "
            "unauthenticated connections; use this only on a trusted network.\n"
        )


def streams(output, errors):
    """`(output, errors)`: stdout and stderr apart by default, one stream when captured."""
    if output is None:
        return sys.stdout, sys.stderr if errors is None else errors
    return output, output if errors is None else errors


def run_group(command, configs, base, output, grace_seconds, *, timeout_seconds=None,
               errors=None, stop_when=None, interrupted=None):
    """Runs one start of the workers of `configs`; returns its exit code.

    When `stop_when()`, called while the workers run, returns True, they are all stopped
    and `REGROUP` returned. Ctrl-C or SIGTERM stops them and sets `interrupted` (an
    `mgpu_tf.cluster.interrupt.Interrupt`, a new one when None), whose `code` is returned.
    """
    with interrupt.as_flag(interrupted or interrupt.Interrupt()) as interrupted:
        return _run(command, configs, base, output, grace_seconds, interrupted,
                    timeout_seconds=timeout_seconds, errors=errors, stop_when=stop_when)


def _run(command, configs, base, output, grace_seconds, interrupted, *, timeout_seconds,
         errors, stop_when):
    lock = threading.Lock()
    processes, pumps, held = {}, [], []
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    failed = None  # (index, returncode) of the first worker seen failing
    code, message, report = 0, None, False
    try:
        for config in configs:
            index = config["task"]["index"]
            worker_env = dict(base, TF_CONFIG=json.dumps(config))
            try:
                process = subprocess.Popen(
                    list(command), env=worker_env, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,  # bytes: only "\n" ends a line, not a redraw
                    start_new_session=True,
                )
            except OSError as error:  # checked up front: a race, or a script's bad #! line
                raise LaunchError(f"Worker {index} could not start: {error}. Received: "
                                  f"command={list(command)!r}") from None
            processes[index] = process
            for stream, to in ((process.stdout, output), (process.stderr, errors or output)):
                pump = threading.Thread(target=_pump, args=(index, stream, to, lock, held),
                                        daemon=True)
                pump.start()
                pumps.append(pump)
        while failed is None and any(p.poll() is None for p in processes.values()):
            if interrupted.is_set():
                raise KeyboardInterrupt
            if stop_when is not None and stop_when():
                code = REGROUP
                break
            if deadline is not None and time.monotonic() > deadline:
                code = TIMED_OUT
                message = (f"{_workers(processes)} did not finish in {timeout_seconds:g} "
                           "seconds; stopped.")
                break
            time.sleep(0.05)
            failed = _first_failure(processes)
        if interrupted.is_set():
            raise KeyboardInterrupt
        failed = failed or _first_failure(processes)
        if failed is not None and code not in (TIMED_OUT, REGROUP):
            # A worker may leave on purpose for `stop_when`: it is asked once more.
            if stop_when is not None and stop_when():
                code = REGROUP
            else:
                code, report = _exit_code(failed[1]), True
    except KeyboardInterrupt:
        if not interrupted.is_set():  # raised before the handlers were ours: Ctrl-C
            interrupted.stop(signal.SIGINT)
        said = ("interrupted" if interrupted.signum == signal.SIGINT else
                f"stopped by {interrupted.signum.name}")
        code, message, report = interrupted.code, f"{said}; stopped {_workers(processes)}.", False
    finally:
        signalled = _stop(list(processes.values()), grace_seconds)
        for pump in pumps:
            pump.join(timeout=5)
    if report:
        # Told after the stop: a worker still running when the first failed may fail on
        # its own before the signal reaches it; it was not stopped.
        message = _describe_failure(processes, failed, signalled)
    for stream, line in held if code != 0 else ():
        stream.write(line)
        stream.flush()
    if message:
        output.write(f"mgpu-tf launch: {message}\n")
        output.flush()
    return code


def _describe_failure(processes, failed, signalled):
    """`worker 1 failed with exit code 7; ...`: what became of each of the others."""
    stopped, also, exited = [], [], False
    for i, p in processes.items():
        if i == failed[0]:
            continue
        if p in signalled and _exit_code(p.returncode) in _STOPPED_CODES:
            stopped.append(str(i))
        elif p.returncode:
            also.append(f"worker {i} also failed with {_describe_exit(p.returncode)}")
        else:
            exited = True
    parts = [f"worker {failed[0]} failed with {_describe_exit(failed[1])}", *also]
    if stopped and len(stopped) + 1 == len(processes):
        parts.append(f"stopped the other workers ({', '.join(stopped)})")
    elif stopped:
        parts.append(f"stopped worker{'s' * (len(stopped) > 1)} {', '.join(stopped)}")
    elif exited and not also:
        parts.append("the other workers had already exited")
    return "; ".join(parts) + "."


def _workers(processes):
    if len(processes) == 1:
        return f"worker {next(iter(processes))}"
    return f"all {len(processes)} workers"


def _first_failure(processes):
    """`(index, returncode)` of a worker that exited non-zero, or `None`."""
    for i, p in processes.items():
        if p.poll() not in (None, 0):
            return i, p.returncode
    return None
