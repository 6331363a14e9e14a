"""What scikit-learn, when installed, adds to each worker's start and to the main job.

    python benchmarks/bench_worker_start.py [ROUNDS]

Keras imports scikit-learn (and through it SciPy's statistics) whenever it is installed,
for its scikit-learn wrappers. Each round runs a worker's imports (`mgpu_tf`, TensorFlow,
Keras) and the main job for one epoch in fresh interpreters, once as installed and once
with `sklearn` made unimportable (what an environment without it sees), alternating, so a
busy machine slows both alike. Prints each run's wall clock and CPU, then the medians.
"""

import resource
import statistics
import subprocess
import sys
import time

BLOCK = "import sys; sys.modules['sklearn'] = None; "
COMMANDS = {
    "imports": "import mgpu_tf, tensorflow, keras",
    "main job, 1 epoch": "import runpy, sys; sys.argv = ['train', '--epochs=1']; "
                         "runpy.run_module('mgpu_tf.train', run_name='__main__')",
}


def _run(code):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    runs = {}
    for round_ in range(rounds):
        for name, code in COMMANDS.items():
            for sklearn in ("installed", "absent"):
                wall, cpu = _run(code if sklearn == "installed" else BLOCK + code)
                runs.setdefault((name, sklearn), []).append((wall, cpu))
                print(f"round {round_ + 1}: {name:<18} scikit-learn {sklearn:<9} "
                      f"{wall:6.2f} s wall {cpu:6.2f} s CPU", flush=True)
    print(f"\nmedians of {rounds} rounds")
    for name in COMMANDS:
        walls, cpus = {}, {}
        for sklearn in ("installed", "absent"):
            walls[sklearn] = statistics.median(w for w, _ in runs[(name, sklearn)])
            cpus[sklearn] = statistics.median(c for _, c in runs[(name, sklearn)])
            print(f"{name:<18} scikit-learn {sklearn:<9} {walls[sklearn]:6.2f} s wall "
                  f"{cpus[sklearn]:6.2f} s CPU")
        print(f"{name:<18} absent / installed: wall {walls['absent'] / walls['installed']:.2f}, "
              f"CPU {cpus['absent'] / cpus['installed']:.2f}")


if __name__ == "__main__":
    main()
