"""mgpu_tf: multi-device training for TensorFlow and Keras 3, switched on with one flag.

The public names load on first use, so that `mgpu-tf launch`, `mgpu-tf k8s` and a
bad command-line argument answer without importing TensorFlow.
"""

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "ClusterConfig": "mgpu_tf.tf_config",
    "ClusterConfigError": "mgpu_tf.tf_config",
    "parse_tf_config": "mgpu_tf.tf_config",
    "DevicesAlreadyInitializedError": "mgpu_tf.devices",
    "simulate_devices": "mgpu_tf.devices",
    "ModelParallel": "mgpu_tf.model_parallel",
    "plan": "mgpu_tf.planner",
    "describe_sharding": "mgpu_tf.sharding",
    "shard_dataset": "mgpu_tf.sharding",
    "StrategyKind": "mgpu_tf.registry",
    "available_strategies": "mgpu_tf.registry",
    "make_strategy": "mgpu_tf.strategies",
    "prepare_model": "mgpu_tf.strategies",
    "strategy_kind": "mgpu_tf.strategies",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mgpu_tf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
