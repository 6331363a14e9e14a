"""A user's script whose peer dies mid-fit, without `worker_failures`: a few lines say which
worker was lost and what to do, not TensorFlow's trace of the graph around it."""

import json
import os
import re
import subprocess
import sys

import pytest

from mgpu_tf.cluster import launcher
from support import workers

_TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.multiworker
def test_an_uncaught_lost_worker_is_reported_in_a_few_lines():
    configs = launcher.worker_tf_configs(2)
    env = workers.environment({"MGPU_TF_JOB_SECRET": "a-job-secret-for-the-tcp-ring"})
    env["PYTHONPATH"] = os.pathsep.join([_TESTS, env.get("PYTHONPATH", "")])
    processes = [subprocess.Popen([sys.executable, "-m", "support.mw_lost_peer", "tcp"],
                                  cwd=_TESTS, env=dict(env, TF_CONFIG=json.dumps(config)),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for config in configs]
    try:
        errors = [p.communicate(timeout=600)[1] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert processes[1].returncode == -9, errors[1][-3000:]
    assert processes[0].returncode == 1, errors[0][-3000:]
    text = errors[0]
    peer = configs[0]["cluster"]["worker"][1]
    start = text.index("Traceback (most recent call last; TensorFlow's, Keras' and mgpu_tf's "
                       "frames left out):\n")
    report = text[start:].split("\n")
    end = next(i for i, line in enumerate(report) if "WorkerLostError" in line)
    # The script's own two frames (its call of main, main's call of fit), then who was lost
    # and what to do.
    assert end == 5, "\n".join(report[:end + 1])
    assert re.search(r'line \d+, in main\n +model\.fit\(', "\n".join(report)), report[:end]
    assert report[end].startswith(
        f"mgpu_tf.cluster.failures.WorkerLostError: worker 1 ({peer}) was lost: it stopped "
        "answering, so this worker's collectives were aborted. Restart the group"), report[end]
    for noise in ("PeerLostError", "Graph execution error", "ring_pipeline.py"):
        assert noise not in text, text[-3000:]
