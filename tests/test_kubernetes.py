"""`mgpu-tf k8s`: manifests valid against the Kubernetes schemas, and pods that train.

The schemas come with kubernetes-validate (offline); JobSet's is vendored from
kubernetes-sigs/jobset in tests/data (its source, commit and licence in its
`$comment`). The workers' test runs the container's command twice, each time with
exactly the environment the manifest gives that pod, the pods' names mapped to
loopback by MGPU_TF_HOST_OVERRIDE.
"""

import copy
import functools
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import kubernetes
from mgpu_tf.cluster import launcher
from support import main_job
from support.manifests import jobset_validator as _jobset_validator
from support.manifests import TRAIN as _TRAIN
from support.manifests import k8s as _k8s
from support.manifests import manifests as _manifests
from support.manifests import validate as _validate
from support.manifests import validate_jobset as _validate_jobset
from support import workers

# ------------------------------------------------------------------ Indexed Job


def test_indexed_job_manifests_are_valid_kubernetes(capsys):
    documents = _manifests(capsys, "--workers", "3", "--gpus_per_worker", "2",
                           "--image", "registry.example.com/mnist:1", "--name", "mnist",
                           "--namespace", "ml")
    assert [d["kind"] for d in documents] == ["Service", "Job"]
    for document in documents:
        _validate(document)


def test_indexed_job_has_a_headless_service_and_stable_pod_names(capsys):
    service, job = _manifests(capsys, "--workers", "3", "--gpus_per_worker", "2",
                              "--image", "img:1", "--name", "mnist")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"][
        "labels"].items()
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
        "Indexed", 3, 3)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == "mnist"
    container = pod["containers"][0]
    assert container["command"][:2] == ["/bin/sh", "-c"] and container["args"] == _TRAIN
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    # Kubernetes names pod i of an Indexed Job `<job>-<i>`; with the subdomain that is
    # `<job>-<i>.<service>`. Every pod must find the same cluster, and itself in it.
    expected = ["mnist-0.mnist:2222", "mnist-1.mnist:2222", "mnist-2.mnist:2222"]
    for i in range(3):
        config = cluster.detect_cluster(kubernetes.pod_environment([service, job], "mnist", i))
        assert config.cluster == {"worker": expected}
        assert config.address == f"{job['metadata']['name']}-{i}.{pod['subdomain']}:2222"
        assert config.source == "kubernetes"


def test_zero_gpus_leaves_out_the_gpu_limit(capsys):
    _, job = _manifests(capsys, "--workers", "2", "--gpus_per_worker", "0", "--image", "i")
    assert "resources" not in job["spec"]["template"]["spec"]["containers"][0]


def test_node_pools_become_jobs_with_selectors_and_shard_weights(capsys):
    documents = _manifests(
        capsys, "--image", "img:1", "--name", "mix",
        "--node_pool", "a100:2:3:NVIDIA-A100-SXM4-80GB",
        "--node_pool", "t4:1:1:cloud.google.com/gke-accelerator=nvidia-tesla-t4")
    for document in documents:
        _validate(document)
    service, a100, t4 = documents
    assert [a100["metadata"]["name"], t4["metadata"]["name"]] == ["mix-a100", "mix-t4"]
    assert a100["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert t4["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    pods = [kubernetes.pod_environment(documents, "mix-a100", 0),
            kubernetes.pod_environment(documents, "mix-a100", 1),
            kubernetes.pod_environment(documents, "mix-t4", 0)]
    configs = [cluster.detect_cluster(env) for env in pods]
    assert [c.task_index for c in configs] == [0, 1, 2]
    assert configs[2].cluster["worker"] == ["mix-a100-0.mix:2222", "mix-a100-1.mix:2222",
                                            "mix-t4-0.mix:2222"]
    assert all(cluster.shard_weights(env) == [3.0, 3.0, 1.0] for env in pods)


# ------------------------------------------------------------------ JobSet

def test_jobset_is_valid_against_its_schema_and_its_jobs_against_kubernetes(capsys):
    (jobset,) = _manifests(capsys, "--format", "jobset", "--workers", "3", "--max_restarts",
                           "2", "--image", "registry.example.com/mnist:1", "--name", "mnist",
                           "--namespace", "ml")
    assert (jobset["apiVersion"], jobset["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    _validate_jobset(jobset)


@pytest.mark.parametrize("path, value, match", [
    (("spec", "failurePolicy", "maxRestart"), 3, "'maxRestart' was unexpected"),
    (("spec", "failurePolicy", "restartStrategy"), "Always", "'Always' is not one of"),
    (("spec", "network", "enableDNSHostnames"), "yes", "'yes' is not of type 'boolean'"),
])
def test_the_jobset_schema_check_sees_a_bad_field(capsys, path, value, match):
    (jobset,) = _manifests(capsys, "--format", "jobset", "--workers", "2", "--image", "i")
    broken = copy.deepcopy(jobset)
    functools.reduce(lambda node, key: node[key], path[:-1], broken)[path[-1]] = value
    with pytest.raises(AssertionError, match=match):
        _validate_jobset(broken)


def test_jobset_restarts_the_whole_group_and_pods_find_each_other(capsys):
    (jobset,) = _manifests(capsys, "--format", "jobset", "--workers", "3", "--max_restarts",
                           "4", "--image", "img:1", "--name", "mnist",
                           command=[*_TRAIN, "--backup_dir=/ckpt/mnist"])
    spec = jobset["spec"]
    # No rules: JobSet applies RestartJobSet to every failure, maxRestarts times.
    assert spec["failurePolicy"] == {"maxRestarts": 4, "restartStrategy": "Recreate"}
    assert spec["network"]["enableDNSHostnames"] is True
    assert spec["network"]["publishNotReadyAddresses"] is True
    (worker,) = spec["replicatedJobs"]
    job = worker["template"]["spec"]
    assert (worker["replicas"], job["completionMode"], job["completions"],
            job["parallelism"], job["backoffLimit"]) == (1, "Indexed", 3, 3, 0)
    env = job["template"]["spec"]["containers"][0]["env"]
    restart = [e for e in env if e["name"] == "MGPU_TF_RESTART"]
    assert restart == [{"name": "MGPU_TF_RESTART", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"}}}]
    # JobSet's documented pod host name: <jobset>-<replicatedJob>-<job index>-<pod index>
    # .<subdomain>, the subdomain defaulting to the JobSet's name.
    expected = [f"mnist-worker-0-{i}.mnist:2222" for i in range(3)]
    for i in range(3):
        environ = kubernetes.pod_environment([jobset], "mnist-worker-0", i)
        config = cluster.detect_cluster(environ)
        assert (config.cluster, config.task_index) == ({"worker": expected}, i)
        assert environ["MGPU_TF_RESTART"] == "0"


def test_jobset_node_pools_become_replicated_jobs(capsys):
    (jobset,) = _manifests(capsys, "--format", "jobset", "--image", "img:1", "--name", "mix",
                           "--node_pool", "a100:2:3:NVIDIA-A100-SXM4-80GB",
                           "--node_pool", "t4:1")
    _validate_jobset(jobset)
    a100, t4 = jobset["spec"]["replicatedJobs"]
    assert a100["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    pods = [kubernetes.pod_environment([jobset], "mix-a100-0", 1),
            kubernetes.pod_environment([jobset], "mix-t4-0", 0)]
    configs = [cluster.detect_cluster(env) for env in pods]
    assert [c.task_index for c in configs] == [1, 2]
    assert configs[0].cluster["worker"] == ["mix-a100-0-0.mix:2222", "mix-a100-0-1.mix:2222",
                                            "mix-t4-0-0.mix:2222"]
    assert all(cluster.shard_weights(env) == [3.0, 3.0, 1.0] for env in pods)


def test_restarts_without_a_backup_are_pointed_out(capsys):
    code, out, err = _k8s(capsys, "--format", "jobset", "--workers", "2", "--max_restarts",
                          "3", "--image", "i", "--", *_TRAIN)
    assert code == 0 and out.startswith("---")
    assert "the command has no --backup_dir" in err
    code, out, err = _k8s(capsys, "--format", "jobset", "--workers", "2", "--max_restarts",
                          "3", "--image", "i", "--", *_TRAIN, "--backup_dir=gs://b/ckpt")
    assert code == 0 and err == ""


@pytest.mark.parametrize("args", [
    ["--workers", "2"], ["--format", "jobset", "--workers", "2"],
    ["--format", "jobset", "--workers", "2", "--max_restarts", "3"], ["--format", "tfjob",
                                                                     "--workers", "2"]])
@pytest.mark.parametrize("backup", [["--backup_dir=/ckpt/mnist"], ["--backup-dir", "/ckpt/mnist"]])
def test_a_backup_dir_without_a_volume_is_pointed_out_whatever_the_restarts(capsys, args,
                                                                             backup):
    code, out, err = _k8s(capsys, *args, "--image", "i", "--", *_TRAIN, *backup)
    assert code == 0 and out.startswith("---")
    assert err == ("mgpu-tf k8s: note: the manifests mount no volume at "
                   "--backup_dir=/ckpt/mnist: without one the backup stays on the pod's own "
                   "disk and is lost with it, and a new start trains from the first epoch. "
                   "Add a PersistentVolumeClaim mounted there to the pod template, or give a "
                   "bucket (gs://..., s3://...).\n")


def test_the_deployment_guides_jobset_command_gives_what_it_describes(capsys):
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "deployment.md").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("mgpu-tf k8s --format jobset")]
    argv = shlex.split(line)
    assert argv[-2] == ">", argv
    code = cli_main(argv[1:-2])
    out, err = capsys.readouterr()
    assert code == 0 and "mount no volume at --backup_dir=/ckpt/mnist" in err, err
    assert "mount no volume" in " ".join(text.split())
    (jobset,) = yaml.safe_load_all(out)
    _validate_jobset(jobset)
    (worker,) = jobset["spec"]["replicatedJobs"]
    assert worker["name"] == "worker" and "mnist-worker-0-i.mnist" in text
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 3


# ------------------------------------------------------------------ TF_CONFIG in the pod


def _pod_container(documents, job):
    for doc in documents:
        if doc["kind"] == "Job" and doc["metadata"]["name"] == job:
            return doc["spec"]["template"]["spec"]["containers"][0]
        for replicated in doc["spec"].get("replicatedJobs", ()):
            if f"{doc['metadata']['name']}-{replicated['name']}-0" == job:
                return replicated["template"]["spec"]["template"]["spec"]["containers"][0]
    raise AssertionError(f"no Job {job}")


def _run_pod_command(container, environ, *args):
    """Runs the container's command as the pod would, with `args` in place of its own."""
    return subprocess.run([*container["command"], *args], capture_output=True, text=True,
                          env=dict(environ, PATH=os.environ["PATH"]), timeout=60)


_MIX = ["--name", "mix", "--port", "3000", "--node_pool", "a100:2:3", "--node_pool", "t4:1"]


@pytest.mark.parametrize("args, pods, hosts", [
    (["--workers", "3", "--name", "mnist"], [("mnist", 0, 0), ("mnist", 2, 2)],
     ["mnist-0.mnist:2222", "mnist-1.mnist:2222", "mnist-2.mnist:2222"]),
    (_MIX, [("mix-a100", 1, 1), ("mix-t4", 0, 2)],
     ["mix-a100-0.mix:3000", "mix-a100-1.mix:3000", "mix-t4-0.mix:3000"]),
    (["--format", "jobset", *_MIX], [("mix-a100-0", 0, 0), ("mix-t4-0", 0, 2)],
     ["mix-a100-0-0.mix:3000", "mix-a100-0-1.mix:3000", "mix-t4-0-0.mix:3000"]),
])
def test_each_pod_exports_the_tf_config_plain_tensorflow_reads(capsys, monkeypatch, args,
                                                               pods, hosts):
    import tensorflow as tf

    documents = _manifests(capsys, "--image", "i", *args)
    for job, index, task in pods:
        container = _pod_container(documents, job)
        environ = kubernetes.pod_environment(documents, job, index)
        run = _run_pod_command(container, environ, "/bin/sh", "-c", 'printf %s "$TF_CONFIG"')
        assert run.returncode == 0 and run.stderr == "", run.stderr
        monkeypatch.setenv("TF_CONFIG", run.stdout)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        assert resolver.cluster_spec().as_dict() == {"worker": hosts}
        assert (resolver.task_type, resolver.task_id) == ("worker", task)
        # mgpu_tf sees the same cluster from the MGPU_TF_* variables, or from TF_CONFIG.
        for view in (environ, dict(environ, TF_CONFIG=run.stdout)):
            config = cluster.detect_cluster(view)
            assert (config.cluster, config.task_index) == ({"worker": hosts}, task)


def test_the_pod_runs_the_command_given_and_needs_its_index(capsys):
    documents = _manifests(capsys, "--workers", "2", "--image", "i", "--name", "mnist")
    container = _pod_container(documents, "mnist")
    environ = kubernetes.pod_environment(documents, "mnist", 1)
    run = _run_pod_command(container, environ, sys.executable, "-c",
                           "import sys; print(sys.argv[1:])", "a b", "$HOME")
    assert (run.returncode, run.stdout) == (0, "['a b', '$HOME']\n"), run.stderr
    del environ["JOB_COMPLETION_INDEX"]
    run = _run_pod_command(container, environ, "/bin/sh", "-c", "echo ran")
    assert run.returncode != 0 and run.stdout == ""
    assert "JOB_COMPLETION_INDEX" in run.stderr and "Indexed Job" in run.stderr


def test_a_job_of_one_worker_runs_its_command_without_tf_config(capsys):
    _, job = _manifests(capsys, "--workers", "1", "--image", "i")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == _TRAIN and "args" not in container


# ------------------------------------------------------------------ TFJob


def test_tfjob_manifest(capsys):
    (tfjob,) = _manifests(capsys, "--format", "tfjob", "--workers", "4",
                          "--gpus_per_worker", "1", "--image", "img:1", "--name", "mnist")
    assert (tfjob["apiVersion"], tfjob["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert list(tfjob["spec"]["tfReplicaSpecs"]) == ["Worker"]
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4
    assert worker["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
    container = worker["template"]["spec"]["containers"][0]
    assert container["name"] == "tensorflow"  # the name the training operator looks for
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    # The CRD embeds a core PodTemplateSpec: validate it as one.
    _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"},
               "template": worker["template"]})


def test_the_tf_config_the_training_operator_writes_is_detected():
    # What kubeflow/training-operator sets in pod mnist-worker-1 of namespace ml.
    hosts = [f"mnist-worker-{i}.ml.svc:2222" for i in range(4)]
    environ = {"TF_CONFIG": json.dumps({"cluster": {"worker": hosts},
                                        "task": {"type": "worker", "index": 1},
                                        "environment": "cloud"})}
    config = cluster.detect_cluster(environ)
    assert (config.source, config.num_workers, config.is_chief) == ("TF_CONFIG", 4, False)


# ------------------------------------------------------------------ YAML


def test_yaml_reads_back_to_the_same_objects():
    documents = [{"a": ["2222", "yes", "-m", "x: y", "", "null", 1, 2.5, True, None],
                  "b": {"nvidia.com/gpu": 1, "on": {}, "c": []}}, {"d": [{"e": [1, [2]]}]}]
    assert list(yaml.safe_load_all(kubernetes.to_yaml(documents))) == documents


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("args, match", [
    (["--workers", "0", "--image", "i"],
     r"`workers` must be an integer of at least 1. Received: workers=0"),
    (["--image", "i"], r"The number of workers must be given, or node pools .* Pass "
     r"workers=N \(--workers N\), or pools \(--node_pool NAME:WORKERS"),
    (["--workers", "2", "--image", "i", "--name", "My_Job"],
     r"`name` must be a DNS label: 1-63 lowercase letters, digits or '-'.*"
     r"Received: `name`='My_Job'"),
    (["--workers", "2", "--image", "i", "--name", "a" * 62],
     "a pod's host name .* must be a DNS label"),
    (["--workers", "2", "--image", "i", "--namespace=-ml"], "`namespace` must be a DNS label"),
    (["--workers", "2", "--image", "i", "--port", "70000"],
     "`port` must be between 1 and 65535. Received: port=70000"),
    (["--workers", "2", "--image", "i", "--gpus_per_worker", "-1"],
     "`gpus_per_worker` must be an integer of at least 0"),
    (["--workers", "2", "--image", "my image"], "`image` must name a container image"),
    (["--image", "i", "--format", "tfjob", "--node_pool", "a:1"],
     "Node pools need format='indexed-job' or 'jobset'"),
    (["--image", "i", "--workers", "2", "--max_restarts", "1"],
     "`max_restarts` needs format='jobset'.* Received: max_restarts=1 with "
     "format='indexed-job'"),
    (["--image", "i", "--workers", "2", "--format", "jobset", "--max_restarts", "-1"],
     "`max_restarts` must be an integer of at least 0"),
    (["--image", "i", "--format", "jobset", "--name", "a" * 56, "--node_pool", "pool:2"],
     "a pod's host name .* must be a DNS label"),
    (["--image", "i", "--workers", "3", "--node_pool", "a:1", "--node_pool", "b:1"],
     r"`workers` must equal the node pools' total \(2\)"),
    (["--image", "i", "--node_pool", "a100"], "A node pool is NAME:WORKERS"),
    (["--image", "i", "--node_pool", "a100:²"], "A node pool is NAME:WORKERS"),
    (["--image", "i", "--node_pool", "a100:2:fast"], "A node pool's SPEED must be a number"),
    (["--image", "i", "--node_pool", "a100:2:0"], "A node pool's speed must be a positive"),
    (["--image", "i", "--node_pool", "a100:0"], "`workers of pool 'a100'` must be an integer "
                                                "of at least 1"),
    (["--image", "i", "--node_pool", "A100:1"], "a node pool's name must be a DNS label"),
    (["--image", "i", "--node_pool", "a:1:1:NVIDIA A100"], "A node selector must be"),
    (["--image", "i", "--node_pool", "a:1", "--node_pool", "a:1"],
     "Node pool names must differ"),
])
def test_bad_requests_fail_with_the_argument_named(capsys, args, match):
    code, out, err = _k8s(capsys, *args, "--", "python", "train.py")
    assert code == 2 and out == ""
    assert re.search(match, err), err


def test_a_missing_command_is_named(capsys):
    code, out, err = _k8s(capsys, "--workers", "2", "--image", "i")
    assert code == 2 and "`command` must be a non-empty list" in err


# ------------------------------------------------------------------ real workers

@pytest.mark.multiworker
def test_two_pods_of_the_manifest_train_to_the_end(capsys):
    documents = _manifests(capsys, "--workers", "2", "--gpus_per_worker", "0",
                           "--image", "img:1", "--name", "mnist",
                           command=[*_TRAIN, "--epochs=2"])
    container = documents[1]["spec"]["template"]["spec"]["containers"][0]
    command, args = container["command"], container["args"]
    assert args[0] == "python"
    ports = launcher.free_ports(2)
    override = ",".join(f"mnist-{i}.mnist=127.0.0.1:{port}" for i, port in enumerate(ports))
    environments = [dict(kubernetes.pod_environment(documents, "mnist", i),
                         MGPU_TF_HOST_OVERRIDE=override) for i in range(2)]
    # As the pod runs it: the shell exports TF_CONFIG, which make_strategy then reads first.
    results = workers.run_together([[*command, sys.executable, *args[1:]]] * 2, environments)
    main_job.assert_trained_alike(results, "pods")


# ------------------------------------------------------------------ closed ports


@pytest.mark.parametrize("fmt", ["indexed-job", "jobset", "tfjob"])
def test_the_job_secret_and_network_policy_are_valid_and_reach_every_worker(capsys, fmt):
    from mgpu_tf.cluster import network_policy

    documents = _manifests(capsys, "--workers", "2", "--image", "img:1", "--name", "mnist",
                           "--namespace", "ml", "--format", fmt, "--job_secret", "create",
                           "--network_policy")
    secret, policy = documents[:2]
    assert (secret["kind"], policy["kind"]) == ("Secret", "NetworkPolicy")
    for document in (secret, policy, *[d for d in documents[2:] if d["kind"] != "TFJob"]):
        if document["kind"] == "JobSet":
            _jobset_validator().validate(document)
        else:
            _validate(document)
    assert len(secret["stringData"]["job-secret"]) == 64
    # Every worker's container reads the secret from the Secret.
    text = json.dumps(documents[2:])
    entries = [e for e in re.findall(r'\{"name": "MGPU_TF_JOB_SECRET", "valueFrom": [^}]*\}\}\}',
                                     text)]
    entries = [json.loads(e) for e in entries]
    assert entries and all(e["valueFrom"]["secretKeyRef"] == {
        "name": "mnist-job-secret", "key": "job-secret"} for e in entries)
    # Ingress to the job's pods, on every port, from the job's pods only.
    labels = network_policy.pod_labels("mnist", fmt)
    assert policy["spec"] == {"podSelector": {"matchLabels": labels},
                              "policyTypes": ["Ingress"],
                              "ingress": [{"from": [{"podSelector": {"matchLabels": labels}}]}]}
    if fmt == "indexed-job":  # our template labels the pods; the controllers label theirs
        template = documents[3]["spec"]["template"]["metadata"]["labels"]
        assert labels.items() <= template.items()
        env = kubernetes.pod_environment(documents, "mnist", 1)
        assert env["MGPU_TF_JOB_SECRET"] == secret["stringData"]["job-secret"]


def test_the_network_policy_lets_the_scrapers_reach_the_metrics_port_only(capsys):
    from mgpu_tf.cluster import network_policy

    documents = _manifests(capsys, "--workers", "2", "--image", "img:1", "--name", "mnist",
                           "--network_policy", "--metrics_port", "9400", "--no_pod_monitor")
    policy = next(d for d in documents if d["kind"] == "NetworkPolicy")
    _validate(policy)
    labels = network_policy.pod_labels("mnist", "indexed-job")
    # The job's pods on every port; anyone (Prometheus, in its own namespace) on 9400 alone.
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": labels}}]},
        {"ports": [{"port": 9400, "protocol": "TCP"}]}]


def test_an_existing_secret_is_referenced_and_a_bad_name_refused(capsys):
    documents = _manifests(capsys, "--workers", "2", "--image", "img:1", "--job_secret",
                           "team-secret")
    assert [d["kind"] for d in documents] == ["Service", "Job"]
    container = documents[1]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MGPU_TF_JOB_SECRET", "valueFrom": {"secretKeyRef": {
        "name": "team-secret", "key": "job-secret"}}} in container["env"]
    code, _, err = _k8s(capsys, "--workers", "2", "--image", "img:1", "--job_secret",
                        "Bad_Name", "--", "python", "t.py")
    assert code == 2 and "`job_secret` (a Secret's name, or 'create') must be a DNS label" in err
