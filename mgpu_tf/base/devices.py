"""Devices: splitting one physical device into logical ones, and naming devices.

TensorFlow is imported when a function runs, so that `mgpu_tf.simulate_devices` sets the
log up before TensorFlow writes its import-time lines.

Design: docs/design.md#devices
"""

import sys

__all__ = [
    "DevicesAlreadyInitializedError",
    "MAX_SIMULATED_DEVICES",
    "simulate_devices",
    "physical_devices",
    "planned_logical_devices",
    "local_devices",
    "nccl_available",
    "canonical_device",
]

_DEVICE_TYPES = ("CPU", "GPU")
# Each logical device has its own allocator, thread pools and, under a strategy, a replica
# of every variable: past this, a split costs minutes and gigabytes, not a test set-up.
MAX_SIMULATED_DEVICES = 256


class DevicesAlreadyInitializedError(RuntimeError):
    """Raised when devices are split after TensorFlow has started its runtime."""


def simulate_devices(count, device_type="CPU", *, memory_limit_mb=1024):
    """Splits the first physical device of a type into `count` logical devices.

    Mirrored and model-parallel code then runs on a laptop: `simulate_devices(4)`
    gives `/device:CPU:0` to `/device:CPU:3`. It must run before anything starts
    TensorFlow's runtime (creating a tensor, listing logical devices, building a
    model). Calling it again with the same count is a no-op. `mgpu_tf.simulate_devices`
    sets the log up first (`mgpu_tf.setup_logging`), which this one leaves to the caller.

    Example:

    ```python
    import mgpu_tf
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("mirrored")
    ```

    Args:
        count: number of logical devices, from 1 to `MAX_SIMULATED_DEVICES` (256).
        device_type: `"CPU"` or `"GPU"`. Defaults to `"CPU"`.
        memory_limit_mb: memory of each logical GPU in MiB; ignored for CPUs.
            Defaults to `1024`.

    Returns:
        The names of the logical devices of that type, such as `"/device:CPU:1"`
        (read from the configuration, so the runtime is still not started).

    Raises:
        ValueError: for a bad count or device type, or no such physical device.
        DevicesAlreadyInitializedError: when the runtime has already started.
    """
    import tensorflow as tf

    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(
            f"`count` must be an integer of at least 1. Received: count={count!r}"
        )
    if count > MAX_SIMULATED_DEVICES:
        raise ValueError(
            f"`count` must be at most {MAX_SIMULATED_DEVICES}: each logical device costs "
            "memory and threads, and a replica of the model under a strategy. "
            f"Received: count={count}. Use {MAX_SIMULATED_DEVICES} or fewer."
        )
    device_type = str(device_type).upper()
    if device_type not in _DEVICE_TYPES:
        raise ValueError(
            f"`device_type` must be one of {_DEVICE_TYPES}. "
            f"Received: device_type={device_type!r}"
        )
    physical = tf.config.list_physical_devices(device_type)
    if not physical:
        raise ValueError(
            f"There is no physical {device_type} to split. "
            f"Received: device_type={device_type!r}. Use device_type='CPU'."
        )
    if device_type == "GPU":
        config = [
            tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)
            for _ in range(count)
        ]
    else:
        config = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    try:
        tf.config.set_logical_device_configuration(physical[0], config)
    except RuntimeError as error:
        current = tf.config.list_logical_devices(device_type)
        if len(current) == count:
            return [device.name for device in current]
        raise DevicesAlreadyInitializedError(
            f"simulate_devices({count}) must be called before TensorFlow starts its "
            f"runtime; it has already started with {len(current)} logical "
            f"{device_type} device(s). Call mgpu_tf.simulate_devices() first thing in "
            "the program, before creating tensors, models or strategies (or pass "
            "--simulate_devices on the command line)."
        ) from error
    return planned_logical_devices(device_type)


def physical_devices(device_type):
    """Returns the physical devices of a type; does not start the runtime."""
    import tensorflow as tf

    return tf.config.list_physical_devices(device_type)


def planned_logical_devices(device_type):
    """Names the logical devices of a type that the runtime has or will have.

    Reads the logical configuration set so far instead of listing logical devices,
    which would start the runtime.
    """
    import tensorflow as tf

    names = []
    for physical in tf.config.list_physical_devices(device_type):
        logical = tf.config.get_logical_device_configuration(physical) or [None]
        start = len(names)
        names += [f"/device:{device_type}:{start + i}" for i in range(len(logical))]
    return names


def local_devices(device_type=None):
    """Returns this process' logical device names, GPUs first by default.

    Args:
        device_type: `"CPU"`, `"GPU"` or `None` for GPUs if there are any, else CPUs.
    """
    import tensorflow as tf

    if device_type is None:
        device_type = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    return planned_logical_devices(device_type.upper())


def nccl_available():
    """True where NCCL can run: Linux with at least one GPU and a CUDA build."""
    import tensorflow as tf

    return (
        sys.platform.startswith("linux")
        and tf.test.is_built_with_cuda()
        and bool(tf.config.list_physical_devices("GPU"))
    )


def canonical_device(name):
    """Turns `"gpu:1"`, `"/GPU:1"` or `"/device:gpu:1"` into `"/device:GPU:1"`.

    Raises:
        ValueError: when the string is not a device name.
    """
    import tensorflow as tf

    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"A device must be a string such as '/device:GPU:0'. Received: {name!r}"
        )
    text = name.strip()
    if not text.startswith("/"):
        text = "/device:" + text
    try:
        spec = tf.DeviceSpec.from_string(text)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"A device must look like '/device:GPU:0' or 'CPU:1'. Received: {name!r}"
        ) from error
    if spec.device_type is None or spec.device_index is None:
        raise ValueError(
            "A device must name a type and an index, such as '/device:GPU:0'. "
            f"Received: {name!r}"
        )
    prefix = spec.replace(device_type=None, device_index=None).to_string()
    return f"{prefix}/device:{spec.device_type.upper()}:{spec.device_index}"
