"""Communication: how gradients cross between replicas and workers.

`compression` casts gradients for the all-reduce, `accumulation` sums them
locally for `steps_per_sync` steps, `ring` is the toolkit's TCP ring and
`transport` drives it from the training step; `prepare` puts the options a
strategy was made with into the Keras optimizer.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.comm.compression": "Compression",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
