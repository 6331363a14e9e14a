"""Test session set-up: four logical CPU devices, and a clean environment per test.

TensorFlow's logical devices can be set only before its runtime starts, once per
process, so the whole session gets four; tests needing another count run a subprocess.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.pop("TF_CONFIG", None)

import pytest  # noqa: E402

import mgpu_tf  # noqa: E402

SESSION_DEVICES = 4
mgpu_tf.simulate_devices(SESSION_DEVICES)

_WATCHED = ("TF_CONFIG", "TPU_NAME", "JOB_COMPLETION_INDEX", "SLURM_PROCID", "SLURM_NTASKS",
            "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST")


@pytest.fixture(autouse=True)
def restore_environment():
    """Puts back TF_CONFIG and the other variables mgpu_tf reads after each test."""
    saved = {name: os.environ.get(name) for name in _WATCHED}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
