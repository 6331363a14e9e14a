"""`mgpu_tf.base.registry` under its older public path (design: docs/design.md#layers)."""

from mgpu_tf.strategies import options as _options  # noqa: F401 - the options, declared
from mgpu_tf.base.registry import *  # noqa: F401,F403
from mgpu_tf.base.registry import __all__  # noqa: F401
