"""The planner's memory per pipeline stage against each stage's measured peak, one by one.

    nice -n 10 python benchmarks/bench_stage_memory.py [BLOCKS HIDDEN SEQUENCE BATCH MICROBATCHES]

KerasHub's `GPT2CausalLM` (defaults: 8 blocks, hidden 256, 4 heads, feed-forward 4x,
sequence 128, vocabulary 1024, no dropout), cut into 2 stages as
`ModelParallel(balance="params")` cuts it, Adam. The planner's figure for each stage is
`mgpu_tf.planner.memory`'s (what `mgpu-tf plan` prints), its step memory: gradients,
activations, temporaries, with and without its runtime share.

Each stage is measured alone in a fresh process on one CPU device, as its device would
run it: its entering values for every micro-batch (made by the stages before it, outside
the measurement), each micro-batch's forward pass on its own tape, then the backward
passes in reverse order (the last stage's upstream gradient a tensor of ones), the
gradients of its own variables summed, and Adam's update. The figure is TensorFlow's
allocator peak over that traced step above what was in use before it (the weights and
slots), read with `tf.config.experimental.get_memory_info("CPU:0")`, whose statistics
the CPU keeps only with `TF_CPU_ALLOCATOR_USE_BFC=true`.
"""

import os
import subprocess
import sys
import time

VOCAB = 1024


def _model(blocks, hidden, sequence):
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=blocks, num_heads=max(1, hidden // 64),
        hidden_dim=hidden, intermediate_dim=4 * hidden, max_sequence_length=sequence,
        dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def _inputs(batch, sequence):
    import numpy as np

    tokens = np.random.default_rng(0).integers(1, VOCAB, size=(batch, sequence))
    return [np.ones((batch, sequence), "int32"), tokens.astype("int32")]  # mask, ids


def measure_stage(index, blocks, hidden, sequence, batch, microbatches):
    """In a fresh process: prints the measured step peak of stage `index`, in bytes."""
    import keras
    import tensorflow as tf

    from mgpu_tf.model_parallel import balance, graph as graph_lib, stage as stage_lib

    model = _model(blocks, hidden, sequence)
    graph = graph_lib.flatten(model)
    cut = stage_lib.cut(graph, balance.balance_by_params(graph, 2))
    rows = batch // microbatches
    flat = _inputs(batch, sequence)
    assert [t.name for t in graph.input_tensors] == ["padding_mask", "token_ids"]
    pieces = []
    for m in range(microbatches):
        values = {k: tf.constant(x[m * rows:(m + 1) * rows]) for k, x in zip(graph.inputs, flat)}
        for stage in cut.stages[:index]:
            values.update(zip(stage.leaving, stage([values[k] for k in stage.entering], False)))
        pieces.append([values[k].numpy() for k in cut.stages[index].entering])
    stage = cut.stages[index]
    earlier = {id(v) for s in cut.stages[:index] for v in s.variables}
    own = [v for v in stage.variables if v.trainable and id(v) not in earlier]
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(own)

    @tf.function
    def step(pieces):
        records = []
        for entering in pieces:
            with tf.GradientTape() as tape:
                tape.watch([x for x in entering if x.dtype.is_floating])
                out = stage(list(entering), training=True)
            records.append((tape, out))
        sums = [None] * len(own)
        for tape, out in reversed(records):
            targets = [y for y in out if y.dtype.is_floating]
            grads = tape.gradient(targets, own, output_gradients=[tf.ones_like(y)
                                                                  for y in targets])
            sums = [g if s is None else s + g for s, g in zip(sums, map(
                tf.convert_to_tensor, grads))]
        optimizer.apply(sums, own)
        return tf.constant(0)

    step(pieces)  # traces, makes the slots
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    step(pieces)
    print(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)


def main(blocks=8, hidden=256, sequence=128, batch=8, microbatches=4):
    from mgpu_tf.model_parallel import balance
    from mgpu_tf.planner import memory as memory_lib

    started = time.perf_counter()
    model = _model(blocks, hidden, sequence)
    planned = memory_lib.measure_model(model, sequence_length=sequence)
    counts = balance.balance_by_params(planned.graph, 2)
    footprints = planned.stage_footprints(counts, batch, 2, "never", microbatches)
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPP_MIN_LOG_LEVEL="3",
               CUDA_VISIBLE_DEVICES="")
    print(f"GPT-2 {blocks} blocks, hidden {hidden}, sequence {sequence}, vocabulary {VOCAB}; "
          f"batch {batch}, {microbatches} micro-batches, Adam; stages of {counts} layers")
    print(f"{'stage':>5} {'weights MiB':>11} {'measured MiB':>12} {'planner MiB':>11} "
          f"{'/ measured':>10} {'no runtime':>10} {'/ measured':>10}")
    for index, footprint in enumerate(footprints):
        done = subprocess.run(
            [sys.executable, __file__, "stage", str(index), str(blocks), str(hidden),
             str(sequence), str(batch), str(microbatches)],
            capture_output=True, text=True, env=env)
        if done.returncode:
            sys.exit(f"stage {index} failed:\n{done.stderr[-3000:]}")
        measured = int(done.stdout.split()[-1])
        planner = footprint.total - footprint.params - footprint.optimizer
        tensors = planner - footprint.runtime
        print(f"{index:>5} {footprint.params / 2**20:11.2f} {measured / 2**20:12.2f} "
              f"{planner / 2**20:11.2f} {planner / measured:10.2f} {tensors / 2**20:10.2f} "
              f"{tensors / measured:10.2f}", flush=True)
    print(f"whole run {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if len(sys.argv) > 1 and sys.argv[1] == "stage":
        measure_stage(*(int(a) for a in sys.argv[2:8]))
    else:
        main(*(int(a) for a in sys.argv[1:6]))
