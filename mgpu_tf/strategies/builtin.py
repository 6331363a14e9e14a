"""TensorFlow's own strategies: default, one_device, mirrored, multi_worker and tpu.

Design: docs/design.md#the-strategy-factory
"""

import tensorflow as tf

from mgpu_tf import compat
from mgpu_tf.base import devices as devices_lib
from mgpu_tf.strategies import options as _options  # noqa: F401 - declares the options named here
from mgpu_tf.base.registry import register_strategy
from mgpu_tf.cluster import detect as cluster_lib
from mgpu_tf.cluster import failures
from mgpu_tf.compat import patches

__all__ = ["build_multi_worker"]


def _build_default(settings):
    return tf.distribute.get_strategy()


def _build_one_device(settings):
    device = (settings.devices or devices_lib.local_devices())[0]
    patches.install("steps")
    return tf.distribute.OneDeviceStrategy(device)


def _cross_device_ops(algorithm, num_packs):
    if algorithm == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=num_packs)
    if algorithm == "hierarchical_copy":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=num_packs)
    if algorithm == "reduce_to_one":
        return tf.distribute.ReductionToOneDevice()
    return None


def _build_mirrored(settings):
    if settings.num_gpus is not None:
        devices = devices_lib.local_devices("GPU")[: settings.num_gpus] or None
    else:
        devices = settings.devices or devices_lib.local_devices()
    # also keras-team/keras#19246 on one machine, and #23085 (a custom loop's optimizer)
    patches.install("multi_worker", "steps", "custom_loop", "metric_sums")
    with compat.distinct_collective_keys():
        return tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=_cross_device_ops(settings.all_reduce, settings.num_packs)
        )


def build_multi_worker(settings):
    """Returns a `tf.distribute.MultiWorkerMirroredStrategy` for parsed `settings`."""
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[settings.all_reduce]
    communication = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=settings.bytes_per_pack,
        timeout_seconds=settings.timeout_seconds,
        implementation=implementation,
    )
    config = settings.cluster or cluster_lib.detect_cluster()
    resolver = config.cluster_resolver() if config else None
    if config is not None and config.num_workers > 1:
        failures.configure_failure_detection(
            config, settings.timeout_seconds or failures.DEFAULT_HEARTBEAT_SECONDS)
    patches.install("multi_worker", "steps", "custom_loop", "metric_sums")
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(
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


def _build_tpu(settings):
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


# Which options each takes is declared with the options, in mgpu_tf.base.options.
register_strategy("default", "no distribution: TensorFlow's default strategy",
                  _build_default, aliases=("off", "none"))
register_strategy("one_device", "everything on one device", _build_one_device,
                  strategy_types=(tf.distribute.OneDeviceStrategy,))
register_strategy("mirrored", "data parallel over the devices of one machine",
                  _build_mirrored, strategy_types=(tf.distribute.MirroredStrategy,))
register_strategy("multi_worker", "data parallel over several machines (TF_CONFIG)",
                  build_multi_worker, aliases=("multi_worker_mirrored",),
                  strategy_types=(tf.distribute.MultiWorkerMirroredStrategy,))
register_strategy("tpu", "TPU pods and TPU VMs", _build_tpu,
                  strategy_types=(tf.distribute.TPUStrategy,))
