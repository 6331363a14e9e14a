"""The planner's memory estimate against the peak of one real training step, model by model.

Each case runs `python -m support.planner_memory CASE` (tests/support/planner_memory.py)
in a fresh process, `--runs` times: the growth of the process' peak resident set over
building the model, compiling it with Adam and one training step, after a warm-up
step of a tiny model; then `mgpu_tf.plan`'s one-device estimate for the same batch.
Prints one row per case and run, and the measured / estimate ratio.

    nice -n 10 python benchmarks/bench_planner_memory.py [--runs 2] [--cases a,b]
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = ("dense", "dense-4096x2", "dense-1024x32", "transformer", "resnet50-224",
         "resnet50-fused-224")


def run_case(case):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    out = subprocess.run([sys.executable, "-m", "support.planner_memory", case], env=env,
                         capture_output=True, text=True, check=True, timeout=1800).stdout
    return dict(re.findall(r"^([^:\n]+): (.*)$", out, re.M))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    print(f"{'case':<20}{'batch':>6}{'estimate MiB':>14}{'measured MiB':>14}{'ratio':>7}")
    for case in args.cases.split(","):
        for _ in range(args.runs):
            row = run_case(case)
            estimate, measured = int(row["estimate bytes"]), int(row["measured bytes"])
            print(f"{case:<20}{row['batch']:>6}{estimate / 2**20:>14.1f}"
                  f"{measured / 2**20:>14.1f}{measured / estimate:>7.3f}", flush=True)
            print(f"  {row['footprint']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
