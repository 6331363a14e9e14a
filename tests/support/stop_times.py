"""Prints how long after SIGTERM two training workers exit, over several runs.

    python -m support.stop_times [RUNS]

Each run starts `support.mw_signals stop` on two workers and, once both have trained five
steps, sends SIGTERM to both (as `mgpu-tf launch` stops a group), or to worker 1 only
(worker 0 stops with it at the step they agree on), or SIGKILLs worker 1 and, a second
later, sends SIGTERM to worker 0, which waits in worker 1's collective. Prints each time
from the signal to the last exit, and the median and maximum.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from mgpu_tf.cluster import launcher
from support import workers

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(case):
    out = tempfile.mkdtemp(prefix="stop-times-")
    env = dict(workers.environment(), PYTHONPATH=os.pathsep.join(
        [_TESTS, os.environ.get("PYTHONPATH", "")]))
    processes = [subprocess.Popen(
        [sys.executable, "-m", "support.mw_signals", "stop", out], cwd=_TESTS,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(env, TF_CONFIG=json.dumps(config)))
        for config in launcher.worker_tf_configs(2)]
    steps = [os.path.join(out, f"steps-{i}") for i in range(2)]
    while min(len(open(s).readlines()) if os.path.exists(s) else 0 for s in steps) < 5:
        time.sleep(0.05)
    if case == "survivor":
        processes[1].kill()
        processes[1].wait()
        time.sleep(1.0)
        targets = processes[:1]
    else:
        targets = processes
    sent = time.monotonic()
    for p in targets[1:] if case == "one" else targets:
        p.send_signal(signal.SIGTERM)
    times = []
    for p in targets:
        p.wait()
        times.append(time.monotonic() - sent)
    last = [p.stderr.read().strip().splitlines()[-1:] for p in targets]
    return max(times), [p.returncode for p in targets], last


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for case in ("both", "one", "survivor"):
        times = []
        for _ in range(runs):
            seconds, codes, last = _run(case)
            times.append(seconds)
            print(f"{case}: {seconds:.2f} s, exit codes {codes}, {last}", flush=True)
        print(f"{case}: runs={runs} median={statistics.median(times):.2f} s "
              f"max={max(times):.2f} s", flush=True)


if __name__ == "__main__":
    main()
