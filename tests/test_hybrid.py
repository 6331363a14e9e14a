"""The "hybrid" strategy: a pipeline in each worker, gradients averaged across workers."""

import json
import re
import subprocess
import sys

import pytest

import mgpu_tf
from support import workers


@pytest.mark.multiworker
def test_two_workers_of_two_devices_train_as_one_device_through_launch():
    result = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "2", "--",
         sys.executable, "-m", "support.mw_hybrid"],
        env=workers.environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for task in (0, 1):
        lines = dict(re.findall(rf"^\[{task}\] ([^:\n]+): (.*)$", result.stdout, re.M))
        assert lines["kind"] == "hybrid"
        assert f"[{task}] done" in result.stdout
        assert int(lines["steps"]) == 8
        assert float(lines["moved"]) > 1e-2  # training changed the weights
        assert float(lines["relative error"]) < 1e-5
        own = [f"/job:worker/replica:0/task:{task}/device:CPU:{stage}" for stage in (0, 1)]
        for stage in (0, 1):
            assert lines[f"stage {stage} devices"] == own[stage]
        assert lines["slot devices"] == " ".join(own)  # Adam's moments beside their weights
    initial = re.findall(r"^\[\d\] initial: (.*)$", result.stdout, re.M)
    assert len(initial) == 2 and initial[0] == initial[1]  # broadcast from worker 0


def test_more_devices_per_worker_than_present_fails_before_starting():
    with pytest.raises(ValueError, match=r"`devices_per_worker` asks for 8 devices but this "
                       r"worker has 4 .*Received: devices_per_worker=8"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=8)


def test_one_worker_is_not_a_hybrid_layout():
    with pytest.raises(ValueError, match="'hybrid' averages gradients across workers and "
                       "needs at least 2; this cluster has 1"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=2)


def test_devices_and_devices_per_worker_must_agree():
    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
               "task": {"type": "worker", "index": 0}}
    with pytest.raises(ValueError, match="`devices` and `devices_per_worker` disagree"):
        mgpu_tf.make_strategy("hybrid", devices=["CPU:0", "CPU:1"], devices_per_worker=3,
                              cluster=json.dumps(cluster))


def test_devices_per_worker_must_be_an_integer():
    with pytest.raises(TypeError, match="`devices_per_worker` must be an integer"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker="2")


def test_hybrid_refuses_options_of_other_strategies():
    with pytest.raises(ValueError, match="`compression` does not apply to strategy 'hybrid'"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=2, compression="float16")
