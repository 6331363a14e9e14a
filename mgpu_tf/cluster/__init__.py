"""Clusters: where the workers are, how they start, and what happens when one is lost.

`tf_config` checks and builds TF_CONFIG as data, `hostlist` expands SLURM host
lists, `detect` finds the cluster in the environment (the only module that reads
environment variables), `launcher` starts local worker groups, `failures` turns a
lost worker into `WorkerLostError`, `kubernetes` writes manifests and `calibrate`
measures each worker's speed for weighted shards.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "ClusterConfig": "mgpu_tf.cluster.tf_config",
    "ClusterConfigError": "mgpu_tf.cluster.tf_config",
    "parse_tf_config": "mgpu_tf.cluster.tf_config",
    "detect_cluster": "mgpu_tf.cluster.detect",
    "launch": "mgpu_tf.cluster.launcher",
    "WorkerLostError": "mgpu_tf.cluster.failures",
    "worker_failures": "mgpu_tf.cluster.failures",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(
    __name__, _EXPORTS,
    ("tf_config", "hostlist", "detect", "launcher", "failures", "kubernetes", "calibrate"))
