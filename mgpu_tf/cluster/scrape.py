"""Where each worker's metrics endpoint listens, so that a scrape configuration can list them.

Worker `i` serves on `metrics_port + k`, `k` being its place among the workers that share its
host: `metrics_port + i` under the local launcher, `metrics_port` in a pod of its own.
"""

from mgpu_tf.cluster import tf_config

__all__ = ["TRAINING_ROLES", "check_metrics_port", "metrics_port", "metrics_targets"]

# Chief first: the order in which `tf.distribute` numbers the workers.
TRAINING_ROLES = ("chief", "worker")


def check_metrics_port(port, *, name="metrics_port"):
    """Returns `port` if it can be a base port; raises `ValueError` naming `name` otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(
            f"`{name}` must be a port number from 1 to 65535 (0: any free port). "
            f"Received: {name}={port!r}. Use e.g. 9400.")
    return port


def _workers(config):
    """`[(role, index, host), ...]` of the cluster's training tasks, in the workers' order."""
    return [(role, index, tf_config.parse_address(address)[0])
            for role in TRAINING_ROLES
            for index, address in enumerate(config.cluster.get(role, ()))]


def metrics_port(base, config=None):
    """The port this task serves its metrics on: `base` plus its place on its host.

    Args:
        base: the job's `--metrics_port`; 0 stays 0 (any free port).
        config: this task's `ClusterConfig`. Defaults to `None` (a single process).
    """
    check_metrics_port(base)
    if not base or config is None:
        return base
    workers = _workers(config)
    host = next(h for r, i, h in workers if (r, i) == (config.task_type, config.task_index))
    on_host = [(r, i) for r, i, h in workers if h == host]
    return base + on_host.index((config.task_type, config.task_index))


def metrics_targets(base, config):
    """Every training task's metrics endpoint, `"host:port"`, in the workers' order."""
    check_metrics_port(base)
    if not base:
        raise ValueError("Targets need a fixed `metrics_port`. Received: metrics_port=0.")
    seen, targets = {}, []
    for _, _, host in _workers(config):
        name = f"[{host}]" if ":" in host else host
        targets.append(f"{name}:{base + seen.get(host, 0)}")
        seen[host] = seen.get(host, 0) + 1
    return targets
