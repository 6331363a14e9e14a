"""Communication: how gradients cross between replicas and workers.

`compression` casts gradients for the all-reduce, `accumulation` sums them locally between
syncs, `ring` is the toolkit's TCP ring and `transport` drives it from the training step,
`buckets` all-reduces them in buckets while the backward pass runs; `sharded_state` (with `shard_layout`)
keeps each replica's slice of the optimizer slots; `clipping` clips the gradient summed
over replicas; `prepare` puts the options a strategy was made with into the Keras optimizer;
`batch_norm` makes BatchNormalization layers normalise with the global batch
(`sync_batch_norm`).
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
