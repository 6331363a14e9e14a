"""Model parallelism: consecutive layers on different devices, pipelined GPipe-style.

`wrapper` is the wrapper (`ModelParallel`), `balance` the partitioners, `graph` the
flattened layer graph (nested models opened), `stage` its cutting into stages,
`partition` the top-level view the planner reads, `microbatch` the splitting of a batch,
`pipeline` the placed forward and backward schedule, `placement` the variables and
optimizer updates on their devices, `strategy` the `"model_parallel"` strategy, and
`hybrid/` a pipeline in each worker with data parallelism across workers.
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
