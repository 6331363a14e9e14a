"""Closed ports on Kubernetes: the job's secret in a Secret, and a NetworkPolicy that admits
only the job's own pods to its workers.

`mgpu-tf k8s --job_secret create|NAME --network_policy` adds them to the manifests.

Design: docs/deployment.md#closed-ports
"""

import copy

from mgpu_tf.cluster import job_secret
from mgpu_tf.cluster import manifest_parts as parts

__all__ = ["SECRET_KEY", "pod_labels", "secret_name", "job_secret_manifest", "add_secret",
           "make_network_policy", "secure"]

# The key of the job's secret in its Secret.
SECRET_KEY = "job-secret"
# The labels each format's controller (or our template) puts on the job's pods.
_POD_LABELS = {"indexed-job": parts.CLUSTER_LABEL,
               "jobset": "jobset.sigs.k8s.io/jobset-name",
               "tfjob": "training.kubeflow.org/job-name"}


def pod_labels(name, format):
    """The labels every pod of job `name` carries in `format`."""
    return {_POD_LABELS[format]: name}


def secret_name(name):
    """The name of the Secret `mgpu-tf k8s --job_secret create` makes for job `name`."""
    return f"{name}-job-secret"


def job_secret_manifest(name, namespace, value=None):
    """A Secret holding a new job secret (or `value`) under `SECRET_KEY`."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": parts.metadata(secret_name(name), namespace),
            "type": "Opaque",
            "stringData": {SECRET_KEY: value or job_secret.new_secret()}}


def add_secret(documents, secret):
    """A copy of `documents` whose containers read `MGPU_TF_JOB_SECRET` from Secret `secret`."""
    documents = copy.deepcopy(documents)
    source = {"secretKeyRef": {"name": secret, "key": SECRET_KEY}}
    for container in _containers(documents):
        container.setdefault("env", []).append(
            {"name": job_secret.SECRET_VARIABLE, "valueFrom": copy.deepcopy(source)})
    return documents


def _containers(value):
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield from value["containers"]
        for key, item in value.items():
            if key != "containers":
                yield from _containers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _containers(item)


def make_network_policy(name, format, namespace, metrics_port=None):
    """A NetworkPolicy: the job's pods take connections, on any port, from its pods only,
    and on `metrics_port` (when given) from anywhere, so that Prometheus can scrape them.

    Any port: the tcp ring listens on ports the system picks, besides TensorFlow's gRPC
    port. Egress stays open (the pods reach their storage and registries).
    """
    selector = {"matchLabels": pod_labels(name, format)}
    ingress = [{"from": [{"podSelector": copy.deepcopy(selector)}]}]
    if metrics_port is not None:
        ingress.append({"ports": [{"port": int(metrics_port), "protocol": "TCP"}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": parts.metadata(f"{name}-workers-only", namespace),
            "spec": {"podSelector": selector, "policyTypes": ["Ingress"],
                     "ingress": ingress}}


def secure(documents, name, *, format, namespace=None, secret=None, network_policy=False,
           metrics_port=None):
    """`documents` with the job's secret and NetworkPolicy, as `mgpu-tf k8s` asks.

    Args:
        documents: what `kubernetes.make_manifests` returned for job `name`.
        format: their format (`kubernetes.FORMATS`).
        secret: `"create"` (a new Secret, `secret_name(name)`), the name of an existing
            Secret holding the secret under `SECRET_KEY`, or `None` (no secret).
        network_policy: add the NetworkPolicy. Defaults to `False`.
        metrics_port: the workers' metrics port, which the NetworkPolicy leaves open to
            the scrapers. Defaults to `None`.

    Raises:
        ManifestError: for a Secret name that is no DNS label.
    """
    extra = []
    if secret == "create":
        extra.append(job_secret_manifest(name, namespace))
        secret = secret_name(name)
    if secret is not None:
        parts.check_label(secret, "`job_secret` (a Secret's name, or 'create')")
        documents = add_secret(documents, secret)
    if network_policy:
        extra.append(make_network_policy(name, format, namespace, metrics_port))
    return extra + list(documents)
