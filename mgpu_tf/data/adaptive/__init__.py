"""Adaptive shard weights: each unit's share of the global batch follows its measured speed.

`shard_dataset(..., weights="adaptive")` starts the shares (`start`) and hands them to the
strategy's kind (`mgpu_tf.kind_of(strategy).adaptive_shares()`); each epoch a
`TrainingMonitor` measures the units and steers them (`steering`); the shares
(`shares`) move in grains when `settle` says a move pays, sized by `compute_curve`.

Design: docs/design.md#adaptive-shard-weights
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
