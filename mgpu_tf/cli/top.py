"""`mgpu-tf top`: a live table of the workers' metrics endpoints, the straggler marked.

Read each worker's metrics endpoint (TrainingMonitor(metrics_port=...), or the main job's
--metrics_port) and show one row per worker: step and compute time, wait, examples/s,
utilisation, memory and share. The endpoints come from --targets, or from --metrics_port and
the cluster in the environment (TF_CONFIG, ...) or the local launcher's --workers.
Example: mgpu-tf top --metrics_port 9400 --workers 2
"""

import statistics
import sys
import time
import urllib.error
import urllib.request

from mgpu_tf.callbacks import figures
from mgpu_tf.cli import parsing
from mgpu_tf.cluster import detect
from mgpu_tf.cluster import scrape

__all__ = ["add_parser", "top_command", "read_targets", "render", "STRAGGLER_THRESHOLD"]

_SHOWN = tuple(f for f in figures.FIGURES if f.top is not None)
_COLUMNS = ("worker", *(f.top.header for f in _SHOWN), "target")
_COMPUTE = figures.named("compute_ms")
_BOLD, _PLAIN = "\033[1;31m", "\033[0m"
# The slowest compute over the median above which a worker is named: identical workers differ
# by up to 10% from one measure to the next, the spread `mgpu-tf calibrate` accepts of one
# worker's runs and the band within which adaptive shares leave settled workers alone.
STRAGGLER_THRESHOLD = 1.1


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, top_command, __doc__, raw=True)
    parser.add_argument("--targets", default=None, metavar="HOST:PORT,...",
                        help="the workers' endpoints (default: --metrics_port on each worker "
                        "of the cluster in the environment, else on 127.0.0.1)")
    parser.add_argument("--metrics_port", type=int, default=None,
                        help="the job's --metrics_port: worker i of a host serves on it + i")
    parser.add_argument("--workers", type=int, default=None,
                        help="with --metrics_port: the workers of `mgpu-tf launch` on this "
                        "machine, on --metrics_port + 0..N-1")
    parser.add_argument("--interval", type=float, default=2.0,
                        help="seconds between refreshes (default 2)")
    parser.add_argument("--once", action="store_true",
                        help="print one table and exit, for scripts")
    return parser


def _targets(args):
    if args.targets:
        targets = [t.strip() for t in args.targets.split(",") if t.strip()]
        for target in targets:
            host, _, port = target.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"`--targets` must be HOST:PORT,... . Received: "
                                 f"--targets={args.targets}. E.g. 127.0.0.1:9400,127.0.0.1:9401")
        return targets
    if args.metrics_port is None:
        raise ValueError("`mgpu-tf top` needs --targets HOST:PORT,... or --metrics_port PORT. "
                         "Received: neither. E.g. --metrics_port 9400, the job's own.")
    scrape.check_metrics_port(args.metrics_port, name="--metrics_port")
    if args.workers is not None:
        if args.workers < 1:
            raise ValueError(f"`--workers` must be at least 1. Received: --workers="
                             f"{args.workers}. Give the launcher's --workers.")
        return [f"127.0.0.1:{args.metrics_port + i}" for i in range(args.workers)]
    config = detect.detect_cluster()
    if config is None:
        return [f"127.0.0.1:{args.metrics_port}"]
    return scrape.metrics_targets(args.metrics_port, config)


def read_targets(targets, timeout=2.0):
    """`{(target, worker): {metric name: value}}` of each endpoint; `{(target, None): None}`
    for one that does not answer."""
    from prometheus_client import parser

    rows = {}
    for target in targets:
        try:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=timeout) as answer:
                text = answer.read().decode()
        except (OSError, urllib.error.URLError):
            rows[target, None] = None
            continue
        for family in parser.text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("mgpu_tf_") and "device" not in sample.labels:
                    worker = int(sample.labels.get("worker", 0))
                    rows.setdefault((target, worker), {})[sample.name] = sample.value
    return rows


def _figure(row, figure):
    """`figure`'s value in its own unit, from a row of metrics, or `None`."""
    value = row.get(figure.metric.name)
    return None if value is None else value / figure.to_base


def _straggler(rows):
    """The worker with the longest compute, and how many times the median it takes."""
    computes = {key: row[_COMPUTE.metric.name] for key, row in rows.items()
                if row and _COMPUTE.metric.name in row}
    if len(computes) < 2 or statistics.median(computes.values()) <= 0:
        return None, None
    slowest = max(computes, key=computes.get)
    return slowest, computes[slowest] / statistics.median(computes.values())


def _named_straggler(rows):
    """`_straggler`'s worker, or `None` when it is within the noise, and its ratio."""
    slowest, times = _straggler(rows)
    return (slowest if times is not None and times > STRAGGLER_THRESHOLD else None), times


def _cells(row):
    cells = []
    for figure in _SHOWN:
        value = _figure(row, figure)
        if figure.top.percent_of is not None:
            whole = _figure(row, figures.named(figure.top.percent_of))
            value = 100.0 * value / whole if value is not None and whole else None
        cells.append("-" if value is None or value != value
                     else f"{value:.{figure.top.digits}f}")
    return cells


def render(rows, *, highlight=False):
    """The table of `read_targets`' rows, the straggler's worker marked `*` (and in bold)
    when its compute exceeds the median's `STRAGGLER_THRESHOLD` times."""
    slowest, times = _named_straggler(rows)
    lines = []
    for key in sorted(rows, key=lambda k: (k[1] is None, k[1] or 0, k[0])):
        target, worker = key
        if rows[key] is None:
            lines.append(["?", *["-"] * len(_SHOWN), f"{target} (no answer)"])
            continue
        lines.append([("*" if key == slowest else "") + str(worker), *_cells(rows[key]), target])
    widths = [max(len(c), *(len(line[i]) for line in lines)) if lines else len(c)
              for i, c in enumerate(_COLUMNS)]
    text = ["  ".join(c.rjust(w) for c, w in zip(_COLUMNS, widths))]
    for line in lines:
        row = "  ".join(v.rjust(w) for v, w in zip(line, widths))
        text.append(f"{_BOLD}{row}{_PLAIN}" if highlight and line[0].startswith("*") else row)
    if slowest is not None:
        text.append(f"straggler: worker {slowest[1]} (compute "
                    f"{_figure(rows[slowest], _COMPUTE):.1f} ms, "
                    f"{times:.2f}x the median)")
    elif times is not None:
        text.append(f"straggler: none (the slowest compute is {times:.2f}x the median, within "
                    f"the {STRAGGLER_THRESHOLD - 1:.0%} that identical workers vary by)")
    return "\n".join(text)


def top_command(args):
    try:
        targets = _targets(args)
        if not args.interval > 0:
            raise ValueError(f"`--interval` must be a positive number of seconds. Received: "
                             f"--interval={args.interval}. E.g. 2.")
    except ValueError as error:
        print(f"mgpu-tf top: {error}", file=sys.stderr)
        return 2
    if args.once:
        rows = read_targets(targets)
        print(render(rows))
        if all(row is None for row in rows.values()):
            print(f"mgpu-tf top: no endpoint answered ({', '.join(targets)}). Is the job "
                  "running with --metrics_port?", file=sys.stderr)
            return 1
        return 0
    try:
        while True:
            table = render(read_targets(targets), highlight=sys.stdout.isatty())
            sys.stdout.write(f"\033[H\033[2J{time.strftime('%H:%M:%S')}  mgpu-tf top, every "
                             f"{args.interval:g} s (Ctrl-C to stop)\n{table}\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
