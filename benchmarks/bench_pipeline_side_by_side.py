"""A GPT-2-style causal LM's pipeline step against one device's, side by side in one process.

    nice -n 10 python benchmarks/bench_pipeline_side_by_side.py [ROUNDS] [SETTINGS]

The model and batch of `bench_pipeline_lm.py`. Every setting is built and traced first,
then the settings take one step each in turn, `ROUNDS` times (default 4), so all see the
same load; per setting the median step (`train_on_batch`), the process' CPU time for it,
and both as a ratio of one device's. Settings (comma-separated, default all):

- `one`: one device, the batch whole;
- `pipe4`, `pipe8`: `ModelParallel` over 2 simulated CPU devices, 4 or 8 micro-batches;
- `floor4`, `floor8`: one device doing the pipeline's arithmetic, the gradients of 4 or 8
  slices of the batch summed in one `tf.function`, then one Adam step: what splitting the
  batch costs before any pipeline does.
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_pipeline_lm as lm  # noqa: E402

SETTINGS = ("one", "pipe4", "pipe8", "floor4", "floor8")


def _step(setting, x, y):
    """A function taking one training step of `setting`."""
    import keras
    import tensorflow as tf

    import mgpu_tf

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = lm.gpt2_lm()
    if setting.startswith("floor"):
        pieces = int(setting[len("floor"):])
        optimizer = keras.optimizers.Adam(1e-4)
        optimizer.build(model.trainable_variables)
        inputs = {k: tf.constant(v) for k, v in x.items()}
        labels = tf.constant(y)

        @tf.function
        def step():
            total = None
            for i in range(pieces):
                rows = slice(i * lm.BATCH // pieces, (i + 1) * lm.BATCH // pieces)
                with tf.GradientTape() as tape:
                    out = model({k: v[rows] for k, v in inputs.items()}, training=True)
                    value = loss(labels[rows], out) / pieces
                grads = [tf.convert_to_tensor(g)
                         for g in tape.gradient(value, model.trainable_variables)]
                total = grads if total is None else [a + b for a, b in zip(total, grads)]
            optimizer.apply_gradients(zip(total, model.trainable_variables))

        return step
    if setting.startswith("pipe"):
        model = mgpu_tf.ModelParallel(model, ["CPU:0", "CPU:1"],
                                      microbatches=int(setting[len("pipe"):]))
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=loss)
    return lambda: model.train_on_batch(x, y)


def main(rounds=4, settings=SETTINGS):
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    import numpy as np

    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise SystemExit(f"SETTINGS must be among {', '.join(SETTINGS)}. Received: "
                         f"{', '.join(sorted(unknown))}.")
    began, load = time.perf_counter(), os.getloadavg()[0]
    tokens = np.random.default_rng(0).integers(1, lm.VOCAB, size=(lm.BATCH, lm.LENGTH + 1))
    x = {"token_ids": tokens[:, :-1].astype("int32"),
         "padding_mask": np.ones((lm.BATCH, lm.LENGTH), "int32")}
    y = tokens[:, 1:].astype("int32")
    steps = {}
    for setting in settings:
        started = time.perf_counter()
        steps[setting] = _step(setting, x, y)
        steps[setting]()  # traced here, not timed
        print(f"{setting}: built and traced in {time.perf_counter() - started:.1f} s", flush=True)
    wall = {s: [] for s in settings}
    cpu = {s: [] for s in settings}
    for _ in range(rounds):
        for setting in settings:
            w, c = time.perf_counter(), time.process_time()
            steps[setting]()
            wall[setting].append(time.perf_counter() - w)
            cpu[setting].append(time.process_time() - c)
    first = settings[0]
    print(f"{'setting':<8}{'step':>9}{'x ' + first:>9}{'CPU':>9}{'x ' + first:>9}")
    for setting in settings:
        step, used = statistics.median(wall[setting]), statistics.median(cpu[setting])
        print(f"{setting:<8}{step:>8.3f}s{statistics.median(wall[first]) / step:>9.2f}"
              f"{used:>8.3f}s{statistics.median(cpu[first]) / used:>9.2f}")
    print(f"whole run {time.perf_counter() - began:.0f} s; load {load:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4,
         tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else SETTINGS)
