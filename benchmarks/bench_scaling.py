"""The scaling benchmark: `mgpu-tf bench` from a checkout, with the same arguments.

Trains one MLP (4 Dense layers of width 1024, global batch 256; with --model cnn a
compute-bound CNN) as 1 process of 1 and N threads, N simulated devices, N local workers
of one thread each (default options, and each communication option on and off) and N
pipeline stages, and prints examples/s,
the ratios and the ring all-reduce cost model's figures; writes bench.json and
bench.png to --out.

    python benchmarks/bench_scaling.py --workers 2 --rounds 3 --out /tmp/bench
"""

import sys

from mgpu_tf.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
