"""Data sharding: each example once, evenly or by device speed.

`sharding` is the request (`shard_dataset`, `describe_sharding`), `source` checks
and counts what is sharded, `plan` computes the layout as plain Python,
`pipeline` builds the input pipelines, and `replica_weights` corrects the loss
when replicas' batches differ in size.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.data.sharding": "describe_sharding shard_dataset",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
