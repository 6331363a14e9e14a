"""The strategy factory: one name in, the real `tf.distribute` object out.

`make_strategy("mirrored", devices=2)` returns a `tf.distribute.MirroredStrategy`,
not a wrapper. What this adds over calling TensorFlow directly: one registry of
names (so a flag can choose), options checked before TensorFlow's runtime starts
(TensorFlow rejects many combinations late, or ignores them silently), an
`"auto"` choice that says what it chose, and the Keras fixes that multi-worker
training needs (see `mgpu_tf.compat`).
"""

import dataclasses
import enum
import importlib
import logging
import numbers

import tensorflow as tf

from mgpu_tf import cluster as cluster_lib
from mgpu_tf import communication
from mgpu_tf import devices as devices_lib
from mgpu_tf import failures
from mgpu_tf import precision as precision_lib
from mgpu_tf import transport

__all__ = [
    "StrategyKind",
    "register_strategy",
    "available_strategies",
    "resolve_kind",
    "auto_choice",
    "validate_options",
    "make_strategy",
    "strategy_kind",
    "prepare_model",
    "register_option",
    "OPTIONS",
]

logger = logging.getLogger("mgpu_tf")


class StrategyKind(str, enum.Enum):
    """The built-in strategy names."""

    AUTO = "auto"
    DEFAULT = "default"
    ONE_DEVICE = "one_device"
    MIRRORED = "mirrored"
    MULTI_WORKER = "multi_worker"
    TPU = "tpu"

    def __str__(self):
        return self.value


# Every option make_strategy knows, with a one-line description (used by --help).
OPTIONS = {
    "devices": "device names, or how many local devices to use",
    "num_gpus": "how many local GPUs to use (mirrored)",
    "all_reduce": "all-reduce algorithm: auto, nccl, hierarchical_copy, "
    "reduce_to_one (one machine); auto, ring, nccl (several)",
    "num_packs": "how many packs gradients are grouped into (nccl, hierarchical_copy)",
    "bytes_per_pack": "gradient bytes per all-reduce pack across workers (0: automatic)",
    "timeout_seconds": "seconds a collective waits for a peer, and a silent worker counts "
    "as lost, before failing (default: collectives wait, workers lost after 10 s)",
    "cluster": "a TF_CONFIG dictionary or JSON string",
    "worker_hosts": "'host:port' of every worker, instead of cluster",
    "task_index": "this process' index in worker_hosts",
    "tpu": "TPU address or name",
    "model": "auto only: a built Keras model; one too big for a device gets model_parallel "
    "(one machine) or hybrid (several workers) instead of data parallelism",
    "device_memory": "auto only, with model: memory of each device, e.g. '16GiB' "
    "(default: the GPUs' memory, or RAM shared by the CPU devices)",
    **communication.OPTION_HELP,
    **precision_lib.OPTION_HELP,
}

_ONE_MACHINE_ALL_REDUCE = ("auto", "nccl", "hierarchical_copy", "reduce_to_one")
_MULTI_WORKER_ALL_REDUCE = ("auto", "ring", "nccl")


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    description: str
    build: object
    options: frozenset
    strategy_types: tuple


_REGISTRY = {}
_ALIASES = {}
_OPTION_CHECKS = {}

# Modules that register further strategies; imported when the registry is first read.
_PLUGINS = ("mgpu_tf.model_parallel", "mgpu_tf.hybrid")
_plugins_loaded = False


def _load_plugins():
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        for module in _PLUGINS:
            importlib.import_module(module)


def register_strategy(name, description, build, *, options=(), aliases=(),
                      strategy_types=()):
    """Adds a strategy name to the registry.

    Args:
        name: the short lowercase name.
        description: one line saying what it is.
        build: a function of the validated options dictionary returning the strategy.
        options: option names the strategy accepts.
        aliases: other names for it.
        strategy_types: classes of the objects it returns, for `strategy_kind`.
    """
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ValueError(f"Unknown options {sorted(unknown)} for strategy {name!r}.")
    _REGISTRY[name] = _Entry(name, description, build, frozenset(options),
                             tuple(strategy_types))
    for alias in aliases:
        _ALIASES[alias] = name


def register_option(name, description, check=None):
    """Adds an option name that strategies registered later may accept.

    Args:
        name: the option's keyword.
        description: one line saying what it is.
        check: a function of the value that returns it normalised or raises
            `TypeError`/`ValueError`; `validate_options` calls it, so flags and
            `make_strategy` reject a bad value before anything is built.
    """
    OPTIONS.setdefault(name, description)
    if check is not None:
        _OPTION_CHECKS[name] = check


def available_strategies():
    """Returns `{name: description}` for every registered strategy name."""
    _load_plugins()
    return {name: entry.description for name, entry in _REGISTRY.items()}


def resolve_kind(kind):
    """Returns the registered name for `kind` (a name, alias or `StrategyKind`).

    Raises:
        TypeError: when `kind` is not a string.
        KeyError: when the name is unknown; the message lists the known names.
    """
    if not isinstance(kind, str):
        raise TypeError(f"`kind` must be a strategy name. Received: kind={kind!r}")
    _load_plugins()
    name = str(kind.value if isinstance(kind, enum.Enum) else kind).strip().lower()
    name = _ALIASES.get(name, name)
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        aliases = ", ".join(f"{a} ({t})" for a, t in sorted(_ALIASES.items()))
        raise KeyError(
            f"Unknown strategy {kind!r}. Known strategies: {known}; aliases: {aliases}."
        )
    return name


# ---------------------------------------------------------------- validation


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer. Received: {name}={value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be at least {minimum}. Received: {name}={value!r}")
    return int(value)


def _check_devices(kind, value):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        count = _check_int("devices", value, 1)
        present = devices_lib.local_devices()
        if count > len(present):
            raise ValueError(
                f"`devices` asks for {count} devices but this process has "
                f"{len(present)} ({', '.join(present)}). Received: devices={count}. "
                f"Use devices<={len(present)}, or call "
                f"mgpu_tf.simulate_devices({count}) first to split the CPU."
            )
        return present[:count]
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise TypeError(
            "`devices` must be a non-empty list of device names or a count. "
            f"Received: devices={value!r}"
        )
    names = [devices_lib.canonical_device(d) for d in value]
    if len(set(names)) != len(names):
        raise ValueError(f"`devices` names a device twice. Received: devices={list(value)!r}")
    for name in names:
        spec = tf.DeviceSpec.from_string(name)
        if spec.job is not None and spec.job != "localhost":
            continue  # remote devices are checked by TensorFlow when it connects
        present = devices_lib.planned_logical_devices(spec.device_type)
        if name.split("/device:")[-1] not in [p.split("/device:")[-1] for p in present]:
            listed = ", ".join(devices_lib.local_devices("CPU") + devices_lib.local_devices("GPU"))
            raise ValueError(
                f"`devices` names {value[names.index(name)]!r}, which does not exist. "
                f"Devices here: {listed}. Received: devices={list(value)!r}. "
                "To have more CPU devices, call mgpu_tf.simulate_devices(N) first."
            )
    return names


def _check_all_reduce(kind, value):
    allowed = _MULTI_WORKER_ALL_REDUCE if kind == "multi_worker" else _ONE_MACHINE_ALL_REDUCE
    if not isinstance(value, str) or value.lower() not in allowed:
        other = (
            " ('ring' is for multi_worker)" if value == "ring" else
            " ('hierarchical_copy' and 'reduce_to_one' are for one machine)"
            if value in ("hierarchical_copy", "reduce_to_one") else ""
        )
        raise ValueError(
            f"`all_reduce` for {kind} must be one of {', '.join(allowed)}{other}. "
            f"Received: all_reduce={value!r}"
        )
    value = value.lower()
    if value == "nccl" and not devices_lib.nccl_available():
        alternative = "ring" if kind == "multi_worker" else "hierarchical_copy"
        raise ValueError(
            "`all_reduce='nccl'` needs NCCL, which runs only on Linux with GPUs and a "
            f"CUDA build of TensorFlow; this machine has none. Received: all_reduce='nccl'. "
            f"Use all_reduce='{alternative}' (or 'auto')."
        )
    return value


def validate_options(kind, options):
    """Checks options for a strategy without starting TensorFlow's runtime.

    Args:
        kind: a registered strategy name or alias (not `"auto"`).
        options: the keyword options given to `make_strategy`.

    Returns:
        A new dictionary of normalised options.

    Raises:
        TypeError: for an unknown option or a value of the wrong type.
        ValueError: for a value or combination the strategy cannot use.
    """
    kind = resolve_kind(kind)
    entry = _REGISTRY[kind]
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(
            f"make_strategy() got unknown option(s) {unknown}. "
            f"Options: {', '.join(OPTIONS)}."
        )
    options = {k: v for k, v in options.items() if v is not None}
    for name in options:
        if name not in entry.options:
            takers = sorted(n for n, e in _REGISTRY.items() if name in e.options and n != "auto")
            raise ValueError(
                f"`{name}` does not apply to strategy {kind!r}; it applies to "
                f"{', '.join(takers) or 'no strategy'}. Received: {name}={options[name]!r}"
            )
    out = dict(options)
    if "devices" in options and "num_gpus" in options:
        raise ValueError(
            "Pass `devices` or `num_gpus`, not both. Received: "
            f"devices={options['devices']!r}, num_gpus={options['num_gpus']!r}"
        )
    if "devices" in options:
        out["devices"] = _check_devices(kind, options["devices"])
        if kind == "one_device" and len(out["devices"]) != 1:
            raise ValueError(
                "`devices` for one_device must name exactly one device. "
                f"Received: devices={options['devices']!r}. Use 'mirrored' for several."
            )
    if "num_gpus" in options:
        count = _check_int("num_gpus", options["num_gpus"], 0)
        present = devices_lib.local_devices("GPU")
        if count > len(present):
            raise ValueError(
                f"`num_gpus` asks for {count} GPUs but this machine has {len(present)}. "
                f"Received: num_gpus={count}. Use num_gpus<={len(present)}, or "
                "devices=N with mgpu_tf.simulate_devices(N) on a CPU."
            )
        out["num_gpus"] = count
    if "all_reduce" in options:
        out["all_reduce"] = _check_all_reduce(kind, options["all_reduce"])
    if "num_packs" in options:
        out["num_packs"] = _check_int("num_packs", options["num_packs"], 1)
        if out.get("all_reduce") not in ("nccl", "hierarchical_copy"):
            raise ValueError(
                "`num_packs` applies only to all_reduce='nccl' or 'hierarchical_copy'. "
                f"Received: num_packs={options['num_packs']!r}, "
                f"all_reduce={out.get('all_reduce', 'auto')!r}. Pass one of those too."
            )
    if "bytes_per_pack" in options:
        out["bytes_per_pack"] = _check_int("bytes_per_pack", options["bytes_per_pack"], 0)
    if "timeout_seconds" in options:
        value = options["timeout_seconds"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"`timeout_seconds` must be a number. Received: timeout_seconds={value!r}"
            )
        if not value > 0:
            raise ValueError(
                f"`timeout_seconds` must be positive. Received: timeout_seconds={value!r}"
            )
        out["timeout_seconds"] = float(value)
    if "cluster" in options and ("worker_hosts" in options or "task_index" in options):
        raise ValueError(
            "Pass `cluster` or `worker_hosts` with `task_index`, not both. Received: "
            f"cluster={options['cluster']!r}, worker_hosts={options.get('worker_hosts')!r}"
        )
    if "cluster" in options:
        value = options["cluster"]
        if not isinstance(value, cluster_lib.ClusterConfig):
            value = cluster_lib.parse_tf_config(value, source="cluster")
        out["cluster"] = value
    elif "worker_hosts" in options or "task_index" in options:
        out["cluster"] = cluster_lib.cluster_from_hosts(
            options.get("worker_hosts"), options.get("task_index"))
        out.pop("worker_hosts", None)
        out.pop("task_index", None)
    if "compression" in options:
        out["compression"] = communication.check_compression(options["compression"])
    if "steps_per_sync" in options:
        out["steps_per_sync"] = _check_int("steps_per_sync", options["steps_per_sync"], 1)
    if "transport" in options:
        out["transport"] = transport.check_transport(options["transport"])
    if "precision" in options:
        out["precision"] = precision_lib.check_precision(options["precision"])
    if "tpu" in options and not isinstance(options["tpu"], str):
        raise TypeError(f"`tpu` must be a TPU name or address. Received: tpu={options['tpu']!r}")
    for name, check in _OPTION_CHECKS.items():
        if name in out:
            out[name] = check(out[name])
    return out


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
    return communication.attach(_REGISTRY[name].build(checked), checked)


def strategy_kind(strategy):
    """Returns the registry name of a strategy object (`"mirrored"`, ...).

    Raises:
        TypeError: when `strategy` is not a strategy.
    """
    _load_plugins()
    for name, entry in _REGISTRY.items():
        if entry.strategy_types and isinstance(strategy, entry.strategy_types):
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
