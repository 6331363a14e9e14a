"""mgpu_tf: multi-device training for TensorFlow and Keras 3, switched on with one flag."""

from mgpu_tf.cluster import ClusterConfig, ClusterConfigError, parse_tf_config
from mgpu_tf.devices import DevicesAlreadyInitializedError, simulate_devices
from mgpu_tf.model_parallel import ModelParallel
from mgpu_tf.sharding import describe_sharding, shard_dataset
from mgpu_tf.strategies import (
    StrategyKind,
    available_strategies,
    make_strategy,
    prepare_model,
    strategy_kind,
)

__version__ = "0.1.0"

__all__ = [
    "ClusterConfig",
    "ClusterConfigError",
    "DevicesAlreadyInitializedError",
    "ModelParallel",
    "StrategyKind",
    "available_strategies",
    "describe_sharding",
    "make_strategy",
    "parse_tf_config",
    "prepare_model",
    "shard_dataset",
    "simulate_devices",
    "strategy_kind",
]
