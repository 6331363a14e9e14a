"""`mgpu_tf.base.registry` under its public path `mgpu_tf.strategies.registry`.

The module moved down to `mgpu_tf.base`, which `model_parallel` and `planner` import
without importing `strategies`; this path stays for scripts and plugins that use it.
"""

from mgpu_tf.base.registry import *  # noqa: F401,F403
from mgpu_tf.base.registry import __all__  # noqa: F401
