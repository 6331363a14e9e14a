"""The scaling benchmark behind `mgpu-tf bench`: examples/s against devices and workers.

Each setting trains the same MLP with Keras `fit` in fresh processes: one
process with 1 or N threads, N simulated devices (mirrored), N local workers of
one thread each (multi_worker, with each communication option on and off) and
N pipeline stages (model_parallel). Settings alternate round by round so that
all see the same machine load; the figure of a setting is its median.

Workers also time the all-reduce alone (the gradients' bytes, as the step
sends them) and a one-number all-reduce (the fixed cost per all-reduce), so
the measured communication can be set against `mgpu_tf.planner.cost_model`.

Example:

```python
from mgpu_tf.planner.bench import scaling
settings = scaling.default_settings(2, global_batch=256)
results = scaling.run_benchmark(settings[:2], rounds=1, steps=5)
print(scaling.format_table(results))
```
"""

import dataclasses
import functools
import io
import json
import os
import statistics
import subprocess
import sys
import time
import zlib

import numpy as np

__all__ = [
    "Setting",
    "ModelSpec",
    "default_settings",
    "measure",
    "run_benchmark",
    "summarise",
    "format_table",
    "write_json",
    "write_plot",
]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The benchmark's model: an MLP of `depth` Dense layers of `width`."""

    features: int = 784
    width: int = 1024
    depth: int = 4
    classes: int = 10


@dataclasses.dataclass(frozen=True)
class Setting:
    """One way of running the benchmark.

    Args:
        key: short identifier, for `mgpu-tf bench --only`.
        name: label for the table.
        mode: `"process"` (default strategy), `"mirrored"`, `"workers"`
            (multi_worker) or `"model_parallel"`.
        count: devices, workers or stages.
        threads: TensorFlow threads per process.
        global_batch: examples per step over all replicas.
        options: extra `make_strategy` options.
        group: the row of the plot the setting belongs to.
    """

    key: str
    name: str
    mode: str
    count: int
    threads: int
    global_batch: int
    options: tuple = ()
    group: str = ""


def default_settings(n=2, *, global_batch=256, model_parallel=True):
    """The settings `mgpu-tf bench` runs for N devices or workers.

    A 1-thread process on `global_batch // n` examples gives the computation
    one worker does per step, and one worker alone under multi_worker on as
    many examples gives its whole step without communication: the compute
    term of the cost model's predicted step.
    """
    b = global_batch
    workers = [("workers", "", ()), ("workers-float16", " float16", (("compression", "float16"),)),
               ("workers-bfloat16", " bfloat16", (("compression", "bfloat16"),)),
               ("workers-packs", " 1 MB packs", (("bytes_per_pack", 1 << 20),)),
               ("workers-overlap", " 4 MB packs, last layer first",
                (("bytes_per_pack", 4 << 20), ("overlap", True))),
               ("workers-steps4", " steps_per_sync=4", (("steps_per_sync", 4),)),
               ("workers-float16-steps4", " float16, steps_per_sync=4",
                (("compression", "float16"), ("steps_per_sync", 4))),
               ("workers-mixed_bfloat16", " mixed_bfloat16",
                (("precision", "mixed_bfloat16"),)),
               ("workers-tcp", " transport=tcp", (("transport", "tcp"),)),
               ("workers-tcp-float16", " tcp, float16",
                (("transport", "tcp"), ("compression", "float16"))),
               ("workers-tcp-steps4", " tcp, steps_per_sync=4",
                (("transport", "tcp"), ("steps_per_sync", 4))),
               ("workers-tcp-float16-steps4", " tcp, float16, steps_per_sync=4",
                (("transport", "tcp"), ("compression", "float16"), ("steps_per_sync", 4)))]
    settings = [
        Setting("process1", "1 process x 1 thread", "process", 1, 1, b, group="devices"),
        Setting("processN", f"1 process x {n} threads", "process", 1, n, b, group="process"),
        Setting("compute", f"1 thread, batch {b // n}", "process", 1, 1, b // n,
                group="compute"),
        Setting("worker1", f"1 worker, batch {b // n}", "workers", 1, 1, b // n,
                group="compute-worker"),
        Setting("mirrored", f"{n} simulated devices", "mirrored", n, n, b, group="devices"),
        *[Setting(key, f"{n} workers{label}", "workers", n, 1, b, options, group=key)
          for key, label, options in workers],
        Setting("processN-mixed_bfloat16", f"1 process x {n} threads mixed_bfloat16",
                "process", 1, n, b, (("precision", "mixed_bfloat16"),),
                group="process mixed_bfloat16"),
    ]
    if model_parallel:
        settings.append(Setting("model_parallel", f"{n} stages model_parallel",
                                "model_parallel", n, n, b, (("microbatches", 4),),
                                group="model_parallel"))
    return settings


# ----------------------------------------------------------- in the child


def _thread_environment(threads):
    return {"TF_NUM_INTRAOP_THREADS": str(threads), "TF_NUM_INTEROP_THREADS": str(threads),
            "OMP_NUM_THREADS": str(threads)}


def _build_model(spec):
    import keras

    layers = [keras.Input((spec.features,))]
    layers += [keras.layers.Dense(spec.width, activation="relu") for _ in range(spec.depth - 1)]
    layers.append(keras.layers.Dense(spec.classes, dtype="float32"))
    return keras.Sequential(layers)


def _dataset(spec, batch, steps):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * 8, spec.features)).astype("float32")
    y = rng.integers(0, spec.classes, size=batch * 8).astype("int32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
            .repeat().prefetch(tf.data.AUTOTUNE).with_options(options))


def _time_collectives(strategy, model, wire, transport="tensorflow", repeats=20):
    """Seconds of collectives as the step sends them, for the cost model.

    Returns the all-reduce of the model's gradients, the all-reduce of one
    number (the fixed cost per all-reduce) and the all-gather of 1/N of the
    gradient bytes from each worker, which moves (N-1)/N of them over each
    link: half of what the ring all-reduce moves, with no arithmetic. With
    `transport="tcp"` these go over the toolkit's ring (the all-gather as N-1
    exchanges of 1/N each), as the step's gradients do.
    """
    import tensorflow as tf

    shapes = [tuple(w.shape) for w in model.trainable_weights]
    share = sum(int(np.prod(s)) for s in shapes) // strategy.num_replicas_in_sync
    if transport == "tcp":
        from mgpu_tf.comm import transport as transport_lib

        connection = transport_lib.connect(strategy)
        ring = connection.ring

    def timed(collective):
        @tf.function
        def once():
            return strategy.run(collective)

        once()
        start = time.perf_counter()
        for _ in range(repeats):
            out = once()
        tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0].numpy(), out)
        return (time.perf_counter() - start) / repeats

    def all_reduce(shapes_):
        if transport == "tcp":
            size = sum(int(np.prod(s)) for s in shapes_)
            return lambda: transport_lib.ring_all_reduce(
                connection, tf.ones((size,), wire), f"bench {size}")
        return lambda: tf.distribute.get_replica_context().all_reduce(
            "SUM", [tf.ones(s, wire) for s in shapes_])

    def all_gather():
        if transport == "tcp":
            out, op = tf.ones((share,), wire), zlib.crc32(b"bench exchange")
            for step in range(strategy.num_replicas_in_sync - 1):
                exchange = functools.partial(ring.exchange, count=share, op=op, step=step)
                out = tf.numpy_function(exchange, [out], out.dtype, stateful=True)
            return out
        # The CPU all-gather has no bfloat16 kernel; float16 moves as many bytes.
        dtype = "float16" if wire == "bfloat16" else wire
        return tf.distribute.get_replica_context().all_gather(tf.ones((share,), dtype), axis=0)

    return timed(all_reduce(shapes)), timed(all_reduce([(1,)])), timed(all_gather)


def _reverse_all_reduce(optimizer):
    """Makes the optimizer all-reduce the last layers' gradients first."""
    inner = optimizer.inner_optimizer if hasattr(optimizer, "inner_optimizer") else optimizer
    original = inner._all_reduce_sum_gradients

    def reversed_order(grads_and_vars):
        return list(reversed(original(list(reversed(list(grads_and_vars))))))

    object.__setattr__(inner, "_all_reduce_sum_gradients", reversed_order)


def _run_child(setting, spec, steps):
    import keras
    import tensorflow as tf

    import mgpu_tf

    tf.config.threading.set_intra_op_parallelism_threads(setting.threads)
    tf.config.threading.set_inter_op_parallelism_threads(setting.threads)
    options = dict(setting.options)
    overlap = options.pop("overlap", False)
    if setting.mode == "process":
        strategy = mgpu_tf.make_strategy("default", **options)
    elif setting.mode == "mirrored":
        mgpu_tf.simulate_devices(setting.count)
        strategy = mgpu_tf.make_strategy("mirrored", devices=setting.count, **options)
    elif setting.mode == "workers":
        strategy = mgpu_tf.make_strategy("multi_worker", **options)
    else:
        mgpu_tf.simulate_devices(setting.count)
        strategy = mgpu_tf.make_strategy("model_parallel", devices=setting.count, **options)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = mgpu_tf.prepare_model(_build_model(spec), strategy)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if overlap:
        _reverse_all_reduce(model.optimizer)
    seconds = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds.append(time.perf_counter() - self._start)

    # The first epoch traces and warms up; the second is timed.
    model.fit(_dataset(spec, setting.global_batch, steps), epochs=2, steps_per_epoch=steps,
              verbose=0, callbacks=[Timer()])
    result = {"examples_per_sec": setting.global_batch * steps / seconds[-1],
              "step_seconds": seconds[-1] / steps}
    if setting.mode == "workers":
        from mgpu_tf.planner import cost_model

        wire = options.get("compression", "float32")
        wire = "float32" if wire == "none" else wire
        (result["all_reduce_seconds"], result["latency_seconds"],
         gather_seconds) = _time_collectives(strategy, model, wire,
                                             options.get("transport", "tensorflow"))
        result["gradient_bytes"] = cost_model.gradient_bytes(model, wire)
        n = strategy.num_replicas_in_sync
        result["transport_bandwidth"] = (n - 1) / n * result["gradient_bytes"] / max(
            gather_seconds - result["latency_seconds"], 1e-9)
    return result


# ----------------------------------------------------------- in the parent


def measure(setting, *, spec=ModelSpec(), steps=30, timeout=600):
    """Runs one setting in fresh processes; returns its figures (worker 0's for workers)."""
    payload = json.dumps({"setting": dataclasses.asdict(setting),
                          "spec": dataclasses.asdict(spec), "steps": steps})
    command = [sys.executable, "-m", "mgpu_tf.planner.bench.scaling", payload]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               KERAS_BACKEND="tensorflow", **_thread_environment(setting.threads))
    env.pop("TF_CONFIG", None)
    if setting.mode == "workers":
        from mgpu_tf.cluster import launcher

        buffer = io.StringIO()
        code = launcher.launch(command, setting.count, env=env, output=buffer)
        text = buffer.getvalue()
        lines = [line[4:] for line in text.splitlines() if line.startswith("[0] ")]
    else:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=timeout)
        code, text, lines = done.returncode, done.stderr, done.stdout.splitlines()
    figures = [line for line in lines if line.startswith("{")]
    if code or not figures:
        raise RuntimeError(f"setting {setting.name!r} failed ({code}):\n{text[-3000:]}")
    return json.loads(figures[-1])


def _progress(done, total, label, stream):
    width = 30
    filled = width * done // total
    stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40.40}")
    stream.flush()


def run_benchmark(settings, *, rounds=3, steps=30, spec=ModelSpec(), progress=None):
    """Measures every setting `rounds` times, alternating; returns the summary rows.

    Args:
        settings: `Setting`s, e.g. from `default_settings`.
        rounds: runs of each setting. Defaults to `3`.
        steps: timed steps per run. Defaults to `30`.
        spec: the model. Defaults to `ModelSpec()`.
        progress: a stream for a progress bar, or None for none.

    Returns:
        A list of dictionaries, one per setting (see `summarise`).
    """
    runs = {s.name: [] for s in settings}
    total, done = rounds * len(settings), 0
    for _ in range(rounds):
        for setting in settings:
            if progress is not None:
                _progress(done, total, setting.name, progress)
            runs[setting.name].append(measure(setting, spec=spec, steps=steps))
            done += 1
    if progress is not None:
        _progress(done, total, "done", progress)
        progress.write("\n")
    return summarise(settings, runs)


def summarise(settings, runs):
    """Median figures per setting, with the ratios and the cost model's predictions.

    A setting's ratio is the median over rounds of its examples/s over the
    1-process row's (N threads, same precision) in the same round.
    """
    from mgpu_tf.planner import cost_model

    rows = []
    for s in settings:
        row = {"key": s.key, "name": s.name, "mode": s.mode, "count": s.count,
               "threads": s.threads, "global_batch": s.global_batch,
               "options": dict(s.options), "group": s.group, "rounds": len(runs[s.name])}
        for key in runs[s.name][0]:
            row[key] = statistics.median(r[key] for r in runs[s.name])
        row["examples_per_sec_by_round"] = [r["examples_per_sec"] for r in runs[s.name]]
        rows.append(row)
    by_group = {r["group"]: r for r in rows}
    names = {s.group: s.name for s in settings}
    # A worker's step alone under multi_worker (the strategy's own work included),
    # else its bare computation.
    compute = by_group.get("compute-worker") or by_group.get("compute")
    # A ring of two sends and receives at once: two opposite streams share the loopback.
    bandwidth = cost_model.measure_loopback_bandwidth(streams=2)
    for row in rows:
        same_precision = row["mode"] != "process" and "mixed_bfloat16" in row["group"]
        base = "process mixed_bfloat16" if same_precision else "process"
        if base in names and row["group"] != base and row["group"] != "process":
            # Paired by round: each round ran both settings minutes apart, under one load.
            pairs = zip(runs[row["name"]], runs[names[base]])
            row["ratio"] = statistics.median(
                r["examples_per_sec"] / b["examples_per_sec"] for r, b in pairs)
        if "all_reduce_seconds" in row and row["count"] > 1:
            row["bandwidth"] = bandwidth
            row["model_all_reduce_seconds"] = cost_model.ring_all_reduce_seconds(
                row["gradient_bytes"], row["count"], bandwidth, row["latency_seconds"])
            row["link_model_all_reduce_seconds"] = cost_model.ring_all_reduce_seconds(
                row["gradient_bytes"], row["count"], row["transport_bandwidth"],
                row["latency_seconds"])
            if compute and not row["options"].get("precision"):
                # Keras also all-reduces the step's logs: one more fixed cost a step.
                row["predicted_step_seconds"] = cost_model.predict_step_seconds(
                    compute["step_seconds"], row["gradient_bytes"], row["count"],
                    row["transport_bandwidth"], row["latency_seconds"],
                    steps_per_sync=int(row["options"].get("steps_per_sync", 1))
                ) + row["latency_seconds"]
    return rows


def format_table(rows):
    """The summary as a compact table."""
    lines = [f"{'setting':<38}{'ex/s':>9}{'ratio':>7}{'step ms':>9}{'comm ms':>9}"
             f"{'tcp ms':>9}{'link ms':>9}{'pred ms':>9}"]

    def ms(row, key):
        return f"{row[key] * 1e3:>9.1f}" if key in row else f"{'':>9}"

    for r in rows:
        ratio = f"{r['ratio']:>7.2f}" if "ratio" in r else f"{'':>7}"
        lines.append(f"{r['name']:<38}{r['examples_per_sec']:>9.0f}{ratio}"
                     f"{ms(r, 'step_seconds')}{ms(r, 'all_reduce_seconds')}"
                     f"{ms(r, 'model_all_reduce_seconds')}"
                     f"{ms(r, 'link_model_all_reduce_seconds')}{ms(r, 'predicted_step_seconds')}")
    bandwidth = next((r["bandwidth"] for r in rows if "bandwidth" in r), None)
    if bandwidth:
        links = []
        for transport, path in (("tensorflow", "TensorFlow's collectives (all-gather)"),
                                ("tcp", "the tcp ring (exchanges)")):
            seen = [r["transport_bandwidth"] for r in rows if "transport_bandwidth" in r
                    and r["count"] > 1
                    and r["options"].get("transport", "tensorflow") == transport]
            if seen:
                links.append(f"{statistics.median(seen) / 1e9:.2f} GB/s through {path}")
        lines.append(
            f"loopback bandwidth: {bandwidth / 1e9:.2f} GB/s each way over two TCP "
            "sockets at once, "
            f"{', '.join(links)}. comm: all-reduce of the gradients alone; tcp, link: the "
            "ring model with each bandwidth; pred: the cost model's step (a worker's "
            "measured step alone under multi_worker, else its 1-thread computation, + link "
            "model). ratio: against the 1-process row of the same precision, median of the "
            "rounds' ratios.")
    return "\n".join(lines)


def write_json(rows, path, **meta):
    """Writes the summary rows and `meta` to `path`."""
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=2)


def write_plot(rows, path):
    """Plots examples/s against devices or workers, one line per group, to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    one = next((r for r in rows if r["group"] == "devices" and r["count"] == 1), None)
    figure, axes = plt.subplots(figsize=(9, 4.5))
    axes.set_prop_cycle(color=plt.cm.tab20.colors)
    for group in dict.fromkeys(r["group"] for r in rows if not r["group"].startswith("compute")):
        members = sorted((r for r in rows if r["group"] == group), key=lambda r: r["count"])
        if group.startswith(("workers", "model_parallel")) and one is not None:
            members = [one] + members
        if group.startswith("process"):
            axes.axhline(members[0]["examples_per_sec"], linestyle="--",
                         color="grey" if group == "process" else "tan", label=members[0]["name"])
            continue
        axes.plot([r["count"] for r in members], [r["examples_per_sec"] for r in members],
                  marker="o", label=group if group != "devices" else "simulated devices")
    axes.set_xlabel("devices / workers / stages")
    axes.set_ylabel("examples/s")
    axes.set_xticks(sorted({r["count"] for r in rows}))
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _child_main(payload):
    data = json.loads(payload)
    setting = Setting(**{**data["setting"], "options": tuple(
        tuple(o) for o in data["setting"]["options"])})
    result = _run_child(setting, ModelSpec(**data["spec"]), data["steps"])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _child_main(sys.argv[1])
