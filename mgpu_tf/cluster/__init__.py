"""Clusters: where the workers are, how they start, and what happens when one is lost.

`tf_config` builds TF_CONFIG, `hostlist` expands SLURM host lists, `detect` finds the
cluster (the only module that reads environment variables), `launcher` starts local worker
groups and `elastic` resizes them, `failures` turns a lost worker into `WorkerLostError`,
`kubernetes` writes manifests (`jobset`, `manifest_parts`, `pod_metrics`; `network_policy`
closes them), `job_secret` is the ring's secret, `calibrate` measures workers' speeds,
`scrape` places metrics endpoints, `ray_train` reports training on Ray Train's workers.
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
