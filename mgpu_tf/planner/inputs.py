"""The planner's arguments that mean something before any model is built: memory sizes and the
optimizers known by name. No TensorFlow here, so `mgpu-tf plan` checks them in milliseconds.
"""

import numbers
import re

__all__ = ["OPTIMIZER_SLOTS", "parse_size", "slots_by_name"]

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}

# Slot variables per weight of Keras' optimizers with their default arguments.
OPTIMIZER_SLOTS = {"sgd": 0, "rmsprop": 1, "adagrad": 1, "lion": 1, "adam": 2, "adamw": 2,
                   "adamax": 2, "nadam": 2, "adadelta": 2, "ftrl": 2, "lamb": 2}


def parse_size(value, name="device_memory"):
    """Returns a memory size in bytes: an int, or text such as `"80GiB"`, `"80 GB"`, `"512MiB"`.

    `parse_size("1.5 GiB")` is 1610612736. Raises `TypeError` for neither number nor text, and
    `ValueError` for text that is not a size, or a size that is not positive.
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(f"`{name}` must be a size such as '80GiB' or a number of bytes. "
                        f"Received: {name}={value!r}")
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        unit = match and match.group(2).lower()
        if not match or unit not in _UNITS:
            raise ValueError(
                f"`{name}` must be a size: a number with an optional unit (B, KB, MB, GB, "
                f"TB, KiB, MiB, GiB, TiB). Received: {name}={value!r}. For example '80GiB' "
                "or '512 MB'.")
        value = float(match.group(1)) * _UNITS[unit]
    if not value > 0:
        raise ValueError(f"`{name}` must be positive. Received: {name}={value!r}")
    return int(value)


def slots_by_name(optimizer, name="optimizer"):
    """Slot variables per weight of the optimizer called `optimizer` (`"adam"`: 2).

    Raises `ValueError`, listing the known names, for one it does not know.
    """
    key = optimizer.strip().lower()
    if key not in OPTIMIZER_SLOTS:
        raise ValueError(
            f"`{name}` must be one of {', '.join(sorted(OPTIMIZER_SLOTS))} or a Keras "
            f"optimizer. Received: {name}={optimizer!r}")
    return OPTIMIZER_SLOTS[key]
