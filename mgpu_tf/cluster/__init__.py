"""Clusters: where the workers are, how they start, and what happens when one is lost.

`tf_config` checks and builds TF_CONFIG as data, `hostlist` expands SLURM host
lists, `detect` finds the cluster in the environment (the only module that reads
environment variables), `launcher` starts local worker groups, `failures` turns a
lost worker into `WorkerLostError`, `kubernetes` writes manifests (a JobSet through
`jobset`, both from `manifest_parts`, metrics and sizes from `pod_metrics`), `calibrate`
measures each worker's speed for weighted shards, `scrape` places the workers' metrics
endpoints and `ray_train` reports Keras training on Ray Train's workers.
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
