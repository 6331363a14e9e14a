"""Kubernetes manifests for a multi-worker training job, ready for `kubectl apply`.

Two formats:

- `"indexed-job"` (the default): a headless Service and an Indexed Job (plain
  Kubernetes, no operator). Pod `i` of Job `name` is reachable as
  `name-i.service`; the container's environment tells `mgpu_tf.cluster.detect` the rest
  (`MGPU_TF_JOB_NAME`, `MGPU_TF_JOBS`, `MGPU_TF_SERVICE_NAME`, `MGPU_TF_PORT`; see
  `mgpu_tf.cluster.detect`), and Kubernetes sets `JOB_COMPLETION_INDEX`. Node pools of
  different GPUs become one Indexed Job each, sharing the Service, and their
  relative speeds reach the pods as `MGPU_TF_SHARD_WEIGHTS`.
- `"tfjob"`: a Kubeflow TFJob (`kubeflow.org/v1`), for clusters that run the
  Kubeflow training operator, which writes each pod's TF_CONFIG itself. Kubeflow's
  newer Trainer has dropped TensorFlow (kubeflow/trainer#2699), hence the default.

Example:

```python
from mgpu_tf.cluster import kubernetes
documents = kubernetes.make_manifests(
    "mnist", ["python", "-m", "mgpu_tf.train", "--strategy=multi_worker"],
    image="registry.example.com/mnist:1", workers=4, gpus_per_worker=2)
print(kubernetes.to_yaml(documents))
```
"""

import dataclasses
import json
import math
import numbers
import re

from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import tf_config

__all__ = ["FORMATS", "GPU_RESOURCE", "ManifestError", "NodePool", "parse_node_pool",
           "make_manifests", "pod_environment", "to_yaml"]

FORMATS = ("indexed-job", "tfjob")
GPU_RESOURCE = "nvidia.com/gpu"
# Set on every node by NVIDIA's GPU Feature Discovery (part of the GPU Operator).
_GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_CLUSTER_LABEL = "mgpu-tf/cluster"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class ManifestError(ValueError):
    """A manifest request that cannot give a valid Kubernetes object."""


@dataclasses.dataclass(frozen=True)
class NodePool:
    """Workers on one kind of node: how many, how fast, and which nodes.

    Attributes:
        name: a DNS label; the pool's Job is `<job>-<name>`.
        workers: how many workers (pods) run on the pool.
        speed: the pool's relative speed per worker; becomes its shard weight.
        node_selector: labels a node must have, e.g.
            `{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}`.
    """

    name: str
    workers: int
    speed: float = 1.0
    node_selector: dict = dataclasses.field(default_factory=dict)


def _label(name, what):
    try:
        return cluster.check_dns_label(name, what=what)
    except tf_config.ClusterConfigError as error:
        raise ManifestError(str(error)) from None


def _positive_int(name, value, lowest=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ManifestError(
            f"`{name}` must be an integer of at least {lowest}. Received: {name}={value!r}")
    return value


def parse_node_pool(text):
    """Parses `"NAME:WORKERS[:SPEED[:SELECTOR]]"` as given to `mgpu-tf k8s --node_pool`.

    SELECTOR is `KEY=VALUE`, or a VALUE alone for `nvidia.com/gpu.product=VALUE`.

    Example:

    ```python
    parse_node_pool("a100:2:2.5:NVIDIA-A100-SXM4-80GB")
    # NodePool(name='a100', workers=2, speed=2.5,
    #          node_selector={'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB'})
    ```

    Raises:
        ManifestError: for a missing field, a bad count or speed, or a bad label.
    """
    parts = str(text).split(":", 3)
    hint = ("A node pool is NAME:WORKERS[:SPEED[:SELECTOR]], e.g. "
            "'a100:2:2.5:NVIDIA-A100-SXM4-80GB'.")
    if len(parts) < 2 or not parts[1].strip().isdigit():
        raise ManifestError(f"{hint} Received: {text!r}")
    try:
        speed = float(parts[2]) if len(parts) > 2 and parts[2].strip() else 1.0
    except ValueError:
        raise ManifestError(f"A node pool's SPEED must be a number. {hint} "
                            f"Received: {text!r}") from None
    selector = {}
    if len(parts) > 3 and parts[3].strip():
        key, sep, value = parts[3].rpartition("=")
        selector = {key if sep else _GPU_PRODUCT_LABEL: value}
    return _check_pool(NodePool(parts[0].strip(), int(parts[1]), speed, selector))


def _check_pool(pool):
    if not isinstance(pool, NodePool):
        raise ManifestError(f"`pools` must hold NodePool objects. Received: {pool!r}")
    _label(pool.name, "a node pool's name")
    _positive_int(f"workers of pool {pool.name!r}", pool.workers)
    if (isinstance(pool.speed, bool) or not isinstance(pool.speed, numbers.Real)
            or not math.isfinite(pool.speed) or pool.speed <= 0):
        raise ManifestError(
            f"A node pool's speed must be a positive number. Received: speed={pool.speed!r} "
            f"for pool {pool.name!r}")
    for key, value in pool.node_selector.items():
        if not _LABEL_KEY.match(str(key)) or not _LABEL_VALUE.match(str(value)):
            raise ManifestError(
                "A node selector must be a Kubernetes label KEY=VALUE (VALUE: up to 63 "
                "letters, digits, '-', '_' or '.'). "
                f"Received: {key}={value} for pool {pool.name!r}")
    return pool


def _container(name, image, command, gpus, port, port_name, env):
    container = {"name": name, "image": image, "command": list(command),
                 "ports": [{"name": port_name, "containerPort": port}]}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: gpus}}
    return container


def _metadata(name, namespace, labels=None):
    metadata = {"name": name, "labels": {"app.kubernetes.io/managed-by": "mgpu-tf",
                                         **(labels or {})}}
    if namespace:
        metadata["namespace"] = namespace
    return metadata


def _indexed_jobs(name, command, image, pools, gpus, port, namespace):
    jobs = [(name if len(pools) == 1 and pools[0].name == name else f"{name}-{p.name}", p)
            for p in pools]
    for job, pool in jobs:
        # The pod's host name is `<job>-<index>`: a DNS label too.
        _label(f"{job}-{pool.workers - 1}", "a pod's host name (job name, '-', index)")
    env = {"MGPU_TF_JOBS": ",".join(f"{job}:{pool.workers}" for job, pool in jobs),
           "MGPU_TF_SERVICE_NAME": name, "MGPU_TF_PORT": str(port)}
    if len(pools) > 1:
        env["MGPU_TF_SHARD_WEIGHTS"] = ",".join(
            f"{pool.speed:g}" for _, pool in jobs for _ in range(pool.workers))
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
            "containers": [_container("worker", image, command, gpus, port, "grpc",
                                      {"MGPU_TF_JOB_NAME": job, **env})],
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
                   namespace=None):
    """Returns the Kubernetes objects (dictionaries) that run `command` on every worker.

    Args:
        name: the job's name, a DNS label; also the Service's name.
        command: the container's command, a list of strings.
        image: the container image.
        workers: number of workers. Defaults to the pools' total.
        gpus_per_worker: `nvidia.com/gpu` limit of each pod (0: none). Defaults to `1`.
        format: `"indexed-job"` or `"tfjob"`. Defaults to `"indexed-job"`.
        pools: `NodePool`s (indexed-job only). Defaults to one pool of `workers`.
        port: the workers' gRPC port. Defaults to `2222`.
        namespace: the objects' namespace. Defaults to the current one of `kubectl`.

    Returns:
        A list of dictionaries, one per object.

    Raises:
        ManifestError: naming the argument that cannot make a valid object.
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
        if format != "indexed-job":
            raise ManifestError(
                "Node pools need format='indexed-job' (one Job per pool); a TFJob has one "
                f"template for all workers. Received: format={format!r} with "
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
    if format == "tfjob":
        return _tfjob(name, command, image, workers, gpus_per_worker, port, namespace)
    pools = pools or [NodePool(name, workers)]
    return _indexed_jobs(name, command, image, pools, gpus_per_worker, port, namespace)


def pod_environment(documents, job, index):
    """Returns the environment variables pod `index` of Job `job` gets from `documents`.

    What the manifest gives its container, plus what Kubernetes adds to the pods of
    an Indexed Job (`JOB_COMPLETION_INDEX`). Used to run a manifest's workers locally.

    Raises:
        ManifestError: when `documents` have no Indexed Job `job` with such a pod.
    """
    for doc in documents:
        if doc.get("kind") == "Job" and doc["metadata"]["name"] == job:
            if not 0 <= index < doc["spec"]["completions"]:
                raise ManifestError(
                    f"`index` must be in 0..{doc['spec']['completions'] - 1} for Job {job!r}. "
                    f"Received: index={index!r}")
            container = doc["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in container.get("env", ())}
            return {**env, "JOB_COMPLETION_INDEX": str(index)}
    jobs = [d["metadata"]["name"] for d in documents if d.get("kind") == "Job"]
    raise ManifestError(f"No Indexed Job named {job!r}; the Jobs are {jobs}.")


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
