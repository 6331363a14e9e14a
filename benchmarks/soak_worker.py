"""A long two-worker training job that records each epoch's memory and step time.

Run as 2 workers (`mgpu_tf.cluster.launcher`; bench_soak.py and tests/test_soak.py do):

    python benchmarks/soak_worker.py OUT_DIR EPOCHS [LEAK_BYTES [WITHOUT [STEPS [KIND]]]]

trains a tiny model under `make_strategy("multi_worker", transport="tcp",
shard_optimizer_state=True)` on adaptive shares (`shard_dataset(weights="adaptive")`)
with the `TrainingMonitor` steering them, and appends one JSON line per epoch to
OUT_DIR/soak-<worker>.jsonl: `epoch`, `steps` (done so far), `rss` (resident bytes,
from /proc; `rss_anon` and `rss_file` its anonymous and file-backed parts), `held` (bytes
malloc has handed out and not had back, `held_bytes`), `python_blocks` (Python's small-object
blocks in use), `threads`, `seconds` (a monotonic clock), `step_seconds` (the epoch's wall
time over its steps) and `step_cpu_seconds` (the process' CPU time over its steps, which a
busy machine moves less).
LEAK_BYTES > 0 makes worker 1 keep a tensor of that many bytes per step: the leak a
detector must catch, beside worker 0, which has none. DataOrder drives the data's
position, so the fit reads one stream of epochs. WITHOUT, a comma-separated list of
`tcp`, `sharded`, `adaptive`, `monitor`, `stream` and `timeout`, leaves those parts out
(tensorflow's collectives instead of the ring; a new iterator each epoch instead of the
stream; collectives that wait for ever instead of `TIMEOUT_SECONDS`); `toolkit` leaves
mgpu_tf out altogether: one process trains the same model with plain Keras on one device,
the reference for what Keras and TensorFlow keep by themselves. STEPS: steps per epoch,
`STEPS_PER_EPOCH` by default. KIND `mirrored`: one process trains on 2 simulated devices
under `make_strategy("mirrored")` instead (tcp, adaptive shares and timeout do not apply).
"""

import ctypes
import json
import os
import pathlib
import sys
import time

import numpy as np

__all__ = ["EXAMPLES", "GLOBAL_BATCH", "STEPS_PER_EPOCH", "held_bytes", "read", "resident_bytes",
           "thread_count", "trend", "window_trend"]

EXAMPLES, FEATURES, GLOBAL_BATCH = 256, 8, 16
STEPS_PER_EPOCH = EXAMPLES // GLOBAL_BATCH
# A user's value: TensorFlow's own collective timeout held two threads per collective this
# long, which ran a fast run out of threads (docs/benchmarks.md, "Soak").
TIMEOUT_SECONDS = 60


def _statuses(*fields):
    """The values of `fields` in one read of /proc/self/status, in their order."""
    with open("/proc/self/status") as f:
        found = dict(line.split(":", 1) for line in f if ":" in line)
    missing = [field for field in fields if field not in found]
    if missing:
        raise RuntimeError(f"/proc/self/status has no {', '.join(missing)} line")
    return [int(found[field].split()[0]) for field in fields]


def _status(field):
    return _statuses(field)[0]


def resident_bytes():
    """This process' resident set size in bytes (VmRSS of /proc/self/status)."""
    return _status("VmRSS") * 1024


class _MallocInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def held_bytes():
    """The bytes this process holds through malloc: in use in its arenas plus mapped blocks.

    glibc's `mallinfo2` (2.33 on); what the allocator keeps resident beyond it is free space
    it has not returned. TensorFlow's buffers, numpy's arrays and Python's objects above 512
    bytes are in it; Python's small objects are counted by `sys.getallocatedblocks()`.
    """
    mallinfo2 = getattr(ctypes.CDLL(None), "mallinfo2", None)
    if mallinfo2 is None:
        raise RuntimeError("held_bytes reads glibc's mallinfo2 (glibc 2.33 on), which this C "
                           "library lacks. Run the soak on a glibc 2.33+ system (Debian 12).")
    mallinfo2.restype = _MallocInfo
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def thread_count():
    """This process' number of threads (Threads of /proc/self/status)."""
    return _status("Threads")


def read(out, index):
    """The records worker `index` wrote to `out`, one dict per epoch."""
    with open(pathlib.Path(out) / f"soak-{index}.jsonl") as f:
        return [json.loads(line) for line in f]


def trend(records, key, *, warmup=0.2, scale=1.0):
    """`(slope per 1,000 steps, residual standard deviation)` of `key` against steps.

    A least-squares line through the records after the first `warmup` share of them,
    `key`'s values multiplied by `scale`.
    """
    records = records[int(len(records) * warmup):]
    steps = np.array([r["steps"] for r in records], "float64")
    values = np.array([r[key] for r in records], "float64") * scale
    slope, intercept = np.polyfit(steps, values, 1)
    return 1000.0 * slope, float(np.std(values - (slope * steps + intercept)))


def window_trend(records, key, *, warmup=0.2, scale=1.0, windows=5):
    """`(median, slopes)`: the slopes per 1,000 steps of `key` fitted in `windows` equal
    spans of the records after the warm-up, and their median.

    A leak raises every window; a one-time rise (a retrace when adaptive shares move, a
    library's pages read in) raises one, which the median leaves out.
    """
    records = records[int(len(records) * warmup):]
    if len(records) < 2 * windows:
        raise ValueError(f"`windows` needs 2 records each after the warm-up. Received: "
                         f"windows={windows} for {len(records)} records; run more epochs.")
    bounds = np.linspace(0, len(records), windows + 1).astype(int)
    slopes = [trend(records[a:b], key, warmup=0.0, scale=scale)[0]
              for a, b in zip(bounds[:-1], bounds[1:])]
    return float(np.median(slopes)), slopes


def _record(out, index, leak_bytes):
    import keras
    import tensorflow as tf

    class Record(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps, self.kept = 0, []

        def on_epoch_begin(self, epoch, logs=None):
            self.start, self.cpu, self.first = time.perf_counter(), time.process_time(), self.steps

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if leak_bytes:
                self.kept.append(tf.ones([leak_bytes // 4], tf.float32) * float(self.steps))

        def on_epoch_end(self, epoch, logs=None):
            steps = self.steps - self.first
            rss, anon, file, threads = _statuses("VmRSS", "RssAnon", "RssFile", "Threads")
            line = {"epoch": epoch, "steps": self.steps, "rss": rss * 1024,
                    "rss_anon": anon * 1024, "rss_file": file * 1024,
                    "held": held_bytes(), "python_blocks": sys.getallocatedblocks(),
                    "threads": threads, "seconds": time.monotonic(),
                    "step_seconds": (time.perf_counter() - self.start) / max(1, steps),
                    "step_cpu_seconds": (time.process_time() - self.cpu) / max(1, steps)}
            with open(out / f"soak-{index}.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")

    return Record()


def _model(keras):
    keras.utils.set_random_seed(11)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(1)])


def main():
    import keras
    import tensorflow as tf

    out, epochs = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    leak_bytes = int(sys.argv[3]) if len(sys.argv) > 3 and index == 1 else 0
    without = set(sys.argv[4].split(",")) if len(sys.argv) > 4 and sys.argv[4] else set()
    examples = GLOBAL_BATCH * (int(sys.argv[5]) if len(sys.argv) > 5 else STEPS_PER_EPOCH)
    mirrored = len(sys.argv) > 6 and sys.argv[6] == "mirrored"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((examples, FEATURES)).astype("float32")
    y = (x @ rng.standard_normal((FEATURES, 1))).astype("float32")
    if "toolkit" in without:
        model = _model(keras)
        model.compile(keras.optimizers.Adam(1e-3), "mse")
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=epochs, verbose=0, shuffle=False,
                  callbacks=[_record(out, index, leak_bytes)])
        print(f"worker {index} finished without mgpu_tf", flush=True)
        return
    import mgpu_tf

    if mirrored:
        mgpu_tf.simulate_devices(2)
        without |= {"adaptive"}
        strategy = mgpu_tf.make_strategy("mirrored", shard_optimizer_state="sharded" not in without)
    else:
        strategy = mgpu_tf.make_strategy(
            "multi_worker", transport="tensorflow" if "tcp" in without else "tcp",
            shard_optimizer_state="sharded" not in without,
            timeout_seconds=None if "timeout" in without else TIMEOUT_SECONDS)
    with strategy.scope():
        model = mgpu_tf.prepare_model(_model(keras), strategy)
        model.compile(keras.optimizers.Adam(1e-3), "mse")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                 GLOBAL_BATCH,
                                 weights=None if "adaptive" in without else "adaptive")
    # DataOrder drives the data's position: the fit reads one stream of epochs.
    stream = [] if "stream" in without else [mgpu_tf.callbacks.DataOrder()]
    monitor = [] if "monitor" in without else [
        mgpu_tf.callbacks.TrainingMonitor(log_dir=str(out / "tb"), print_table=False)]
    model.fit(data, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[*stream, *monitor, _record(out, index, leak_bytes)])
    print(f"worker {index} finished", flush=True)


if __name__ == "__main__":
    main()
