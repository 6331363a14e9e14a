"""The monitor's metrics endpoint: a real Prometheus server scrapes a real 2-worker run.

One run (tests/support/metrics_job.py, worker 1 the slower) is checked several ways: the
series Prometheus stored and their labels, their values against each worker's Keras
`History` and the shares the run was given, and `mgpu-tf top --once` against the live
endpoints. Debian's `prometheus` package provides the server (`support.servers` installs it
when missing, so the README's test command needs nothing set up by hand).
"""

import json
import math
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from mgpu_tf.callbacks import metrics
from mgpu_tf.callbacks import utilization
from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import scrape
from mgpu_tf.cluster import tf_config
from support import metrics_job
from support import servers
from support import workers

pytestmark = pytest.mark.multiworker

_SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
_STEPS = metrics_job.EXAMPLES // metrics_job.GLOBAL_BATCH  # per epoch
_MB = 1024.0 * 1024.0


def _free_ports(count, first=20000):
    """`count` consecutive free ports on loopback: the base and worker 1's."""
    for base in range(first, 60000, 97):
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no free ports on loopback")


def _get(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _query(server, expression):
    url = f"{server}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    answer = json.loads(_get(url))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _wait(condition, what, seconds=90):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Prometheus scraping both workers of metrics_job; their logs; `top --once`'s output."""
    binary = servers.prometheus_binary()
    directory = tmp_path_factory.mktemp("metrics")
    port = _free_ports(2)
    server_port = _free_ports(1, first=port + 2)
    targets = [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
    (directory / "prometheus.yml").write_text(
        "global: {scrape_interval: 200ms, scrape_timeout: 150ms}\n"
        "scrape_configs:\n"
        f"  - job_name: workers\n    static_configs: [{{targets: {json.dumps(targets)}}}]\n")
    server = subprocess.Popen(
        [binary, f"--config.file={directory / 'prometheus.yml'}",
         f"--storage.tsdb.path={directory / 'data'}", "--log.level=warn",
         f"--web.listen-address=127.0.0.1:{server_port}"],
        stdout=subprocess.DEVNULL, stderr=open(directory / "prometheus.log", "w"))
    url = f"http://127.0.0.1:{server_port}"
    release = directory / "release"
    log = open(directory / "workers.log", "w+")
    job = subprocess.Popen(
        [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "2", "--",
         sys.executable, str(_SUPPORT / "metrics_job.py"), str(port), str(release)],
        env=workers.environment(), stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        def histories():
            text = pathlib.Path(log.name).read_text()
            assert job.poll() is None, text[-3000:]
            found = dict(re.findall(r"^\[(\d)\] HISTORY (.*)$", text, re.MULTILINE))
            return {int(w): json.loads(h) for w, h in found.items()} if len(found) == 2 else None

        logs = _wait(histories, "both workers' Keras logs")
        # Both workers still serve their last figures: wait until Prometheus has them.
        _wait(lambda: len([r for r in _query(url, "mgpu_tf_epoch") if
                           float(r["value"][1]) == metrics_job.EPOCHS - 1]) == 2,
              "Prometheus to scrape the last epoch of both workers")
        time.sleep(0.5)
        top = subprocess.run([sys.executable, "-m", "mgpu_tf.cli", "top", "--once",
                              "--metrics_port", str(port), "--workers", "2"],
                             capture_output=True, text=True, timeout=60)
        stored = _query(url, '{__name__=~"mgpu_tf_.*"}[5m]')
        yield {"logs": logs, "stored": stored, "top": top, "port": port, "url": url,
               "output": pathlib.Path(log.name).read_text()}
    finally:
        release.touch()
        try:
            job.wait(timeout=60)
        finally:
            job.kill()
            server.terminate()
            server.wait(timeout=30)
            log.close()


def _series(run, name):
    """`{worker: [values over the run]}` of one metric as Prometheus stored it."""
    found = {}
    for result in run["stored"]:
        if result["metric"]["__name__"] == name:
            found[int(result["metric"]["worker"])] = [float(v) for _, v in result["values"]]
    return found


def test_every_series_is_stored_for_both_workers(run):
    names = {r["metric"]["__name__"] for r in run["stored"]}
    gauges = set(metrics.SERIES) | {"mgpu_tf_share_ratio", "mgpu_tf_straggler_slowdown",
                                    "mgpu_tf_epoch"}
    assert gauges | {f"{name}_total" for name in metrics.COUNTERS} <= names, names
    for name in names:
        assert set(_series(run, name)) == {0, 1}, name


def test_the_labels_are_the_job_the_worker_and_the_scrape_target(run):
    for result in run["stored"]:
        labels = result["metric"]
        assert set(labels) == {"__name__", "job", "instance", "job_name", "worker"}, labels
        assert labels["job_name"] == metrics_job.JOB_NAME
        # Workers sharing a host serve on metrics_port + their index.
        assert labels["instance"] == f"127.0.0.1:{run['port'] + int(labels['worker'])}"


@pytest.mark.parametrize("series, logged, scale", [
    ("mgpu_tf_step_seconds", "step_ms", 1e-3),
    ("mgpu_tf_compute_seconds", "compute_ms", 1e-3),
    ("mgpu_tf_wait_seconds", "wait_ms", 1e-3),
    ("mgpu_tf_examples_per_second", "examples_per_sec", 1.0),
    ("mgpu_tf_memory_bytes", "memory_mb", _MB),
    ("mgpu_tf_utilization_ratio", "utilization_pct", 0.01),
    ("mgpu_tf_straggler_slowdown", "straggler_ratio", 1.0),
])
def test_the_values_are_those_of_each_workers_keras_logs(run, series, logged, scale):
    for worker, values in _series(run, series).items():
        epochs = [v * scale for v in run["logs"][worker][logged]]
        # Every value scraped is one epoch's, and the last scrape has the last epoch's.
        for value in values:
            assert any(math.isclose(value, e, rel_tol=1e-9) for e in epochs), (value, epochs)
        assert math.isclose(values[-1], epochs[-1], rel_tol=1e-9), (values[-1], epochs)


def test_the_counts_and_shares_are_those_the_run_was_given(run):
    for worker in (0, 1):
        share = 0.5  # even shards
        assert _series(run, "mgpu_tf_share_ratio")[worker][-1] == share
        assert _series(run, "mgpu_tf_batch_examples")[worker][-1] == (
            metrics_job.GLOBAL_BATCH * share)
        steps = _STEPS * metrics_job.EPOCHS
        assert _series(run, "mgpu_tf_steps_total")[worker][-1] == steps
        assert _series(run, "mgpu_tf_examples_total")[worker][-1] == (
            steps * metrics_job.GLOBAL_BATCH * share)
        assert _series(run, "mgpu_tf_restarts_total")[worker][-1] == 0


def test_utilization_is_a_share_of_the_cores_in_the_logs_and_the_table(run):
    for values in _series(run, "mgpu_tf_utilization_ratio").values():
        assert all(0.0 < v <= 1.0 for v in values), values
    for logs in run["logs"].values():
        assert all(0.0 < v <= 100.0 for v in logs["utilization_pct"]), logs
    # The chief's table has the column.
    header = re.search(r"^\[0\] (worker .*)$", run["output"], re.MULTILINE).group(1)
    assert "util %" in re.split(r"\s{2,}", header.strip()), header


def test_top_once_names_both_workers_and_the_slower_one(run):
    top = run["top"]
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    rows = {int(line.split()[0].lstrip("*")): line for line in lines
            if re.match(r"^\*?[01]\s", line.lstrip())}
    assert set(rows) == {0, 1}, top.stdout
    # The slower worker by the Keras logs: the larger compute time.
    logs = run["logs"]
    slower = max((0, 1), key=lambda w: logs[w]["compute_ms"][-1])
    assert f"straggler: worker {slower}" in top.stdout, top.stdout
    for worker in (0, 1):
        step_ms = float(rows[worker].split()[1])
        assert math.isclose(step_ms, logs[worker]["step_ms"][-1], abs_tol=0.05), rows


def test_the_grafana_dashboards_queries_run_on_the_series_stored(run):
    dashboard = json.loads((_SUPPORT.parents[1] / "docs" / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(queries) >= 10
    for query in queries:
        result = _query(run["url"], query.replace("$job_name", metrics_job.JOB_NAME))
        # dcgm-exporter's and NVML's series need GPUs; every other query plots something.
        if not re.search(r"DCGM_|mgpu_tf_device_", query):
            assert result, query


def test_a_port_in_use_is_named_with_the_fix():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(metrics.MetricsPortError,
                           match=rf"^`metrics_port` must be free .* Received: "
                                 rf"metrics_port={port}, .* pass another --metrics_port"):
            metrics.MetricsExporter(port)


@pytest.mark.parametrize("where", ["flag", "pod"])
def test_the_main_job_names_a_metrics_port_in_use_in_one_line(where):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # A pod's manifest (mgpu-tf k8s --metrics_port) gives the port in its environment.
        flag, env = ([f"--metrics_port={port}"], None) if where == "flag" else (
            [], {"MGPU_TF_METRICS_PORT": str(port), "MGPU_TF_METRICS_HOST": "127.0.0.1"})
        done = workers.run_python("-m", "mgpu_tf.train", "--epochs=1", "--dataset=synthetic",
                                  "--synthetic_examples=256", *flag, env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    fatal = [line for line in done.stderr.splitlines() if line.startswith("FATAL")]
    assert len(fatal) == 1 and f"Received: metrics_port={port}," in fatal[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, match", [
    ([], r"needs --targets HOST:PORT,\.\.\. or --metrics_port PORT\. Received: neither"),
    (["--targets", "localhost"], r"`--targets` must be HOST:PORT.* Received: "
                                 r"--targets=localhost\. E\.g\."),
    (["--metrics_port", "70000"], r"`--metrics_port` must be a port number .* "
                                  r"Received: --metrics_port=70000"),
    (["--targets", "127.0.0.1:1", "--interval", "0"], r"`--interval` must be a positive"),
    (["--metrics_port", "9400", "--workers", "0"], r"`--workers` must be at least 1"),
])
def test_top_names_a_bad_argument_in_one_line(capsys, args, match):
    assert cli_main(["top", "--once", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(match, err), err


def test_top_says_when_no_endpoint_answers(capsys):
    port = _free_ports(1)
    assert cli_main(["top", "--once", "--targets", f"127.0.0.1:{port}"]) == 1
    out, err = capsys.readouterr()
    assert f"127.0.0.1:{port} (no answer)" in out and "no endpoint answered" in err


def _proc_cpu_seconds():
    """The process' user and system time as the kernel accounts it (/proc/self/stat)."""
    fields = pathlib.Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("cluster, ports", [
    # Workers sharing a host (the local launcher): the base port plus each one's place there.
    ({"worker": ["127.0.0.1:2000", "127.0.0.1:2001", "127.0.0.1:2002"]},
     ["127.0.0.1:9400", "127.0.0.1:9401", "127.0.0.1:9402"]),
    # A pod (or node) each: the base port everywhere; the chief comes first.
    ({"chief": ["a:2222"], "worker": ["b:2222", "c:2222"]}, ["a:9400", "b:9400", "c:9400"]),
    # Two nodes of two workers each.
    ({"worker": ["n1:1", "n1:2", "n2:1", "n2:2"]}, ["n1:9400", "n1:9401", "n2:9400", "n2:9401"]),
])
def test_each_worker_serves_on_the_base_port_plus_its_place_on_its_host(cluster, ports):
    roles = [(r, i) for r in ("chief", "worker") for i in range(len(cluster.get(r, ())))]
    for (role, index), expected in zip(roles, ports):
        config = tf_config.ClusterConfig(cluster, role, index)
        assert scrape.metrics_port(9400, config) == int(expected.rpartition(":")[2])
        assert scrape.metrics_targets(9400, config) == ports


def test_top_finds_the_workers_in_tf_config(capsys, monkeypatch):
    hosts = ["127.0.0.1:2000", "127.0.0.1:2001"]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": hosts},
                                                "task": {"type": "worker", "index": 0}}))
    port = _free_ports(2)
    assert cli_main(["top", "--once", "--metrics_port", str(port)]) == 1
    out = capsys.readouterr().out
    assert f"127.0.0.1:{port} (no answer)" in out and f"127.0.0.1:{port + 1} (no answer)" in out


@pytest.mark.parametrize("busy", [False, True])
def test_cpu_utilization_is_the_kernels_cpu_time_over_wall_time_and_cores(busy):
    reader = utilization.CpuUtilization()
    start, cpu = time.perf_counter(), _proc_cpu_seconds()
    end = time.process_time() + 0.5
    while busy and time.process_time() < end:  # one core busy
        pass
    time.sleep(0 if busy else 0.5)
    share = reader.read()
    expected = (_proc_cpu_seconds() - cpu) / ((time.perf_counter() - start) * reader.cores)
    # The kernel counts in clock ticks (10 ms): 2 of them over 0.5 s.
    assert abs(share - expected) < 0.02 / reader.cores + 0.01, (share, expected)
    # Busy, it has a share of a core even when other jobs take most of them.
    assert (share > 0.1 / reader.cores) if busy else (share < 0.2), share


@pytest.mark.gpu
def test_gpus_report_utilization_memory_and_power_through_nvml():
    import tensorflow as tf

    reader = utilization.make_reader(1)
    assert isinstance(reader, utilization.GpuUtilization)
    with tf.device("GPU:0"):
        kept = tf.ones([1024, 1024, 64])  # 256 MiB the allocator holds
    share = reader.read()
    (device, *_) = reader.devices
    assert 0.0 <= share <= 1.0 and 0.0 <= device["utilization"] <= 1.0
    # NVML sees at least what TensorFlow's allocator holds.
    held = tf.config.experimental.get_memory_info("GPU:0")["current"]
    assert device["memory_bytes"] >= held >= kept.shape.num_elements() * 4
    assert math.isnan(device["power_watts"]) or device["power_watts"] > 0
