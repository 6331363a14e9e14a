"""`mgpu_tf.base.devices` under its public path, with `simulate_devices` setting the log up.

Design: docs/design.md#layers
"""

import functools

from mgpu_tf.base import devices as _devices
from mgpu_tf.base.devices import *  # noqa: F401,F403
from mgpu_tf.base.devices import __all__  # noqa: F401
from mgpu_tf.compat import native_logs


@functools.wraps(_devices.simulate_devices)
def simulate_devices(count, device_type="CPU", *, memory_limit_mb=1024):
    # Listing the devices starts the platforms: their start-up lines (cuInit's) stay out.
    native_logs.setup_logging()
    return _devices.simulate_devices(count, device_type, memory_limit_mb=memory_limit_mb)
