"""Model parallelism: consecutive layers on different devices, pipelined GPipe-style.

`wrapper` is the wrapper (`ModelParallel`), `balance` the partitioners, `partition`
the cutting of a model into stages, `microbatch` the splitting of a batch,
`pipeline` the placed forward and backward schedule, `placement` the variables and
optimizer updates on their devices, `strategy` the `"model_parallel"` strategy, and
`hybrid/` a pipeline in each worker with data parallelism across workers.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.model_parallel.balance": "Balance balance_by_params balance_by_time "
                                      "balance_by_uniform",
    "mgpu_tf.model_parallel.wrapper": "ModelParallel StagePlan",
    "mgpu_tf.model_parallel.strategy": "ModelParallelStrategy",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, ("hybrid",))
