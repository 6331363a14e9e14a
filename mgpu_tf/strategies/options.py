"""`mgpu_tf.base.options` under its older public path (design: docs/design.md#layers)."""

from mgpu_tf.base.options import *  # noqa: F401,F403
from mgpu_tf.base.options import __all__  # noqa: F401
