"""The training monitor's figures in Prometheus' text format, served by every worker.

`TrainingMonitor(metrics_port=...)` starts one `MetricsExporter` per process; the series and
their labels are listed in docs/deployment.md#metrics.
"""

import math
import threading

import prometheus_client
from prometheus_client import core

from mgpu_tf.callbacks import figures
from mgpu_tf.cluster import detect
from mgpu_tf.cluster import launcher
from mgpu_tf.cluster import scrape
from mgpu_tf.cluster import tf_config

__all__ = ["SERIES", "COUNTERS", "DEVICE_SERIES", "MetricsExporter", "MetricsPortError",
           "check_port", "cluster_of", "serve"]

_GAUGES = tuple(f for f in figures.FIGURES if f.metric is not None)
# Gauges of each worker: name: (help, the monitor's figure, its scale to base units).
SERIES = {f.metric.name: (f.metric.help, f.name, f.to_base) for f in _GAUGES}
# Counters of each worker (exposed with a `_total` suffix): name: help.
COUNTERS = {
    "mgpu_tf_steps": "Training steps done in this run of the process.",
    "mgpu_tf_examples": "Examples this worker trained on in this run of the process.",
    "mgpu_tf_share_changes": "Changes of the adaptive shares' batch sizes.",
    "mgpu_tf_restarts": "Restarts of the worker group before this run (mgpu-tf launch).",
}
# Gauges of each GPU (NVML): name: (help, the reader's figure).
DEVICE_SERIES = {
    "mgpu_tf_device_utilization_ratio": ("Share of NVML's last sample period in which the GPU "
                                         "ran a kernel, from 0 to 1.", "utilization"),
    "mgpu_tf_device_memory_used_bytes": ("The GPU's memory in use, as NVML sees it.",
                                         "memory_bytes"),
    "mgpu_tf_device_power_watts": ("The GPU's power draw.", "power_watts"),
}
_LABELS = ("job_name", "worker")


class MetricsPortError(ValueError):
    """A metrics endpoint that cannot listen where it was asked to."""


def check_port(port):
    """Returns `port` (`None`, or a valid `metrics_port`); raises `ValueError` otherwise."""
    return None if port is None else scrape.check_metrics_port(port)


def serve(base_port, strategy, *, host="127.0.0.1", job_name="mgpu-tf"):
    """Starts this process' `MetricsExporter`, on its port under the job's `base_port`."""
    port = scrape.metrics_port(base_port, cluster_of(strategy))
    return MetricsExporter(port, host=host, job_name=job_name, base_port=base_port)


def cluster_of(strategy):
    """The `ClusterConfig` of a multi-worker `strategy`, else `None` (one process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not any(spec.get(role) for role in scrape.TRAINING_ROLES):
        return None
    return tf_config.ClusterConfig({r: list(h) for r, h in spec.items()},
                                   resolver.task_type, int(resolver.task_id or 0))


class MetricsExporter:
    """Serves the last figures published for this process' workers, at `host:port`.

    Example:

    ```python
    exporter = MetricsExporter(0, job_name="mnist")  # 0: any free port
    exporter.publish({"epoch": 0, "step": 10, "straggler_ratio": 1.0, "units": [
        {"step_ms": 20.0, "compute_ms": 15.0, "wait_ms": 5.0, "examples_per_sec": 3200.0,
         "batch": 64.0, "utilization_pct": 80.0, "memory_mb": 900.0, "peak_memory_mb": 950.0}]},
        workers=[0])
    exporter.url  # 'http://127.0.0.1:PORT/metrics'
    exporter.close()
    ```

    Args:
        port: the port to listen on (`scrape.metrics_port` gives a worker's).
        host: the address to bind. Defaults to `"127.0.0.1"`.
        job_name: the `job_name` label. Defaults to `"mgpu-tf"`.
        base_port: the job's `metrics_port`, for the error message. Defaults to `port`.

    Raises:
        MetricsPortError: when the port is taken or the address cannot be bound.
    """

    def __init__(self, port, *, host="127.0.0.1", job_name="mgpu-tf", base_port=None):
        scrape.check_metrics_port(port)
        self.job_name, self.host = job_name, host
        self._lock = threading.Lock()
        self._families = []
        self._steps, self._examples = {}, {}
        self._restarts = int(detect.environ_value(launcher.RESTART_VARIABLE, "0") or 0)
        # Only the monitor's figures: a scrape reads no /proc files, as prometheus_client's
        # process collector would; the kubelet (cAdvisor) exports a pod's CPU and memory.
        self._registry = prometheus_client.CollectorRegistry()
        self._registry.register(self)
        base = port if base_port is None else base_port
        try:
            self._server, _ = prometheus_client.start_http_server(port, host, self._registry)
        except OSError as error:
            where = f"port {port}" + (f" (metrics_port + {port - base})" if port != base else "")
            raise MetricsPortError(
                f"`metrics_port` must be free on `metrics_host`: {where} on {host} cannot "
                f"listen ({error.strerror or error}). Received: metrics_port={base}, "
                f"metrics_host={host!r}. Stop what listens there, or pass another "
                "--metrics_port.") from None
        self.port = self._server.server_port

    @property
    def url(self):
        """The endpoint's address, for a browser or `mgpu-tf top --targets`."""
        return f"http://{self.host}:{self.port}/metrics"

    def collect(self):
        """The families of the last `publish`, for `prometheus_client`."""
        with self._lock:
            return list(self._families)

    def publish(self, record, workers, *, share_changes=0, devices=None):
        """Serves one interval's figures (a `TrainingMonitor.history` record).

        Args:
            record: the interval's record, every worker's figures in `units`.
            workers: the indices of this process' workers in `units`.
            share_changes: batch-size changes of the adaptive shares so far. Defaults to `0`.
            devices: the GPUs' figures (`GpuUtilization.devices`). Defaults to none.
        """
        units = record["units"]
        total = sum(u["batch"] for u in units)
        families = []

        def family(name, help_text, values, counter=False, extra=()):
            kind = core.CounterMetricFamily if counter else core.GaugeMetricFamily
            made = kind(name, help_text, labels=_LABELS + extra)
            for labels, value in values:
                if value is not None and math.isfinite(value):
                    made.add_metric([self.job_name, *map(str, labels)], value)
            families.append(made)

        # The exporter's own figures, from every worker's row.
        own = {"share": {w: units[w]["batch"] / total if total else None for w in workers}}
        for figure in _GAUGES:
            if figure.source == figures.Source.EXPORTER:
                values = own[figure.name]
            else:
                values = {w: figure.value(record, w) for w in workers}
            family(figure.metric.name, figure.metric.help,
                   [((w,), None if values[w] is None else values[w] * figure.to_base)
                    for w in workers])
        for w in workers:
            done = self._steps.get(w, 0)
            self._examples[w] = (self._examples.get(w, 0.0)
                                 + max(0, record["step"] - done) * units[w]["batch"])
            self._steps[w] = max(done, record["step"])
        counts = {"mgpu_tf_steps": self._steps, "mgpu_tf_examples": self._examples,
                  "mgpu_tf_share_changes": dict.fromkeys(workers, share_changes),
                  "mgpu_tf_restarts": dict.fromkeys(workers, self._restarts)}
        for name, help_text in COUNTERS.items():
            family(name, help_text, [((w,), float(counts[name][w])) for w in workers],
                   counter=True)
        for name, (help_text, figure) in DEVICE_SERIES.items():
            family(name, help_text, [((workers[0], d), device[figure])
                                     for d, device in enumerate(devices or ())],
                   extra=("device",))
        with self._lock:
            self._families = families

    def close(self):
        """Stops serving."""
        self._server.shutdown()
        self._server.server_close()
