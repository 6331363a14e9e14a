"""How long `import mgpu_tf` and `mgpu-tf --help` take; the import must load no TensorFlow.

    nice -n 10 python benchmarks/bench_import.py [ROUNDS] [OTHER_TREE]

Each round runs both commands once in a fresh interpreter for this tree and, when
OTHER_TREE (another checkout, such as an older commit's `git worktree`) is given, for
that one too, alternating, so a busy machine slows both alike. Prints the best wall
time of each over the rounds.
"""

import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent.parent
COMMANDS = {
    "import mgpu_tf": ["-c", "import sys, mgpu_tf; sys.exit('tensorflow' in sys.modules)"],
    "mgpu-tf --help": ["-m", "mgpu_tf.cli", "--help"],  # the console script's main
}


def _seconds(tree, arguments):
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *arguments], cwd="/", capture_output=True,
                            env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    seconds = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{tree}: {' '.join(arguments)} failed or loaded TensorFlow: "
                         f"{result.stderr.decode()[-500:]}")
    return seconds


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    trees = [HERE] + [pathlib.Path(p).resolve() for p in sys.argv[2:3]]
    best = {}
    for _ in range(rounds):
        for tree in trees:
            for name, arguments in COMMANDS.items():
                key = (str(tree), name)
                best[key] = min(best.get(key, float("inf")), _seconds(tree, arguments))
    print(f"{'tree':<40} {'command':<16} best of {rounds}")
    for (tree, name), seconds in sorted(best.items()):
        print(f"{tree:<40} {name:<16} {seconds * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
