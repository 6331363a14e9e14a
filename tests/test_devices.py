"""simulate_devices and device naming."""

import textwrap

import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.strategies import devices
from support import workers


def test_the_session_has_the_simulated_cpus():
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert names == [f"/device:CPU:{i}" for i in range(4)]
    assert devices.planned_logical_devices("CPU") == names


def test_calling_again_with_the_same_count_is_a_no_op():
    assert len(mgpu_tf.simulate_devices(4)) == 4


def test_calling_after_the_runtime_started_says_to_call_it_first():
    with pytest.raises(mgpu_tf.DevicesAlreadyInitializedError,
                       match=r"simulate_devices\(2\) must be called before TensorFlow starts"):
        mgpu_tf.simulate_devices(2)


@pytest.mark.parametrize("count, device_type, match", [
    (0, "CPU", "`count` must be an integer of at least 1. Received: count=0"),
    (2.0, "CPU", "`count` must be an integer"),
    (True, "CPU", "`count` must be an integer"),
    (2, "XPU", "`device_type` must be one of"),
    (2, "GPU", "There is no physical GPU to split"),
])
def test_bad_arguments(count, device_type, match):
    with pytest.raises(ValueError, match=match):
        mgpu_tf.simulate_devices(count, device_type)


@pytest.mark.parametrize("name, expected", [
    ("cpu:1", "/device:CPU:1"),
    ("/CPU:2", "/device:CPU:2"),
    ("/device:gpu:0", "/device:GPU:0"),
    ("/job:worker/task:1/device:GPU:3", "/job:worker/task:1/device:GPU:3"),
])
def test_canonical_device(name, expected):
    assert devices.canonical_device(name) == expected


@pytest.mark.parametrize("name", ["", "gpu", "/device:", 3])
def test_canonical_device_rejects_non_devices(name):
    with pytest.raises(ValueError, match="A device must"):
        devices.canonical_device(name)


def test_nccl_is_unavailable_without_gpus():
    assert not devices.nccl_available()


def test_a_fresh_process_gets_the_count_it_asks_for(tmp_path):
    script = tmp_path / "split.py"
    script.write_text(textwrap.dedent("""
        import mgpu_tf, tensorflow as tf
        mgpu_tf.simulate_devices(3)
        s = mgpu_tf.make_strategy("mirrored")
        print(len(tf.config.list_logical_devices("CPU")), s.num_replicas_in_sync)
    """))
    result = workers.run_python(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["3", "3"]
