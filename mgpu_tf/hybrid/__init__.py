"""Hybrid parallelism: a model-parallel pipeline in each worker, data parallel across workers.

`strategy` is the `"hybrid"` strategy (`make_strategy("hybrid", devices_per_worker=K)`),
`model` the `HybridParallel` wrapper that `prepare_model` returns under it.
"""

from mgpu_tf.hybrid.model import HybridParallel
from mgpu_tf.hybrid.strategy import HybridStrategy

__all__ = ["HybridParallel", "HybridStrategy"]
