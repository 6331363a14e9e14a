"""What every Kubernetes manifest of `mgpu-tf k8s` is made of: node pools, containers, metadata.

`kubernetes` and `jobset` share these pieces, so a bad value gives the same
`ManifestError` whatever the format.
"""

import dataclasses
import json
import math
import numbers
import re

from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import tf_config

__all__ = ["GPU_RESOURCE", "CLUSTER_LABEL", "ManifestError", "NodePool", "parse_node_pool",
           "check_pool", "check_label", "positive_int", "container", "metadata",
           "cluster_environment", "tf_config_command"]

GPU_RESOURCE = "nvidia.com/gpu"
# The label that ties a job's pods to its headless Service.
CLUSTER_LABEL = "mgpu-tf/cluster"
# Set on every node by NVIDIA's GPU Feature Discovery (part of the GPU Operator).
_GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
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
        speed: the relative speed per worker; becomes its shard weight.
        node_selector: labels a node must have, e.g. `{"nvidia.com/gpu.product": "..."}`.
    """

    name: str
    workers: int
    speed: float = 1.0
    node_selector: dict = dataclasses.field(default_factory=dict)


def check_label(name, what):
    """Returns `name` if it is a DNS label; raises `ManifestError` naming `what` otherwise."""
    try:
        return cluster.check_dns_label(name, what=what)
    except tf_config.ClusterConfigError as error:
        raise ManifestError(str(error)) from None


def positive_int(name, value, lowest=1):
    """Returns `value` if it is an integer of at least `lowest`; raises `ManifestError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ManifestError(
            f"`{name}` must be an integer of at least {lowest}. Received: {name}={value!r}")
    return value


def parse_node_pool(text):
    """Parses `"NAME:WORKERS[:SPEED[:SELECTOR]]"` as given to `mgpu-tf k8s --node_pool`.

    SELECTOR is `KEY=VALUE`, or a VALUE alone for `nvidia.com/gpu.product=VALUE`. Raises
    `ManifestError` for a missing field, a bad count or speed, or a bad label.
    """
    parts = str(text).split(":", 3)
    hint = ("A node pool is NAME:WORKERS[:SPEED[:SELECTOR]], e.g. "
            "'a100:2:2.5:NVIDIA-A100-SXM4-80GB'.")
    if len(parts) < 2 or not (parts[1].strip().isascii() and parts[1].strip().isdigit()):
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
    return check_pool(NodePool(parts[0].strip(), int(parts[1]), speed, selector))


def check_pool(pool):
    """Returns `pool` if it can make a valid Job; raises `ManifestError` otherwise."""
    if not isinstance(pool, NodePool):
        raise ManifestError(f"`pools` must hold NodePool objects. Received: {pool!r}")
    check_label(pool.name, "a node pool's name")
    positive_int(f"workers of pool {pool.name!r}", pool.workers)
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


def container(name, image, command, gpus, port, port_name, env, wrapper=None):
    """A container: `env` maps names to values, or to a `valueFrom` source (a dict).

    With a `wrapper` (`tf_config_command`'s), that is the container's command and `command`
    its arguments.
    """
    spec = {"name": name, "image": image, "command": list(wrapper or command)}
    if wrapper:
        spec["args"] = list(command)
    spec["ports"] = [{"name": port_name, "containerPort": port}]
    if env:
        spec["env"] = [{"name": k, "valueFrom": v} if isinstance(v, dict) else
                       {"name": k, "value": v} for k, v in env.items()]
    if gpus:
        spec["resources"] = {"limits": {GPU_RESOURCE: gpus}}
    return spec


def metadata(name, namespace, labels=None):
    """An object's metadata: its name, namespace and labels (ours, plus `labels`)."""
    meta = {"name": name, "labels": {"app.kubernetes.io/managed-by": "mgpu-tf",
                                     **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def cluster_environment(jobs, service, port):
    """What every pod's container needs to find the cluster (see `mgpu_tf.cluster.detect`).

    `jobs` is `[(Job name, NodePool), ...]` in the workers' order; `service` is the headless
    Service, the pods' subdomain.
    """
    env = {"MGPU_TF_JOBS": ",".join(f"{job}:{pool.workers}" for job, pool in jobs),
           "MGPU_TF_SERVICE_NAME": service, "MGPU_TF_PORT": str(port)}
    if len(jobs) > 1:
        env["MGPU_TF_SHARD_WEIGHTS"] = ",".join(
            f"{pool.speed:g}" for _, pool in jobs for _ in range(pool.workers))
    return env


def tf_config_command(jobs, job, service, port):
    """The shell that exports the pod's TF_CONFIG, then runs the command (its arguments).

    Worker `offset + JOB_COMPLETION_INDEX` of every Job's pods in order, each
    `<job>-<index>.<service>:<port>`: the cluster `detect` builds from the `MGPU_TF_*`
    variables, for scripts that build their own `tf.distribute` strategy. `None` for one
    worker, a single machine.
    """
    hosts = [f"{name}-{i}.{service}:{port}" for name, pool in jobs for i in range(pool.workers)]
    if len(hosts) == 1:
        return None
    offset = sum(pool.workers for name, pool in jobs[:[n for n, _ in jobs].index(job)])
    head = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": 0}})
    head = head.removesuffix("0}}")
    # Kubernetes expands only `$(NAME)` of a variable the container has: `$((` stays.
    index = (f"$(({offset} + ${{JOB_COMPLETION_INDEX:?unset: Kubernetes sets it in the pods "
             "of an Indexed Job}))")
    return ["/bin/sh", "-c", f"export TF_CONFIG='{head}'{index}'}}}}' && exec \"$@\"", "sh"]
