# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["describe_sharding", "load_digits", "shard_dataset"]

# The modules load on first use too, so the guides' `mgpu_tf.data.plan` and the like resolve.
from . import (adaptive, digits, in_memory, marks, order, pipeline, plan, preprocessing,
               replica_weights, sharding, source, split, stream)
from .digits import load_digits
from .sharding import describe_sharding, shard_dataset
