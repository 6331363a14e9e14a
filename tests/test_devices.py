"""simulate_devices and device naming."""

import json
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.base import devices
from support import compare
from support import workers

_GPUS = tf.config.list_physical_devices("GPU")  # does not start the runtime
_WITHOUT_GPU = pytest.mark.skipif(bool(_GPUS), reason="checks a machine without a GPU")


def test_the_session_has_the_simulated_cpus():
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert names == [f"/device:CPU:{i}" for i in range(4)]
    assert devices.planned_logical_devices("CPU") == names


def test_calling_again_with_the_same_count_is_a_no_op():
    cpu = tf.config.list_physical_devices("CPU")[0]
    configuration = tf.config.get_logical_device_configuration(cpu)
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert mgpu_tf.simulate_devices(4) == names
    assert [d.name for d in tf.config.list_logical_devices("CPU")] == names
    assert tf.config.get_logical_device_configuration(cpu) == configuration
    with tf.device(names[-1]):
        assert tf.constant(1.0).device.endswith("/device:CPU:3")


def test_calling_after_the_runtime_started_says_to_call_it_first():
    with pytest.raises(mgpu_tf.DevicesAlreadyInitializedError,
                       match=r"simulate_devices\(2\) must be called before TensorFlow starts"):
        mgpu_tf.simulate_devices(2)


@pytest.mark.parametrize("count, device_type, match", [
    (0, "CPU", "`count` must be an integer of at least 1. Received: count=0"),
    (2.0, "CPU", "`count` must be an integer"),
    (True, "CPU", "`count` must be an integer"),
    (2, "XPU", "`device_type` must be one of"),
    pytest.param(2, "GPU", "There is no physical GPU to split", marks=_WITHOUT_GPU),
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


@_WITHOUT_GPU
def test_nccl_is_unavailable_without_gpus():
    assert not devices.nccl_available()


def test_a_fresh_process_gets_the_count_it_asks_for(tmp_path):
    # Twice before the runtime starts and once after: the same three devices each time.
    script = tmp_path / "split.py"
    script.write_text(textwrap.dedent("""
        import json, mgpu_tf, tensorflow as tf
        calls = [mgpu_tf.simulate_devices(3), mgpu_tf.simulate_devices(3)]
        s = mgpu_tf.make_strategy("mirrored")
        calls.append(mgpu_tf.simulate_devices(3))
        print(json.dumps({"calls": calls, "replicas": s.num_replicas_in_sync,
                          "logical": [d.name for d in tf.config.list_logical_devices("CPU")]}))
    """))
    result = workers.run_python(script)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.splitlines()[-1])
    names = [f"/device:CPU:{i}" for i in range(3)]
    assert got == {"calls": [names] * 3, "replicas": 3, "logical": names}


@pytest.mark.gpu
def test_nccl_is_available_with_a_gpu():
    assert devices.nccl_available()


@pytest.mark.gpu
def test_a_gpu_splits_into_logical_gpus_that_train_as_one_device(tmp_path):
    # A fresh process: the session's runtime has started, and its GPUs are not split.
    script = tmp_path / "split_gpu.py"
    script.write_text(textwrap.dedent("""
        import json, keras, numpy as np, tensorflow as tf, mgpu_tf
        calls = [mgpu_tf.simulate_devices(2, "GPU"), mgpu_tf.simulate_devices(2, "GPU")]
        tf.config.experimental.enable_tensor_float_32_execution(False)
        rng = np.random.RandomState(0)
        x = rng.normal(size=(32, 5)).astype("float32")
        y = rng.normal(size=(32, 1)).astype("float32")

        def trained(strategy):
            with strategy.scope():
                keras.utils.set_random_seed(0)
                model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8),
                                          keras.layers.Dense(1)])
                model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
            return [w.tolist() for w in model.get_weights()]

        strategy = mgpu_tf.make_strategy("mirrored", all_reduce="hierarchical_copy")
        print(json.dumps({"calls": calls,
                          "logical": [d.name for d in tf.config.list_logical_devices("GPU")],
                          "replicas": list(strategy.extended.worker_devices),
                          "mirrored": trained(strategy),
                          "one": trained(mgpu_tf.make_strategy("one_device",
                                                               devices=["GPU:0"]))}))
    """))
    result = workers.run_python(script, gpus=True)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.splitlines()[-1])
    names = ["/device:GPU:0", "/device:GPU:1"]
    assert got["calls"] == [names, names] and got["logical"] == names
    assert [d.split("device:")[-1] for d in got["replicas"]] == ["GPU:0", "GPU:1"]
    mirrored = [np.asarray(w) for w in got["mirrored"]]
    one = [np.asarray(w) for w in got["one"]]
    assert compare.relative_difference(mirrored, one) < 1e-5
