"""mgpu_tf: multi-device training for TensorFlow and Keras 3, switched on with one flag.

The public names load on first use, so that `mgpu-tf launch`, `mgpu-tf k8s` and a
bad command-line argument answer without importing TensorFlow. The same holds for
the capability folders (`mgpu_tf.callbacks`, `mgpu_tf.cluster`, `mgpu_tf.planner`, ...):
each is reachable as an attribute and loads when first touched.
"""

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "ClusterConfig": "mgpu_tf.cluster.tf_config",
    "ClusterConfigError": "mgpu_tf.cluster.tf_config",
    "parse_tf_config": "mgpu_tf.cluster.tf_config",
    "DevicesAlreadyInitializedError": "mgpu_tf.strategies.devices",
    "simulate_devices": "mgpu_tf.strategies.devices",
    "ModelParallel": "mgpu_tf.model_parallel.wrapper",
    "plan": "mgpu_tf.planner.recommend",
    "describe_sharding": "mgpu_tf.data.sharding",
    "shard_dataset": "mgpu_tf.data.sharding",
    "StrategyKind": "mgpu_tf.strategies.registry",
    "available_strategies": "mgpu_tf.strategies.factory",
    "make_strategy": "mgpu_tf.strategies.factory",
    "prepare_model": "mgpu_tf.strategies.factory",
    "strategy_kind": "mgpu_tf.strategies.factory",
}

# The folders and modules a user reaches as `mgpu_tf.NAME` without importing them first.
_SUBMODULES = ("callbacks", "cli", "cluster", "comm", "compat", "data", "flags",
               "model_parallel", "planner", "strategies", "train")

__all__ = sorted(_EXPORTS)


def lazy_exports(package, exports, submodules=()):
    """Returns `(__getattr__, __dir__)` for a package whose names load on first use.

    Args:
        package: the package's `__name__`.
        exports: `{public name: module that defines it}`.
        submodules: names of the package's modules reachable as attributes.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name):
        if name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports) | set(submodules))

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)
