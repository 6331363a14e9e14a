"""Data sharding: each example once, evenly or by device speed.

`sharding` is the request (`shard_dataset`, `describe_sharding`), `source` checks
and counts what is sharded, `plan` computes the layout as plain Python,
`pipeline` builds the input pipelines, `replica_weights` corrects the loss
when replicas' batches differ in size, and `adaptive` moves the shares by measured speed.
`digits` is the small bundled data set the main job and the guides train on.
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
