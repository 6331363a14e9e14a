"""make_strategy: the registry, real tf.distribute objects, and every option rule."""

import logging

import keras
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.strategies import factory as strategies


def test_available_strategies_lists_every_builtin_with_a_description():
    names = mgpu_tf.available_strategies()
    for kind in mgpu_tf.StrategyName:
        assert kind.value in names
        assert names[kind.value]


def test_strategy_name_enum_compares_and_prints_as_string():
    assert mgpu_tf.StrategyName.MIRRORED == "mirrored"
    assert str(mgpu_tf.StrategyName.MIRRORED) == "mirrored"
    strategy = mgpu_tf.make_strategy(mgpu_tf.StrategyName.MIRRORED, devices=2)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)


@pytest.mark.parametrize("kind", ["default", "off", "none", "DEFAULT"])
def test_default_and_aliases_return_tensorflows_default_strategy(kind):
    strategy = mgpu_tf.make_strategy(kind)
    assert strategy is tf.distribute.get_strategy()
    assert mgpu_tf.strategy_kind(strategy) == "default"


def test_one_device_uses_the_named_device():
    strategy = mgpu_tf.make_strategy("one_device", devices=["cpu:1"])
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert strategy.extended.worker_devices == ("/job:localhost/replica:0/task:0/device:CPU:1",)
    assert mgpu_tf.strategy_kind(strategy) == "one_device"


@pytest.mark.parametrize("devices, expected", [
    (2, 2),
    (4, 4),
    (["/cpu:0", "/device:CPU:3"], 2),
])
def test_mirrored_replicas_follow_devices(devices, expected):
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == expected
    assert mgpu_tf.strategy_kind(strategy) == "mirrored"


@pytest.mark.parametrize("all_reduce, ops_type", [
    ("hierarchical_copy", tf.distribute.HierarchicalCopyAllReduce),
    ("reduce_to_one", tf.distribute.ReductionToOneDevice),
])
def test_mirrored_all_reduce_choice_reaches_tensorflow(all_reduce, ops_type):
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, all_reduce=all_reduce)
    assert isinstance(strategy.extended._cross_device_ops, ops_type)


def test_num_packs_reaches_hierarchical_copy():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, all_reduce="hierarchical_copy",
                                     num_packs=3)
    assert strategy.extended._cross_device_ops._num_packs == 3


def test_mirrored_reduces_a_value_across_its_replicas():
    strategy = mgpu_tf.make_strategy("mirrored", devices=4, all_reduce="reduce_to_one")
    values = strategy.run(lambda: tf.cast(
        tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32))
    assert float(strategy.reduce("SUM", values, axis=None)) == 1 + 2 + 3 + 4


def test_multi_worker_single_task_builds_the_real_strategy():
    strategy = mgpu_tf.make_strategy("multi_worker_mirrored", timeout_seconds=30,
                                     bytes_per_pack=1 << 20, all_reduce="ring")
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    assert mgpu_tf.strategy_kind(strategy) == "multi_worker"
    options = strategy.extended._communication_options
    # TensorFlow would hold two threads per collective for it: the toolkit keeps it.
    assert options.timeout_seconds is None
    assert options.bytes_per_pack == 1 << 20
    assert options.implementation == tf.distribute.experimental.CommunicationImplementation.RING


def test_auto_on_a_cpu_only_machine_chooses_default_and_says_why(caplog):
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        strategy = mgpu_tf.make_strategy()
    assert strategy is tf.distribute.get_strategy()
    lines = [r.getMessage() for r in caplog.records if "auto" in r.getMessage()]
    assert len(lines) == 1 and "'default'" in lines[0] and "no TPU, cluster or GPU" in lines[0]


def test_auto_with_several_devices_chooses_mirrored():
    assert strategies.auto_choice(devices=2)[0] == "mirrored"
    assert isinstance(mgpu_tf.make_strategy("auto", devices=2), tf.distribute.MirroredStrategy)
    assert strategies.auto_choice(devices=1)[0] == "one_device"


def test_auto_with_a_multi_task_tf_config_chooses_multi_worker(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},'
                       ' "task": {"type": "worker", "index": 0}}')
    kind, reason = strategies.auto_choice()
    assert kind == "multi_worker" and "2 workers" in reason


def test_auto_with_a_one_task_tf_config_stays_local(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]},'
                       ' "task": {"type": "worker", "index": 0}}')
    assert strategies.auto_choice()[0] == "default"


def test_auto_with_a_named_tpu_chooses_tpu():
    assert strategies.auto_choice(tpu="grpc://10.0.0.2:8470")[0] == "tpu"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("kind, options, error, match", [
    ("bogus", {}, ValueError, "Unknown strategy 'bogus'. Known strategies: auto, default"),
    (3, {}, TypeError, "`kind` must be a strategy name"),
    ("mirrored", {"devise": 2}, TypeError, r"make_strategy\(\) got unknown option"),
    ("default", {"num_packs": 2}, ValueError, "`num_packs` does not apply to strategy 'default'"),
    ("mirrored", {"timeout_seconds": 5}, ValueError,
     "`timeout_seconds` does not apply to strategy 'mirrored'; it applies to hybrid, "
     "multi_worker"),
    ("mirrored", {"all_reduce": "ring"}, ValueError,
     r"`all_reduce` for mirrored must be one of auto, nccl, hierarchical_copy, reduce_to_one "
     r"\('ring' is for multi_worker\)"),
    ("multi_worker", {"all_reduce": "hierarchical_copy"}, ValueError,
     "`all_reduce` for multi_worker must be one of auto, ring, nccl"),
    ("mirrored", {"all_reduce": "nccl"}, ValueError,
     "`all_reduce='nccl'` needs NCCL.*Use all_reduce='hierarchical_copy'"),
    ("multi_worker", {"all_reduce": "nccl"}, ValueError,
     "`all_reduce='nccl'` needs NCCL.*Use all_reduce='ring'"),
    ("mirrored", {"num_packs": 2}, ValueError,
     "`num_packs` applies only to all_reduce='nccl' or 'hierarchical_copy'"),
    ("mirrored", {"num_packs": 0, "all_reduce": "hierarchical_copy"}, ValueError,
     "`num_packs` must be at least 1. Received: num_packs=0"),
    ("mirrored", {"devices": 9}, ValueError,
     "`devices` asks for 9 devices but this process has 4"),
    ("mirrored", {"devices": ["/cpu:0", "/cpu:7"]}, ValueError,
     "`devices` names '/cpu:7', which does not exist. Devices here: /device:CPU:0"),
    ("mirrored", {"devices": ["/cpu:0", "cpu:0"]}, ValueError, "`devices` names a device twice"),
    ("mirrored", {"devices": "cpu:0"}, TypeError, "`devices` must be a non-empty list"),
    ("mirrored", {"devices": ["gpx"]}, ValueError, "A device must"),
    ("mirrored", {"devices": 2, "num_gpus": 1}, ValueError, "Pass `devices` or `num_gpus`"),
    ("mirrored", {"num_gpus": 2}, ValueError, "`num_gpus` asks for 2 GPUs but this machine has 0"),
    ("mirrored", {"num_gpus": -1}, ValueError, "`num_gpus` must be at least 0"),
    ("one_device", {"devices": 2}, ValueError, "`devices` for one_device must name exactly one"),
    ("multi_worker", {"timeout_seconds": 0}, ValueError, "`timeout_seconds` must be positive"),
    ("multi_worker", {"timeout_seconds": "5"}, TypeError, "`timeout_seconds` must be a number"),
    ("multi_worker", {"bytes_per_pack": -1}, ValueError, "`bytes_per_pack` must be at least 0"),
    ("multi_worker", {"cluster": {"worker": ["a:1"]}, "task_index": 0}, ValueError,
     "Pass `cluster` or `worker_hosts` with `task_index`, not both"),
    ("multi_worker", {"worker_hosts": ["127.0.0.1:1", "127.0.0.1:2"]}, ValueError,
     "`task_index` is required with `worker_hosts`"),
    ("multi_worker", {"worker_hosts": ["127.0.0.1:1"], "task_index": 1}, ValueError,
     r"`task_index` must be in 0..0"),
    ("multi_worker", {"worker_hosts": ["127.0.0.1:0"], "task_index": 0}, ValueError,
     "worker_hosts"),
    ("multi_worker", {"cluster": "{not json"}, ValueError, "TF_CONFIG is not valid JSON"),
    ("tpu", {"tpu": 5}, TypeError, "`tpu` must be a TPU name or address"),
    ("tpu", {}, ValueError, "No TPU is reachable"),
])
def test_bad_options_fail_with_a_message_naming_them(kind, options, error, match):
    with pytest.raises(error, match=match):
        mgpu_tf.make_strategy(kind, **options)


def test_bad_multi_worker_options_fail_before_any_server_starts():
    # A strategy that started its gRPC server would bind the port; the check comes first.
    with pytest.raises(ValueError, match="`task_index` must be in"):
        mgpu_tf.make_strategy("multi_worker", worker_hosts="127.0.0.1:5555", task_index=3)
    assert not tf.distribute.has_strategy()


def test_prepare_model_is_a_no_op_for_data_parallel_strategies():
    import keras

    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert mgpu_tf.prepare_model(model, strategy) is model


def test_mirrored_strategies_of_different_sizes_all_reduce_in_one_process():
    # Without distinct collective keys the second strategy fails at its first
    # in-graph all-reduce: TensorFlow remembers the first one's group size.
    for count in (2, 4, 3):
        strategy = mgpu_tf.make_strategy("mirrored", devices=count)

        @tf.function
        def step():
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
                "SUM", tf.constant(1.0)))

        assert float(strategy.experimental_local_results(step())[0]) == count


def test_strategy_kind_rejects_what_is_not_a_strategy():
    with pytest.raises(TypeError, match="`strategy` must be a strategy"):
        mgpu_tf.strategy_kind("mirrored")


def test_model_parallel_is_registered_without_importing_it_first():
    import subprocess
    import sys

    code = ("import mgpu_tf, sys; assert 'mgpu_tf.model_parallel' not in sys.modules; "
            "print(sorted(mgpu_tf.available_strategies()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'model_parallel'" in result.stdout


def test_the_command_line_answers_a_bad_argument_without_importing_tensorflow():
    import subprocess
    import sys

    code = ("import sys; from mgpu_tf.cli import main; code = main(['launch', '--workers', '0', "
            "'--', 'true']); assert 'tensorflow' not in sys.modules; sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert "`workers` must be an integer of at least 1" in result.stderr


def test_multi_worker_after_a_tensorflow_op_says_to_make_the_strategy_first():
    # TensorFlow alone ends with "Collective ops must be configured at program startup".
    import subprocess
    import sys

    code = ("import tensorflow as tf, mgpu_tf\n"
            "tf.constant(1.0) + 1\n"
            "try:\n"
            "    mgpu_tf.make_strategy('multi_worker', worker_hosts=['127.0.0.1:1', "
            "'127.0.0.1:2'], task_index=0)\n"
            "except RuntimeError as error:\n"
            "    print(type(error).__name__, error, error.__cause__, error.__suppress_context__)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.stdout.startswith(
        "RuntimeError make_strategy('multi_worker') must run before any TensorFlow op: "), (
        result.stdout, result.stderr[-3000:])
    assert "Make the strategy first thing in the program" in result.stdout
    assert result.stdout.rstrip().endswith("None True"), result.stdout  # one error, not a chain


def test_prepare_model_refuses_what_is_not_a_model_or_strategy():
    strategy = mgpu_tf.make_strategy("default")
    with pytest.raises(TypeError, match=r"^`model` must be a Keras model, built inside "
                                        r"`strategy.scope\(\)`. Received: model=None"):
        mgpu_tf.prepare_model(None, strategy)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(TypeError, match="`strategy` must be a strategy"):
        mgpu_tf.prepare_model(model, "mirrored")
