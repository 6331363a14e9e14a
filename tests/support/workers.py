"""Running a test script as real local workers through mgpu_tf's launcher."""

import io
import os
import re
import sys

from mgpu_tf.cluster import launcher

__all__ = ["run_workers", "run_python"]

_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": "tensorflow"}


def _environment(extra):
    env = dict(os.environ, **_ENV)
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


def run_workers(script, workers, *args, env=None, grace_seconds=5.0):
    """Runs `python script args...` as `workers` local workers.

    `script` may be `"-m"`, with the module name first in `args`.

    Returns:
        (exit code, {worker index: its output text}).
    """
    out = io.StringIO()
    code = launcher.launch([sys.executable, str(script), *map(str, args)], workers,
                           env=_environment(env), output=out, grace_seconds=grace_seconds)
    per_worker = {}
    for line in out.getvalue().splitlines():
        match = re.match(r"\[(\d+)\] (.*)", line)
        if match:
            per_worker.setdefault(int(match.group(1)), []).append(match.group(2))
    return code, {i: "\n".join(lines) for i, lines in per_worker.items()}


def run_python(script, *args, env=None, timeout=600):
    """Runs `python script args...` in a fresh process (for another device count)."""
    import subprocess

    return subprocess.run([sys.executable, str(script), *map(str, args)], env=_environment(env),
                          capture_output=True, text=True, timeout=timeout)
