"""A JobSet (`jobset.x-k8s.io/v1alpha2`) that runs a multi-worker job and restarts it whole.

Build one with `mgpu_tf.cluster.kubernetes.make_manifests(..., format="jobset")`.

Design: docs/design.md#kubernetes-manifests
"""

from mgpu_tf.cluster import manifest_parts as parts

__all__ = ["API_VERSION", "RESTART_ANNOTATION", "make_jobset", "worker_pool", "job_name",
           "pod_environment"]

API_VERSION = "jobset.x-k8s.io/v1alpha2"
# JobSet's controller writes how many times the set has been restarted on every pod.
RESTART_ANNOTATION = "jobset.sigs.k8s.io/restart-attempt"
# The replicated Job's name when there are no node pools.
_WORKER = "worker"


def worker_pool(workers):
    """The one pool of a JobSet without node pools: its replicated Job is `worker`."""
    return parts.NodePool(_WORKER, workers)


def job_name(jobset, replicated_job, job_index=0):
    """The name JobSet gives Job `job_index` of `replicated_job`: `<jobset>-<rjob>-<index>`."""
    return f"{jobset}-{replicated_job}-{job_index}"


def make_jobset(name, command, *, image, pools, gpus, port, namespace, max_restarts):
    """Returns the JobSet object for arguments `kubernetes.make_manifests` has checked.

    `pools` are the node pools, one replicated Job each; `max_restarts` is how many times
    the whole group is recreated after a failure.
    """
    jobs = [(job_name(name, pool.name), pool) for pool in pools]
    for job, pool in jobs:
        # The pod's host name is `<job>-<index>`: a DNS label too.
        parts.check_label(f"{job}-{pool.workers - 1}",
                          "a pod's host name (jobset, '-', pool, '-0-', index)")
    env = parts.cluster_environment(jobs, name, port)
    restart = {"fieldRef": {"fieldPath": f"metadata.annotations['{RESTART_ANNOTATION}']"}}
    replicated = []
    for job, pool in jobs:
        pod_spec = {
            "restartPolicy": "Never",
            "containers": [parts.container(
                "worker", image, command, gpus, port, "grpc",
                {"MGPU_TF_JOB_NAME": job, **env, "MGPU_TF_RESTART": restart},
                parts.tf_config_command(jobs, job, name, port))],
        }
        if pool.node_selector:
            pod_spec["nodeSelector"] = dict(pool.node_selector)
        replicated.append({"name": pool.name, "replicas": 1, "template": {"spec": {
            "completionMode": "Indexed",
            "completions": pool.workers,
            "parallelism": pool.workers,
            # One lost pod fails its Job at once; the failure policy restarts them all.
            "backoffLimit": 0,
            "template": {"spec": pod_spec},
        }}})
    return {
        "apiVersion": API_VERSION, "kind": "JobSet",
        "metadata": parts.metadata(name, namespace),
        "spec": {
            # JobSet's headless Service; workers resolve each other before any is Ready.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True,
                        "subdomain": name},
            # No rules: every failure restarts the whole set, up to maxRestarts times.
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": "Recreate"},
            "replicatedJobs": replicated,
        },
    }


def pod_environment(document, job, index, *, restart=0):
    """The environment pod `index` of Job `job` of the JobSet `document` gets, or `None`.

    What the manifest gives the container, plus Kubernetes' and JobSet's variables
    (`JOB_COMPLETION_INDEX`, the restart count); `ManifestError` for no pod `index`.
    """
    name = document["metadata"]["name"]
    for replicated in document["spec"]["replicatedJobs"]:
        if job not in (job_name(name, replicated["name"], k)
                       for k in range(replicated.get("replicas", 1))):
            continue
        spec = replicated["template"]["spec"]
        if not 0 <= index < spec["completions"]:
            raise parts.ManifestError(
                f"`index` must be in 0..{spec['completions'] - 1} for Job {job!r}. "
                f"Received: index={index!r}")
        container = spec["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] if "value" in e else str(restart)
               for e in container.get("env", ())}
        return {**env, "JOB_COMPLETION_INDEX": str(index)}
    return None
