"""Data sharding: each example once, evenly or by device speed.

`sharding` is the request (`shard_dataset`, `describe_sharding`), `source` checks
and counts what is sharded, `plan` computes the layout as plain Python,
`pipeline` builds the input pipelines, and `replica_weights` corrects the loss
when replicas' batches differ in size.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "describe_sharding": "mgpu_tf.data.sharding",
    "shard_dataset": "mgpu_tf.data.sharding",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
