"""absl flags that choose the strategy, defined next to the user's own flags.

`define_flags` sets up the job's log (`mgpu_tf.setup_logging`), as the main job does.

Design: docs/design.md#flags
"""

from absl import flags

from mgpu_tf.base import registry
from mgpu_tf.compat import native_logs
from mgpu_tf.strategies import factory
from mgpu_tf.strategies import options as options_lib

# `keras_steps` and `devices` load TensorFlow: imported where used, after `define_flags` has
# set up the job's log, so that the lines TensorFlow writes as it loads stay out of it.

__all__ = ["define_flags", "strategy_options", "make_strategy_from_flags", "compile_options"]

# The flags are the key flags of the module that calls define_flags(), not of this one:
# absl's --help lists the main module's key flags only, the rest under --helpfull.
flags.disclaim_key_flags()

_DEFINE = {"list": flags.DEFINE_list, "integer": flags.DEFINE_integer,
           "string": flags.DEFINE_string, "boolean": flags.DEFINE_boolean}


def define_flags(flag_values=flags.FLAGS):
    """Defines the strategy flags on `flag_values`; safe to call more than once.

    They belong to the calling module, so a script that calls this lists them
    under `--help` beside its own flags.

    Args:
        flag_values: the `FlagValues` to define on. Defaults to `absl.flags.FLAGS`.
    """
    # A script with these flags is a job: TensorFlow's own lines stay out of its log.
    native_logs.setup_logging()
    if "strategy" in flag_values:
        return
    flags.DEFINE_string(
        "strategy", "auto",
        "Distribution strategy: " + ", ".join(factory.available_strategies()) + ".",
        flag_values=flag_values)
    flags.DEFINE_integer("simulate_devices", 0,
                         "Split the device into N logical devices (0: off).",
                         flag_values=flag_values)
    flags.DEFINE_enum("simulate_device_type", "CPU", ["CPU", "GPU"],
                      "Device type --simulate_devices splits.", flag_values=flag_values)
    for option in _flag_options():
        _DEFINE[option.flag](option.name, None, option.help + option.flag_note,
                             flag_values=flag_values)
    flags.DEFINE_string(
        "jit_compile", "auto", "XLA for each replica's training step: auto (Keras' choice: "
        "off under a strategy and on CPU-only machines), true or false.",
        flag_values=flag_values)
    flags.DEFINE_integer(
        "steps_per_execution", 1, "Training steps run in one call into TensorFlow, so Python "
        "and callbacks run once per this many steps (1: every step).", flag_values=flag_values)
    flags.register_validator("simulate_devices", _raises(_check_simulate_devices),
                             flag_values=flag_values)
    flags.register_validator("jit_compile", _raises(_keras_steps().check_jit_compile),
                             flag_values=flag_values)
    flags.register_validator("steps_per_execution",
                             _raises(_keras_steps().check_steps_per_execution),
                             flag_values=flag_values)
    # One validator on --strategy that reads the others (absl runs validators once all
    # flags are parsed): a multi-flag validator would prefix every flag's value.
    names = ["strategy", "simulate_devices", "simulate_device_type",
             *(option.name for option in _flag_options())]
    flags.register_validator(
        "strategy",
        lambda _: _validate({name: flag_values[name].value for name in names}, flag_values),
        flag_values=flag_values)


def compile_options(flag_values=flags.FLAGS):
    """Returns `{"jit_compile": ..., "steps_per_execution": ...}` for `model.compile`."""
    return {"jit_compile": _keras_steps().check_jit_compile(flag_values.jit_compile),
            "steps_per_execution": _keras_steps().check_steps_per_execution(
                flag_values.steps_per_execution)}


def _keras_steps():
    from mgpu_tf.compat import keras_steps

    return keras_steps


def _devices():
    from mgpu_tf.strategies import devices

    return devices


def _raises(check):
    def validator(value):
        try:
            check(value)
        except (TypeError, ValueError) as error:
            raise flags.ValidationError(str(error)) from None
        return True

    return validator


def _check_simulate_devices(count):
    # simulate_devices' own message would name its argument `count`, under --strategy.
    if count is None or count < 0:
        raise ValueError(
            "--simulate_devices must be 0 (off) or the number of logical devices to split "
            f"the device into. Received: --simulate_devices={count}")
    if count > _devices().MAX_SIMULATED_DEVICES:
        raise ValueError(
            f"--simulate_devices must be at most {_devices().MAX_SIMULATED_DEVICES}: each "
            "logical device costs memory and threads, and a replica of the model under a "
            f"strategy. Received: --simulate_devices={count}. Use "
            f"{_devices().MAX_SIMULATED_DEVICES} or fewer.")


def _flag_options():
    """The options of the table that have a flag (`Option.flag`)."""
    return [option for option in registry.options() if option.flag]


def _options(values):
    """`make_strategy` options from flag values: those set, each as its option reads it."""
    options = {}
    for option in _flag_options():
        value = values.get(option.name)
        if value is not None:
            options[option.name] = option.from_flag(value) if option.from_flag else value
    return options


def _validate(values, flag_values):
    try:
        count = values["simulate_devices"]
        if count and 0 < count <= _devices().MAX_SIMULATED_DEVICES:  # else its own flag fails
            _devices().simulate_devices(count, values["simulate_device_type"])
        kind = registry.resolve_kind(values["strategy"])
    except (TypeError, ValueError, RuntimeError) as error:
        raise flags.ValidationError(str(error)) from None
    options = _options(values)
    # Under "auto" each value is checked alone here (a device that is not there fails at
    # parse time too); how they go together waits for the strategy it picks.
    for name, value in options.items():
        try:
            options_lib.check_option(kind, name, value)
        except (TypeError, ValueError) as error:
            # absl would name --strategy, whose validator this is, not the flag at fault.
            raise flags.IllegalFlagValueError(
                f"flag {flag_values[name].serialize()}: {error}") from None
    if kind == "auto":
        return True
    try:  # how the options go together
        options_lib.parse_options(kind, options)
    except (TypeError, ValueError, RuntimeError) as error:
        raise flags.ValidationError(str(error)) from None
    return True


def strategy_options(flag_values=flags.FLAGS):
    """Returns `(kind, options)` for `make_strategy` from parsed flags."""
    values = {o.name: flag_values[o.name].value for o in _flag_options() if o.name in flag_values}
    return flag_values.strategy, _options(values)


def make_strategy_from_flags(flag_values=flags.FLAGS):
    """Returns `make_strategy(*strategy_options(flag_values))`'s strategy."""
    kind, options = strategy_options(flag_values)
    return factory.make_strategy(kind, **options)
