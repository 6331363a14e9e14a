"""TF_CONFIG as data: the cluster a task belongs to, parsed, validated or built.

TF_CONFIG is checked up front, with errors that quote the offending part, and can be built from
a host list.

Design: docs/design.md#cluster-detection
"""

import dataclasses
import json

__all__ = [
    "ROLES",
    "ClusterConfigError",
    "ClusterConfig",
    "parse_tf_config",
    "cluster_from_hosts",
    "parse_address",
    "training_tasks",
]

ROLES = ("chief", "worker", "ps", "evaluator")
_TRAINING_ROLES = ("chief", "worker")


class ClusterConfigError(ValueError):
    """A TF_CONFIG, host list or task index that cannot describe a cluster."""


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A validated cluster and this process' place in it.

    Attributes:
        cluster: role name to list of `"host:port"` addresses.
        task_type, task_index: this process' role and index within it.
        source: `"TF_CONFIG"`, `"kubernetes"`, `"slurm"`, `"worker_hosts"` or `"cluster"`
            (given to `make_strategy`).
    """

    cluster: dict
    task_type: str
    task_index: int
    source: str = "TF_CONFIG"

    @property
    def num_workers(self):
        """Number of training tasks (chief plus workers)."""
        return sum(len(self.cluster.get(role, ())) for role in _TRAINING_ROLES)

    @property
    def is_chief(self):
        """True for the task that writes checkpoints and logs."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def address(self):
        """This task's own `"host:port"`."""
        return self.cluster[self.task_type][self.task_index]

    def to_tf_config(self):
        """Returns the TF_CONFIG dictionary for this task."""
        return {
            "cluster": {role: list(hosts) for role, hosts in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }

    def to_json(self):
        """Returns the TF_CONFIG string for this task."""
        return json.dumps(self.to_tf_config(), sort_keys=True)

    def cluster_resolver(self):
        """Returns a `tf.distribute` cluster resolver for this task."""
        import tensorflow as tf

        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(self.cluster),
            task_type=self.task_type,
            task_id=self.task_index,
            rpc_layer="grpc",
        )


def parse_address(address, *, where="address"):
    """Returns `(host, port)` of a `"host:port"`: `ClusterConfigError` without host or port."""
    if not isinstance(address, str) or ":" not in address:
        raise ClusterConfigError(
            f"{where} must be a 'host:port' string. Received: {address!r}"
        )
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() for c in host):
        raise ClusterConfigError(
            f"{where} must name a host before the port. Received: {address!r}"
        )
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= port <= 65535:
        raise ClusterConfigError(
            f"{where} must end in a port between 1 and 65535. Received: {address!r}"
        )
    return host, port


def _check_cluster(cluster):
    if not isinstance(cluster, dict) or not cluster:
        raise ClusterConfigError(
            "TF_CONFIG['cluster'] must be a non-empty object of role -> addresses. "
            f"Received: cluster={cluster!r}"
        )
    seen = {}
    for role, hosts in cluster.items():
        if role not in ROLES:
            raise ClusterConfigError(
                f"TF_CONFIG['cluster'] has an unknown role {role!r}; roles are "
                f"{', '.join(ROLES)}."
            )
        if isinstance(hosts, str) or not isinstance(hosts, list) or not hosts:
            raise ClusterConfigError(
                f"TF_CONFIG['cluster'][{role!r}] must be a non-empty list of "
                f"'host:port' strings. Received: {hosts!r}"
            )
        for i, address in enumerate(hosts):
            parse_address(address, where=f"TF_CONFIG['cluster'][{role!r}][{i}]")
            if address in seen:
                raise ClusterConfigError(
                    f"Address {address!r} appears twice in TF_CONFIG['cluster'] "
                    f"(as {seen[address]} and {role}[{i}]); each task needs its own port."
                )
            seen[address] = f"{role}[{i}]"
    if len(cluster.get("chief", ())) > 1:
        raise ClusterConfigError(
            "TF_CONFIG['cluster']['chief'] may hold one address at most. "
            f"Received: {cluster['chief']!r}. Make the others workers."
        )
    if "ps" in cluster:
        raise ClusterConfigError(
            "TF_CONFIG names 'ps' tasks: parameter-server training is not a strategy "
            "mgpu_tf makes. Received roles: "
            f"{sorted(cluster)}. Use chief and worker roles for multi_worker."
        )
    if not any(role in cluster for role in _TRAINING_ROLES):
        raise ClusterConfigError(
            "TF_CONFIG['cluster'] needs a 'chief' or 'worker' role. "
            f"Received roles: {sorted(cluster)}"
        )


def parse_tf_config(value, *, source="TF_CONFIG"):
    """Parses and validates a TF_CONFIG, JSON text or a dictionary, into a `ClusterConfig`.

    `source` is a label kept in the result. Raises `ClusterConfigError`, naming the part
    that is wrong.

    Example:

    ```python
    config = parse_tf_config(
        '{"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},'
        ' "task": {"type": "worker", "index": 1}}')
    config.num_workers  # 2
    ```
    """
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except (ValueError, UnicodeDecodeError) as error:
            raise ClusterConfigError(
                f"TF_CONFIG is not valid JSON ({error}). Received: {str(value)[:200]!r}"
            ) from None
    if not isinstance(value, dict):
        raise ClusterConfigError(
            "TF_CONFIG must be a JSON object with 'cluster' and 'task'. "
            f"Received: {value!r}"
        )
    unknown = sorted(set(value) - {"cluster", "task", "environment", "rpc_layer"})
    if unknown:
        raise ClusterConfigError(
            f"TF_CONFIG has unknown keys {unknown}; the keys are 'cluster', 'task', "
            "'environment' and 'rpc_layer'."
        )
    cluster = value.get("cluster")
    _check_cluster(cluster)
    task = value.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ClusterConfigError(
            "TF_CONFIG['task'] must be an object with 'type' and 'index'. "
            f"Received: task={task!r}"
        )
    task_type, index = task["type"], task["index"]
    if task_type not in cluster:
        raise ClusterConfigError(
            f"TF_CONFIG['task']['type'] is {task_type!r}, which is not a role of the "
            f"cluster ({', '.join(sorted(cluster))})."
        )
    if isinstance(index, bool) or not isinstance(index, int):
        raise ClusterConfigError(
            f"TF_CONFIG['task']['index'] must be an integer. Received: index={index!r}"
        )
    if not 0 <= index < len(cluster[task_type]):
        raise ClusterConfigError(
            f"TF_CONFIG['task']['index'] must be in 0..{len(cluster[task_type]) - 1} "
            f"for the {len(cluster[task_type])} {task_type!r} task(s). "
            f"Received: index={index}"
        )
    return ClusterConfig(
        cluster={role: list(hosts) for role, hosts in cluster.items()},
        task_type=task_type,
        task_index=index,
        source=source,
    )


def cluster_from_hosts(worker_hosts, task_index):
    """Builds a worker-only `ClusterConfig` (source `"worker_hosts"`) from a host list.

    `worker_hosts` is `"host:port"` strings, or one comma-separated string; `task_index`
    is this process' index in it.
    """
    if isinstance(worker_hosts, str):
        worker_hosts = [h.strip() for h in worker_hosts.split(",") if h.strip()]
    if not isinstance(worker_hosts, (list, tuple)) or not worker_hosts:
        raise ClusterConfigError(
            "`worker_hosts` must list at least one 'host:port'. "
            f"Received: worker_hosts={worker_hosts!r}"
        )
    if task_index is None:
        raise ClusterConfigError(
            "`task_index` is required with `worker_hosts`: the index of this process "
            f"in {list(worker_hosts)!r}."
        )
    if isinstance(task_index, bool) or not isinstance(task_index, int):
        raise ClusterConfigError(
            f"`task_index` must be an integer. Received: task_index={task_index!r}"
        )
    if not 0 <= task_index < len(worker_hosts):
        raise ClusterConfigError(
            f"`task_index` must be in 0..{len(worker_hosts) - 1} for "
            f"{len(worker_hosts)} worker_hosts. Received: task_index={task_index}"
        )
    config = {
        "cluster": {"worker": list(worker_hosts)},
        "task": {"type": "worker", "index": task_index},
    }
    try:
        return parse_tf_config(config, source="worker_hosts")
    except ClusterConfigError as error:
        raise ClusterConfigError(
            str(error).replace("TF_CONFIG['cluster']['worker']", "worker_hosts")
        ) from None


def training_tasks(cluster_spec):
    """`[(task type, index, address)]` of the tasks that train (chief, then workers, by index)
    in a cluster spec's dict (`ClusterResolver.cluster_spec().as_dict()`); a sparse job (a
    dict of index to address) keeps its indices."""
    tasks = []
    for task_type in _TRAINING_ROLES:
        jobs = cluster_spec.get(task_type, [])
        indexed = sorted(jobs.items()) if isinstance(jobs, dict) else enumerate(jobs)
        tasks += [(task_type, int(index), address) for index, address in indexed]
    return tasks
