"""TF_CONFIG parsing and validation, and clusters built from host lists."""

import json

import pytest

import mgpu_tf
from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import tf_config


def _config(cluster_spec, task_type="worker", index=0):
    return {"cluster": cluster_spec, "task": {"type": task_type, "index": index}}


def test_parses_a_worker_cluster():
    config = mgpu_tf.parse_tf_config(
        json.dumps(_config({"worker": ["h1:2222", "h2:2222"]}, index=1)))
    assert config.num_workers == 2
    assert (config.task_type, config.task_index, config.address) == ("worker", 1, "h2:2222")
    assert not config.is_chief


def test_worker_zero_is_chief_without_a_chief_role():
    assert tf_config.parse_tf_config(_config({"worker": ["h1:1", "h2:1"]})).is_chief


def test_chief_role_is_the_chief():
    spec = {"chief": ["c:1"], "worker": ["w:1"]}
    assert tf_config.parse_tf_config(_config(spec, "chief")).is_chief
    assert not tf_config.parse_tf_config(_config(spec, "worker")).is_chief
    assert tf_config.parse_tf_config(_config(spec, "chief")).num_workers == 2


def test_round_trips_to_tf_config():
    value = _config({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, index=1)
    assert json.loads(tf_config.parse_tf_config(value).to_json()) == value


def test_ipv6_addresses_are_accepted():
    assert tf_config.parse_address("[::1]:2222") == ("::1", 2222)


def test_cluster_from_hosts_matches_the_hand_written_tf_config():
    built = tf_config.cluster_from_hosts("h1:10, h2:10", 1)
    assert built.to_tf_config() == _config({"worker": ["h1:10", "h2:10"]}, index=1)
    assert built.source == "worker_hosts"


def test_cluster_resolver_describes_the_same_cluster():
    resolver = tf_config.cluster_from_hosts(["h1:10", "h2:10"], 1).cluster_resolver()
    assert resolver.cluster_spec().as_dict() == {"worker": ["h1:10", "h2:10"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)


def test_detect_cluster_reads_tf_config(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(_config({"worker": ["a:1", "b:1"]})))
    assert cluster.detect_cluster().num_workers == 2
    monkeypatch.setenv("TF_CONFIG", "")
    assert cluster.detect_cluster() is None


@pytest.mark.parametrize("value, match", [
    ("{nope", "TF_CONFIG is not valid JSON"),
    ("[1, 2]", "TF_CONFIG must be a JSON object"),
    ({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "x": 1},
     r"TF_CONFIG has unknown keys \['x'\]"),
    ({"cluster": {}, "task": {}}, r"TF_CONFIG\['cluster'\] must be a non-empty object"),
    (_config({"boss": ["a:1"]}), "TF_CONFIG\\['cluster'\\] has an unknown role 'boss'"),
    (_config({"worker": "a:1"}), r"TF_CONFIG\['cluster'\]\['worker'\] must be a non-empty list"),
    (_config({"worker": ["a"]}), r"TF_CONFIG\['cluster'\]\['worker'\]\[0\] must be a 'host:port'"),
    (_config({"worker": ["a:70000"]}),
     r"must end in a port between 1 and 65535. Received: 'a:70000'"),
    (_config({"worker": ["a:0"]}), "must end in a port between 1 and 65535"),
    (_config({"worker": [":80"]}), "must name a host before the port"),
    (_config({"worker": ["a:1", "a:1"]}), "Address 'a:1' appears twice"),
    (_config({"chief": ["a:1", "b:1"]}, "chief"),
     "TF_CONFIG\\['cluster'\\]\\['chief'\\] may hold one address"),
    (_config({"worker": ["a:1"], "ps": ["b:1"]}), "TF_CONFIG names 'ps' tasks"),
    (_config({"evaluator": ["a:1"]}, "evaluator"),
     "TF_CONFIG\\['cluster'\\] needs a 'chief' or 'worker'"),
    ({"cluster": {"worker": ["a:1"]}}, r"TF_CONFIG\['task'\] must be an object"),
    (_config({"worker": ["a:1"]}, "chief"),
     "TF_CONFIG\\['task'\\]\\['type'\\] is 'chief', which is not a role"),
    (_config({"worker": ["a:1"]}, "worker", "0"),
     r"TF_CONFIG\['task'\]\['index'\] must be an integer"),
    (_config({"worker": ["a:1", "b:1"]}, "worker", 2),
     r"TF_CONFIG\['task'\]\['index'\] must be in 0..1"),
    (_config({"worker": ["a:1"]}, "worker", -1), r"must be in 0..0"),
])
def test_malformed_tf_config_quotes_the_offending_part(value, match):
    with pytest.raises(mgpu_tf.ClusterConfigError, match=match):
        tf_config.parse_tf_config(value)


def test_invalid_tf_config_in_the_environment_fails_make_strategy_at_once(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(_config({"worker": ["a:1", "a:1"]})))
    with pytest.raises(ValueError, match="Address 'a:1' appears twice"):
        mgpu_tf.make_strategy()


@pytest.mark.parametrize("hosts, index, match", [
    ([], 0, "`worker_hosts` must list at least one"),
    (["a:1"], None, "`task_index` is required"),
    (["a:1"], "0", "`task_index` must be an integer"),
    (["a:1", "b:2"], 5, r"`task_index` must be in 0..1 for 2 worker_hosts"),
    (["a:1", "a:1"], 0, "Address 'a:1' appears twice"),
])
def test_bad_host_lists(hosts, index, match):
    with pytest.raises(tf_config.ClusterConfigError, match=match):
        tf_config.cluster_from_hosts(hosts, index)


def test_training_tasks_are_the_chief_then_the_workers_with_their_own_indices():
    spec = {"ps": ["p:1"], "evaluator": ["e:1"], "worker": ["w0:1", "w1:1"], "chief": ["c:1"]}
    assert tf_config.training_tasks(spec) == [
        ("chief", 0, "c:1"), ("worker", 0, "w0:1"), ("worker", 1, "w1:1")]
    # A sparse job (index to address) keeps its indices: task 3 stays task 3.
    assert tf_config.training_tasks({"worker": {3: "w3:1", 1: "w1:1"}}) == [
        ("worker", 1, "w1:1"), ("worker", 3, "w3:1")]
