"""The `"model_parallel"` strategy: what `make_strategy("model_parallel")` returns.

Design: docs/design.md#the-model-parallel-strategy
"""

import contextlib

import tensorflow as tf

from mgpu_tf.base import devices as devices_lib
from mgpu_tf.base import registry
from mgpu_tf.base.kind import OnePipelineKind
from mgpu_tf.comm import combinations
from mgpu_tf.comm import options as _comm  # noqa: F401 - the table lists them before these
from mgpu_tf.model_parallel import balance as balance_lib
from mgpu_tf.model_parallel import microbatch
from mgpu_tf.model_parallel import recompute as recompute_lib
from mgpu_tf.model_parallel import wrapper

__all__ = ["ModelParallelStrategy", "ModelParallelKind"]


class ModelParallelStrategy:
    """Model parallelism with the face of a `tf.distribute` strategy.

    Example:

    ```python
    import keras, mgpu_tf
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2, microbatches=4)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32),
                                  keras.layers.Dense(1)])
    model = mgpu_tf.prepare_model(model, strategy)  # a ModelParallel over CPU:0, CPU:1
    ```

    Args:
        devices: device names, one per stage.
        balance: how layers are shared among stages; see `ModelParallel`, which checks
            this and the rest (`make_strategy` has parsed them). Defaults to `"params"`.
        microbatches: micro-batches per batch. Defaults to `1`.
        recompute: which micro-batches are recomputed. Defaults to `"never"`.
        deferred_batch_norm: see `ModelParallel`. Defaults to `False`.
    """

    num_replicas_in_sync = 1  # one copy of the model: the global batch is the batch
    should_checkpoint = True  # one process, which writes checkpoints and logs

    def __init__(self, devices, *, balance="params", microbatches=1, recompute="never",
                 deferred_batch_norm=False):
        self.devices = tuple(devices)
        self.balance = balance
        self.microbatches = microbatches
        self.recompute = recompute
        self.deferred_batch_norm = deferred_batch_norm

    def scope(self):
        """A context for building the model; variables are placed by `prepare_model`."""
        return contextlib.nullcontext(self)

    def prepare_model(self, model):
        """Returns `model` split over this strategy's devices, as a `ModelParallel`."""
        if isinstance(model, wrapper.ModelParallel):
            return model
        return wrapper.ModelParallel(model, list(self.devices), balance=self.balance,
                                     microbatches=self.microbatches, recompute=self.recompute,
                                     deferred_batch_norm=self.deferred_batch_norm)

    def experimental_distribute_dataset(self, dataset, options=None):
        """Returns `dataset` as is: every batch goes through the one pipeline."""
        return dataset

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """Returns `dataset_fn` called with a single-pipeline input context."""
        return dataset_fn(tf.distribute.InputContext())

    def __repr__(self):
        balance = str(self.balance) if isinstance(self.balance, str) else self.balance
        return (f"ModelParallelStrategy(devices={list(self.devices)!r}, "
                f"balance={balance!r}, microbatches={self.microbatches}, "
                f"recompute={str(self.recompute)!r}, "
                f"deferred_batch_norm={self.deferred_batch_norm})")


class ModelParallelKind(OnePipelineKind):
    """One copy of the model in one process: one input pipeline of whole batches."""

    name = "model_parallel"

    @property
    def worker_devices(self):
        return self.strategy.devices

    def prepare_model(self, model):
        return self.strategy.prepare_model(model)

    def prepare_fit(self, data, callbacks, **fit):
        combinations.check_fit(self.name, data, **fit)
        super().prepare_fit(data, callbacks, **fit)


def _build(settings):
    return ModelParallelStrategy(settings.devices or devices_lib.local_devices(),
                                 balance=settings.balance, microbatches=settings.microbatches,
                                 recompute=settings.recompute,
                                 deferred_batch_norm=settings.deferred_batch_norm)


def _balance_from_flag(parts):
    parts = [part.strip() for part in parts]
    digits = all(part.isascii() and part.isdigit() for part in parts)
    return [int(p) for p in parts] if digits else ",".join(parts)


_PIPELINES = ("model_parallel", "hybrid")
registry.register_option(
    "balance", "how layers are shared among model_parallel stages: uniform, params, time, "
    "or layer counts", wrapper.check_balance, type=(str, list),
    choices=tuple(b.value for b in balance_lib.Balance), default=balance_lib.Balance.PARAMS,
    strategies=_PIPELINES, flag="list", flag_note=" (comma-separated counts).",
    from_flag=_balance_from_flag)
registry.register_option(
    "microbatches", "micro-batches per batch in the model_parallel pipeline",
    microbatch.check_microbatches, type=int, minimum=1, default=1, strategies=_PIPELINES,
    flag="integer")
registry.register_option(
    "recompute", "which micro-batches a model_parallel stage recomputes in the backward pass "
    "instead of keeping their activations: never, except_last, always",
    recompute_lib.check_recompute, type=str,
    choices=tuple(r.value for r in recompute_lib.Recompute),
    default=recompute_lib.Recompute.NEVER, strategies=_PIPELINES, flag="string")
registry.register_option(
    "deferred_batch_norm", "model_parallel: BatchNormalization with micro-batches, its moving "
    "statistics updated once per step", wrapper.check_deferred_batch_norm, type=bool,
    default=False, strategies=_PIPELINES, flag="boolean")
registry.register_strategy(
    "model_parallel", "consecutive layers on different devices, pipelined (GPipe)", _build,
    options=("devices",), strategy_types=(ModelParallelStrategy,), kind=ModelParallelKind)
