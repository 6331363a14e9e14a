"""Kubernetes manifests for a multi-worker training job, ready for `kubectl apply`.

Three formats: `"indexed-job"` (the default, plain Kubernetes), `"jobset"` (restarts the whole
group after a failure) and `"tfjob"` (Kubeflow's training operator).

Design: docs/design.md#kubernetes-manifests
"""

import json
import re

from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import job_secret
from mgpu_tf.cluster import jobset as jobset_lib
from mgpu_tf.cluster import manifest_parts as parts
from mgpu_tf.cluster import pod_metrics

__all__ = ["FORMATS", "GPU_RESOURCE", "ManifestError", "NodePool", "parse_node_pool",
           "make_manifests", "pod_environment", "to_yaml"]

FORMATS = ("indexed-job", "jobset", "tfjob")
GPU_RESOURCE = parts.GPU_RESOURCE
ManifestError = parts.ManifestError
NodePool = parts.NodePool
parse_node_pool = parts.parse_node_pool
_label = parts.check_label
_positive_int = parts.positive_int
_check_pool = parts.check_pool
_container = parts.container
_metadata = parts.metadata
_CLUSTER_LABEL = parts.CLUSTER_LABEL


def _indexed_jobs(name, command, image, pools, gpus, port, namespace):
    jobs = [(name if len(pools) == 1 and pools[0].name == name else f"{name}-{p.name}", p)
            for p in pools]
    for job, pool in jobs:
        # The pod's host name is `<job>-<index>`: a DNS label too.
        _label(f"{job}-{pool.workers - 1}", "a pod's host name (job name, '-', index)")
    env = parts.cluster_environment(jobs, name, port)
    selector = {_CLUSTER_LABEL: name}
    documents = [{
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(name, namespace, selector),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            # Workers must resolve each other while they start, before any is Ready.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "grpc", "port": port, "targetPort": port}],
        },
    }]
    for job, pool in jobs:
        pod_spec = {
            "subdomain": name,
            "restartPolicy": "Never",
            "containers": [_container(
                "worker", image, command, gpus, port, "grpc", {"MGPU_TF_JOB_NAME": job, **env},
                parts.tf_config_command(jobs, job, name, port))],
        }
        if pool.node_selector:
            pod_spec["nodeSelector"] = dict(pool.node_selector)
        documents.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": _metadata(job, namespace, selector),
            "spec": {
                "completionMode": "Indexed",
                "completions": pool.workers,
                "parallelism": pool.workers,
                # A lost worker stops every collective: fail the job, do not retry one pod.
                "backoffLimit": 0,
                "template": {"metadata": {"labels": dict(selector)}, "spec": pod_spec},
            },
        })
    return documents


def _tfjob(name, command, image, workers, gpus, port, namespace):
    return [{
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": _metadata(name, namespace),
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": workers,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [
                # The training operator finds its container and port by these names.
                _container("tensorflow", image, command, gpus, port, "tfjob-port", {})]}},
        }}},
    }]


def make_manifests(name, command, *, image, workers=None, gpus_per_worker=1,
                   format="indexed-job", pools=None, port=cluster.DEFAULT_PORT,
                   namespace=None, max_restarts=None, metrics_port=None, pod_monitor=True,
                   memory=None, cpu=None):
    """Returns the Kubernetes objects (dictionaries) that run `command` on every worker.

    The options are `mgpu-tf k8s`'s (docs/cli.md). Raises `ManifestError`, naming the
    argument that cannot make a valid object.

    Example:

    ```python
    from mgpu_tf.cluster import kubernetes
    documents = kubernetes.make_manifests(
        "mnist", ["python", "-m", "mgpu_tf.train", "--strategy=multi_worker"],
        image="registry.example.com/mnist:1", workers=4, gpus_per_worker=2)
    print(kubernetes.to_yaml(documents))
    ```

    Args:
        name: the job's name, a DNS label; also the Service's name.
        command: the container's command, a list of strings.
        workers: number of workers. Defaults to the pools' total.
        gpus_per_worker: `nvidia.com/gpu` limit of each pod (0: none). Defaults to `1`.
        format: `"indexed-job"`, `"jobset"` or `"tfjob"`. Defaults to `"indexed-job"`.
        pools: `NodePool`s (not for tfjob). Defaults to one pool of `workers`.
        port: the workers' gRPC port. Defaults to `2222`.
        namespace: the objects' namespace. Defaults to `kubectl`'s current one.
        max_restarts: recreations of the whole group after a failure (jobset). Defaults to `0`.
        metrics_port: the port of each worker's metrics endpoint, with scrape annotations.
            Defaults to `None` (none).
        pod_monitor: with `metrics_port`, add the `PodMonitor`. Defaults to `True`.
        memory: each worker's memory request and limit, e.g. `"16Gi"`. Defaults to `None`.
        cpu: each worker's CPU request and limit, e.g. `"4"`. Defaults to `None`.
    """
    _label(name, "`name`")
    if namespace is not None:
        _label(namespace, "`namespace`")
    if format not in FORMATS:
        raise ManifestError(
            f"`format` must be one of {', '.join(FORMATS)}. Received: format={format!r}")
    if isinstance(command, str) or not isinstance(command, (list, tuple)) or not command or \
            not all(isinstance(part, str) and part for part in command):
        raise ManifestError(
            "`command` must be a non-empty list of strings (put it after `--` on the "
            f"command line). Received: command={command!r}")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ManifestError(f"`image` must name a container image. Received: image={image!r}")
    _positive_int("gpus_per_worker", gpus_per_worker, lowest=0)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ManifestError(f"`port` must be between 1 and 65535. Received: port={port!r}")
    pools = [_check_pool(p) for p in pools or ()]
    if pools:
        if format == "tfjob":
            raise ManifestError(
                "Node pools need format='indexed-job' or 'jobset' (one Job per pool); a "
                f"TFJob has one template for all workers. Received: format={format!r} with "
                f"{len(pools)} pools.")
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ManifestError(f"Node pool names must differ. Received: {names}")
        total = sum(p.workers for p in pools)
        if workers is not None and workers != total:
            raise ManifestError(
                f"`workers` must equal the node pools' total ({total}) when both are given. "
                f"Received: workers={workers!r}. Leave it out.")
        workers = total
    if workers is None:
        raise ManifestError(
            "The number of workers must be given, or node pools that add up to it. Received: "
            "workers=None and no pools. Pass workers=N (--workers N), or pools "
            "(--node_pool NAME:WORKERS, once per pool).")
    _positive_int("workers", workers)
    if max_restarts is not None and format != "jobset":
        raise ManifestError(
            "`max_restarts` needs format='jobset', whose failure policy restarts the whole "
            "group; an Indexed Job or TFJob fails when a worker does. Received: "
            f"max_restarts={max_restarts!r} with format={format!r}.")
    if format == "jobset":
        documents = [jobset_lib.make_jobset(
            name, command, image=image, pools=pools or [jobset_lib.worker_pool(workers)],
            gpus=gpus_per_worker, port=port, namespace=namespace,
            max_restarts=_positive_int("max_restarts", max_restarts or 0, lowest=0))]
    elif format == "tfjob":
        documents = _tfjob(name, command, image, workers, gpus_per_worker, port, namespace)
    else:
        documents = _indexed_jobs(name, command, image, pools or [NodePool(name, workers)],
                                  gpus_per_worker, port, namespace)
    pod_metrics.add_resources(documents, memory=memory, cpu=cpu)
    if metrics_port is None:
        return documents
    return pod_metrics.add_metrics(documents, name, metrics_port, namespace,
                                   pod_monitor=pod_monitor)


def pod_environment(documents, job, index):
    """Returns the environment variables pod `index` of Job `job` gets from `documents`.

    What the manifest gives its container, plus Kubernetes' `JOB_COMPLETION_INDEX` and, for
    a JobSet's Job, the restart count 0; the job's secret is read from the documents'
    Secret. Raises `ManifestError` for no such pod.
    """
    for doc in documents:
        env = jobset_lib.pod_environment(doc, job, index) if doc.get("kind") == "JobSet" \
            else None
        if env is not None:
            return _with_secret(env, doc, documents)
        if doc.get("kind") == "Job" and doc["metadata"]["name"] == job:
            if not 0 <= index < doc["spec"]["completions"]:
                raise ManifestError(
                    f"`index` must be in 0..{doc['spec']['completions'] - 1} for Job {job!r}. "
                    f"Received: index={index!r}")
            container = doc["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in container.get("env", ()) if "value" in e}
            return _with_secret({**env, "JOB_COMPLETION_INDEX": str(index)}, doc, documents)
    jobs = [d["metadata"]["name"] for d in documents if d.get("kind") == "Job"]
    jobs += [jobset_lib.job_name(d["metadata"]["name"], r["name"])
             for d in documents if d.get("kind") == "JobSet" for r in d["spec"]["replicatedJobs"]]
    raise ManifestError(f"No Indexed Job named {job!r}; the Jobs are {jobs}.")


def _with_secret(env, doc, documents):
    """`env` with the job's secret when the pods read one from a Secret in `documents`."""
    references = [e["valueFrom"]["secretKeyRef"] for e in _env_entries(doc)
                  if e.get("name") == job_secret.SECRET_VARIABLE and "valueFrom" in e]
    env = {k: v for k, v in env.items() if k != job_secret.SECRET_VARIABLE}
    for ref in references:
        for secret in documents:
            if secret.get("kind") == "Secret" and secret["metadata"]["name"] == ref["name"]:
                env[job_secret.SECRET_VARIABLE] = secret["stringData"][ref["key"]]
    return env


def _env_entries(value):
    """Every environment entry (`{"name": ..., ...}`) of the containers in `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "env" and isinstance(item, list):
                yield from item
            else:
                yield from _env_entries(item)
    elif isinstance(value, list):
        for item in value:
            yield from _env_entries(item)


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _inline(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _string(value)


def _string(text):
    # Plain when YAML cannot read it as anything else (a number, a boolean, null);
    # otherwise a JSON string, which is a YAML double-quoted scalar.
    plain = _PLAIN.match(text) and text.lower() not in _YAML_WORDS
    return text if plain else json.dumps(text)


def _block(value, indent):
    pad, lines = " " * indent, []
    items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
    for key, item in items:
        head = f"{pad}{_string(key)}:" if key is not None else f"{pad}-"
        if isinstance(item, (dict, list)) and item:
            inner = _block(item, indent + 2)
            if key is None:
                lines += [f"{head} {inner[0].lstrip()}", *inner[1:]]
            else:
                lines += [head, *inner]
        else:
            lines.append(f"{head} {_inline(item)}")
    return lines


def to_yaml(documents):
    """Returns `documents` as one YAML stream (`---` between objects) for `kubectl apply -f`."""
    return "".join("---\n" + "\n".join(_block(doc, 0)) + "\n" for doc in documents)
