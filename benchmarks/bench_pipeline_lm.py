"""A GPT-2-style causal LM on 2 pipeline stages against one device: memory and wall clock.

    nice -n 10 python benchmarks/bench_pipeline_lm.py [ROUNDS] [STEPS]

KerasHub's `GPT2CausalLM` (8 blocks, hidden 256, 4 heads, feed-forward 1024, sequence
128, vocabulary 1024, no dropout), batch 8, Adam, trained as one device (plain Keras) and
as `ModelParallel` over 2 simulated CPU devices with 4 and 8 micro-batches. Each setting
runs in a fresh process, the settings alternating within each round. Per setting: the
whole run's seconds (building the model, the traced first step and the timed ones), the
median step after the first, the step's memory, and for the pipelines the planner's
estimate per stage (`mgpu_tf.planner.stages`).

Memory: TensorFlow's allocator statistics (`tf.config.experimental.get_memory_info`),
the peak of one traced step after `reset_memory_stats`, above what was in use before it
(weights and optimizer slots). Logical CPU devices share one allocator, so this is the
whole process: both stages together, not one device. The planner's figure beside it is the
sum of its stages' step memory (gradients, activations, temporaries), each stage's too.
"""

import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SETTINGS = ("one", "pipe4", "pipe8")
BATCH, LENGTH, VOCAB = 8, 128, 1024


def gpt2_lm():
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=8, num_heads=4, hidden_dim=256,
        intermediate_dim=1024, max_sequence_length=LENGTH, dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def one_setting(setting, steps):
    """In a fresh process: prints `whole step peak estimate stage-estimates` for one setting."""
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    import keras
    import numpy as np
    import tensorflow as tf

    from mgpu_tf.planner import stages as stages_lib

    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(BATCH, LENGTH + 1)).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((BATCH, LENGTH), "int32")}
    y = tokens[:, 1:]
    started = time.perf_counter()
    model = gpt2_lm()
    estimates = []
    if setting != "one":
        model = mgpu_tf.ModelParallel(model, ["CPU:0", "CPU:1"], microbatches=int(setting[4:]))
        footprints = stages_lib.stage_footprints(model, x, slots=2)
        estimates = [f.total - f.params - f.optimizer for f in footprints]
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    model.train_on_batch(x, y)  # traces; makes the optimizer's slots
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    model.train_on_batch(x, y)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    whole = time.perf_counter() - started
    print(whole, statistics.median(times), peak, sum(estimates),
          ",".join(str(e) for e in estimates))


def main(rounds=2, steps=4):
    results = {s: [] for s in SETTINGS}
    started = time.perf_counter()
    for _ in range(rounds):
        for setting in SETTINGS:
            out = subprocess.run([sys.executable, __file__, "one", setting, str(steps)],
                                 capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{setting} failed:\n{out.stderr[-3000:]}")
            whole, step, peak, estimate, stages = out.stdout.split("\n")[-2].split(" ")
            print(f"{setting}: whole {float(whole):.1f} s, step {float(step):.2f} s, peak "
                  f"{int(peak)} B, planner {estimate} B ({stages})", flush=True)
            results[setting].append((float(whole), float(step), int(peak), int(estimate),
                                     stages))
    print(f"whole run: {time.perf_counter() - started:.0f} s, {rounds} rounds of "
          f"{', '.join(SETTINGS)}, {steps} timed steps each")
    one = {k: statistics.median(r[k] for r in results["one"]) for k in (0, 1, 2)}
    print(f"{'setting':>8} {'whole s':>8} {'step s':>7} {'x one':>6} {'peak MiB':>9} "
          f"{'x one':>6} {'planner MiB':>11} {'/ peak':>6}  planner per stage MiB")
    for setting in SETTINGS:
        rows = results[setting]
        whole = statistics.median(r[0] for r in rows)
        step = statistics.median(r[1] for r in rows)
        peak = statistics.median(r[2] for r in rows)
        estimate = rows[-1][3]
        stages = " + ".join(f"{int(s) / 2**20:.1f}" for s in rows[-1][4].split(",") if s)
        ratio = f"{estimate / peak:6.2f}" if estimate else f"{'-':>6}"
        print(f"{setting:>8} {whole:8.1f} {step:7.2f} {one[1] / step:6.2f} "
              f"{peak / 2**20:9.1f} {peak / one[2]:6.2f} {estimate / 2**20:11.1f} {ratio}  "
              f"{stages or '-'}")
    print("x one: one device's step time over this one's (speed), this peak over one device's")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one_setting(sys.argv[2], int(sys.argv[3]))
    else:
        main(*(int(a) for a in sys.argv[1:3]))
