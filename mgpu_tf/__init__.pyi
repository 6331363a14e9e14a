# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them, and read
# nothing of __init__.py: what it imports itself is declared at the end. (lazy-loader accepts
# only relative `from` imports, hence `import enum`.)

import enum

__all__ = ["ClusterConfig", "ClusterConfigError", "DevicesAlreadyInitializedError",
           "ModelParallel", "StrategyKind", "StrategyName", "available_strategies",
           "describe_sharding", "kind_of", "make_strategy", "parse_tf_config", "plan",
           "prepare_model", "setup_logging", "shard_dataset", "simulate_devices",
           "strategy_kind"]

from . import (base, callbacks, cli, cluster, comm, compat, data, flags, model_parallel,
               planner, strategies, train)
from .base.devices import DevicesAlreadyInitializedError
from .base.kind import StrategyKind
from .base.registry import StrategyName
from .strategies.devices import simulate_devices
from .cluster.tf_config import ClusterConfig, ClusterConfigError, parse_tf_config
from .compat.native_logs import setup_logging
from .data.sharding import describe_sharding, shard_dataset
from .model_parallel.wrapper import ModelParallel
from .planner.recommend import plan
from .strategies.factory import available_strategies, make_strategy, prepare_model, strategy_kind
from .strategies.kinds import kind_of

__version__: str

# A base for the toolkit's enums, without members of its own, which mypy flags in a stub.
class Choice(str, enum.Enum):  # type: ignore[misc]
    @classmethod
    def parse(cls, value, argument): ...
