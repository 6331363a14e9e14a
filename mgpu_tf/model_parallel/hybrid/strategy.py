"""The `"hybrid"` strategy: a model-parallel pipeline per worker, data parallel across workers.

Design: docs/design.md#hybrid-parallelism
"""

import contextlib

import tensorflow as tf

from mgpu_tf.base import devices as devices_lib
from mgpu_tf.base import options as _options  # noqa: F401 - declares the options named here
from mgpu_tf.cluster import options as _cluster  # noqa: F401 - cluster, worker_hosts, task_index
from mgpu_tf.base import registry
from mgpu_tf.base.kind import StrategyKind
from mgpu_tf.cluster import communicator as communicator_lib
from mgpu_tf.cluster import detect as cluster_lib
from mgpu_tf.cluster import fit_callbacks
from mgpu_tf.cluster import step_watchdog
from mgpu_tf.cluster import stop_vote
from mgpu_tf.comm import combinations
from mgpu_tf.compat import patches
from mgpu_tf.model_parallel import strategy as _model_parallel  # noqa: F401 (its options)

__all__ = ["HybridStrategy", "HybridKind", "check_layout"]

# The multi_worker options its communicator is built with.
_COMMUNICATION_OPTIONS = ("all_reduce", "bytes_per_pack", "timeout_seconds", "cluster",
                          "worker_hosts", "task_index")


class HybridStrategy:
    """Model parallelism in each worker and data parallelism across workers.

    Example:

    ```python
    # run as: mgpu-tf launch --workers 2 -- python train.py
    import mgpu_tf
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2, microbatches=4)
    with strategy.scope():
        model = build_model()
    model = mgpu_tf.prepare_model(model, strategy)  # a mgpu_tf.model_parallel.hybrid.HybridParallel
    ```

    Args:
        devices: this worker's devices, one per stage.
        communicator: the `MultiWorkerMirroredStrategy` averaging gradients.
        num_workers: workers in the cluster.
        task_index: this worker's index.
        balance: as for `ModelParallel`, which checks this and the rest. Defaults to
            `"params"`.
        microbatches: as for `ModelParallel`. Defaults to `1`.
        recompute: as for `ModelParallel`. Defaults to `"never"`.
        deferred_batch_norm: as for `ModelParallel`; the moving statistics are each
            worker's, from its share of the batch. Defaults to `False`.
    """

    def __init__(self, devices, communicator, num_workers, task_index, *, balance="params",
                 microbatches=1, recompute="never", deferred_batch_norm=False):
        self.devices = tuple(devices)
        self.communicator = communicator
        self.num_workers = int(num_workers)
        self.task_index = int(task_index)
        self.balance = balance
        self.microbatches = microbatches
        self.recompute = recompute
        self.deferred_batch_norm = deferred_batch_norm

    @property
    def num_replicas_in_sync(self):
        return self.num_workers

    @property
    def cluster_resolver(self):
        """The cluster's resolver, its communicator's."""
        return self.communicator.cluster_resolver

    @property
    def should_checkpoint(self):
        """True on the chief, the one worker that writes checkpoints and logs."""
        return bool(self.communicator.extended.should_checkpoint)

    def scope(self):
        """A context for building the model; variables are placed by `prepare_model`."""
        return contextlib.nullcontext(self)

    def prepare_model(self, model):
        """Returns `model` as a `HybridParallel` over this worker's devices."""
        from mgpu_tf.model_parallel.hybrid import model as model_lib

        if isinstance(model, model_lib.HybridParallel):
            return model
        return model_lib.HybridParallel(model, list(self.devices), self.communicator,
                                        balance=self.balance, microbatches=self.microbatches,
                                        recompute=self.recompute,
                                        deferred_batch_norm=self.deferred_batch_norm)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """Returns `dataset_fn` called with this worker's input context: its own batches."""
        return dataset_fn(tf.distribute.InputContext(
            num_input_pipelines=self.num_workers, input_pipeline_id=self.task_index,
            num_replicas_in_sync=self.num_workers))

    def __repr__(self):
        return (f"HybridStrategy(workers={self.num_workers}, task_index={self.task_index}, "
                f"devices={list(self.devices)!r}, microbatches={self.microbatches})")


def check_layout(devices_per_worker, devices, num_workers):
    """Checks a hybrid layout against this worker's devices and the cluster.

    Returns:
        This worker's stage devices.

    Raises:
        ValueError: when the layout does not match the devices or workers present.
    """
    present = devices_lib.local_devices()
    if devices_per_worker is not None:  # an int of at least 1: the table checked it
        if devices is not None and len(devices) != devices_per_worker:
            raise ValueError(
                "`devices` and `devices_per_worker` disagree: one stage per device. "
                f"Received: devices={list(devices)!r}, devices_per_worker={devices_per_worker}. "
                "Pass one of them.")
        if devices is None and devices_per_worker > len(present):
            raise ValueError(
                f"`devices_per_worker` asks for {devices_per_worker} devices but this worker "
                f"has {len(present)} ({', '.join(present)}). Received: devices_per_worker="
                f"{devices_per_worker}. Use devices_per_worker<={len(present)}, or call "
                f"mgpu_tf.simulate_devices({devices_per_worker}) first in every worker.")
    count = devices_per_worker or len(present)
    stage_devices = list(devices) if devices is not None else present[:count]
    if num_workers < 2:
        raise ValueError(
            "'hybrid' averages gradients across workers and needs at least 2; this cluster "
            f"has {num_workers}. Received: {num_workers} worker(s) (TF_CONFIG or `cluster`). "
            "Start the workers with `mgpu-tf launch --workers N -- ...`, or use "
            "'model_parallel' on one machine.")
    return stage_devices


class HybridKind(StrategyKind):
    """A pipeline per worker: one replica and one input pipeline of whole batches each."""

    name = "hybrid"

    def settle(self):
        if self.strategy.num_workers > 1:
            self.stop_vote = stop_vote.StopVote()

    @property
    def worker_devices(self):
        return self.strategy.devices

    @property
    def replicas_per_worker(self):
        return 1

    @property
    def patches(self):
        return (*patches.REPLICA_FIXES, "shuffle", "fit")  # its communicator's

    def data_layout(self):
        return "hybrid", self.strategy.num_workers, 1

    def prepare_model(self, model):
        return self.strategy.prepare_model(model)

    def prepare_fit(self, data, callbacks, **fit):
        # What `comm.combinations` declares refused under 'hybrid', before the first step.
        combinations.check_fit(self.name, data, **fit)
        super().prepare_fit(data, callbacks, **fit)

    def fit_callbacks(self, callbacks):
        # As multi_worker's: Keras' writing callbacks refused, a stop at a step boundary on
        # SIGTERM, and a step waiting timeout_seconds for a peer fails.
        return fit_callbacks.fit_callbacks(callbacks, step_watchdog.for_fit(self),
                                           self.stop_vote)


def _build(settings):
    config = settings.cluster or cluster_lib.detect_cluster()
    num_workers = config.num_workers if config is not None else 1
    devices = check_layout(settings.devices_per_worker, settings.devices, num_workers)
    communicator = communicator_lib.build_multi_worker(settings)  # reads its own options
    return HybridStrategy(devices, communicator, num_workers,
                          communicator.cluster_resolver.task_id, balance=settings.balance,
                          microbatches=settings.microbatches, recompute=settings.recompute,
                          deferred_batch_norm=settings.deferred_batch_norm)


registry.register_option("devices_per_worker", "hybrid: devices (pipeline stages) of each "
                         "worker's model-parallel pipeline", type=int, minimum=1,
                         strategies=("hybrid",), flag="integer")
registry.register_strategy(
    "hybrid", "a model_parallel pipeline in each worker, data parallel across workers",
    _build, options=("devices", *_COMMUNICATION_OPTIONS), strategy_types=(HybridStrategy,),
    kind=HybridKind)
