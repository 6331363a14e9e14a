"""Where a process runs: TF_CONFIG, a Kubernetes Indexed Job, SLURM, or one machine.

Each test sets the variables exactly as that system does and compares the cluster
with one written out by hand.
"""

import ast
import json
import os
import pathlib
import re

import pytest

from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import hostlist
from mgpu_tf.cluster import launcher
from mgpu_tf.cluster import tf_config
from mgpu_tf.strategies import factory as strategies
from support import main_job
from support import workers


def _pod(index, job="train", jobs="train:3", service="train", port="2222", **extra):
    """The variables of one pod of an Indexed Job made by mgpu_tf.cluster.kubernetes."""
    return {"JOB_COMPLETION_INDEX": str(index), "MGPU_TF_JOB_NAME": job, "MGPU_TF_JOBS": jobs,
            "MGPU_TF_SERVICE_NAME": service, "MGPU_TF_PORT": port, **extra}


def _srun_task(rank, node, local, *, nodes="gpu[07-08]", per_node="2(x2)", ntasks=4,
               job_id="4242", **extra):
    """The variables `srun -N2 -n4` gives one task (block distribution)."""
    return {"SLURM_JOB_ID": job_id, "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(ntasks),
            "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_STEP_NODELIST": nodes,
            "SLURM_JOB_NODELIST": nodes, "SLURM_STEP_TASKS_PER_NODE": per_node,
            "SLURM_TASKS_PER_NODE": per_node, "SLURM_NODEID": str(node),
            "SLURM_LOCALID": str(local), **extra}


# ------------------------------------------------------------------ order of detection


def test_nothing_set_is_a_single_machine():
    assert cluster.detect_cluster({}) is None
    assert cluster.detect_source({}) == "single_machine"


def test_tf_config_comes_first():
    tf_config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    environ = {**_pod(0), **_srun_task(0, 0, 0), "TF_CONFIG": json.dumps(tf_config)}
    config = cluster.detect_cluster(environ)
    assert config.source == "TF_CONFIG"
    assert config.to_tf_config() == tf_config


def test_kubernetes_comes_before_slurm():
    assert cluster.detect_cluster({**_pod(2), **_srun_task(0, 0, 0)}).source == "kubernetes"


def test_reads_os_environ_by_default(monkeypatch):
    for name, value in _pod(1).items():
        monkeypatch.setenv(name, value)
    config = cluster.detect_cluster()
    assert (config.source, config.task_index) == ("kubernetes", 1)


# ------------------------------------------------------------------ Kubernetes


def test_kubernetes_indexed_job_gives_the_stable_pod_names():
    config = cluster.detect_cluster(_pod(1))
    assert config.cluster == {"worker": ["train-0.train:2222", "train-1.train:2222",
                                         "train-2.train:2222"]}
    assert (config.task_type, config.task_index, config.source) == ("worker", 1, "kubernetes")
    assert config.address == "train-1.train:2222"


def test_kubernetes_node_pools_are_jobs_in_order():
    environ = _pod(1, job="mnist-t4", jobs="mnist-a100:2,mnist-t4:2", service="mnist",
                   port="3000")
    config = cluster.detect_cluster(environ)
    assert config.cluster["worker"] == ["mnist-a100-0.mnist:3000", "mnist-a100-1.mnist:3000",
                                        "mnist-t4-0.mnist:3000", "mnist-t4-1.mnist:3000"]
    assert config.task_index == 3


def test_kubernetes_job_of_one_pod_is_a_single_machine():
    assert cluster.detect_cluster(_pod(0, jobs="train:1")) is None
    assert cluster.detect_source(_pod(0, jobs="train:1")) == "kubernetes"


def test_an_indexed_job_not_made_by_mgpu_tf_is_a_single_machine():
    assert cluster.detect_cluster({"JOB_COMPLETION_INDEX": "3"}) is None


# ------------------------------------------------------------------ SLURM


def test_slurm_tasks_all_see_one_cluster_and_distinct_indices():
    tasks = [_srun_task(rank, rank // 2, rank % 2) for rank in range(4)]
    configs = [cluster.detect_cluster(t) for t in tasks]
    base = 10000 + (4242 % 1400) * 16
    expected = [f"gpu07:{base}", f"gpu07:{base + 1}", f"gpu08:{base}", f"gpu08:{base + 1}"]
    assert all(c.cluster == {"worker": expected} for c in configs)
    assert [c.task_index for c in configs] == [0, 1, 2, 3]
    assert {c.source for c in configs} == {"slurm"}
    assert configs[0].is_chief and not configs[3].is_chief


def test_slurm_cyclic_distribution_orders_workers_by_node():
    # srun --distribution=cyclic: rank 1 runs on the second node.
    config = cluster.detect_cluster(_srun_task(1, 1, 0, MGPU_TF_PORT="5000"))
    assert config.address == "gpu08:5000"
    assert config.task_index == 2


def test_slurm_uneven_tasks_per_node():
    environ = _srun_task(2, 1, 0, nodes="n[1-2]", per_node="2,1", ntasks=3,
                         MGPU_TF_PORT="7000")
    config = cluster.detect_cluster(environ)
    assert config.cluster["worker"] == ["n1:7000", "n1:7001", "n2:7000"]
    assert config.task_index == 2


def test_a_slurm_batch_script_outside_srun_is_a_single_machine():
    # sbatch runs the script once, on the first node, with the job's variables only.
    environ = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "2",
               "SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)",
               "SLURM_NODEID": "0"}
    assert cluster.detect_cluster(environ) is None
    assert cluster.detect_source(environ) == "single_machine"


def test_slurm_without_tasks_per_node_spreads_tasks_evenly():
    environ = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "a,b",
               "SLURM_NODEID": "1", "MGPU_TF_PORT": "2222"}
    assert cluster.detect_cluster(environ).cluster["worker"] == ["a:2222", "b:2222"]


def test_slurm_single_task_is_a_single_machine():
    environ = _srun_task(0, 0, 0, nodes="gpu01", per_node="1", ntasks=1)
    assert cluster.detect_cluster(environ) is None
    assert cluster.detect_source(environ) == "slurm"


def test_slurm_jobs_sharing_a_node_get_different_ports():
    first = cluster.detect_cluster(_srun_task(0, 0, 0, job_id="100"))
    second = cluster.detect_cluster(_srun_task(0, 0, 0, job_id="101"))
    assert not set(first.cluster["worker"]) & set(second.cluster["worker"])


@pytest.mark.parametrize("text, hosts", [
    ("gpu01", ["gpu01"]),
    ("node[01-03,07],login", ["node01", "node02", "node03", "node07", "login"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("rack[1-2]-n[0-1]", ["rack1-n0", "rack1-n1", "rack2-n0", "rack2-n1"]),
    ("a,b[009-010]", ["a", "b009", "b010"]),
])
def test_expand_hostlist(text, hosts):
    assert hostlist.expand_hostlist(text) == hosts


def test_expand_tasks_per_node():
    assert hostlist.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


@pytest.mark.parametrize("text, match", [
    ("node[01-03", "unclosed"),
    ("node]1", "without its"),
    ("node[3-1]", "must not run backwards"),
    ("node[a-b]", "range must be 'N' or 'N-M'"),
    ("", "at least one host"),
    ("a,,b", "empty name"),
])
def test_bad_hostlists(text, match):
    with pytest.raises(hostlist.HostlistError, match=match):
        hostlist.expand_hostlist(text)


# ------------------------------------------------------------------ overrides and weights


def test_host_override_maps_names_to_loopback():
    environ = _pod(0, MGPU_TF_HOST_OVERRIDE="train-0.train=127.0.0.1:5001,"
                                            "train-1.train=127.0.0.1:5002,train-2.train=[::1]")
    config = cluster.detect_cluster(environ)
    assert config.cluster["worker"] == ["127.0.0.1:5001", "127.0.0.1:5002", "[::1]:2222"]
    assert config.source == "kubernetes"


def test_shard_weights_follow_the_cluster():
    assert cluster.shard_weights(_pod(0, MGPU_TF_SHARD_WEIGHTS="2,2,1")) == [2.0, 2.0, 1.0]
    assert cluster.shard_weights(_pod(0)) is None
    assert cluster.shard_weights({"MGPU_TF_SHARD_WEIGHTS": "3,1"}) == [3.0, 1.0]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("environ, match", [
    ({"TF_CONFIG": "{nope"}, "TF_CONFIG is not valid JSON"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 4}}'},
     r"TF_CONFIG\['task'\]\['index'\] must be in 0..0"),
    ({"TF_CONFIG": '{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", '
                   '"index": 0}}'}, r"TF_CONFIG\['cluster'\]\['chief'\] may hold one"),
    (_pod(3), r"JOB_COMPLETION_INDEX must be in 0..2 for Job 'train'"),
    (_pod("x"), "JOB_COMPLETION_INDEX must be an integer of at least 0. Received: "
                "JOB_COMPLETION_INDEX='x'"),
    ({k: v for k, v in _pod(0).items() if k != "JOB_COMPLETION_INDEX"},
     "JOB_COMPLETION_INDEX must be set by Kubernetes; the Job needs completionMode: Indexed"),
    (_pod(0, service="Train_Svc"), "MGPU_TF_SERVICE_NAME must be a DNS label"),
    (_pod(0, job="x" * 64, jobs="x" * 64 + ":3"), "MGPU_TF_JOB_NAME must be a DNS label"),
    (_pod(0, job="other"), r"MGPU_TF_JOB_NAME must be one of the Jobs in MGPU_TF_JOBS \(train\)"),
    (_pod(0, jobs="train:0"), "MGPU_TF_JOBS must list the cluster's Jobs"),
    # '²' is a digit to str.isdigit(), not to int().
    (_pod("²"), "JOB_COMPLETION_INDEX must be an integer of at least 0. Received: "
                "JOB_COMPLETION_INDEX='²'"),
    (_pod(0, jobs="train:²"), "MGPU_TF_JOBS must list the cluster's Jobs"),
    ({k: v for k, v in _pod(0).items() if k != "MGPU_TF_JOBS"},
     "MGPU_TF_JOBS must be set with MGPU_TF_JOB_NAME.* Received: MGPU_TF_JOBS unset"),
    (_pod(0, port="70000"), "MGPU_TF_PORT must be between 1 and 65535. Received: "
                            "MGPU_TF_PORT=70000"),
    (_pod(0, port="0"), "MGPU_TF_PORT must be between 1 and 65535"),
    (_srun_task(4, 1, 1), "SLURM_PROCID must be in 0..3 for 4 tasks. Received: SLURM_PROCID=4"),
    (_srun_task(0, 0, 0, per_node="3,2"), "SLURM_STEP_TASKS_PER_NODE must give one count per "
                                          "node"),
    (_srun_task(0, 0, 2), "SLURM_NODEID and SLURM_LOCALID must name a task of the step"),
    (_srun_task(0, 0, 0, nodes="gpu[07-08"), "A SLURM host list has an unclosed"),
    ({k: v for k, v in _srun_task(0, 0, 0).items() if k != "SLURM_STEP_NUM_TASKS"},
     "SLURM_STEP_NUM_TASKS must be set by srun"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "a,b"},
     "SLURM_STEP_TASKS_PER_NODE must be set when SLURM_STEP_NUM_TASKS=3 tasks do not spread"),
    (_srun_task(0, 0, 0, MGPU_TF_PORT="65535"), "MGPU_TF_PORT leaves no room for 2 tasks"),
    (_pod(0, MGPU_TF_HOST_OVERRIDE="train-9.train=127.0.0.1"),
     r"MGPU_TF_HOST_OVERRIDE names hosts that are not in the cluster: \['train-9.train'\]"),
    (_pod(0, MGPU_TF_HOST_OVERRIDE="train-0.train"),
     r"MGPU_TF_HOST_OVERRIDE must be 'name=host\[:port\],...'"),
    (_pod(0, MGPU_TF_HOST_OVERRIDE="train-0.train=127.0.0.1:99999"),
     "must end in a port between 1 and 65535"),
    (_pod(0, MGPU_TF_HOST_OVERRIDE="train-0.train=h:1,train-1.train=h:1"),
     "Address 'h:1' appears twice"),
])
def test_bad_environment_fails_with_the_variable_named(environ, match):
    with pytest.raises(tf_config.ClusterConfigError, match=match):
        cluster.detect_cluster(environ)


@pytest.mark.parametrize("value, match", [
    ("2,x", "MGPU_TF_SHARD_WEIGHTS must be comma-separated numbers"),
    ("0,0,0", "not all zero"),
    ("1,-1,1", "not negative"),
    ("2,1", r"one weight per worker \(3, from kubernetes\)"),
])
def test_bad_shard_weights(value, match):
    with pytest.raises(tf_config.ClusterConfigError, match=match):
        cluster.shard_weights(_pod(0, MGPU_TF_SHARD_WEIGHTS=value))


def test_bad_kubernetes_environment_fails_make_strategy_before_tensorflow_connects(monkeypatch):
    for name, value in _pod(5).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX must be in 0..2"):
        strategies.make_strategy("multi_worker")


# ------------------------------------------------------------------ strategy 'auto'


@pytest.mark.parametrize("environ, source", [
    (_pod(0), "kubernetes"),
    (_srun_task(1, 0, 1), "slurm"),
])
def test_auto_chooses_multi_worker_on_a_detected_cluster(monkeypatch, environ, source):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    kind, reason = strategies.auto_choice()
    assert kind == "multi_worker"
    assert reason == f"{source} gives {3 if source == 'kubernetes' else 4} workers"


# ------------------------------------------------------------------ the test session's environment


def _names_read(path):
    """Environment variable names a module reads: the string constants of its calls and
    subscripts that involve `environ` (`environ.get("X")`, `environ["X"]`, `"X" in
    environ`, `_integer(environ, "X")`), of `environ_value("X")` and of `getenv("X")`."""

    def mentions_environ(node):
        return any(isinstance(n, ast.Name) and n.id == "environ"
                   or isinstance(n, ast.Attribute) and n.attr == "environ"
                   for n in ast.walk(node))

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("environ_value", "getenv") or mentions_environ(node):
                names |= {a.value for a in node.args if isinstance(a, ast.Constant)}
        elif isinstance(node, ast.Subscript) and mentions_environ(node.value):
            names.add(getattr(node.slice, "value", None))
        elif isinstance(node, ast.Compare) and mentions_environ(node):
            names.add(getattr(node.left, "value", None))
    return {n for n in names if isinstance(n, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", n)}


_READ = {name for path in (pathlib.Path(cluster.__file__).parents[1]).rglob("*.py")
         for name in _names_read(path)}


def test_the_session_watches_every_variable_mgpu_tf_reads():
    # Not empty: the scan finds what detect's docstring lists, and TPU_NAME from the factory.
    assert {"TF_CONFIG", "TPU_NAME", "JOB_COMPLETION_INDEX", "MGPU_TF_JOB_NAME",
            "MGPU_TF_HOST_OVERRIDE", "SLURM_PROCID", "SLURM_STEP_NODELIST"} <= _READ
    assert sorted(n for n in _READ if not workers.is_cluster_variable(n)) == []


def test_the_session_puts_cluster_variables_back():
    os.environ["TF_CONFIG"] = "before"
    with workers.cluster_variables_restored():
        os.environ["TF_CONFIG"] = "changed"
        os.environ["SLURM_PROCID"] = "3"
        os.environ["MGPU_TF_SOMETHING_NEW"] = "x"
        del os.environ["TF_CONFIG"]
    assert os.environ["TF_CONFIG"] == "before"
    assert "SLURM_PROCID" not in os.environ and "MGPU_TF_SOMETHING_NEW" not in os.environ


def test_a_test_starts_without_cluster_variables():
    assert not [n for n in os.environ if workers.is_cluster_variable(n)]


# ------------------------------------------------------------------ real workers

@pytest.mark.multiworker
def test_two_slurm_tasks_train_to_the_end_from_detected_variables():
    """`srun -N2 -n2 python -m mgpu_tf.train` on two nodes, the nodes mapped to loopback."""
    ports = launcher.free_ports(2)
    override = f"gpu1=127.0.0.1:{ports[0]},gpu2=127.0.0.1:{ports[1]}"
    environments = [
        _srun_task(rank, rank, 0, nodes="gpu[1-2]", per_node="1(x2)", ntasks=2,
                   MGPU_TF_HOST_OVERRIDE=override)
        for rank in range(2)
    ]
    results = workers.run_with_environments(
        ["-m", "mgpu_tf.train", "--strategy=auto", "--epochs=2"], environments)
    main_job.assert_trained_alike(results, "tasks")
