"""Hybrid parallelism: a model-parallel pipeline in each worker, data parallel across workers.

`strategy` is the `"hybrid"` strategy (`make_strategy("hybrid", devices_per_worker=K)`),
`model` the `HybridParallel` wrapper that `prepare_model` returns under it.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.model_parallel.hybrid.model": "HybridParallel",
    "mgpu_tf.model_parallel.hybrid.strategy": "HybridStrategy",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, ("model", "strategy"))
