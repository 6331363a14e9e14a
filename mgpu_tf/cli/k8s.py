"""`mgpu-tf k8s`: Kubernetes manifests (Indexed Job, JobSet or Kubeflow TFJob) for N GPU workers.

Print the manifests that run COMMAND as a multi-worker job on Kubernetes: a headless
Service and an Indexed Job (default), a JobSet that restarts the whole group when a
worker fails, or a Kubeflow TFJob. Example: mgpu-tf k8s --workers 4 --gpus_per_worker 2
--image IMAGE -- python -m mgpu_tf.train --strategy=multi_worker | kubectl apply -f -
"""

import sys

from mgpu_tf.cli import parsing
from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import kubernetes
from mgpu_tf.cluster import network_policy
from mgpu_tf.cluster import pod_metrics

__all__ = ["add_parser", "k8s_command"]


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, k8s_command, __doc__, raw=True)
    parser.add_argument("--workers", type=int, default=None,
                        help="number of workers (default: the node pools' total)")
    parser.add_argument("--gpus_per_worker", type=int, default=None,
                        help="nvidia.com/gpu limit of each worker pod (default 1, or with "
                        "--from_plan the plan's devices per worker; 0: none)")
    parser.add_argument("--image", required=True, help="container image of the workers")
    parser.add_argument("--format", choices=kubernetes.FORMATS, default="indexed-job",
                        help="indexed-job (plain Kubernetes, default), jobset (the JobSet "
                        "controller; restarts the group) or tfjob (Kubeflow's legacy "
                        "training operator)")
    parser.add_argument("--max_restarts", type=int, default=None,
                        help="jobset: recreate every worker after a failure, up to N times "
                        "(default 0); give the job a --backup_dir on shared storage so "
                        "it resumes")
    parser.add_argument("--name", default="mgpu-tf",
                        help="job name, a DNS label; also the Service name (default mgpu-tf)")
    parser.add_argument("--namespace", default=None, help="namespace of the objects")
    parser.add_argument("--port", type=int, default=cluster.DEFAULT_PORT,
                        help="gRPC port of the workers (default 2222)")
    parser.add_argument("--node_pool", action="append", default=[], dest="node_pools",
                        metavar="NAME:WORKERS[:SPEED[:SELECTOR]]",
                        help="a pool of nodes with one GPU type (repeat for each); SPEED "
                        "becomes its shard weight; SELECTOR is KEY=VALUE or a VALUE of "
                        "nvidia.com/gpu.product")
    parser.add_argument("--job_secret", default=None, metavar="create|SECRET",
                        help="give the workers the job's secret, which the tcp ring's "
                        "handshake checks: 'create' adds a Secret with a new one; a name "
                        "reads an existing Secret's key job-secret (default: none)")
    parser.add_argument("--network_policy", action="store_true",
                        help="add a NetworkPolicy that admits only the job's own pods to "
                        "the workers' ports")
    _add_metrics_and_sizes(parser)
    parser.add_argument("cmd", nargs="*", metavar="-- COMMAND",
                        help="the command each worker's container runs")
    return parser


def _add_metrics_and_sizes(parser):
    parser.add_argument("--metrics_port", type=int, default=None,
                        help="each worker serves the training monitor's metrics on this port "
                        "(the main job reads it; give your own script --metrics_port); adds "
                        "the prometheus.io annotations and a PodMonitor")
    parser.add_argument("--no_pod_monitor", action="store_true",
                        help="leave out the PodMonitor (a cluster without the Prometheus "
                        "Operator)")
    parser.add_argument("--memory", default=None,
                        help="memory request and limit of each worker, e.g. 16Gi")
    parser.add_argument("--cpu", default=None,
                        help="CPU request and limit of each worker, e.g. 4 or 500m")
    parser.add_argument("--from_plan", default=None, metavar="PLAN.json",
                        help="take each worker's memory (and, without --workers, the worker "
                        "count) from `mgpu-tf plan --json`'s output")
    parser.add_argument("--memory_overhead", default="1Gi",
                        help="with --from_plan: memory added for the TensorFlow runtime, "
                        "which the plan does not count (default 1Gi)")


def _sizes(args):
    """`(workers, gpus per worker, memory)` from the flags, or with --from_plan from the plan."""
    if args.from_plan is None:
        gpus = 1 if args.gpus_per_worker is None else args.gpus_per_worker
        return args.workers, gpus, args.memory
    if args.memory is not None:
        raise kubernetes.ManifestError(
            "Give `memory` or `from_plan`, not both. Received: memory="
            f"{args.memory!r}, from_plan={args.from_plan!r}. Leave one out.")
    memory, plan = pod_metrics.memory_from_plan(args.from_plan, args.memory_overhead)
    devices = int(plan["devices"])
    # The memory is the plan's for its devices: other GPUs would hold other shares.
    if args.gpus_per_worker not in (None, 0, devices):
        raise kubernetes.ManifestError(
            f"`gpus_per_worker` must be the plan's devices per worker ({devices}), for which "
            f"it sized the memory. Received: gpus_per_worker={args.gpus_per_worker}, "
            f"from_plan={args.from_plan!r}. Leave --gpus_per_worker out, or plan again with "
            f"--devices {args.gpus_per_worker}.")
    gpus = devices if args.gpus_per_worker is None else args.gpus_per_worker
    workers = args.workers
    if workers is None and not args.node_pools:
        workers = int(plan.get("workers") or 1)
    return workers, gpus, memory


def k8s_command(args):
    try:
        pools = [kubernetes.parse_node_pool(text) for text in args.node_pools]
        workers, gpus, memory = _sizes(args)
        documents = kubernetes.make_manifests(
            args.name, args.cmd, image=args.image, workers=workers,
            gpus_per_worker=gpus, format=args.format, pools=pools,
            port=args.port, namespace=args.namespace, max_restarts=args.max_restarts,
            metrics_port=args.metrics_port, pod_monitor=not args.no_pod_monitor,
            memory=memory, cpu=args.cpu)
        documents = network_policy.secure(
            documents, args.name, format=args.format, namespace=args.namespace,
            secret=args.job_secret, network_policy=args.network_policy,
            metrics_port=args.metrics_port)
    except kubernetes.ManifestError as error:
        print(f"mgpu-tf k8s: {error}", file=sys.stderr)
        return 2
    backup = _backup_dir(args.cmd)
    if backup is None and args.max_restarts:
        # A restarted pod starts on a fresh disk: without a backup it trains from the start.
        print("mgpu-tf k8s: note: the command has no --backup_dir, so a restarted group "
              "starts training again from the first epoch. Add --backup_dir=DIR on storage "
              "every pod mounts (a PersistentVolume or a bucket) to resume.", file=sys.stderr)
    elif backup is not None and "://" not in backup:
        print(f"mgpu-tf k8s: note: the manifests mount no volume at --backup_dir={backup}: "
              "without one the backup stays on the pod's own disk and is lost with it, and a "
              "new start trains from the first epoch. Add a PersistentVolumeClaim mounted "
              "there to the pod template, or give a bucket (gs://..., s3://...).",
              file=sys.stderr)
    sys.stdout.write(kubernetes.to_yaml(documents))
    return 0


def _backup_dir(command):
    """The value of the command's `--backup_dir` (or `--backup-dir`), or `None`."""
    for k, part in enumerate(command):
        name, sep, value = part.partition("=")
        if name in ("--backup_dir", "--backup-dir"):
            return value if sep else (command[k + 1] if k + 1 < len(command) else "")
    return None
