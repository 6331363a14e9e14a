"""Property-based checks: the TF_CONFIG and flag parsers answer any input with a
valid result or one of mgpu_tf's errors, never a crash or a hang."""

import json

from absl import flags
from hypothesis import given, settings
from hypothesis import strategies as st

from mgpu_tf.cluster import tf_config
from mgpu_tf import flags as mgpu_flags

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["cluster", "task", "type", "index", "worker", "chief", "ps",
                         "evaluator", "environment", "x"]), children, max_size=4),
    max_leaves=12)

_ADDRESS = st.builds(lambda h, p: f"{h}:{p}", st.sampled_from(["a", "127.0.0.1", "", "[::1]"]),
                     st.integers(-1, 70000)) | st.text(max_size=10)

_SHAPED = st.fixed_dictionaries({
    "cluster": st.dictionaries(st.sampled_from(["chief", "worker", "ps", "evaluator", "boss"]),
                               st.lists(_ADDRESS, max_size=3), max_size=3),
    "task": st.fixed_dictionaries({"type": st.sampled_from(["chief", "worker", "evaluator"]),
                                   "index": st.integers(-2, 4) | st.text(max_size=2)}),
})


def _parse_or_our_error(value):
    try:
        config = tf_config.parse_tf_config(value)
    except tf_config.ClusterConfigError:
        return None
    # A result is a usable cluster: the task is inside it and round-trips.
    assert config.cluster[config.task_type][config.task_index] == config.address
    assert tf_config.parse_tf_config(config.to_json()) == config
    return config


@settings(max_examples=300, deadline=1000)
@given(_JSON)
def test_any_json_value(value):
    _parse_or_our_error(value)
    _parse_or_our_error(json.dumps(value))


@settings(max_examples=300, deadline=1000)
@given(_SHAPED)
def test_tf_config_shaped_values(value):
    _parse_or_our_error(value)


@settings(max_examples=200, deadline=1000)
@given(st.text(max_size=60))
def test_any_text(text):
    _parse_or_our_error(text)


@settings(max_examples=200, deadline=1000)
@given(st.lists(_ADDRESS, max_size=4) | st.text(max_size=20),
       st.none() | st.integers(-2, 5) | st.text(max_size=2))
def test_host_lists(hosts, index):
    try:
        config = tf_config.cluster_from_hosts(hosts, index)
    except tf_config.ClusterConfigError:
        return
    assert config.address == config.cluster["worker"][index]


_FLAG_NAMES = ["strategy", "devices", "num_gpus", "all_reduce", "num_packs", "tpu",
               "worker_hosts", "task_index", "simulate_devices", "simulate_device_type"]
_FLAG_VALUES = st.sampled_from(["", "0", "1", "2", "4", "-1", "9", "mirrored", "multi_worker",
                                "default", "one_device", "tpu", "auto", "ring", "nccl",
                                "hierarchical_copy", "cpu:0", "cpu:0,cpu:1", "gpu:0",
                                "127.0.0.1:1,127.0.0.1:2", "x:99999", "CPU", "GPU"]) | st.text(
                                    max_size=8)


@settings(max_examples=200, deadline=2000)
@given(st.lists(st.tuples(st.sampled_from(_FLAG_NAMES), _FLAG_VALUES), max_size=4))
def test_any_flag_values(pairs):
    values = flags.FlagValues()
    mgpu_flags.define_flags(values)
    argv = ["prog"] + [f"--{name}={value}" for name, value in pairs]
    try:
        values(argv)
    except flags.Error:
        return
    kind, options = mgpu_flags.strategy_options(values)
    assert isinstance(kind, str) and isinstance(options, dict)
