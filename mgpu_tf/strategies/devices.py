"""`mgpu_tf.base.devices` under its older public path (design: docs/design.md#layers)."""

from mgpu_tf.base.devices import *  # noqa: F401,F403
from mgpu_tf.base.devices import __all__  # noqa: F401
