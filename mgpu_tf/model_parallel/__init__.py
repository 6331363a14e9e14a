"""Model parallelism: consecutive layers on different devices, pipelined GPipe-style.

`wrapper` is the wrapper (`ModelParallel`), `balance` the partitioners, `partition`
the cutting of a model into stages, `microbatch` the splitting of a batch,
`pipeline` the placed forward and backward schedule, `placement` the variables and
optimizer updates on their devices, `strategy` the `"model_parallel"` strategy.
"""

from mgpu_tf.model_parallel.balance import (
    Balance,
    balance_by_params,
    balance_by_time,
    balance_by_uniform,
)
from mgpu_tf.model_parallel.strategy import ModelParallelStrategy
from mgpu_tf.model_parallel.wrapper import ModelParallel, StagePlan

__all__ = [
    "Balance",
    "ModelParallel",
    "ModelParallelStrategy",
    "StagePlan",
    "balance_by_params",
    "balance_by_time",
    "balance_by_uniform",
]
