"""`mgpu_tf.kind_of` answers for each built-in strategy as TensorFlow's own object does, and
making a strategy is the one place patches are installed."""

import json
import textwrap

import keras
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.compat import metric_sums
from support import workers

CPUS = ["/cpu:0", "/cpu:1"]


def _tensorflow_answers(strategy):
    """What TensorFlow's object says: replicas, whether it writes, this process' devices."""
    try:
        devices = tuple(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy names no devices
        devices = ()
    return strategy.num_replicas_in_sync, strategy.extended.should_checkpoint, devices


def _kind_answers(strategy):
    kind = mgpu_tf.kind_of(strategy)
    return kind.num_replicas, kind.is_chief, kind.worker_devices


@pytest.mark.parametrize("name, made_by_make_strategy, made_by_tensorflow", [
    ("default", lambda: mgpu_tf.make_strategy("default"), tf.distribute.get_strategy),
    ("one_device", lambda: mgpu_tf.make_strategy("one_device", devices=["/cpu:1"]),
     lambda: tf.distribute.OneDeviceStrategy("/cpu:1")),
    ("mirrored", lambda: mgpu_tf.make_strategy("mirrored", devices=2),
     lambda: tf.distribute.MirroredStrategy(CPUS)),
])
def test_kind_of_answers_as_tensorflow_does(name, made_by_make_strategy, made_by_tensorflow):
    for strategy in (made_by_make_strategy(), made_by_tensorflow()):
        assert mgpu_tf.kind_of(strategy).name == name
        assert _kind_answers(strategy) == _tensorflow_answers(strategy)


def test_a_mirrored_kind_has_a_unit_and_a_pipeline_per_replica():
    strategy = tf.distribute.MirroredStrategy(CPUS)
    kind = mgpu_tf.kind_of(strategy)
    devices = strategy.extended.worker_devices
    assert kind.data_layout() == ("mirrored", 1, 2)
    assert kind.local_units() == (2, 1, {0: [devices[0]], 1: [devices[1]]})
    assert (kind.num_workers, kind.replicas_per_worker) == (1, 2)


def test_a_single_task_multi_worker_kind_answers_as_tensorflow_does():
    strategy = mgpu_tf.make_strategy("multi_worker", timeout_seconds=30)
    kind = mgpu_tf.kind_of(strategy)
    assert kind.name == "multi_worker"
    assert _kind_answers(strategy) == _tensorflow_answers(strategy)
    local = len(strategy.extended.worker_devices)
    assert kind.data_layout() == ("multi_worker", strategy.num_replicas_in_sync // local, local)


def test_kind_of_keeps_one_object_per_strategy_with_the_settings_it_was_made_with():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, steps_per_sync=2)
    assert mgpu_tf.kind_of(strategy) is mgpu_tf.kind_of(strategy)
    assert mgpu_tf.kind_of(strategy).settings.steps_per_sync == 2
    assert mgpu_tf.kind_of(tf.distribute.MirroredStrategy(CPUS)).settings is None


def test_kind_of_refuses_what_is_not_a_strategy():
    with pytest.raises(TypeError, match="`strategy` must be a strategy"):
        mgpu_tf.kind_of("mirrored")


def test_strategy_kind_is_the_name_of_the_kind():
    strategy = tf.distribute.MirroredStrategy(CPUS)
    assert mgpu_tf.strategy_kind(strategy) == mgpu_tf.kind_of(strategy).name == "mirrored"


INSTALLED = """
import json
import sys

import mgpu_tf
from mgpu_tf.compat import patches

mgpu_tf.simulate_devices(2)
after_import = sorted(patches.installed())
strategy = mgpu_tf.make_strategy(sys.argv[1])
print(json.dumps({"after_import": after_import, "installed": sorted(patches.installed()),
                  "needed": sorted(mgpu_tf.kind_of(strategy).patches)}))
"""


@pytest.mark.parametrize("name", ["default", "one_device", "mirrored"])
def test_make_strategy_installs_exactly_what_its_kind_needs(tmp_path, name):
    script = tmp_path / "installed.py"
    script.write_text(textwrap.dedent(INSTALLED))
    result = workers.run_python(script, name, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    # The metric fix is for Keras 3.8-3.9 only: elsewhere it is needed but does not apply.
    applies = {"metric_sums"} if metric_sums.metric_sum_fix_applies(keras.__version__) else set()
    # KerasHub's hook goes in only where KerasHub is imported, which this script does not.
    expected = {p for p in seen["needed"] if p not in ("metric_sums", "keras_hub")} | (
        applies & set(seen["needed"]))
    assert seen["after_import"] == []
    assert set(seen["installed"]) == expected
    assert "shuffle" in expected


SHARDED = """
import json

import tensorflow as tf

import mgpu_tf
from mgpu_tf.compat import patches

data = mgpu_tf.shard_dataset(tf.data.Dataset.range(16).map(lambda i: tf.cast(i, tf.float32)),
                             tf.distribute.get_strategy(), 4)
print(json.dumps({"installed": sorted(patches.installed()), "batches": len(list(data))}))
"""


def test_import_and_shard_dataset_install_no_patch(tmp_path):
    script = tmp_path / "sharded.py"
    script.write_text(textwrap.dedent(SHARDED))
    result = workers.run_python(script, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"installed": [], "batches": 4}


UNPATCHED = """
import keras
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import accumulation

try:
    accumulation.accumulate(keras.optimizers.SGD(0.1), tf.distribute.get_strategy(), 2)
except ValueError as error:
    print(str(error).split(".")[0])
"""


def test_a_hook_without_the_patch_that_calls_it_is_refused(tmp_path):
    script = tmp_path / "unpatched.py"
    script.write_text(textwrap.dedent(UNPATCHED))
    result = workers.run_python(script, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == (
        "`steps_per_sync` acts through the optimizer patch, which make_strategy installs for "
        "the strategies that take it")


LATE_REGISTRATION = """
import tensorflow as tf

from mgpu_tf.base import kind as kind_lib

strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
kind_lib.kind_of(strategy).log_mean = "kept"
from mgpu_tf.strategies import kinds  # registers TensorFlow's strategies now

kind = kinds.kind_of(strategy)
print(type(kind).__name__, kind.name, kind.log_mean, kind.settings)
"""


def test_what_a_strategy_kept_before_its_kind_was_registered_stays(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(textwrap.dedent(LATE_REGISTRATION))
    result = workers.run_python(script, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "MirroredKind mirrored kept None"


def test_a_kind_refuses_options_it_cannot_use_before_it_is_built():
    # one_device's own check, asked by the option parser through the kind.
    with pytest.raises(ValueError, match=r"one_device must name exactly one device. "
                                         r"Received: devices=\['/cpu:0', '/cpu:1'\]"):
        mgpu_tf.make_strategy("one_device", devices=CPUS)
