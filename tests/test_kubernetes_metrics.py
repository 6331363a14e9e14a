"""`mgpu-tf k8s --metrics_port/--memory/--cpu/--from_plan`: pods Prometheus can scrape and size.

The workloads are checked against the Kubernetes schemas (kubernetes-validate, offline) and
JobSet's vendored CRD schema, as in test_kubernetes.py; the PodMonitor against the Prometheus
Operator's CRD, through the models `cloudcoil-models-prometheus-operator` generates from it
(a PyPI package): a field they drop on the way back is one the CRD does not have.
"""

import json
import math
import re

import pytest

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import kubernetes
from support.manifests import TRAIN, k8s, validate_jobset
from support.manifests import manifests as _manifests
from support.manifests import validate as _validate


def _k8s(capsys, *args):
    return k8s(capsys, *args, "--", *TRAIN)


def _validate_workload(document):
    """A Job, or a JobSet and the Jobs it embeds, or a TFJob's pod template."""
    if document["kind"] == "JobSet":
        validate_jobset(document)
    elif document["kind"] == "TFJob":
        template = document["spec"]["tfReplicaSpecs"]["Worker"]["template"]
        _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "w"},
                   "template": template})
    else:
        _validate(document)


def _validate_pod_monitor(document):
    from cloudcoil.models.prometheus_operator import v1

    model = v1.PodMonitor.model_validate(document)
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == document


def _templates(document):
    spec = document["spec"]
    if document["kind"] == "Job":
        return [spec["template"]]
    if document["kind"] == "JobSet":
        return [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]]
    return [r["template"] for r in spec["tfReplicaSpecs"].values()]


def _matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize("format", ["indexed-job", "jobset", "tfjob"])
def test_every_worker_pod_serves_metrics_and_a_pod_monitor_selects_them(capsys, format):
    documents = _manifests(capsys, "--format", format, "--workers", "2", "--image", "img:1",
                           "--name", "mnist", "--namespace", "ml", "--metrics_port", "9400")
    *workloads, monitor = documents
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert monitor["metadata"]["namespace"] == "ml"
    _validate_pod_monitor(monitor)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    templates = [t for d in workloads if d["kind"] != "Service" for t in _templates(d)]
    assert templates
    for document in workloads:
        _validate_workload(document)
    for template in templates:
        assert _matches(monitor["spec"]["selector"], template["metadata"]["labels"])
        assert template["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/port": "9400",
            "prometheus.io/path": "/metrics"}
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports[endpoint["port"]] == 9400 and endpoint["path"] == "/metrics"
        env = {e["name"]: e.get("value") for e in container["env"]}
        # The main job listens on the pod's own address, on the port the scrape reads.
        assert (env["MGPU_TF_METRICS_PORT"], env["MGPU_TF_METRICS_HOST"]) == ("9400", "0.0.0.0")


def test_without_the_operator_the_pod_monitor_is_left_out(capsys):
    documents = _manifests(capsys, "--workers", "2", "--image", "i", "--metrics_port", "9400",
                           "--no_pod_monitor")
    assert [d["kind"] for d in documents] == ["Service", "Job"]


@pytest.mark.parametrize("path, value, match", [
    (("spec", "podMetricsEndpoints", 0, "interval"), "fast", "should match pattern"),
    (("spec", "podMetricsEndpoint"), [], r"assert .* =="),
    (("kind",), "ServiceMonitor", "kind"),
])
def test_the_pod_monitor_schema_check_sees_a_bad_field(capsys, path, value, match):
    *_, monitor = _manifests(capsys, "--workers", "2", "--image", "i", "--metrics_port", "9400")
    node = monitor
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(Exception, match=match):
        _validate_pod_monitor(monitor)


@pytest.mark.parametrize("format", ["indexed-job", "jobset", "tfjob"])
def test_memory_and_cpu_become_requests_and_limits(capsys, format):
    documents = _manifests(capsys, "--format", format, "--workers", "2", "--image", "i",
                           "--memory", "16Gi", "--cpu", "500m")
    for document in documents:
        if document["kind"] != "Service":
            _validate_workload(document)
            for template in _templates(document):
                resources = template["spec"]["containers"][0]["resources"]
                assert resources["requests"] == {"memory": "16Gi", "cpu": "500m"}
                assert resources["limits"] == {"nvidia.com/gpu": 1, "memory": "16Gi",
                                               "cpu": "500m"}


def test_the_plan_gives_the_memory_and_the_workers(capsys, tmp_path):
    assert cli_main(["plan", "--model", "support.planner_models:lopsided",
                     "--global_batch_size", "64", "--workers", "2", "--devices", "2",
                     "--device_memory", "1GiB", "--json"]) == 0
    text = capsys.readouterr().out
    (tmp_path / "plan.json").write_text(text)
    plan = json.loads(text)
    chosen = next(o for o in plan["options"] if o["name"] == plan["recommended"]["name"])
    # By hand: the peak of a device, for each of a worker's 2 devices, plus 1 GiB, in MiB.
    expected = f"{math.ceil((chosen['peak'] * 2 + 2 ** 30) / 2 ** 20)}Mi"
    documents = _manifests(capsys, "--image", "i", "--from_plan", str(tmp_path / "plan.json"))
    (job,) = [d for d in documents if d["kind"] == "Job"]
    _validate(job)
    assert job["spec"]["completions"] == 2
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == expected


@pytest.mark.parametrize("args, match", [
    (["--memory=-4Gi"], r"^mgpu-tf k8s: `memory` must be a positive Kubernetes quantity, "
                           r"e\.g\. 16Gi or 512Mi \(bytes\)\. Received: memory='-4Gi'$"),
    (["--memory", "16GB"], r"`memory` must be a positive .* Received: memory='16GB'"),
    (["--memory", "0"], r"`memory` must be a positive .* Received: memory='0'"),
    (["--cpu=-1"], r"`cpu` must be a positive .* e\.g\. 4 or 500m \(cores\)\. "
                      r"Received: cpu='-1'"),
    (["--metrics_port", "70000"], r"`metrics_port` must be between 1 and 65535\. "
                                  r"Received: metrics_port=70000"),
    (["--metrics_port", "2222"], r"`metrics_port` must differ from the workers' other ports"),
    (["--from_plan", "PLAN", "--memory", "1Gi"], r"Give `memory` or `from_plan`, not both"),
    (["--from_plan", "MISSING"], r"`from_plan` must be the JSON of `mgpu-tf plan --json`\. "
                                 r"Received: from_plan='.*MISSING' \(No such file"),
    (["--from_plan", "PLAN"], r"`from_plan` must be the JSON of `mgpu-tf plan --json`\. "
                              r"Received: from_plan='.*PLAN' \(Expecting value.*\)\. "
                              r"Write it with `mgpu-tf plan"),
])
def test_bad_metrics_and_sizes_fail_in_one_line_naming_the_argument(capsys, tmp_path, args,
                                                                     match):
    (tmp_path / "PLAN").write_text("not json")
    args = [str(tmp_path / a) if a in ("PLAN", "MISSING") else a for a in args]
    code, out, err = _k8s(capsys, "--workers", "2", "--image", "i", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and re.search(match, err.strip()), err


def test_the_pods_environment_carries_the_metrics_port(capsys):
    documents = _manifests(capsys, "--workers", "2", "--image", "i", "--name", "mnist",
                           "--metrics_port", "9400")
    environ = kubernetes.pod_environment(documents, "mnist", 1)
    assert environ["MGPU_TF_METRICS_PORT"] == "9400"
