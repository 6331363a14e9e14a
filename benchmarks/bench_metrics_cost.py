"""What the monitor's metrics export costs in wall-clock time: whole fits, with and without it.

Both arms run `TrainingMonitor` on the main job's model and synthetic data (`mgpu_tf.train`),
under the default strategy and under 2 local workers (`multi_worker`, `mgpu-tf launch
--workers 2`); the "on" arm adds `metrics_port`, and a separate process scrapes each
worker's endpoint every `--scrape_seconds` (Prometheus' default is 15 s) while it trains.
The arms alternate in one fresh process (one per worker), after a round that warms both up
(and starts the endpoint, which then serves for the whole run, as in a job);
each `fit` is timed whole, tracing included, and builds a new model, as a job does. The cost
is the median `fit` with the export over the median without, less 1; "paired" is the median
of each round's own cost, which is steadier when other jobs share the cores.

    python benchmarks/bench_metrics_cost.py --rounds 5
    python benchmarks/bench_metrics_cost.py --rounds 5 --every_n_steps 10 --scrape_seconds 0.1
"""

import argparse
import socket
import statistics
import subprocess
import sys
import time

from mgpu_tf.planner.bench import runner

_EPOCHS = 5
_BATCH = 64
# Reads the endpoint every SECONDS until killed; prints a line per answered scrape.
_SCRAPER = """
import sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
print("ready", flush=True)
while True:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        print("scraped", flush=True)
    except OSError:
        pass
    time.sleep(seconds)
"""


def _scrape_seconds(url, count=50):
    """One scrape's seconds, client and endpoint both in this process, idle: an upper bound
    on the endpoint's work for a scrape."""
    import urllib.request

    start = time.perf_counter()
    for _ in range(count):
        urllib.request.urlopen(url, timeout=2).read()
    return (time.perf_counter() - start) / count


def _prepare(strategy):
    """The main job's model, compiled, and its synthetic data, sharded."""
    import keras
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf import train

    (x, y), _ = train.load_data("synthetic", examples=16384, seed=0)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, _BATCH,
                                 shuffle_seed=0)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = mgpu_tf.prepare_model(train.build_model(x.shape[1], 10, seed=0), strategy)
        model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, data


def fits(payload):
    """Runs in a fresh process (a worker, for multi_worker): the timed fits, alternating."""
    import mgpu_tf
    from mgpu_tf import callbacks
    from mgpu_tf.callbacks import metrics
    from mgpu_tf.cluster import scrape

    strategy = mgpu_tf.make_strategy(payload["strategy"])
    port = scrape.metrics_port(payload["port"], metrics.cluster_of(strategy))
    exporting = callbacks.TrainingMonitor(payload["every_n_steps"], global_batch_size=_BATCH,
                                          print_table=False, metrics_port=port)
    times = {name: [] for name in ("off", "on", "scrapes", "scrape_seconds", "off_cpu", "on_cpu",
                                   "off_own", "on_own")}
    for index in range(payload["rounds"] + 1):  # round 0 warms both up and is left out
        for arm in ("off", "on") if index % 2 else ("on", "off"):
            model, data = _prepare(strategy)
            # One endpoint for the whole run, as a job has: it starts in the first fit.
            monitor = exporting if arm == "on" else callbacks.TrainingMonitor(
                payload["every_n_steps"], global_batch_size=_BATCH, print_table=False)
            scraper = None
            if arm == "on":  # started before the clock, as Prometheus runs before the job
                scraper = subprocess.Popen(
                    [sys.executable, "-c", _SCRAPER, f"http://127.0.0.1:{port}/metrics",
                     str(payload["scrape_seconds"])], stdout=subprocess.PIPE, text=True)
                scraper.stdout.readline()
            start, cpu = time.perf_counter(), time.process_time()
            model.fit(data, epochs=payload["epochs"], verbose=0,
                      callbacks=[callbacks.DataOrder(), monitor], shuffle=False)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            if scraper is not None:
                scraper.kill()
                scrapes = len(scraper.communicate()[0].split())
                serving = scrapes * _scrape_seconds(monitor.metrics.url)
            if index:
                times[arm].append(seconds)
                times[f"{arm}_cpu"].append(cpu)  # every thread's, the endpoint's too
                times[f"{arm}_own"].append(monitor.own_seconds)
                if arm == "on":
                    times["scrapes"].append(scrapes)
                    times["scrape_seconds"].append(serving)
    exporting.metrics.close()
    return times


def _free_base(count=2):
    """A port with the next `count - 1` free too, for the workers of one host."""
    for base in range(21000, 60000, 53):
        try:
            sockets = [socket.create_server(("127.0.0.1", p)) for p in range(base, base + count)]
        except OSError:
            continue
        for s in sockets:
            s.close()
        return base
    raise RuntimeError("no free ports on loopback")


def _percent(on, off):
    return 100.0 * (statistics.median(on) / statistics.median(off) - 1.0)


def _paired(on, off):
    return 100.0 * statistics.median(a / b - 1.0 for a, b in zip(on, off))


def _rows(setting, workers, args):
    payload = {"strategy": setting, "rounds": args.rounds, "epochs": args.epochs,
               "port": _free_base(workers),
               "every_n_steps": args.every_n_steps, "scrape_seconds": args.scrape_seconds}
    times = runner.run_in_fresh_process(fits, payload, workers=workers, timeout=3600,
                                        label=f"fits under {setting}")
    rows = zip(times["off"], times["on"], times["scrapes"], times["off_cpu"], times["on_cpu"])
    for index, (off, on, scrapes, off_cpu, on_cpu) in enumerate(rows):
        print(f"{setting:<13}{index:>6}{off:>9.3f}{on:>9.3f}{100.0 * (on / off - 1.0):>+9.2f}%"
              f"{off_cpu:>9.3f}{on_cpu:>9.3f}{100.0 * (on_cpu / off_cpu - 1.0):>+9.2f}%"
              f"{scrapes:>9}", flush=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{setting:<13}{'median':>6}{median['off']:>9.3f}{median['on']:>9.3f}"
          f"{_percent(times['on'], times['off']):>+9.2f}%{median['off_cpu']:>9.3f}"
          f"{median['on_cpu']:>9.3f}{_percent(times['on_cpu'], times['off_cpu']):>+9.2f}%"
          f"{median['scrapes']:>9.0f}", flush=True)
    print(f"{setting:<13}{'':>6}wall clock ratio {median['on'] / median['off']:.4f}, paired "
          f"{_paired(times['on'], times['off']):+.2f}%; CPU time ratio "
          f"{median['on_cpu'] / median['off_cpu']:.4f}, paired "
          f"{_paired(times['on_cpu'], times['off_cpu']):+.2f}%; the monitor's hooks "
          f"{1000 * median['off_own']:.1f} ms without, {1000 * median['on_own']:.1f} ms with "
          f"(publishing: {100 * (median['on_own'] - median['off_own']) / median['on']:+.3f}% "
          f"of the fit); serving the scrapes at most {1000 * median['scrape_seconds']:.1f} ms "
          f"({100 * median['scrape_seconds'] / median['on']:.3f}% of the fit)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed fits of each arm")
    parser.add_argument("--settings", default="default,multi_worker")
    parser.add_argument("--epochs", type=int, default=_EPOCHS, help="epochs of each fit")
    parser.add_argument("--every_n_steps", type=int, default=None,
                        help="the monitor's interval in steps (default: each epoch)")
    parser.add_argument("--scrape_seconds", type=float, default=1.0,
                        help="seconds between two scrapes of an endpoint (default 1)")
    args = parser.parse_args()
    print(f"main job's model and synthetic data, {args.epochs} epochs, global batch {_BATCH}, "
          f"the monitor every {args.every_n_steps or 'epoch'} (steps), a scrape every "
          f"{args.scrape_seconds:g} s; seconds of each fit (wall clock and CPU time) without / "
          "with the export")
    print(f"{'setting':<13}{'round':>6}{'off s':>9}{'on s':>9}{'cost':>10}{'off CPU':>9}"
          f"{'on CPU':>9}{'cost':>10}{'scrapes':>9}")
    for setting in args.settings.split(","):
        _rows(setting, 2 if setting == "multi_worker" else 1, args)


if __name__ == "__main__":
    main()
