"""TensorFlow's own strategies: default, one_device, mirrored, multi_worker and tpu.

Design: docs/design.md#the-strategy-factory
"""

import tensorflow as tf

from mgpu_tf import compat
from mgpu_tf.base import devices as devices_lib
from mgpu_tf.base.registry import register_strategy
from mgpu_tf.cluster import detect as cluster_lib
from mgpu_tf.cluster import failures
from mgpu_tf.compat import patches

__all__ = ["build_multi_worker"]


def _build_default(options):
    return tf.distribute.get_strategy()


def _build_one_device(options):
    device = options.get("devices", devices_lib.local_devices()[:1])[0]
    patches.install("steps")
    return tf.distribute.OneDeviceStrategy(device)


def _cross_device_ops(options):
    algorithm = options.get("all_reduce", "auto")
    if algorithm == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=options.get("num_packs", 1))
    if algorithm == "hierarchical_copy":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=options.get("num_packs", 1))
    if algorithm == "reduce_to_one":
        return tf.distribute.ReductionToOneDevice()
    return None


def _build_mirrored(options):
    if "num_gpus" in options:
        devices = devices_lib.local_devices("GPU")[: options["num_gpus"]] or None
    else:
        devices = options.get("devices", devices_lib.local_devices())
    patches.install("multi_worker", "steps")  # also keras-team/keras#19246 on one machine
    with compat.distinct_collective_keys():
        return tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=_cross_device_ops(options)
        )


def build_multi_worker(options):
    """Returns a `tf.distribute.MultiWorkerMirroredStrategy` for checked `options`."""
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[options.get("all_reduce", "auto")]
    communication = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=options.get("bytes_per_pack", 0),
        timeout_seconds=options.get("timeout_seconds"),
        implementation=implementation,
    )
    config = options.get("cluster") or cluster_lib.detect_cluster()
    resolver = config.cluster_resolver() if config else None
    if config is not None and config.num_workers > 1:
        failures.configure_failure_detection(
            config, options.get("timeout_seconds", failures.DEFAULT_HEARTBEAT_SECONDS))
    patches.install("multi_worker", "steps")
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=communication
    )


def _build_tpu(options):
    address = options.get("tpu") or cluster_lib.environ_value("TPU_NAME", "")
    if not address and not devices_lib.physical_devices("TPU"):
        raise ValueError(
            "No TPU is reachable: this machine has no TPU devices and neither `tpu` nor "
            "TPU_NAME names one. Received: tpu=None. Pass tpu='grpc://host:8470' or a "
            "TPU name, or use another strategy."
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address or "local")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise ValueError(
            f"Could not reach the TPU {address or 'on this machine'!r}: {error}. "
            f"Received: tpu={address!r}"
        ) from error
    return tf.distribute.TPUStrategy(resolver)


register_strategy("default", "no distribution: TensorFlow's default strategy",
                  _build_default, options=("precision",), aliases=("off", "none"))
register_strategy("one_device", "everything on one device", _build_one_device,
                  options=("devices", "precision"),
                  strategy_types=(tf.distribute.OneDeviceStrategy,))
register_strategy("mirrored", "data parallel over the devices of one machine",
                  _build_mirrored,
                  options=("devices", "num_gpus", "all_reduce", "num_packs", "compression",
                           "steps_per_sync", "precision"),
                  strategy_types=(tf.distribute.MirroredStrategy,))
register_strategy("multi_worker", "data parallel over several machines (TF_CONFIG)",
                  build_multi_worker,
                  options=("all_reduce", "bytes_per_pack", "timeout_seconds", "cluster",
                           "worker_hosts", "task_index", "compression", "steps_per_sync",
                           "transport", "precision"),
                  aliases=("multi_worker_mirrored",),
                  strategy_types=(tf.distribute.MultiWorkerMirroredStrategy,))
register_strategy("tpu", "TPU pods and TPU VMs", _build_tpu, options=("tpu", "precision"),
                  strategy_types=(tf.distribute.TPUStrategy,))
