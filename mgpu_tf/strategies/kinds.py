"""The kinds of TensorFlow's own strategies: default, one_device, mirrored, multi_worker, tpu.

Importing it registers them; `kind_of` and `kind_of_model` are `mgpu_tf.base.kind`'s, with
them known.

Design: docs/design.md#the-strategy-factory
"""

import tensorflow as tf

from mgpu_tf.base.kind import OnePipelineKind, StrategyKind, kind_of, kind_of_model
from mgpu_tf.base.registry import register_strategy
from mgpu_tf.cluster import fit_callbacks
from mgpu_tf.cluster import step_watchdog
from mgpu_tf.cluster import stop_vote
from mgpu_tf.comm import accumulation
from mgpu_tf.comm import batch_norm
from mgpu_tf.comm import clipping
from mgpu_tf.comm import combinations
from mgpu_tf.comm import prepare as communication
from mgpu_tf.compat import patches
from mgpu_tf.compat import private_runtime
from mgpu_tf.strategies import builtin

__all__ = ["DefaultKind", "OneDeviceKind", "MirroredKind", "MultiWorkerKind", "TPUKind",
           "kind_of", "kind_of_model"]


class DefaultKind(OnePipelineKind):
    """TensorFlow's default strategy: one replica, one input pipeline."""

    name = "default"

    @property
    def patches(self):
        # KerasHub's hook: a task mapping its preprocessing over shard_dataset's data set
        # itself trains, under one_device, each epoch on the next epoch's order.
        return ("shuffle", "fit", "keras_hub")

    def prepare_fit(self, data, callbacks, **fit):
        combinations.check_fit(self.name, data, **fit)
        super().prepare_fit(data, callbacks, **fit)

    @property
    def worker_devices(self):
        return ()  # TensorFlow's default strategy names none


class OneDeviceKind(DefaultKind):
    """`tf.distribute.OneDeviceStrategy`."""

    name = "one_device"

    @classmethod
    def check_options(cls, values, given):
        if len(values.get("devices", ())) > 1:
            raise ValueError("`devices` for one_device must name exactly one device. "
                             f"Received: devices={given['devices']!r}. Use 'mirrored' for "
                             "several.")

    @property
    def worker_devices(self):
        return tuple(self.strategy.extended.worker_devices)

    @property
    def patches(self):
        return ("steps", "shuffle", "fit", "keras_hub")


class _DataParallelKind(StrategyKind):
    """What the mirrored kinds share: upstream fixes, and communication options and clipping
    of the summed gradient that ready the optimizer of each model compiled under them (and
    its layers: sync_batch_norm)."""

    sums_in_optimizer = True

    @property
    def patches(self):
        # The optimizer and compile hooks run Keras' own code where no option asks otherwise.
        return (*patches.REPLICA_FIXES, "optimizer", "compile", "shuffle", "fit")

    def check_epoch(self, steps, global_batch_size):
        accumulation.check_epoch(self.settings, steps, global_batch_size)

    def prepare_fit(self, data, callbacks, **fit):
        combinations.check_fit(self.name, data, **fit)
        super().prepare_fit(data, callbacks, **fit)

    def prepare_optimizer(self, optimizer):
        toolkit = {} if self.settings is None else {
            "shard_optimizer_state": self.settings.shard_optimizer_state,
            "steps_per_sync": self.settings.steps_per_sync}
        combinations.refuse(self.name, **toolkit, **combinations.optimizer_levels(optimizer))
        chosen = communication.options_of(self.settings)
        # Options a user installed before `compile` are theirs to keep (comm.prepare.install).
        if chosen and not communication.installed(optimizer):
            communication.install(optimizer, self.strategy, **chosen)
        return clipping.clip_after_sum(optimizer)

    def prepare_model(self, model):
        if self.settings is not None and self.settings.sync_batch_norm:
            batch_norm.synchronize(model)
        batch_norm.note_per_replica(model, self.num_replicas)
        return model

    def prepare_compiled(self, model):
        super().prepare_compiled(model)
        self.prepare_model(model)


class MirroredKind(_DataParallelKind):
    """`tf.distribute.MirroredStrategy`: one worker, a unit and an input pipeline per replica."""

    name = "mirrored"

    def local_units(self):
        devices = self.worker_devices
        return self.num_replicas, 1, {unit: [device] for unit, device in enumerate(devices)}

    def data_layout(self):
        return "mirrored", 1, self.num_replicas

    def distribute_datasets(self, make_replica, make_worker):
        return self.strategy.distribute_datasets_from_function(
            lambda context: make_replica(context.input_pipeline_id),
            options=tf.distribute.InputOptions(
                experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA))


class MultiWorkerKind(_DataParallelKind):
    """`tf.distribute.MultiWorkerMirroredStrategy`: a unit and an input pipeline per worker."""

    name = "multi_worker"
    spans_processes = True

    def settle(self):
        if self.num_workers > 1:
            self.stop_vote = stop_vote.StopVote()

    def local_units(self):
        devices = list(self.worker_devices)
        local = len(devices)
        ids = self.strategy.experimental_distribute_values_from_function(
            lambda context: context.replica_id_in_sync_group)
        first = min(int(i) for i in self.strategy.experimental_local_results(ids))
        return self.num_replicas // local, local, {first // local: devices}

    def data_layout(self):
        return "multi_worker", self.num_workers, self.replicas_per_worker

    def distribute_datasets(self, make_replica, make_worker):
        # Every worker's pipeline gives each epoch's steps, padded with empty batches
        # (data.pipeline): no step needs TensorFlow's all-reduce of who still has data.
        with private_runtime.without_partial_batches(self.strategy):
            return super().distribute_datasets(make_replica, make_worker)

    def fit_callbacks(self, callbacks):
        # Keras' writing callbacks are refused; a signal stops at a step boundary; a step
        # waiting timeout_seconds for a peer fails.
        return fit_callbacks.fit_callbacks(callbacks, step_watchdog.for_fit(self),
                                           self.stop_vote)


class TPUKind(StrategyKind):
    """`tf.distribute.TPUStrategy`: `shard_dataset` does not feed it."""

    name = "tpu"


register_strategy("default", "no distribution: TensorFlow's default strategy",
                  builtin.build_default, aliases=("off", "none"),
                  strategy_types=(type(private_runtime.default_strategy()),), kind=DefaultKind)
register_strategy("one_device", "everything on one device", builtin.build_one_device,
                  strategy_types=(tf.distribute.OneDeviceStrategy,), kind=OneDeviceKind)
register_strategy("mirrored", "data parallel over the devices of one machine",
                  builtin.build_mirrored, strategy_types=(tf.distribute.MirroredStrategy,),
                  kind=MirroredKind)
register_strategy("multi_worker", "data parallel over several machines (TF_CONFIG)",
                  builtin.build_multi_worker, aliases=("multi_worker_mirrored",),
                  strategy_types=(tf.distribute.MultiWorkerMirroredStrategy,),
                  kind=MultiWorkerKind)
register_strategy("tpu", "TPU pods and TPU VMs", builtin.build_tpu,
                  strategy_types=(tf.distribute.TPUStrategy,), kind=TPUKind)
