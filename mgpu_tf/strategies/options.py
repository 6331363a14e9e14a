"""The declared options of every feature: the factory and the flags import it to parse.

Its names are `mgpu_tf.base.options`'. Design: docs/design.md#layers
"""

from mgpu_tf.base.options import *  # noqa: F401,F403
from mgpu_tf.base.options import __all__  # noqa: F401
from mgpu_tf.cluster import options as _cluster  # noqa: F401 - cluster, worker_hosts, task_index
from mgpu_tf.comm import options as _comm  # noqa: F401 - compression, transport, ...
