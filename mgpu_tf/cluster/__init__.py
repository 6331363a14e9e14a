"""Clusters: where the workers are, how they start, and what happens when one is lost.

`tf_config` checks and builds TF_CONFIG as data, `hostlist` expands SLURM host
lists, `detect` finds the cluster in the environment (the only module that reads
environment variables), `launcher` starts local worker groups, `failures` turns a
lost worker into `WorkerLostError`, `kubernetes` writes manifests (a JobSet through
`jobset`, both from `manifest_parts`), `calibrate` measures each worker's speed
for weighted shards and `ray_train` reports Keras training on Ray Train's workers.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.cluster.tf_config": "ClusterConfig ClusterConfigError parse_tf_config",
    "mgpu_tf.cluster.detect": "detect_cluster",
    "mgpu_tf.cluster.launcher": "launch",
    "mgpu_tf.cluster.failures": "WorkerLostError worker_failures",
    "mgpu_tf.cluster.ray_train": "RayReporter",
}

_SUBMODULES = ("tf_config", "hostlist", "detect", "launcher", "failures", "kubernetes",
               "jobset", "manifest_parts", "calibrate", "ray_train")

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)
