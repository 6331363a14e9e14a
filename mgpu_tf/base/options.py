"""Checking `make_strategy`'s options before TensorFlow's runtime starts.

TensorFlow rejects many combinations late (at the first all-reduce, or when a
server starts) or ignores them silently. `validate_options` rejects each at
once, with an error that names the argument, what was received and the fix.
"""

import numbers

import tensorflow as tf

from mgpu_tf.base import devices as devices_lib
from mgpu_tf.base import precision as precision_lib
from mgpu_tf.base import registry
from mgpu_tf.cluster import tf_config
from mgpu_tf.comm import compression
from mgpu_tf.comm import transport

__all__ = ["AUTO_ONLY", "check_devices", "check_global_batch_size", "validate_options"]

# The options only `make_strategy("auto", model=...)` takes: they size the plan.
AUTO_ONLY = ("model", "device_memory", "global_batch_size")

_ONE_MACHINE_ALL_REDUCE = ("auto", "nccl", "hierarchical_copy", "reduce_to_one")
_MULTI_WORKER_ALL_REDUCE = ("auto", "ring", "nccl")


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer. Received: {name}={value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be at least {minimum}. Received: {name}={value!r}")
    return int(value)


def check_global_batch_size(value):
    """Returns `global_batch_size` (auto's, with `model`) as an `int` of at least 1.

    Raises:
        TypeError, ValueError: for a value that is not a positive integer.
    """
    return _check_int("global_batch_size", value, 1)


def check_devices(kind, value):
    """Returns `devices` (a count or names) for strategy `kind` as canonical names.

    Raises:
        TypeError, ValueError: for a count or name this process cannot give.
    """
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
    kind = registry.resolve_kind(kind)
    entry = registry.entry(kind)
    unknown = sorted(set(options) - set(registry.OPTIONS))
    if unknown:
        raise TypeError(
            f"make_strategy() got unknown option(s) {unknown}. "
            f"Options: {', '.join(registry.OPTIONS)}."
        )
    options = {k: v for k, v in options.items() if v is not None}
    for name in options:
        if name not in entry.options:
            takers = sorted(n for n, e in registry.entries().items()
                            if name in e.options and n != "auto")
            if name in AUTO_ONLY:
                takers = ["'auto' only, with `model`"]
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
        out["devices"] = check_devices(kind, options["devices"])
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
        if not isinstance(value, tf_config.ClusterConfig):
            value = tf_config.parse_tf_config(value, source="cluster")
        out["cluster"] = value
    elif "worker_hosts" in options or "task_index" in options:
        out["cluster"] = tf_config.cluster_from_hosts(
            options.get("worker_hosts"), options.get("task_index"))
        out.pop("worker_hosts", None)
        out.pop("task_index", None)
    if "compression" in options:
        out["compression"] = compression.check_compression(options["compression"])
    if "steps_per_sync" in options:
        out["steps_per_sync"] = _check_int("steps_per_sync", options["steps_per_sync"], 1)
    if "transport" in options:
        out["transport"] = transport.check_transport(options["transport"])
    if "precision" in options:
        out["precision"] = precision_lib.check_precision(options["precision"])
    if "tpu" in options and not isinstance(options["tpu"], str):
        raise TypeError(f"`tpu` must be a TPU name or address. Received: tpu={options['tpu']!r}")
    for name, check in registry.option_checks().items():
        if name in out:
            out[name] = check(out[name])
    return out
