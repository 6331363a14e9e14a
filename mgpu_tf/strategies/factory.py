"""The strategy factory: one name in, the real `tf.distribute` object out.

It imports TensorFlow only once a strategy's name is known to be good: a misspelt name
fails in milliseconds, not after the seconds TensorFlow takes to load.

Design: docs/design.md#the-strategy-factory
"""

import logging

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.base import registry
from mgpu_tf.base.registry import OPTIONS, register_strategy

__all__ = ["auto_choice", "available_strategies", "check_strategy_name", "make_strategy",
           "strategy_kind", "prepare_model"]

logger = logging.getLogger("mgpu_tf")

# The names the modules `_registered` imports register (test_strategies checks they agree),
# known before TensorFlow is imported for them; aliases map to their strategy.
_BUILT_IN = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu",
             "model_parallel", "hybrid")
_BUILT_IN_ALIASES = {"off": "default", "none": "default",
                     "multi_worker_mirrored": "multi_worker"}


def check_strategy_name(kind):
    """Refuses a strategy name that neither the built-in modules nor a plugin registers.

    It imports no TensorFlow, so a misspelt name fails at once, with the closest name.

    Raises:
        TypeError: when `kind` is not a string.
        ValueError: for an unknown name.
    """
    if not isinstance(kind, str):
        registry.resolve_kind(kind)  # raises its TypeError
    name = str(getattr(kind, "value", kind)).strip().lower()
    strategies = {*_BUILT_IN, *registry.entries()}
    if name not in strategies and name not in _BUILT_IN_ALIASES:
        raise registry.unknown_strategy(kind, strategies, _BUILT_IN_ALIASES)


def _registered():
    """Imports the modules that register the built-in strategies (and TensorFlow), once."""
    from mgpu_tf.strategies import options  # noqa: F401 - declares the options
    from mgpu_tf.model_parallel import strategy as _model_parallel  # noqa: F401 - registers
    from mgpu_tf.model_parallel.hybrid import strategy as _hybrid  # noqa: F401 - registers
    from mgpu_tf.strategies import kinds  # noqa: F401 - registers TensorFlow's strategies

    if "auto" not in registry.entries():
        register_strategy("auto", "choose: TPU, else TF_CONFIG cluster, else GPUs, else default",
                          _resolved_by_make_strategy, options=OPTIONS)


def auto_choice(**options):
    """Returns `(kind, reason)`: what `make_strategy("auto", **options)` would build.

    Reads no more than it must, and starts no TensorFlow runtime.
    """
    from mgpu_tf.base import devices as devices_lib
    from mgpu_tf.cluster import detect as cluster_lib

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


def make_strategy(kind="auto", **options):
    """Returns the `tf.distribute` strategy named by `kind`.

    All options are checked before TensorFlow's runtime starts. `"auto"` picks a reachable TPU,
    else a TF_CONFIG cluster, else all GPUs, else the default strategy, and logs why; given
    `model=`, it plans the model's memory first.

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
        **options: keyword options, each strategy accepting a subset: the table in
            docs/api/strategies.md#options, rendered from their declarations
            (`register_option` in `mgpu_tf.base.options` and in each feature's module).
            `precision` sets Keras' global dtype policy, which stays in force for the
            rest of the process (see `mgpu_tf.base.precision`).

    Returns:
        The strategy object (`tf.distribute.MirroredStrategy` and so on).

    Raises:
        ValueError: for an unknown strategy name.
        TypeError: for an unknown option or a value of the wrong type.
        ValueError: for a value or combination that strategy cannot use.
    """
    check_strategy_name(kind)
    _registered()
    from mgpu_tf.base import options as options_lib
    from mgpu_tf.compat import native_logs

    # The runtime may start here: its start-up lines stay out (TF_CPP_MIN_LOG_LEVEL shows them).
    native_logs.setup_logging()
    return _build(options_lib.parse_options(kind, options))


def _build(settings):
    from mgpu_tf.base import options as options_lib
    from mgpu_tf.base import precision as precision_lib
    from mgpu_tf.compat import patches
    from mgpu_tf.planner import recommend

    if settings.kind == "auto":
        options = {k: v for k, v in settings.items() if k not in options_lib.AUTO_ONLY}
        name, reason = auto_choice(**options)
        if settings.get("model") is not None:
            name, reason, options = recommend.auto_strategy(
                settings.model, name, reason, options, settings.get("device_memory"),
                global_batch_size=settings.global_batch_size)
        logger.info("mgpu_tf: strategy 'auto' chose %r: %s.", name, reason)
        settings = options_lib.choose(name, settings, options)  # parses only the plan's
    if settings.precision is not None:
        precision_lib.set_precision(settings.precision)
    entry = registry.entry(settings.kind)
    strategy = entry.build(settings)
    kind = kind_lib.kind_of(strategy)  # TensorFlow's default strategy keeps its state
    if type(kind) is (entry.kind or kind_lib.StrategyKind) and kind.name == settings.kind:
        kind.settings = settings
    else:
        kind = kind_lib.attach(strategy, (entry.kind or kind_lib.StrategyKind)(
            strategy, settings, name=settings.kind))
    kind.settle()
    patches.install(*kind.patches)  # the one place the toolkit patches Keras
    return strategy


def strategy_kind(strategy):
    """Returns the registry name of a strategy object (`"mirrored"`, ...): `kind_of(strategy).name`.

    Raises:
        TypeError: when `strategy` is not a strategy.
    """
    _registered()
    return kind_lib.kind_of(strategy).name


def available_strategies():
    """Returns `{name: description}` for every strategy `make_strategy` can build."""
    _registered()
    return registry.available_strategies()


def _resolved_by_make_strategy(options):
    raise AssertionError("'auto' is resolved by make_strategy")  # never called


def prepare_model(model, strategy):
    """Readies a Keras model for a strategy, so one script runs under every strategy.

    Args:
        model: a Keras model, built inside `strategy.scope()`.
        strategy: what `make_strategy` returned.

    Returns:
        The model to compile and fit.

    Raises:
        TypeError: when `model` is not a Keras model or `strategy` not a strategy.
    """
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(
            "`model` must be a Keras model, built inside `strategy.scope()`. Received: "
            f"model={model!r:.80}. Build the model first, then pass it with its strategy.")
    _registered()
    kind = kind_lib.kind_of(strategy)  # raises for what is not a strategy
    model = kind.prepare_model(model)
    if getattr(model, "optimizer", None) is not None:
        kind.prepare_optimizer(model.optimizer)
    return kind_lib.attach_model(model, kind)  # what its fit asks (compat.fit_hook)
