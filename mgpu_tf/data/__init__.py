"""Data sharding: each example once, evenly or by device speed.

`sharding` is the request (`shard_dataset`, `describe_sharding`), `source` checks
and counts what is sharded, `plan` computes the layout as plain Python,
`pipeline` builds the input pipelines, `replica_weights` corrects the loss
when replicas' batches differ in size, and `adaptive` moves the shares by measured speed.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
