"""The options every strategy shares, and parsing the table once into `Settings`.

TensorFlow rejects many combinations late (at the first all-reduce, or when a
server starts) or ignores them silently; `parse_options` rejects each at once. The
options of a feature are declared where it lives (`cluster.options`, `comm.options`,
`model_parallel`); `mgpu_tf.strategies.options` imports them all.

Design: docs/design.md#the-options-walk
"""

import difflib
import functools
import numbers

from mgpu_tf.base import precision as precision_lib
from mgpu_tf.base import registry
from mgpu_tf.base.settings import Settings

__all__ = ["AUTO_ONLY", "OPTIONS", "check_bucket_bytes", "check_devices",
           "check_global_batch_size", "check_option", "parse_options", "choose",
           "refuse_buckets_with_sharding", "validate_options"]

# The options only `make_strategy("auto", model=...)` takes: they size the plan.
AUTO_ONLY = ("model", "device_memory", "global_batch_size")

_ONE_MACHINE_ALL_REDUCE = ("auto", "nccl", "hierarchical_copy", "reduce_to_one")
_MULTI_WORKER_ALL_REDUCE = ("auto", "ring", "nccl")


def _check_int(name, value, minimum, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer. Received: {name}={value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be at least {minimum}. Received: {name}={value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"`{name}` must be at most {maximum}. Received: {name}={value!r}")
    return int(value)


def check_global_batch_size(value):
    """Returns `global_batch_size` (auto's, with `model`) as an `int` of at least 1.

    Raises:
        TypeError, ValueError: for a value that is not a positive integer.
    """
    return _check_int("global_batch_size", value, 1)


def check_devices(kind, value):
    """Returns `devices` (a count or names) as canonical names; `kind` is unused."""
    from mgpu_tf.base import devices as devices_lib  # loads TensorFlow: only when asked

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        count = _check_int("devices", value, 1)
        present = devices_lib.local_devices()
        if count > len(present):
            raise ValueError(
                f"`devices` asks for {count} devices but this process has "
                f"{len(present)} ({', '.join(present)}). Received: devices={count}. "
                f"Use devices<={len(present)}, or split the CPU first: "
                f"mgpu_tf.simulate_devices({count}) in Python, --simulate_devices={count} "
                "with mgpu_tf's flags."
            )
        return present[:count]
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise TypeError(
            "`devices` must be a non-empty list of device names or a count. "
            f"Received: devices={value!r}"
        )
    import tensorflow as tf

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
                "To have more CPU devices, split the CPU first: mgpu_tf.simulate_devices(N) "
                "in Python, --simulate_devices=N with mgpu_tf's flags."
            )
    return names


def check_bucket_bytes(value):
    """Returns `bucket_bytes` as an `int` of at least 0 (0: one all-reduce after the backward
    pass)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("`bucket_bytes` must be an integer number of bytes. "
                        f"Received: bucket_bytes={value!r}. Use e.g. 4 << 20 for 4 MB.")
    if value < 0:
        raise ValueError("`bucket_bytes` must be at least 0 (0: one all-reduce of every "
                         f"gradient after the backward pass). Received: bucket_bytes={value!r}")
    return int(value)


def refuse_buckets_with_sharding(options):
    """Raises for `bucket_bytes` with `shard_optimizer_state`, whose reduce-scatter is not cut
    into buckets; returns `options` otherwise."""
    if options.get("bucket_bytes") and options.get("shard_optimizer_state"):
        raise ValueError(
            "`bucket_bytes` cannot be combined with `shard_optimizer_state`: the sharded "
            "optimizer reduce-scatters every gradient at once, after the backward pass. "
            f"Received: bucket_bytes={options['bucket_bytes']!r}, shard_optimizer_state=True. "
            "Drop bucket_bytes (or pass 0), or drop shard_optimizer_state.")
    return options


def _check_num_gpus(value):
    from mgpu_tf.base import devices as devices_lib

    count = _check_int("num_gpus", value, 0)
    present = devices_lib.local_devices("GPU")
    if count > len(present):
        raise ValueError(
            f"`num_gpus` asks for {count} GPUs but this machine has {len(present)}. "
            f"Received: num_gpus={count}. Use num_gpus<={len(present)}, or "
            "devices=N on a CPU split first (mgpu_tf.simulate_devices(N) in Python, "
            "--simulate_devices=N with mgpu_tf's flags)."
        )
    return count


def _check_timeout(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`timeout_seconds` must be a number. Received: timeout_seconds={value!r}")
    if not value > 0:
        raise ValueError(f"`timeout_seconds` must be positive. Received: timeout_seconds={value!r}")
    return float(value)


def _check_tpu(value):
    if not isinstance(value, str):
        raise TypeError(f"`tpu` must be a TPU name or address. Received: tpu={value!r}")
    return value


def _devices_from_flag(value):
    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
    if value and len(value) == 1 and value[0].strip().isascii() and value[0].strip().isdigit():
        return int(value[0])
    return value


def _unchanged(value):  # checked later, by the planner
    return value


def _lower(value):  # its choices depend on the strategy: _check_for_strategy checks them
    return value.lower() if isinstance(value, str) else value


_declare = registry.register_option
# The registry's table, whole once mgpu_tf.strategies.options has imported every declarer.
OPTIONS = registry.OPTIONS
_declare("devices", "device names, or how many local devices to use",
         functools.partial(check_devices, None), type=(list, int),
         strategies=("one_device", "mirrored"), flag="list",
         flag_note=" (comma-separated names, or one number).", from_flag=_devices_from_flag)
_declare("num_gpus", "how many local GPUs to use (mirrored)", _check_num_gpus, type=int,
         minimum=0, strategies=("mirrored",), flag="integer")
_declare("all_reduce", "all-reduce algorithm: auto, nccl, hierarchical_copy, reduce_to_one "
         "(one machine); auto, ring, nccl (several)", _lower, type=str,
         choices=tuple(dict.fromkeys(_ONE_MACHINE_ALL_REDUCE + _MULTI_WORKER_ALL_REDUCE)),
         default="auto", strategies=("mirrored", "multi_worker"), flag="string")
_declare("num_packs", "how many packs gradients are grouped into (nccl, hierarchical_copy)",
         type=int, minimum=1, default=1, strategies=("mirrored",), flag="integer")
_declare("bytes_per_pack", "gradient bytes per all-reduce pack across workers (0: automatic)",
         type=int, minimum=0, default=0, strategies=("multi_worker",), flag="integer")
_declare("bucket_bytes", "gradient bytes per bucket, all-reduced last layers first while the "
         "backward pass runs (0: every gradient at once, after it; not with "
         "shard_optimizer_state)", check_bucket_bytes, type=int, minimum=0, default=0,
         strategies=("multi_worker",), flag="integer", settle=refuse_buckets_with_sharding)
_declare("timeout_seconds", "seconds make_strategy waits for its peers to start, a fit's "
         "step waits for a live peer, and a silent worker counts as lost, before failing "
         "(default: an hour to start, steps wait, workers lost after 10 s)",
         _check_timeout, type=float, strategies=("multi_worker",))
_declare("tpu", "TPU address or name", _check_tpu, type=str, strategies=("tpu",), flag="string")
_declare("model", "auto only: a built Keras model; one too big for a device gets "
         "model_parallel (one machine) or hybrid (several workers) instead of data parallelism",
         strategies=("auto",))
_declare("device_memory", "auto only, with model: memory of each device, e.g. '16GiB' "
         "(default: the GPUs' memory, or RAM shared by the CPU devices)", _unchanged,
         type=(str, int), strategies=("auto",))
_declare("global_batch_size", "auto only, with model: examples per step over all replicas, "
         "which the plan sizes activations for (default 32)", type=int, minimum=1, default=32,
         strategies=("auto",))
_declare("precision", "Keras dtype policy: float32, mixed_float16 (with loss scaling), "
         "mixed_bfloat16", precision_lib.check_precision, type=str,
         choices=tuple(p.value for p in precision_lib.Precision),
         strategies=("default", "one_device", "mirrored", "multi_worker", "tpu"), flag="string")


def _parse_value(option, value):
    """The value of `option` parsed: by its check, else by its type, range and choices."""
    if option.check is not None:
        return option.check(value)
    name = option.name
    if option.type is int:
        return _check_int(name, value, option.minimum, option.maximum)
    types = option.type if isinstance(option.type, tuple) else (option.type,)
    accepted = tuple(numbers.Real if t is float else t for t in types)
    if option.type is not None and (not isinstance(value, accepted)
                                    or isinstance(value, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types)
        raise TypeError(f"`{name}` must be of type {names}. Received: {name}={value!r}")
    if option.choices and value not in option.choices:
        raise ValueError(f"`{name}` must be one of {', '.join(map(str, option.choices))}. "
                         f"Received: {name}={value!r}")
    if option.minimum is not None and value < option.minimum:
        raise ValueError(f"`{name}` must be at least {option.minimum}. Received: {name}={value!r}")
    if option.maximum is not None and value > option.maximum:
        raise ValueError(f"`{name}` must be at most {option.maximum}. Received: {name}={value!r}")
    return value


def _check_names(kind, options):
    """Raises for an option the table does not know, or one `kind` does not take."""
    unknown = sorted(set(options) - set(registry.OPTIONS))
    if unknown:
        hints = [f"{name!r}: did you mean {close[0]!r}?" for name in unknown
                 for close in [difflib.get_close_matches(name, registry.OPTIONS, n=1)] if close]
        raise TypeError(f"make_strategy() got unknown option(s) {unknown}. "
                        f"{' '.join(hints) + ' ' if hints else ''}"
                        f"Options: {', '.join(registry.OPTIONS)}.")
    # "auto" takes every option, and passes it on to the strategy it chooses.
    accepted = registry.OPTIONS if kind == "auto" else registry.entry(kind).options
    for name in options:
        if name not in accepted:
            takers = sorted(n for n, e in registry.entries().items()
                            if name in e.options and n != "auto")
            if name in AUTO_ONLY:
                takers = ["'auto' only, with `model`"]
            raise ValueError(
                f"`{name}` does not apply to strategy {kind!r}; it applies to "
                f"{', '.join(takers) or 'no strategy'}. Received: {name}={options[name]!r}")


def _check_exclusive(options):
    """Raises for two options given together that say the same thing two ways."""
    if "devices" in options and "num_gpus" in options:
        raise ValueError("Pass `devices` or `num_gpus`, not both. Received: "
                         f"devices={options['devices']!r}, num_gpus={options['num_gpus']!r}")
    for name in ("device_memory", "global_batch_size"):
        if name in options and options.get("model") is None:
            raise ValueError(f"`{name}` is for planning a model: pass `model` too. "
                             f"Received: {name}={options[name]!r}, model=None")


def _across_workers(kind):
    """True for a strategy whose all-reduce crosses machines: one that takes a `cluster`."""
    return "cluster" in registry.entry(kind).options


def _check_for_strategy(kind, values, given):
    """Raises for a value `kind` cannot use; `"auto"` is checked once it has chosen."""
    if kind == "auto":
        return
    answering = registry.entry(kind).kind
    if answering is not None:
        answering.check_options(values, given)
    if "all_reduce" in values:
        value = values["all_reduce"]
        across = _across_workers(kind)
        allowed = _MULTI_WORKER_ALL_REDUCE if across else _ONE_MACHINE_ALL_REDUCE
        if value not in allowed:
            other = (" ('ring' is for multi_worker)" if value == "ring" else
                     " ('hierarchical_copy' and 'reduce_to_one' are for one machine)"
                     if value in ("hierarchical_copy", "reduce_to_one") else "")
            raise ValueError(f"`all_reduce` for {kind} must be one of {', '.join(allowed)}"
                             f"{other}. Received: all_reduce={given['all_reduce']!r}")
        from mgpu_tf.base import devices as devices_lib

        if value == "nccl" and not devices_lib.nccl_available():
            alternative = "ring" if across else "hierarchical_copy"
            raise ValueError(
                "`all_reduce='nccl'` needs NCCL, which runs only on Linux with GPUs and a "
                "CUDA build of TensorFlow; this machine has none. Received: all_reduce='nccl'. "
                f"Use all_reduce='{alternative}' (or 'auto').")
    if "num_packs" in values and values.get("all_reduce") not in ("nccl", "hierarchical_copy"):
        raise ValueError(
            "`num_packs` applies only to all_reduce='nccl' or 'hierarchical_copy'. "
            f"Received: num_packs={given['num_packs']!r}, "
            f"all_reduce={values.get('all_reduce', 'auto')!r}. Pass one of those too.")


def _parse(kind, options, parsed=None):
    parsed = parsed or {}
    options = {k: v for k, v in options.items() if v is not None}
    _check_names(kind, options)
    _check_exclusive(options)
    for settle in dict.fromkeys(registry.option(name).settle for name in options):
        if settle is not None:
            options = settle(options)
    values = {name: parsed[name] if parsed.get(name) is value else
              _parse_value(registry.option(name), value) for name, value in options.items()}
    _check_for_strategy(kind, values, options)
    return Settings(kind, values)


def check_option(kind, name, value):
    """Returns one option's value parsed for strategy `kind`, alone: its name and value only.

    The flags check each option so, to name the flag that is wrong; `parse_options` then
    checks how the options go together.

    Raises:
        TypeError: for an unknown option or a value of the wrong type.
        ValueError: for an option `kind` does not take, or a bad value.
    """
    kind = registry.resolve_kind(kind)
    _check_names(kind, {name: value})
    return _parse_value(registry.option(name), value)


def parse_options(kind, options):
    """Returns `make_strategy`'s `options` for strategy `kind` as `Settings`, checked.

    Raises:
        TypeError: for an unknown option or a value of the wrong type.
        ValueError: for a value or combination the strategy cannot use.
    """
    return _parse(registry.resolve_kind(kind), options)


def choose(kind, settings, options):
    """`"auto"`'s `settings` for its pick, `kind`, with `options`: the plan's are parsed."""
    return _parse(registry.resolve_kind(kind), options, parsed=settings)


def validate_options(kind, options):
    """Checks options for a strategy: `parse_options` as a new dictionary."""
    return dict(parse_options(kind, options))
