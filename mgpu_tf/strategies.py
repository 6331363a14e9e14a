"""The strategy factory: one name in, the real `tf.distribute` object out.

`make_strategy("mirrored", devices=2)` returns a `tf.distribute.MirroredStrategy`,
not a wrapper. What this adds over calling TensorFlow directly: one registry of
names (so a flag can choose), options checked before TensorFlow's runtime starts
(TensorFlow rejects many combinations late, or ignores them silently), an
`"auto"` choice that says what it chose, and the Keras fixes that multi-worker
training needs (see `mgpu_tf.compat`).

The names live in `mgpu_tf.registry` and the options are checked by
`mgpu_tf.options`; both are re-exported here, where plugins and flags find them.
"""

import logging

import tensorflow as tf

from mgpu_tf import cluster as cluster_lib
from mgpu_tf import communication
from mgpu_tf import devices as devices_lib
from mgpu_tf import failures
from mgpu_tf import precision as precision_lib
from mgpu_tf.options import validate_options  # noqa: F401 - re-exported
from mgpu_tf.registry import (  # noqa: F401 - re-exported
    OPTIONS,
    StrategyKind,
    available_strategies,
    entries,
    entry,
    register_option,
    register_strategy,
    resolve_kind,
)

__all__ = ["auto_choice", "make_strategy", "strategy_kind", "prepare_model"]

logger = logging.getLogger("mgpu_tf")


# ------------------------------------------------------------------ builders


def _build_default(options):
    return tf.distribute.get_strategy()


def _build_one_device(options):
    device = options.get("devices", devices_lib.local_devices()[:1])[0]
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
    from mgpu_tf import compat

    if "num_gpus" in options:
        devices = devices_lib.local_devices("GPU")[: options["num_gpus"]] or None
    else:
        devices = options.get("devices", devices_lib.local_devices())
    compat.apply_multi_worker_fixes()  # also keras-team/keras#19246 on one machine
    with compat.distinct_collective_keys():
        return tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=_cross_device_ops(options)
        )


def _build_multi_worker(options):
    from mgpu_tf import compat

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
    compat.apply_multi_worker_fixes()
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


def auto_choice(**options):
    """Returns `(kind, reason)`: what `make_strategy("auto", **options)` would build.

    Reads no more than it must, and starts no TensorFlow runtime.
    """
    if options.get("tpu") or cluster_lib.environ_value("TPU_NAME"):
        return "tpu", "a TPU was named"
    if devices_lib.physical_devices("TPU"):
        return "tpu", "this machine has TPU devices"
    if options.get("cluster") or options.get("worker_hosts"):
        return "multi_worker", "a cluster was given"
    config = cluster_lib.detect_cluster()
    if config is not None and config.num_workers > 1:
        return "multi_worker", f"{config.source} gives {config.num_workers} workers"
    devices = options.get("devices")
    if devices is not None:
        count = devices if isinstance(devices, int) else len(devices)
        if count > 1:
            return "mirrored", f"{count} devices were asked for"
        return "one_device", "one device was asked for"
    gpus = devices_lib.physical_devices("GPU")
    if len(gpus) > 1 or options.get("num_gpus", 0) > 1:
        return "mirrored", f"{len(gpus)} GPUs found"
    if len(gpus) == 1:
        return "one_device", "1 GPU found"
    return "default", "no TPU, cluster or GPU found"


def _build_auto(options):
    raise AssertionError("'auto' is resolved by make_strategy")  # never called


def make_strategy(kind="auto", **options):
    """Returns the `tf.distribute` strategy named by `kind`.

    All options are checked before TensorFlow's runtime starts; a wrong one fails
    at once with a message naming it. `"auto"` picks a reachable TPU, else a
    multi-task cluster from TF_CONFIG, else all GPUs (mirrored; one GPU:
    one_device), else the default strategy, and logs what it chose and why. Given
    `model=`, `"auto"` plans its memory first (`mgpu_tf.plan`): a model that does not
    fit one device gets `"model_parallel"` (one machine) or `"hybrid"` (a cluster)
    instead of an out-of-memory error at the first step.

    Example:

    ```python
    import mgpu_tf
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("mirrored")
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(dataset)
    ```

    Args:
        kind: a name from `available_strategies()`. Defaults to `"auto"`.
        **options: see `mgpu_tf.strategies.OPTIONS`; each strategy accepts a subset.

    Returns:
        The strategy object (`tf.distribute.MirroredStrategy` and so on).

    Raises:
        KeyError: for an unknown strategy name.
        TypeError: for an unknown option or a value of the wrong type.
        ValueError: for a value or combination that strategy cannot use.
    """
    name = resolve_kind(kind)
    if name == "auto":
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            validate_options("default", options)  # raises the unknown-option error
        model = options.pop("model", None)
        device_memory = options.pop("device_memory", None)
        if device_memory is not None and model is None:
            raise ValueError("`device_memory` is for planning a model: pass `model` too. "
                             f"Received: device_memory={device_memory!r}, model=None")
        name, reason = auto_choice(**options)
        if model is not None:
            from mgpu_tf.planner import recommend

            name, reason, options = recommend.auto_strategy(model, name, reason, options,
                                                            device_memory)
        logger.info("mgpu_tf: strategy 'auto' chose %r: %s.", name, reason)
    checked = validate_options(name, options)
    if "precision" in checked:
        precision_lib.set_precision(checked["precision"])
    return communication.attach(entry(name).build(checked), checked)


def strategy_kind(strategy):
    """Returns the registry name of a strategy object (`"mirrored"`, ...).

    Raises:
        TypeError: when `strategy` is not a strategy.
    """
    for name, registered in entries().items():
        if registered.strategy_types and isinstance(strategy, registered.strategy_types):
            return name
    if isinstance(strategy, tf.distribute.Strategy):
        if type(strategy).__name__ == "_DefaultDistributionStrategy":
            return "default"
        return type(strategy).__name__
    raise TypeError(
        "`strategy` must be a strategy, such as mgpu_tf.make_strategy() returns. "
        f"Received: strategy={strategy!r}")


register_strategy("auto", "choose: TPU, else TF_CONFIG cluster, else GPUs, else default",
                  _build_auto, options=OPTIONS)
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
                  _build_multi_worker,
                  options=("all_reduce", "bytes_per_pack", "timeout_seconds", "cluster",
                           "worker_hosts", "task_index", "compression", "steps_per_sync",
                           "transport", "precision"),
                  aliases=("multi_worker_mirrored",),
                  strategy_types=(tf.distribute.MultiWorkerMirroredStrategy,))
register_strategy("tpu", "TPU pods and TPU VMs", _build_tpu, options=("tpu", "precision"),
                  strategy_types=(tf.distribute.TPUStrategy,))


def prepare_model(model, strategy):
    """Readies a Keras model for a strategy, so one script runs under every strategy.

    Data-parallel strategies need nothing (the model was built in `strategy.scope()`)
    and get the model back unchanged, unless `make_strategy` was given `compression`,
    `steps_per_sync` or `transport`: then the optimizer `model.compile` receives is
    made to all-reduce that way (see `mgpu_tf.communication`). Strategies that place layers
    on devices (such as `"model_parallel"`) return the placed model.

    Args:
        model: a Keras model, built inside `strategy.scope()`.
        strategy: what `make_strategy` returned.

    Returns:
        The model to compile and fit.
    """
    prepare = getattr(strategy, "prepare_model", None)
    model = prepare(model) if callable(prepare) else model
    return communication.prepare(model, strategy)
