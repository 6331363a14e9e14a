# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["ClusterConfig", "ClusterConfigError", "RayReporter", "WorkerLostError",
           "detect_cluster", "launch", "parse_tf_config", "worker_failures"]

from . import (calibrate, communicator, detect, elastic, failures, hostlist, interrupt,
               job_secret, jobset, kubernetes, launch_command, launcher, manifest_parts,
               network_policy, pod_metrics, ray_train, scrape, stopping, tf_config, waiting)
from .detect import detect_cluster
from .failures import WorkerLostError, worker_failures
from .launcher import launch
from .ray_train import RayReporter
from .tf_config import ClusterConfig, ClusterConfigError, parse_tf_config
