"""Numeric precision: Keras' mixed-precision policy chosen with the strategy.

Design: docs/design.md#precision
"""

import logging

from mgpu_tf.base.choice import Choice

__all__ = ["Precision", "check_precision", "set_precision"]

logger = logging.getLogger("mgpu_tf")


class Precision(Choice):
    """The Keras dtype policies `precision` can name."""

    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"


def check_precision(value):
    """Returns `value` as a `Precision`.

    Raises:
        ValueError: when it is not float32, mixed_float16 or mixed_bfloat16.
    """
    try:
        return Precision.parse(value, "precision")
    except ValueError as error:
        if str(value).lower() in ("float16", "bfloat16", "fp16", "bf16"):
            raise ValueError(f"{error}. Use 'mixed_float16' or 'mixed_bfloat16': variables "
                             "stay float32.") from None
        raise


def set_precision(precision):
    """Sets Keras' global dtype policy; models built afterwards follow it.

    Args:
        precision: a `Precision` value or its name.

    Returns:
        The `keras.DTypePolicy` now in force.
    """
    import keras

    before = keras.mixed_precision.dtype_policy().name
    wanted = check_precision(precision).value
    keras.mixed_precision.set_dtype_policy(wanted)
    if before != wanted:
        logger.info("mgpu_tf: precision=%r set Keras' global dtype policy (it was %r); "
                    "every model built from now on in this process follows it. "
                    "keras.mixed_precision.set_dtype_policy(%r) sets it back.",
                    wanted, before, before)
    return keras.mixed_precision.dtype_policy()
