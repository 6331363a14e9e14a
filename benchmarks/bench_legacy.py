"""Two workers with the toolkit's defaults against the paths users write by hand.

Each round runs, in fresh processes and in turn: one process of 2 threads (the baseline),
2 workers of one thread with `mgpu_tf.make_strategy("multi_worker")` and Keras 3 `fit`
(default options; `sharded`: the same fed by `mgpu_tf.shard_dataset`), 2 workers with
tf_keras + `tf.distribute.MultiWorkerMirroredStrategy` (the official multi-worker
tutorial's pattern) and 2 workers with a hand-written `tf.distribute` custom training loop. Same MLP (4 Dense layers of width 1024), global batch
256, SGD. Prints, per way, the whole run (fit, from its call to its return: tracing and
warm-up steps included) and the median step over the timed steps, and each way's scaling
(examples/s over the baseline's, by step and by whole run), paired by round.

    pip install tf_keras==<TensorFlow's version>
    python benchmarks/bench_legacy.py --rounds 2 --steps 500

Worker script: benchmarks/legacy_worker.py.
"""

import argparse
import io
import os
import pathlib
import statistics
import sys

from mgpu_tf.cluster import launcher

WORKER = str(pathlib.Path(__file__).with_name("legacy_worker.py"))
WAYS = ("one", "mgpu_tf", "sharded", "tf_keras", "loop")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


def _times(text):
    for line in text.splitlines():
        if "TIMES " in line:
            fit, step = line.split("TIMES ", 1)[1].split()
            return float(fit), float(step)
    raise RuntimeError(f"no TIMES line in the run's output:\n{text[-3000:]}")


def run(way, steps, warmup):
    """`(fit seconds, median step ms)` of one run of `way`."""
    command = [sys.executable, WORKER, f"--way={way}", f"--steps={steps}",
               f"--warmup={warmup}"]
    output = io.StringIO()
    if way == "one":
        code = launcher.run_alone(command + ["--threads=2"], 0, 1, env=ENV, output=output)
    else:
        code = launcher.launch(command, 2, env=ENV, output=output, errors=output)
    if code != 0:
        raise RuntimeError(f"{way} exited {code}:\n{output.getvalue()[-3000:]}")
    return _times(output.getvalue())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=500, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps before them")
    parser.add_argument("--only", default=",".join(WAYS))
    args = parser.parse_args()
    ways = args.only.split(",")
    results = {way: [] for way in ways}
    for round_ in range(args.rounds):
        for way in ways:
            fit, step = run(way, args.steps, args.warmup)
            results[way].append((fit, step))
            print(f"round {round_ + 1} {way:9s} whole run {fit:7.2f} s  step {step:7.2f} ms",
                  flush=True)
    print("\nway        whole run s (median)  step ms (median)  scaling by step  "
          "scaling by whole run")
    for way in ways:
        fits = [f for f, _ in results[way]]
        steps = [s for _, s in results[way]]
        line = f"{way:9s}  {statistics.median(fits):19.2f}  {statistics.median(steps):16.2f}"
        if "one" in results and way != "one":
            # 2 workers of the same global batch: scaling = baseline time / this time.
            by_step = [b[1] / s for b, s in zip(results["one"], steps)]
            by_run = [b[0] / f for b, f in zip(results["one"], fits)]
            line += (f"  {min(by_step):.2f}-{max(by_step):.2f}"
                     f"          {min(by_run):.2f}-{max(by_run):.2f}")
        print(line)


if __name__ == "__main__":
    main()
