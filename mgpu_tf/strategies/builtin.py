"""Builds TensorFlow's own strategies: default, one_device, mirrored, multi_worker and tpu.

`mgpu_tf.strategies.kinds` registers them, each with the kind that answers for it.

Design: docs/design.md#the-strategy-factory
"""

import tensorflow as tf

from mgpu_tf import compat
from mgpu_tf.base import devices as devices_lib
from mgpu_tf.strategies import options as _options  # noqa: F401 - declares the options named here
from mgpu_tf.cluster import detect as cluster_lib
from mgpu_tf.cluster.communicator import build_multi_worker

__all__ = ["build_default", "build_one_device", "build_mirrored", "build_multi_worker",
           "build_tpu"]


def build_default(settings):
    """Returns TensorFlow's default strategy."""
    return tf.distribute.get_strategy()


def build_one_device(settings):
    """Returns a `tf.distribute.OneDeviceStrategy` for parsed `settings`."""
    device = (settings.devices or devices_lib.local_devices())[0]
    return tf.distribute.OneDeviceStrategy(device)


def _cross_device_ops(algorithm, num_packs):
    if algorithm == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=num_packs)
    if algorithm == "hierarchical_copy":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=num_packs)
    if algorithm == "reduce_to_one":
        return tf.distribute.ReductionToOneDevice()
    return None


def build_mirrored(settings):
    """Returns a `tf.distribute.MirroredStrategy` for parsed `settings`."""
    if settings.num_gpus is not None:
        devices = devices_lib.local_devices("GPU")[: settings.num_gpus] or None
    else:
        devices = settings.devices or devices_lib.local_devices()
    with compat.distinct_collective_keys():
        return tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=_cross_device_ops(settings.all_reduce, settings.num_packs)
        )


def build_tpu(settings):
    """Returns a `tf.distribute.TPUStrategy` for parsed `settings`."""
    address = settings.tpu or cluster_lib.environ_value("TPU_NAME", "")
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

