"""`mgpu-tf env`: the facts a bug report needs."""

import json
import os
import subprocess
import sys

import keras
import pytest
import tensorflow as tf

import mgpu_tf


def _run(*args, env):
    # PYTHONPATH (conftest.py): the mgpu_tf under test, not another installed copy.
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env}
    return subprocess.run([sys.executable, "-m", "mgpu_tf.cli", "env", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _env(extra=None):
    result = _run(env={"TF_CPP_MIN_LOG_LEVEL": "3", **(extra or {})})
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


# TensorFlow's C++ start-up lines on a machine without a GPU.
NATIVE = ("cpu_feature_guard", "cudart_stub", "cuInit")


def test_tensorflows_start_up_lines_stay_out_of_the_report():
    # As a user runs it: no TF_CPP_MIN_LOG_LEVEL.
    result = _run(env={})
    assert result.returncode == 0, result.stderr
    assert [m for m in NATIVE if m in result.stderr] == [], result.stderr
    assert result.stdout.startswith("mgpu_tf "), result.stdout


@pytest.mark.parametrize("args, env", [(["-v"], {}), ([], {"TF_CPP_MIN_LOG_LEVEL": "0"})],
                         ids=["-v", "TF_CPP_MIN_LOG_LEVEL=0"])
def test_verbose_or_tensorflows_variable_shows_them(args, env):
    result = _run(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert [m for m in NATIVE if m in result.stderr] == list(NATIVE), result.stderr


def _dist_info(folder, name, version, *, top_level=True):
    """A distribution's metadata as pip leaves it, installing the `keras` package."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if top_level:
        (info / "top_level.txt").write_text("keras\n")
    else:
        (info / "RECORD").write_text("keras/__init__.py,,\n"
                                     f"{info.name}/METADATA,,\n")
    return info


def test_one_keras_distribution_is_named_without_a_warning():
    code, rows = _env()
    assert code == 0
    assert rows["keras"].startswith(f"{keras.__version__} from keras")
    assert "keras package" not in rows


@pytest.mark.parametrize("top_level", [True, False])
def test_owners_reads_which_distributions_install_a_package(tmp_path, monkeypatch, top_level):
    from mgpu_tf.compat import releases

    before = releases.owners("keras")
    assert len(before) == 1 and before[0][1] == keras.__version__, before
    _dist_info(tmp_path, "keras-nightly", "3.16.0.dev2026102704", top_level=top_level)
    _dist_info(tmp_path, "keras-hub", "0.32.0", top_level=False).joinpath("RECORD").write_text(
        "keras_hub/__init__.py,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert releases.owners("keras") == [("keras-nightly", "3.16.0.dev2026102704"), *before]


def test_two_distributions_of_keras_are_named_with_a_warning(tmp_path):
    _dist_info(tmp_path, "keras-nightly", "3.16.0.dev2026102704")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    code, rows = _env({"PYTHONPATH": path})
    assert code == 0
    assert rows["keras"].startswith(f"{keras.__version__} from keras ")
    assert rows["keras package"] == (
        f"WARNING: keras-nightly 3.16.0.dev2026102704 and keras {keras.__version__} both "
        f"install the `keras` package, so the one installed last runs ({keras.__version__}). "
        "Keep the one your TensorFlow requires: pip uninstall keras-nightly keras, then pip "
        "install it.")
