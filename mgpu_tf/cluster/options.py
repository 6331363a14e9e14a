"""The options that name the cluster: `cluster`, or `worker_hosts` with `task_index`.

Design: docs/design.md#layers
"""

from mgpu_tf.base import options as _shared  # noqa: F401 - first in the table, as it lists them
from mgpu_tf.base import registry
from mgpu_tf.cluster import tf_config

__all__ = ["check_cluster", "settle_cluster"]


def check_cluster(value):
    """Returns `cluster` (a TF_CONFIG dictionary or JSON string) as a `ClusterConfig`."""
    if isinstance(value, tf_config.ClusterConfig):
        return value
    return tf_config.parse_tf_config(value, source="cluster")


def settle_cluster(options):
    """Returns the options given with `worker_hosts` and `task_index` made into a `cluster`."""
    if "cluster" in options and ("worker_hosts" in options or "task_index" in options):
        raise ValueError(
            "Pass `cluster` or `worker_hosts` with `task_index`, not both. Received: "
            f"cluster={options['cluster']!r}, worker_hosts={options.get('worker_hosts')!r}")
    if "worker_hosts" in options or "task_index" in options:
        options = dict(options)
        options["cluster"] = tf_config.cluster_from_hosts(options.pop("worker_hosts", None),
                                                          options.pop("task_index", None))
    return options


def _unchanged(value):  # checked with task_index, by settle_cluster
    return value


registry.register_option("cluster", "a TF_CONFIG dictionary or JSON string", check_cluster,
                         type=(dict, str), strategies=("multi_worker",), settle=settle_cluster)
registry.register_option("worker_hosts", "'host:port' of every worker, instead of cluster",
                         _unchanged, type=list, strategies=("multi_worker",), flag="list",
                         flag_note=" (comma-separated).", settle=settle_cluster)
registry.register_option("task_index", "this process' index in worker_hosts", _unchanged,
                         type=int, strategies=("multi_worker",), flag="integer",
                         settle=settle_cluster)
