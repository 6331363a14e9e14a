"""What a worker's imports cost, by the packages beside TensorFlow and by the suite's start-up hook.

    python benchmarks/bench_worker_start.py [ROUNDS]

Each round runs a worker's imports (`import mgpu_tf, tensorflow, keras`) in fresh
interpreters, one per setting, alternating, so a busy machine slows every setting alike:
ml_dtypes 0.7.0 and 0.6.0 (each from a `pip install --target` folder put first on the
path), 0.6.0 with `matplotlib.pyplot` unimportable (what loading it on first use saves:
Keras imports it only to draw), and 0.6.0 with the test processes' start-up hook
(tests/support/startup). Prints each run's wall clock and CPU, then the medians.
"""

import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
IMPORTS = "import mgpu_tf, tensorflow, keras"
NO_PYPLOT = "import sys; sys.modules['matplotlib.pyplot'] = None; "


def _ml_dtypes(folder, version):
    target = folder / version
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), f"ml_dtypes=={version}"], check=True)
    return str(target)


def _run(code, path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="2")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as folder:
        new, old = (_ml_dtypes(pathlib.Path(folder), v) for v in ("0.7.0", "0.6.0"))
        hook = str(ROOT / "tests" / "support" / "startup")
        settings = {
            "ml_dtypes 0.7.0": (IMPORTS, [new]),
            "ml_dtypes 0.6.0": (IMPORTS, [old]),
            "0.6.0, no pyplot": (NO_PYPLOT + IMPORTS, [old]),
            "0.6.0, start-up hook": (IMPORTS, [old, hook]),
        }
        runs = {name: [] for name in settings}
        for round_ in range(rounds):
            for name, (code, path) in settings.items():
                wall, cpu = _run(code, path)
                runs[name].append((wall, cpu))
                print(f"round {round_ + 1}: {name:<22} {wall:6.2f} s wall {cpu:6.2f} s CPU",
                      flush=True)
    print(f"\nmedians of {rounds} rounds (ratio to ml_dtypes 0.7.0)")
    first = None
    for name, measured in runs.items():
        wall = statistics.median(w for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        first = first or (wall, cpu)
        print(f"{name:<22} {wall:6.2f} s wall ({wall / first[0]:.2f}) "
              f"{cpu:6.2f} s CPU ({cpu / first[1]:.2f})")


if __name__ == "__main__":
    main()
