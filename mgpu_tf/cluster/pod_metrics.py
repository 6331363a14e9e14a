"""What `mgpu-tf k8s` adds to every worker pod for Prometheus and for sizing.

The metrics port with the usual scrape annotations, a `PodMonitor` for the Prometheus
Operator, and memory and CPU requests and limits, the memory read from a plan when asked.
"""

import json
import math
import re

from mgpu_tf.cluster import manifest_parts as parts

__all__ = ["METRICS_PORT_NAME", "add_metrics", "add_resources", "check_quantity",
           "memory_from_plan", "make_pod_monitor"]

METRICS_PORT_NAME = "metrics"
_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_CPU = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m)?$")
_MI = 1024 ** 2


def _templates(document):
    """The pod templates of a Job, JobSet or TFJob."""
    kind, spec = document.get("kind"), document.get("spec", {})
    if kind == "Job":
        yield spec["template"]
    elif kind == "JobSet":
        yield from (r["template"]["spec"]["template"] for r in spec["replicatedJobs"])
    elif kind == "TFJob":
        yield from (r["template"] for r in spec["tfReplicaSpecs"].values())


def add_metrics(documents, name, port, namespace=None, *, pod_monitor=True):
    """Gives every worker pod the metrics `port`, and the scrape annotations; returns the
    documents, with a `PodMonitor` for them last when `pod_monitor`.

    The pods' main job reads `MGPU_TF_METRICS_PORT` and binds `MGPU_TF_METRICS_HOST`
    (0.0.0.0: the pod's own address) unless given --metrics_port or --metrics_host.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise parts.ManifestError(
            f"`metrics_port` must be between 1 and 65535. Received: metrics_port={port!r}. "
            "E.g. 9400.")
    for document in documents:
        for template in _templates(document):
            # Metadata first, as Kubernetes writes a template.
            meta, rest = template.pop("metadata", {}), dict(template)
            template.clear()
            template.update(metadata=meta, **rest)
            meta.setdefault("labels", {})[parts.CLUSTER_LABEL] = name
            meta.setdefault("annotations", {}).update({
                "prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                "prometheus.io/path": "/metrics"})
            for container in template["spec"]["containers"]:
                if any(p["containerPort"] == port for p in container.get("ports", ())):
                    raise parts.ManifestError(
                        f"`metrics_port` must differ from the workers' other ports. Received: "
                        f"metrics_port={port}, the container's {container['ports']}.")
                container.setdefault("ports", []).append(
                    {"name": METRICS_PORT_NAME, "containerPort": port})
                container.setdefault("env", []).extend([
                    {"name": "MGPU_TF_METRICS_PORT", "value": str(port)},
                    {"name": "MGPU_TF_METRICS_HOST", "value": "0.0.0.0"}])
    return [*documents, make_pod_monitor(name, namespace)] if pod_monitor else list(documents)


def make_pod_monitor(name, namespace=None):
    """The Prometheus Operator's `PodMonitor` (monitoring.coreos.com/v1) for the job's pods."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": parts.metadata(name, namespace),
            "spec": {"selector": {"matchLabels": {parts.CLUSTER_LABEL: name}},
                     "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics"}]}}


def check_quantity(name, value, *, cpu=False):
    """Returns `value` as a Kubernetes quantity string; raises `ManifestError` naming `name`."""
    text = str(value).strip() if isinstance(value, (str, int, float)) else ""
    match = (_CPU if cpu else _MEMORY).match(text)
    if isinstance(value, bool) or not match or float(match.group(1)) <= 0:
        example = "4 or 500m (cores)" if cpu else "16Gi or 512Mi (bytes)"
        raise parts.ManifestError(
            f"`{name}` must be a positive Kubernetes quantity, e.g. {example}. "
            f"Received: {name}={value!r}")
    return text


def add_resources(documents, *, memory=None, cpu=None):
    """Sets every worker container's memory and CPU requests and limits (equal), in place."""
    wanted = {}
    if memory is not None:
        wanted["memory"] = check_quantity("memory", memory)
    if cpu is not None:
        wanted["cpu"] = check_quantity("cpu", cpu, cpu=True)
    for document in documents:
        for template in _templates(document) if wanted else ():
            for container in template["spec"]["containers"]:
                resources = container.setdefault("resources", {})
                resources.setdefault("requests", {}).update(wanted)
                resources.setdefault("limits", {}).update(wanted)
    return documents


def memory_from_plan(path, overhead="1Gi"):
    """The memory a worker needs by `mgpu-tf plan --json`'s output at `path`, plus `overhead`.

    The plan's recommended option's peak per device times its devices per worker, rounded
    up to MiB; `overhead` is the TensorFlow runtime's own, which the plan does not count.
    Returns `(quantity, the plan as a dict)`.
    """
    fix = ("Write it with `mgpu-tf plan --model ... --global_batch_size N --json > "
           "plan.json`.")
    try:
        with open(path) as f:
            plan = json.load(f)
        _check_plan_keys(plan)
        chosen = next(o for o in plan["options"] if o["name"] == plan["recommended"]["name"])
        peak, devices = float(chosen["peak"]), int(plan["devices"])
        if not (math.isfinite(peak) and peak > 0 and devices > 0):
            raise ValueError(f"peak={peak}, devices={devices}")
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as error:
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise parts.ManifestError(
            "`from_plan` must be the JSON of `mgpu-tf plan --json`. Received: "
            f"from_plan={str(path)!r} ({reason}). {fix}") from None
    extra = _bytes(check_quantity("memory_overhead", overhead))
    return f"{math.ceil((peak * devices + extra) / _MI)}Mi", plan


def _check_plan_keys(plan):
    """Raises `ValueError` saying what the JSON holds when it lacks a plan's keys."""
    wanted = ("recommended", "options", "devices")
    if isinstance(plan, dict) and all(key in plan for key in wanted):
        return
    found = (f"a JSON object with the keys {', '.join(map(repr, plan)) or 'none'}"
             if isinstance(plan, dict) else f"a JSON {type(plan).__name__}")
    raise ValueError(f"{found}, not a plan's {', '.join(map(repr, wanted))}")


def _bytes(quantity):
    number, unit = _MEMORY.match(quantity).groups()
    scale = {None: 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
    return float(number) * (1024 ** (" KMGTPE".index(unit[0])) if unit and unit.endswith("i")
                            else scale[unit])
