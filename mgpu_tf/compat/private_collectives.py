"""The private names of TensorFlow's collective launchers that the sharded state's all-to-all uses.

A MultiWorkerMirroredStrategy launches its collectives through one launcher per local device
(group key, instance keys, ordering token); an all-to-all of our own must take its keys from
the same launchers, or workers would disagree on the order. Accessors work as `compat.private`'s.
"""

from mgpu_tf.compat.versions import PrivateNameError, attribute, describe, method, missing

__all__ = ["PrivateNameError", "all_to_all", "collective_launchers", "device",
           "next_instance_key", "set_unique_instance_keys", "unique_instance_keys"]

_LAUNCHER_NAMES = ("CollectiveReplicaLauncher._group_key", "CollectiveReplicaLauncher._group_size",
                   "CollectiveReplicaLauncher._device", "CollectiveReplicaLauncher._options")


def collective_launchers(strategy):
    """Returns the launchers of a MultiWorkerMirroredStrategy's collectives, one per local device.

    `CollectiveAllReduceExtended._cross_device_ops` and `CollectiveAllReduce._launchers`
    (TensorFlow 2.18-2.22), in the order of `strategy.extended.worker_devices`.
    """
    received = f"strategy={describe(strategy)}"
    ops = attribute(strategy.extended, "CollectiveAllReduceExtended._cross_device_ops", received)
    launchers = attribute(ops, "CollectiveAllReduce._launchers", received)
    if not isinstance(launchers, (list, tuple)) or not launchers:
        raise missing("CollectiveAllReduce._launchers", received)
    for name in _LAUNCHER_NAMES:
        attribute(launchers[0], name, received)
    return list(launchers)


def all_to_all(launcher, tensor):
    """Sends `tensor[i]` to rank `i` of the launcher's group; returns what each rank sent here.

    Keys and ordering come from `CollectiveReplicaLauncher._next_instance_key` and
    `_get_ordering_token` (TensorFlow 2.18-2.22), as its own all-reduce and all-gather take
    them; the op is `tf.raw_ops.CollectiveAllToAllV2`, on the launcher's device.

    Args:
        launcher: one of `collective_launchers(strategy)`.
        tensor: a tensor whose first dimension is the group's size.

    Returns:
        A tensor of `tensor`'s shape: row `j` is what rank `j` sent to this rank.
    """
    import tensorflow as tf

    received = f"launcher={describe(launcher)}"
    instance_key = method(launcher, "CollectiveReplicaLauncher._next_instance_key", received)()
    token = method(launcher, "CollectiveReplicaLauncher._get_ordering_token", received)()
    options = attribute(launcher, "CollectiveReplicaLauncher._options", received)
    with tf.device(device(launcher)):
        return tf.raw_ops.CollectiveAllToAllV2(
            input=tensor,
            group_size=attribute(launcher, "CollectiveReplicaLauncher._group_size", received),
            group_key=attribute(launcher, "CollectiveReplicaLauncher._group_key", received),
            instance_key=instance_key, ordering_token=[] if token is None else [token],
            communication_hint=options.implementation.value.lower(),
            timeout_seconds=options.timeout_seconds or 0.0)


def device(launcher):
    """The device the launcher's collectives run on (`CollectiveReplicaLauncher._device`)."""
    return attribute(launcher, "CollectiveReplicaLauncher._device",
                     f"launcher={describe(launcher)}")


def unique_instance_keys(launcher):
    """True when traced collectives take a new instance key per call (TensorFlow 2.18-2.22)."""
    return attribute(type(launcher), "CollectiveReplicaLauncher._prefer_unique_instance_key",
                     f"launcher={describe(launcher)}")


def set_unique_instance_keys(launcher, unique):
    """Sets what `unique_instance_keys(launcher)` returns, for every launcher of the process."""
    unique_instance_keys(launcher)
    type(launcher)._prefer_unique_instance_key = bool(unique)


def next_instance_key(launcher):
    """The instance key the launcher's next new collective takes (TensorFlow 2.18-2.22)."""
    received = f"launcher={describe(launcher)}"
    keys = attribute(launcher, "CollectiveReplicaLauncher._collective_keys", received)
    table = attribute(keys, "CollectiveKeys._instance_key_table", received)
    group = attribute(launcher, "CollectiveReplicaLauncher._group_key", received)
    return table[group][device(launcher)]
