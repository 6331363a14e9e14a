"""Clusters: where the workers are, how they start, and what happens when one is lost.

`tf_config` checks and builds TF_CONFIG as data, `hostlist` expands SLURM host
lists, `detect` finds the cluster in the environment (the only module that reads
environment variables), `launcher` starts local worker groups, `failures` turns a
lost worker into `WorkerLostError`, `kubernetes` writes manifests (a JobSet through
`jobset`, both from `manifest_parts`) and `calibrate` measures each worker's speed
for weighted shards.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.cluster.tf_config": "ClusterConfig ClusterConfigError parse_tf_config",
    "mgpu_tf.cluster.detect": "detect_cluster",
    "mgpu_tf.cluster.launcher": "launch",
    "mgpu_tf.cluster.failures": "WorkerLostError worker_failures",
}

_SUBMODULES = ("tf_config", "hostlist", "detect", "launcher", "failures", "kubernetes",
               "jobset", "manifest_parts", "calibrate")

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)
