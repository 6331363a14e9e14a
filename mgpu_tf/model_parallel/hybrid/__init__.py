"""Hybrid parallelism: a model-parallel pipeline in each worker, data parallel across workers.

`strategy` is the `"hybrid"` strategy (`make_strategy("hybrid", devices_per_worker=K)`),
`model` the `HybridParallel` wrapper that `prepare_model` returns under it.
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
