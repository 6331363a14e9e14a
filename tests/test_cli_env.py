"""`mgpu-tf env`: the facts a bug report needs."""

import json
import subprocess
import sys

import keras
import tensorflow as tf

import mgpu_tf


def _env(extra=None):
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    env.update(extra or {})
    result = subprocess.run([sys.executable, "-m", "mgpu_tf.cli", "env"], env=env,
                            capture_output=True, text=True, timeout=120)
    rows = dict(line.split(None, 1) if "  " not in line else
                [part.strip() for part in line.split("  ", 1)]
                for line in result.stdout.splitlines() if line.strip())
    return result.returncode, rows


def test_reports_versions_devices_and_the_auto_choice():
    code, rows = _env()
    assert code == 0
    assert rows["mgpu_tf"] == mgpu_tf.__version__
    assert rows["tensorflow"].startswith(tf.__version__)
    assert rows["keras"].startswith(keras.__version__)
    assert rows["physical CPU"] == "/physical_device:CPU:0"
    assert rows["physical GPU"] == "none"
    assert rows["logical CPU"] == "/device:CPU:0"
    assert rows["auto strategy"].startswith("default (")
    assert rows["cluster"] == "none (single_machine)"
    for patch in ("multi_worker", "steps", "optimizer"):
        assert rows[f"patch {patch}"].startswith("installed: ")


def test_a_valid_tf_config_is_shown_with_the_auto_choice_it_implies():
    config = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
              "task": {"type": "worker", "index": 1}}
    code, rows = _env({"TF_CONFIG": json.dumps(config)})
    assert code == 0
    assert rows["cluster"].startswith("valid, from TF_CONFIG: ")
    assert "(chief: False)" in rows["cluster"]
    assert rows["auto strategy"].startswith("multi_worker (")


def test_a_kubernetes_pod_shows_where_its_cluster_came_from():
    code, rows = _env({"JOB_COMPLETION_INDEX": "1", "MGPU_TF_JOB_NAME": "train",
                       "MGPU_TF_JOBS": "train:2", "MGPU_TF_SERVICE_NAME": "workers"})
    assert code == 0
    assert rows["cluster"].startswith("valid, from kubernetes: ")
    assert "train-1.workers:2222" in rows["cluster"]


def test_an_invalid_tf_config_is_named_and_fails_the_command():
    code, rows = _env({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, '
                                    '"task": {"type": "worker", "index": 3}}'})
    assert code == 1
    assert rows["cluster"].startswith("INVALID: TF_CONFIG['task']['index'] must be in 0..0")
