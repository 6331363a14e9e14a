"""Faults at random moments: a seeded injector against training with restarts.

Each run trains fault_worker.py on 2 workers under `mgpu-tf launch --max_restarts R`
(or the elastic launcher, `--workers 1:2 --discovery_script S`) while a thread of this
process injects, at seeded random moments (during start-up or during training), one of

- `kill9`: SIGKILL of a worker;
- `stop`: SIGSTOP of a worker for longer than `timeout_seconds`, then SIGCONT;
- `ring_close`: the worker shuts its tcp ring's sockets down (its hook, by a file);
- `disk_full`: a file-size limit on the worker (`prlimit RLIMIT_FSIZE`), so its next
  backup write fails as on a full disk;

or two at once. Each fault waits for the group's next start. Under the elastic launcher a
kill may also take the worker's slot away until the smaller group trains, after which
the group grows back at a backup. Every run must end with the weights of an
uninterrupted run (within `support.tolerance.training`) or stop with the launcher's one
line; its backup directory must load (the metadata names a weights file whose every array
reads); and it must end within `--start_seconds` per start of the group, plus a minute,
else it counts as a hang.

    python benchmarks/bench_faults.py --runs 60 --seed 0
"""

import argparse
import collections
import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

_HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE), str(_HERE.parent / "tests")]
import fault_worker  # noqa: E402
from support import compare, tolerance  # noqa: E402

KINDS = ("kill9", "stop", "ring_close", "disk_full")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
           MGPU_TF_BENCH_TIMEOUT="3")
TIMEOUT_SECONDS = 3.0
STOP_SECONDS = 2 * TIMEOUT_SECONDS  # a SIGSTOP outlasts the heartbeat timeout
SIZE_LIMIT = 2048  # bytes: above the progress file, below any weights file


def plan(rng, *, elastic):
    """The faults of one run: a list of events, each `{"faults": [(kind, worker)],
    "moment": "start-up" | "training", "delay": s, "shrink": bool}`."""
    events = []
    for _ in range(int(rng.integers(2, 5))):
        if rng.random() < 0.5:
            kinds = rng.choice(len(KINDS), 2, replace=False)
            faults = [(KINDS[k], int(rng.integers(2))) for k in kinds]
        else:
            faults = [(KINDS[int(rng.integers(len(KINDS)))], int(rng.integers(2)))]
        startup = rng.random() < 0.15
        events.append({"faults": faults, "moment": "start-up" if startup else "training",
                       "delay": float(rng.uniform(0, 4.0 if startup else 1.5)),
                       "shrink": bool(elastic and rng.random() < 0.5
                                      and any(k == "kill9" for k, _ in faults))})
    return events


class Injector(threading.Thread):
    """Fires a run's planned events, each in a start of the group later than the last's."""

    def __init__(self, out, events, slots):
        super().__init__(daemon=True)
        self.out, self.events, self.slots = out, events, slots
        self.done = threading.Event()
        self.fired = []  # (start, kind, worker, moment)

    def _wait(self, condition):
        while not self.done.is_set():
            found = condition()
            if found is not None:
                return found
            time.sleep(0.01)
        return None

    def _pids(self, start):
        pids = {}
        for path in (self.out / "pids").glob(f"{start}-*"):
            try:
                pids[int(path.name.split("-")[1])] = int(path.read_text())
            except ValueError:  # being written
                pass
        return pids

    def _latest_start(self):
        starts = [int(p.name.split("-")[0]) for p in (self.out / "pids").glob("*-*")]
        return max(starts, default=None)

    def _training(self, start):
        for path in self.out.glob("progress-*"):
            try:
                if path.read_text().split()[0] == str(start):
                    return True
            except (OSError, IndexError):
                pass
        return None

    def run(self):
        last = -1
        for event in self.events:
            start = self._wait(lambda: (lambda s: s if s is not None and s > last else None)(
                self._latest_start()))
            if start is None:
                return
            while event["moment"] == "training":
                # A start that fails before it trains (a fault or not) hands on to the next.
                found = self._wait(lambda: "trains" if self._training(start) else (
                    self._latest_start() if self._latest_start() != start else None))
                if found is None:
                    return
                if found == "trains":
                    break
                start = found
            if self.done.wait(event["delay"]) or self._latest_start() != start:
                if self.done.is_set():
                    return
            pids = self._pids(start)
            if event["shrink"]:
                self.slots.write_text("1\n")
            for kind, worker in event["faults"]:
                worker = worker if worker in pids else min(pids, default=None)
                if worker is None or not _fire(kind, pids[worker], self.out, start, worker):
                    continue
                self.fired.append((start, kind, worker, event["moment"]))
            last = start
            if event["shrink"]:
                # The slot comes back once the smaller group trains: it grows at a backup.
                self._wait(lambda: (lambda s: s if s is not None and s > start
                                    and self._training(s) else None)(self._latest_start()))
                self.slots.write_text("2\n")


def _fire(kind, pid, out, start, worker):
    """Injects one fault; False when the process was already gone."""
    try:
        if kind == "kill9":
            os.kill(pid, signal.SIGKILL)
        elif kind == "stop":
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(STOP_SECONDS, _continue, args=(pid,)).start()
        elif kind == "ring_close":
            os.kill(pid, 0)
            (out / f"close-{start}-{worker}").touch()
        elif kind == "disk_full":
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (SIZE_LIMIT, SIZE_LIMIT))
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _continue(pid):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def check_backup(directory):
    """`(loads, leftovers)`: whether the backup's metadata names a weights file whose
    every array reads (True when there is no backup), and the temporary files left."""
    import h5py

    directory = pathlib.Path(directory)
    if not directory.exists():
        return True, 0
    leftovers = len([p for p in directory.iterdir() if p.name.startswith(".tmp-")])
    metadata = directory / "training_metadata.json"
    if not metadata.exists():
        return not any(p.name.startswith("weights-") for p in directory.iterdir()), leftovers
    try:
        name = json.loads(metadata.read_text())["weights"]
        with h5py.File(directory / name, "r") as f:
            arrays = []
            f.visititems(lambda _, item: arrays.append(item[()])
                         if isinstance(item, h5py.Dataset) else None)
        return bool(arrays), leftovers
    except (OSError, KeyError, ValueError):
        return False, leftovers


def launch_command(out, *, max_restarts, elastic, slots):
    command = [sys.executable, "-m", "mgpu_tf.cli", "launch", "--grace_seconds", "1",
               "--max_restarts", str(max_restarts)]
    if elastic:
        script = out / "slots.sh"
        script.write_text(f"#!/bin/sh\ncat {slots}\n")
        script.chmod(0o755)
        command += ["--workers", "1:2", "--discovery_script", str(script),
                    "--discovery_seconds", "0.5"]
    else:
        command += ["--workers", "2"]
    return command + ["--", sys.executable, fault_worker.__file__, str(out)]


def run_once(out, events, *, max_restarts, elastic, hard_timeout):
    """Runs one training with its faults; returns a dict of what happened."""
    out.mkdir(parents=True)
    slots = out / "slots"
    slots.write_text("2\n")
    injector = Injector(out, events, slots)
    injector.start()
    began = time.monotonic()
    launcher = subprocess.Popen(
        launch_command(out, max_restarts=max_restarts, elastic=elastic, slots=slots),
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    hang = False
    try:
        output, _ = launcher.communicate(timeout=hard_timeout)
    except subprocess.TimeoutExpired:
        hang = True
        os.killpg(launcher.pid, signal.SIGTERM)
        try:
            output, _ = launcher.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            output, _ = launcher.communicate()
    injector.done.set()
    injector.join()
    for path in (out / "pids").glob("*"):  # nothing may outlive its run
        try:
            os.killpg(int(path.read_text()), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass
    lines = [line for line in output.splitlines() if line.startswith("mgpu-tf launch:")]
    loads, leftovers = check_backup(out / "backup")
    return {"code": launcher.returncode, "hang": hang, "fired": injector.fired,
            "seconds": time.monotonic() - began, "loads": loads, "leftovers": leftovers,
            "launcher_lines": lines, "output": output,
            "starts": len({p.name.split("-")[0] for p in (out / "pids").glob("*")})}


def outcome(result, reference, bound):
    """`"same weights"`, `"stopped with one line"`, `"hang"` or a failure's description."""
    if result["hang"]:
        return "hang"
    if not result["loads"]:
        return "backup does not load"
    if result["code"] == 0:
        final = result["out"] / "final.npz"
        if not final.exists():
            return "no final weights"
        difference = compare.relative_difference(fault_worker.weights(final), reference)
        result["difference"] = difference
        return "same weights" if difference <= bound else f"wrong weights ({difference:.2e})"
    # Each start that failed has its line; the last one is why the group stopped.
    last = result["launcher_lines"][-1:] or [""]
    clear = "failed with exit code" in last[0] or "fewer workers than the minimum" in last[0]
    return "stopped with one line" if clear else "stopped without a clear line"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first_run", type=int, default=0)
    parser.add_argument("--elastic_every", type=int, default=3,
                        help="every this many runs uses the elastic launcher (0: none)")
    parser.add_argument("--short_every", type=int, default=8,
                        help="every this many runs allows one restart fewer than its faults")
    parser.add_argument("--start_seconds", type=float, default=120.0,
                        help="a run that takes longer than this per start of its group, "
                             "plus a minute, is stopped and counted as a hang")
    parser.add_argument("--minutes", type=float, default=None,
                        help="start no run after this many minutes")
    parser.add_argument("--keep", default=None, help="keep each run's files under this folder")
    args = parser.parse_args()
    root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="bench_faults-"))
    reference_run = run_once(root / "reference", [], max_restarts=0, elastic=False,
                             hard_timeout=60 + args.start_seconds)
    if reference_run["code"]:
        raise RuntimeError("the uninterrupted run failed:\n" + reference_run["output"][-3000:])
    reference = fault_worker.weights(root / "reference" / "final.npz")
    steps = fault_worker.EPOCHS * fault_worker.STEPS_PER_EPOCH
    bound = tolerance.training(steps, fault_worker.TERMS, optimizer="adam")
    print(f"reference: {steps} steps in {reference_run['seconds']:.1f} s; weights bound "
          f"{bound:.2e}", flush=True)
    kinds, outcomes, moments = collections.Counter(), collections.Counter(), collections.Counter()
    doubles = 0
    print(f"{'run':>4} {'launcher':>8} {'faults':>6} {'starts':>6} {'s':>6}  outcome", flush=True)
    began, runs = time.monotonic(), 0
    for run in range(args.first_run, args.first_run + args.runs):
        if args.minutes and time.monotonic() - began > 60 * args.minutes:
            break
        runs += 1
        rng = np.random.default_rng([args.seed, run])
        elastic = bool(args.elastic_every) and run % args.elastic_every == args.elastic_every - 1
        events = plan(rng, elastic=elastic)
        faults = sum(len(e["faults"]) for e in events)
        short = bool(args.short_every) and run % args.short_every == args.short_every - 1
        restarts = faults - short
        result = run_once(root / f"run{run}", events, max_restarts=restarts, elastic=elastic,
                          hard_timeout=60 + args.start_seconds * (restarts + 1 + elastic))
        result["out"] = root / f"run{run}"
        said = outcome(result, reference, bound)
        outcomes[said] += 1
        fired = result["fired"]
        kinds.update(kind for _, kind, _, _ in fired)
        moments.update(moment for _, _, _, moment in fired)
        doubles += sum(1 for n in collections.Counter(s for s, _, _, _ in fired).values()
                       if n > 1)
        detail = ", ".join(f"{k}@{w}" for _, k, w, _ in fired)
        extra = f" ({result['difference']:.1e})" if "difference" in result else ""
        if result["code"] and result["launcher_lines"]:
            extra += f": {result['launcher_lines'][-1]}"
        print(f"{run:>4} {'elastic' if elastic else 'restart':>8} {len(fired):>6} "
              f"{result['starts']:>6} {result['seconds']:>6.1f}  {said}{extra} [{detail}]"
              f"{' leftovers=' + str(result['leftovers']) if result['leftovers'] else ''}",
              flush=True)
        if said not in ("same weights", "stopped with one line"):
            (root / f"run{run}" / "launcher.log").write_text(result["output"])
    print(f"runs {runs}; faults injected {sum(kinds.values())}: "
          + ", ".join(f"{k} {kinds[k]}" for k in KINDS)
          + f"; two at once {doubles}; moments: " + ", ".join(
              f"{m} {n}" for m, n in sorted(moments.items())))
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    print(f"files: {root}")


if __name__ == "__main__":
    main()
