"""Builds a cluster's `tf.distribute.MultiWorkerMirroredStrategy`.

It is the multi_worker strategy, and the communicator of each hybrid worker.

Design: docs/design.md#the-strategy-factory
"""

import tensorflow as tf

from mgpu_tf.cluster import detect as cluster_lib
from mgpu_tf.cluster import failures
from mgpu_tf.cluster import stopping
from mgpu_tf.cluster import waiting
from mgpu_tf.compat import private_runtime

__all__ = ["build_multi_worker"]


def build_multi_worker(settings):
    """Returns a `tf.distribute.MultiWorkerMirroredStrategy` for parsed `settings`."""
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[settings.all_reduce]
    # No timeout_seconds here: TensorFlow holds two threads per collective for it (a worker
    # of short steps ran out of threads). The heartbeats below, the tcp ring and a fit's
    # mgpu_tf.cluster.step_watchdog keep it instead.
    communication = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=settings.bytes_per_pack, implementation=implementation)
    config = settings.cluster or cluster_lib.detect_cluster()
    resolver = config.cluster_resolver() if config else None
    several = config is not None and config.num_workers > 1
    if several:
        failures.configure_failure_detection(
            config, settings.timeout_seconds or failures.DEFAULT_HEARTBEAT_SECONDS)
        if not private_runtime.runtime_started():  # else the strategy fails at once, below
            waiting.wait_for_peers(config, timeout_seconds=settings.timeout_seconds)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=communication
        )
    except RuntimeError as error:
        if "at program startup" not in str(error):
            raise
        # TensorFlow's own words name neither the call to move nor what came too early.
        raise RuntimeError(
            "make_strategy('multi_worker') must run before any TensorFlow op: the strategy "
            "sets up collective ops across workers, which TensorFlow allows only before its "
            "runtime starts, and this process has already run one. Received: "
            f"{config.num_workers if config else 1} workers, after the runtime started. "
            "Make the strategy first thing in the program, before building a model or any "
            "tf.constant, tf.Variable or data set op."
        ) from None
    if several:
        failures.install_report()
        stopping.install(task=f"{config.task_type} {config.task_index}")
    return strategy
