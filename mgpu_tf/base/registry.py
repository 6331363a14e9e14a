"""The names of strategies and of their options, in one registry.

Design: docs/design.md#the-strategy-factory
"""

import dataclasses
import enum

from mgpu_tf import Choice

__all__ = [
    "StrategyKind",
    "OPTIONS",
    "register_strategy",
    "register_option",
    "available_strategies",
    "resolve_kind",
    "entry",
    "entries",
    "option_checks",
]


class StrategyKind(Choice):
    """The built-in strategy names."""

    AUTO = "auto"
    DEFAULT = "default"
    ONE_DEVICE = "one_device"
    MIRRORED = "mirrored"
    MULTI_WORKER = "multi_worker"
    TPU = "tpu"


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
    "global_batch_size": "auto only, with model: examples per step over all replicas, "
    "which the plan sizes activations for (default 32)",
    "compression": "gradient dtype during the all-reduce: none, float16, bfloat16 "
    "(the update stays float32)",
    "steps_per_sync": "steps whose gradients are summed locally before one all-reduce "
    "and one update (1: every step)",
    "transport": "how gradients travel between workers: tensorflow (its collectives) or "
    "tcp (the toolkit's socket ring; one replica per worker)",
    "precision": "Keras dtype policy: float32, mixed_float16 (with loss scaling), "
    "mixed_bfloat16",
}


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


def register_strategy(name, description, build, *, options=(), aliases=(),
                      strategy_types=(), override=False):
    """Adds a strategy name to the registry.

    A name or alias that is taken is refused unless `override=True`, so a plugin
    cannot replace a strategy by accident.

    Args:
        name: the short lowercase name.
        description: one line saying what it is.
        build: a function of the validated options dictionary returning the strategy.
        options: option names the strategy accepts.
        aliases: other names for it.
        strategy_types: classes of the objects it returns, for `strategy_kind`.
        override: replace a strategy already registered under `name` or an alias.
            Defaults to `False`.

    Raises:
        ValueError: for a taken name or alias without `override=True`, or an
            option that is not registered.
    """
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ValueError(
            f"Unknown options {sorted(unknown)} for strategy {name!r}. Register them first "
            "with register_option(name, description).")
    if not override:
        for taken in (name, *aliases):
            if taken in _REGISTRY or taken in _ALIASES:
                raise ValueError(
                    f"Strategy name {taken!r} is already registered. Received: name={name!r}, "
                    f"aliases={tuple(aliases)!r}. Pick another name, or pass override=True "
                    "to replace it.")
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
    """Returns `{name: description}` for every registered strategy name.

    The built-in names come first, in `StrategyKind`'s order, then the others in
    the order they were registered.
    """
    builtin = [kind.value for kind in StrategyKind if kind.value in _REGISTRY]
    names = builtin + [name for name in _REGISTRY if name not in builtin]
    return {name: _REGISTRY[name].description for name in names}


def resolve_kind(kind):
    """Returns the registered name for `kind` (a name, alias or `StrategyKind`).

    Raises:
        TypeError: when `kind` is not a string.
        ValueError: when the name is unknown; the message lists the known names.
    """
    if not isinstance(kind, str):
        raise TypeError(f"`kind` must be a strategy name. Received: kind={kind!r}")
    name = str(kind.value if isinstance(kind, enum.Enum) else kind).strip().lower()
    name = _ALIASES.get(name, name)
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        aliases = ", ".join(f"{a} ({t})" for a, t in sorted(_ALIASES.items()))
        raise ValueError(
            f"Unknown strategy {kind!r}. Known strategies: {known}; aliases: {aliases}."
        )
    return name


def entry(name):
    """The registry entry of a resolved strategy name."""
    return _REGISTRY[name]


def entries():
    """`{name: entry}` of every registered strategy (plugins loaded)."""
    return dict(_REGISTRY)


def option_checks():
    """`{option: check}` registered with `register_option`."""
    return dict(_OPTION_CHECKS)
