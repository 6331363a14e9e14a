"""Running local workers with the environment a deployment gives them (no TF_CONFIG).

`mgpu_tf.cluster.launcher` hands every worker a TF_CONFIG, which `detect_cluster` reads
first; to test detection from Kubernetes or SLURM variables, each worker here gets
exactly its own environment and nothing else of the cluster.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

__all__ = ["run_with_environments", "run_together", "assert_trained_alike"]

_DONE = re.compile(r"^done: strategy=multi_worker replicas=2 examples_per_sec=[\d.]+ "
                   r"loss=([\d.]+) accuracy=([\d.]+)$", re.MULTILINE)

_BASE = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": "tensorflow",
         "PYTHONUNBUFFERED": "1"}
# Variables of the test session that would make a worker detect another cluster.
_DROP = ("TF_CONFIG", "JOB_COMPLETION_INDEX", "MGPU_TF_JOB_NAME", "MGPU_TF_HOST_OVERRIDE")


def run_with_environments(args, environments, *, timeout=300):
    """Runs `python args...` once per environment, at the same time.

    The first worker to fail stops the others (they would wait for it for ever).

    Returns:
        A list of `(exit code, output text)`, one per environment.
    """
    return run_together([[sys.executable, *map(str, args)] for _ in environments],
                        environments, timeout=timeout)


def run_together(commands, environments, *, timeout=300):
    """Runs each command (an argv list) with its own extra environment, at the same time."""
    base = {k: v for k, v in os.environ.items()
            if k not in _DROP and not k.startswith("SLURM_")}
    base.update(_BASE)
    files = [tempfile.TemporaryFile("w+", errors="replace") for _ in environments]
    processes = [
        subprocess.Popen(command, env={**base, **extra}, stdout=out,
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


def assert_trained_alike(results, who):
    """Checks that two workers of the main job finished and agree on loss and accuracy."""
    finals = []
    for code, output in results:
        assert code == 0, output[-3000:]
        match = _DONE.search(output)
        assert match, output[-3000:]
        finals.append(match.groups())
    assert finals[0] == finals[1], f"the two {who} disagree on the final loss and accuracy"
