# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["Balance", "ModelParallel", "ModelParallelStrategy", "StagePlan", "balance_by_params",
           "balance_by_time", "balance_by_uniform"]

from . import graph, hybrid, partition, stage
from .balance import Balance, balance_by_params, balance_by_time, balance_by_uniform
from .strategy import ModelParallelStrategy
from .wrapper import ModelParallel, StagePlan
