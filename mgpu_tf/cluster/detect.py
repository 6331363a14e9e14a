"""The cluster a process belongs to, detected from its environment.

`detect_cluster` builds the cluster from `TF_CONFIG`, a Kubernetes Indexed Job's or a SLURM
step's variables, and says where it came from; `shard_weights` reads the workers' speeds. The
only module of mgpu_tf that reads the environment.

Design: docs/design.md#cluster-detection
"""

import math
import os
import re

from mgpu_tf.cluster import hostlist
from mgpu_tf.cluster.tf_config import ClusterConfigError, parse_address, parse_tf_config

__all__ = [
    "detect_cluster",
    "detect_source",
    "shard_weights",
    "environ_value",
    "check_dns_label",
    "DEFAULT_PORT",
    "SOURCES",
]

DEFAULT_PORT = 2222
SOURCES = ("TF_CONFIG", "kubernetes", "slurm", "single_machine")


def environ_value(name, default=None):
    """Reads one environment variable; the one place mgpu_tf does so."""
    return os.environ.get(name, default)


def detect_cluster(environ=None):
    """Finds the cluster this process belongs to: a `ClusterConfig`, or `None` on a single machine.

    Looks at `TF_CONFIG`, a Kubernetes Indexed Job and a SLURM step, in that order; `source`
    says which it found. `environ` replaces `os.environ` (for tests). Raises
    `ClusterConfigError`, naming the variable, when a system's variables do not describe a cluster.

    Example:

    ```python
    config = detect_cluster({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
                             "SLURM_STEP_NODELIST": "gpu[1-2]", "SLURM_NODEID": "1",
                             "SLURM_LOCALID": "0", "MGPU_TF_PORT": "2222"})
    config.source, config.address  # ('slurm', 'gpu2:2222')
    ```
    """
    environ = os.environ if environ is None else environ
    source = detect_source(environ)
    if source == "TF_CONFIG":
        config = parse_tf_config(environ["TF_CONFIG"].strip())
    elif source == "kubernetes":
        config = _from_kubernetes(environ)
    elif source == "slurm":
        config = _from_slurm(environ)
    else:
        config = None
    if config is None or (config.num_workers == 1 and source != "TF_CONFIG"):
        return None
    return _override_hosts(config, environ.get("MGPU_TF_HOST_OVERRIDE", ""))


def detect_source(environ=None):
    """Names the system whose variables this process has, unvalidated: one of `SOURCES`."""
    environ = os.environ if environ is None else environ
    if environ.get("TF_CONFIG", "").strip():
        return "TF_CONFIG"
    if "MGPU_TF_JOB_NAME" in environ:
        return "kubernetes"
    if "SLURM_PROCID" in environ and "SLURM_STEP_NODELIST" in environ:
        return "slurm"
    return "single_machine"


def _integer(environ, name, *, lowest=0, default=None, hint=""):
    text = environ.get(name)
    if text is None:
        if default is not None:
            return default
        raise ClusterConfigError(f"{name} must be set{hint}. Received: {name} unset.")
    text = text.strip()
    digits = text.lstrip("-")
    # isascii: str.isdigit() also takes digits such as '²', which int() refuses.
    if not (digits.isascii() and digits.isdigit()) or int(text) < lowest:
        raise ClusterConfigError(
            f"{name} must be an integer of at least {lowest}. Received: {name}={text!r}")
    return int(text)


def _port(environ, default):
    port = _integer(environ, "MGPU_TF_PORT", lowest=0, default=default)
    if not 1 <= port <= 65535:
        raise ClusterConfigError(
            f"MGPU_TF_PORT must be between 1 and 65535. Received: MGPU_TF_PORT={port}")
    return port


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_dns_label(name, *, what="name"):
    """Raises `ClusterConfigError` for a Kubernetes name that is not a DNS label (RFC 1123)."""
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
        raise ClusterConfigError(
            f"{what} must be a DNS label: 1-63 lowercase letters, digits or '-', "
            f"starting and ending with a letter or digit. Received: {what}={name!r}")
    return name


def _kubernetes_jobs(text):
    if text is None:
        raise ClusterConfigError(
            "MGPU_TF_JOBS must be set with MGPU_TF_JOB_NAME: every Job of the cluster as "
            "'name:count,...' (mgpu-tf k8s writes it). Received: MGPU_TF_JOBS unset.")
    jobs = []
    for item in text.split(","):
        name, _, count = item.strip().rpartition(":")
        if not name or not (count.isascii() and count.isdigit()) or int(count) < 1:
            raise ClusterConfigError(
                "MGPU_TF_JOBS must list the cluster's Jobs as 'name:count,...' with counts "
                f"of at least 1. Received: MGPU_TF_JOBS={text!r}")
        jobs.append((check_dns_label(name, what="a Job name in MGPU_TF_JOBS"), int(count)))
    return jobs


def _from_kubernetes(environ):
    job = check_dns_label(environ["MGPU_TF_JOB_NAME"].strip(), what="MGPU_TF_JOB_NAME")
    index = _integer(environ, "JOB_COMPLETION_INDEX",
                     hint=" by Kubernetes; the Job needs completionMode: Indexed")
    service = check_dns_label(environ.get("MGPU_TF_SERVICE_NAME", "").strip(),
                              what="MGPU_TF_SERVICE_NAME")
    jobs = _kubernetes_jobs(environ.get("MGPU_TF_JOBS"))
    port = _port(environ, DEFAULT_PORT)
    names = [name for name, _ in jobs]
    if job not in names:
        raise ClusterConfigError(
            f"MGPU_TF_JOB_NAME must be one of the Jobs in MGPU_TF_JOBS ({', '.join(names)}). "
            f"Received: MGPU_TF_JOB_NAME={job!r}")
    count = dict(jobs)[job]
    if index >= count:
        raise ClusterConfigError(
            f"JOB_COMPLETION_INDEX must be in 0..{count - 1} for Job {job!r} of {count} "
            f"pods (MGPU_TF_JOBS). Received: JOB_COMPLETION_INDEX={index}")
    hosts = [f"{name}-{i}.{service}:{port}" for name, n in jobs for i in range(n)]
    offset = sum(n for name, n in jobs[:names.index(job)])
    return parse_tf_config(
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": offset + index}},
        source="kubernetes")


def _slurm_base_port(environ):
    # Jobs sharing a node get different ports: 16 per job, below Linux's ephemeral range.
    job_id = _integer(environ, "SLURM_JOB_ID", default=0)
    return _port(environ, 10000 + (job_id % 1400) * 16)


def _from_slurm(environ):
    try:
        nodes = hostlist.expand_hostlist(environ["SLURM_STEP_NODELIST"])
        per_node = (hostlist.expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"])
                    if "SLURM_STEP_TASKS_PER_NODE" in environ else None)
    except hostlist.HostlistError as error:
        raise ClusterConfigError(
            f"{error} (from SLURM_STEP_NODELIST / SLURM_STEP_TASKS_PER_NODE)") from None
    ntasks = _integer(environ, "SLURM_STEP_NUM_TASKS", lowest=1, hint=" by srun")
    rank = _integer(environ, "SLURM_PROCID", hint=" by srun")
    if per_node is None:
        if ntasks % len(nodes):
            raise ClusterConfigError(
                f"SLURM_STEP_TASKS_PER_NODE must be set when SLURM_STEP_NUM_TASKS={ntasks} "
                f"tasks do not spread evenly over {len(nodes)} nodes "
                f"({environ['SLURM_STEP_NODELIST']}).")
        per_node = [ntasks // len(nodes)] * len(nodes)
    if len(per_node) != len(nodes) or sum(per_node) != ntasks:
        raise ClusterConfigError(
            "SLURM_STEP_TASKS_PER_NODE must give one count per node of SLURM_STEP_NODELIST "
            "summing to SLURM_STEP_NUM_TASKS. Received: SLURM_STEP_TASKS_PER_NODE="
            f"{environ.get('SLURM_STEP_TASKS_PER_NODE')!r}, SLURM_STEP_NODELIST="
            f"{environ['SLURM_STEP_NODELIST']!r}, SLURM_STEP_NUM_TASKS={ntasks}")
    if rank >= ntasks:
        raise ClusterConfigError(
            f"SLURM_PROCID must be in 0..{ntasks - 1} for {ntasks} tasks. "
            f"Received: SLURM_PROCID={rank}")
    node = _integer(environ, "SLURM_NODEID", default=0 if len(nodes) == 1 else None,
                    hint=" by srun")
    local = _integer(environ, "SLURM_LOCALID", default=0 if ntasks == len(nodes) else None,
                     hint=" by srun")
    if node >= len(nodes) or local >= per_node[node]:
        raise ClusterConfigError(
            f"SLURM_NODEID and SLURM_LOCALID must name a task of the step ({per_node} tasks "
            f"on {nodes}). Received: SLURM_NODEID={node}, SLURM_LOCALID={local}")
    base = _slurm_base_port(environ)
    if base + max(per_node) - 1 > 65535:
        raise ClusterConfigError(
            f"MGPU_TF_PORT leaves no room for {max(per_node)} tasks per node below 65536. "
            f"Received: MGPU_TF_PORT={base}. Use a port below {65537 - max(per_node)}.")
    # Workers are ordered by node, then local id: the same on every task, whatever
    # srun's --distribution did to SLURM_PROCID.
    hosts = [f"{host}:{base + i}" for host, n in zip(nodes, per_node) for i in range(n)]
    return parse_tf_config(
        {"cluster": {"worker": hosts},
         "task": {"type": "worker", "index": sum(per_node[:node]) + local}},
        source="slurm")


def _override_hosts(config, text):
    if not text.strip():
        return config
    mapping = {}
    for item in text.split(","):
        name, sep, target = (part.strip() for part in item.partition("="))
        if not sep or not name or not target:
            raise ClusterConfigError(
                "MGPU_TF_HOST_OVERRIDE must be 'name=host[:port],...'. "
                f"Received: MGPU_TF_HOST_OVERRIDE={text!r}")
        has_port = ":" in target and not target.endswith("]")
        if has_port:
            parse_address(target, where=f"MGPU_TF_HOST_OVERRIDE[{name!r}]")
        mapping[name] = (target, has_port)
    used = set()

    def rename(address):
        host, port = parse_address(address)
        if host not in mapping:
            return address
        used.add(host)
        target, has_port = mapping[host]
        return target if has_port else f"{target}:{port}"  # a host alone keeps the port

    cluster = {role: [rename(a) for a in hosts] for role, hosts in config.cluster.items()}
    unknown = sorted(set(mapping) - used)
    if unknown:
        known = sorted({parse_address(a)[0] for hosts in config.cluster.values() for a in hosts})
        raise ClusterConfigError(
            f"MGPU_TF_HOST_OVERRIDE names hosts that are not in the cluster: {unknown}. "
            f"Hosts of the cluster: {known}.")
    return parse_tf_config(
        {"cluster": cluster, "task": {"type": config.task_type, "index": config.task_index}},
        source=config.source)


def shard_weights(environ=None):
    """Returns the workers' relative speeds from `MGPU_TF_SHARD_WEIGHTS`, or `None` when unset.

    Pass the result as `weights=` to `mgpu_tf.shard_dataset`:
    `shard_weights({"MGPU_TF_SHARD_WEIGHTS": "2,2,1"})` is `[2.0, 2.0, 1.0]`. Raises
    `ClusterConfigError` for a value that is not a number, a negative or all-zero list, or a
    length other than the detected cluster's workers.
    """
    environ = os.environ if environ is None else environ
    text = environ.get("MGPU_TF_SHARD_WEIGHTS", "").strip()
    if not text:
        return None
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        weights = None
    if weights is None or not all(math.isfinite(w) and w >= 0 for w in weights) or not any(
            weights):
        raise ClusterConfigError(
            "MGPU_TF_SHARD_WEIGHTS must be comma-separated numbers, not negative and not all "
            f"zero. Received: MGPU_TF_SHARD_WEIGHTS={text!r}")
    config = detect_cluster(environ)
    if config is not None and len(weights) != config.num_workers:
        raise ClusterConfigError(
            f"MGPU_TF_SHARD_WEIGHTS must give one weight per worker ({config.num_workers}, "
            f"from {config.source}). Received: MGPU_TF_SHARD_WEIGHTS={text!r}")
    return weights
