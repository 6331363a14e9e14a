"""Starting test scripts as real processes: worker groups, fresh processes, deployments.

Every process gets this session's environment without its cluster (`run_workers`
hands out TF_CONFIG through mgpu_tf's launcher; `run_with_environments` gives each
process exactly the variables a deployment would), on the CPU unless `gpus=True`.
The cluster variables are also what the session keeps clean between tests
(`cluster_variables_restored`, used by conftest.py).
"""

import contextlib
import io
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from mgpu_tf.cluster import launcher

__all__ = ["CLUSTER_VARIABLES", "CLUSTER_PREFIXES", "RAY", "is_cluster_variable",
           "cluster_variables_restored", "environment", "publish", "run_workers", "run_python",
           "run_with_environments", "run_together"]

# The variables mgpu_tf.cluster.detect reads (TPU_NAME: the strategy factory, through it).
CLUSTER_VARIABLES = ("TF_CONFIG", "TPU_NAME", "JOB_COMPLETION_INDEX")
CLUSTER_PREFIXES = ("MGPU_TF_", "SLURM_", "KUBERNETES_")

# A process that crashes (SIGSEGV, SIGABRT) prints every thread's Python stack: the report
# a failing test shows.
_BASE = {"TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow", "PYTHONUNBUFFERED": "1",
         "PYTHONFAULTHANDLER": "1"}

# A local Ray cluster's variables: each worker's log lines whole, and its workers at the
# priority of the suite's other processes. Ray starts them at niceness 15 (for a node of
# its own, where they must not slow its raylet); beside the suite's busy processes on two
# cores that left a worker group minutes without the CPU.
RAY = {"RAY_DEDUP_LOGS": "0", "RAY_worker_niceness": "0"}


def is_cluster_variable(name):
    """True for a variable that tells mgpu_tf where the process runs."""
    return name in CLUSTER_VARIABLES or name.startswith(CLUSTER_PREFIXES)


def _cluster_variables():
    return {k: v for k, v in os.environ.items() if is_cluster_variable(k)}


@contextlib.contextmanager
def cluster_variables_restored():
    """Puts the cluster variables of `os.environ` back as they were on entry.

    Variables set inside are removed, changed ones reset, removed ones set again.
    """
    saved = _cluster_variables()
    try:
        yield
    finally:
        for name in _cluster_variables().keys() - saved.keys():
            del os.environ[name]
        os.environ.update(saved)


def environment(extra=None, *, gpus=False):
    """This process' environment without cluster variables, plus `extra`.

    Args:
        extra: variables to set on top. Defaults to none.
        gpus: keep the GPUs visible. Defaults to `False` (`CUDA_VISIBLE_DEVICES=""`).
    """
    env = {k: v for k, v in os.environ.items() if not is_cluster_variable(k)}
    env.update(_BASE)
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(extra or {})
    return env


def publish(path, text):
    """Writes `text` to `path` whole: under another name, then renamed, so that a process
    polling for `path` never reads it half-written."""
    path = pathlib.Path(path)
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def run_workers(script, workers, *args, env=None, grace_seconds=5.0):
    """Runs `python script args...` as `workers` local workers through mgpu_tf's launcher.

    `script` may be `"-m"`, with the module name first in `args`.

    Returns:
        (exit code, {worker index: its output text}).
    """
    out = io.StringIO()
    code = launcher.launch([sys.executable, str(script), *map(str, args)], workers,
                           env=environment(env), output=out, grace_seconds=grace_seconds)
    per_worker = {}
    for line in out.getvalue().splitlines():
        match = re.match(r"\[(\d+)\] (.*)", line)
        if match:
            per_worker.setdefault(int(match.group(1)), []).append(match.group(2))
    return code, {i: "\n".join(lines) for i, lines in per_worker.items()}


def run_python(script, *args, env=None, gpus=False, timeout=600):
    """Runs `python script args...` in a fresh process (for another device count).

    Returns:
        The `subprocess.CompletedProcess`, its output captured as text.
    """
    return subprocess.run([sys.executable, str(script), *map(str, args)],
                          env=environment(env, gpus=gpus), capture_output=True, text=True,
                          timeout=timeout)


def run_with_environments(args, environments, *, timeout=300):
    """Runs `python args...` once per environment, at the same time.

    Returns:
        A list of `(exit code, output text)`, one per environment.
    """
    return run_together([[sys.executable, *map(str, args)] for _ in environments],
                        environments, timeout=timeout)


def run_together(commands, environments, *, timeout=300):
    """Runs each command (an argv list) with its own extra environment, at the same time.

    The first process to fail stops the others (they would wait for it for ever).

    Returns:
        A list of `(exit code, output text)`, one per command.
    """
    files = [tempfile.TemporaryFile("w+", errors="replace") for _ in environments]
    processes = [
        subprocess.Popen(command, env=environment(extra), stdout=out,
                         stderr=subprocess.STDOUT, text=True)
        for command, extra, out in zip(commands, environments, files)
    ]
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in processes):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in processes):
                break
            time.sleep(0.1)
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
            p.wait()
    results = []
    for p, out in zip(processes, files):
        out.seek(0)
        results.append((p.returncode, out.read()))
        out.close()
    return results
