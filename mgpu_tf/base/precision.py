"""Numeric precision: Keras' mixed-precision policy chosen with the strategy.

`make_strategy(..., precision="mixed_float16")` sets Keras' global dtype
policy before the model is built in `strategy.scope()`. The policy is global to
the process, as Keras keeps it: models built later follow it too, whatever
strategy they are built under, until it is set again (the change is logged). Layers compute in
float16 (or bfloat16) and keep float32 variables. Loss scaling, which float16
needs and bfloat16 does not, is Keras' own: `model.compile` wraps the
optimizer in a `keras.optimizers.LossScaleOptimizer` when the model's policy is
`mixed_float16`. The last layer should keep float32 outputs for a stable loss
(`dtype="float32"` on it, or an `Activation("linear", dtype="float32")`).

Example:

```python
import keras, mgpu_tf
strategy = mgpu_tf.make_strategy("default", precision="mixed_bfloat16")
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.Dense(1, dtype="float32")])
model.layers[0].compute_dtype  # 'bfloat16'
```
"""

import logging

from mgpu_tf import Choice

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

    The policy is Keras' own process-wide setting, not tied to the strategy: every
    model built later in this process follows it, under any strategy, until it is
    set again. A change is logged once, with the policy it replaces and how to go
    back (`keras.mixed_precision.set_dtype_policy("float32")`, or
    `make_strategy(..., precision="float32")`).

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
