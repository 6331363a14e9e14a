"""Training that goes on with another number of workers: resumed from a backup, and under
the elastic launcher (shrink after a failure, grow at a backup).

The reference is the uninterrupted 2-worker run. A resumed run on another number of
replicas adds each step's per-replica gradients in another order, so its weights differ by
float32 rounding, which the momentum carries on: within 1e-6 absolute (measured: 2e-7 after
24 steps) plus 1e-5 relative.
"""

import io
import os
import re
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from benchmarks import failure_worker
from mgpu_tf.cluster import elastic
from mgpu_tf.cluster import launcher
from support import workers

SCRIPT = "support.mw_elastic"
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    code, outputs = workers.run_workers("-m", 2, SCRIPT, out)
    assert code == 0, outputs
    return failure_worker.weights(out / "final.npz")


# A multi-worker TensorFlow process catches SIGTERM (its preemption notice) and stays in the
# collective of a lost peer, so stopping the group waits out the whole grace.
GRACE_SECONDS = 1


def _launch(workers_count, out, *args):
    log = io.StringIO()
    code = launcher.launch([sys.executable, "-m", SCRIPT, str(out), *args], workers_count,
                           env=workers.environment(), output=log, grace_seconds=GRACE_SECONDS)
    return code, log.getvalue()


def _starts(out):
    """`[(workers, replicas, epoch, steps_done), ...]`, one per start, from the chief."""
    return [tuple(int(v) for v in line.split()[1:])
            for line in (out / "starts.txt").read_text().splitlines()]


def _assert_close(reference, out):
    """Checks the run's final weights against the reference; returns the largest difference."""
    weights = failure_worker.weights(out / "final.npz")
    assert len(weights) == len(reference) == 4
    for a, b in zip(reference, weights):
        np.testing.assert_allclose(b, a, **TOLERANCE)
    return max(float(np.max(np.abs(b - a))) for a, b in zip(reference, weights))


def _seconds(out, start):
    """`(first step, latest step)` wall times of the run's start `start`."""
    return tuple(float(v) for v in (out / f"times-{start}").read_text().split())


def _resume_seconds(out, start, *, after_kill=True):
    """From the kill (or the previous start's last step) to start `start`'s first step."""
    if after_kill:
        before = float((out / "killed_at").read_text())
    else:
        before = _seconds(out, start - 1)[1]
    return _seconds(out, start)[0] - before


@pytest.mark.multiworker
def test_mirrored_then_two_workers_then_three_end_as_the_uninterrupted_run(reference, tmp_path):
    """Killed on one machine at epoch 1 (mirrored over 2 CPUs), resumed on 2 workers and
    killed at epoch 2, resumed on 3: the global batch and the order stay."""
    out = tmp_path / "run"
    done = workers.run_python("-m", SCRIPT, out, "--mirrored", "2", "--kill", "1:4")
    assert done.returncode == -9, done.stderr[-3000:]
    killed = float((out / "killed_at").read_text())
    code, log = _launch(2, out, "--kill", "2:1")
    assert code == 137, log[-3000:]
    to_two = _seconds(out, 1)[0] - killed
    assert "taken on 1 worker (2 replicas), on 2 workers (2 replicas); global batch and " \
           "data order kept" in log, log[-3000:]
    code, log = _launch(3, out)
    assert code == 0, log[-3000:]
    assert "resuming the backup of epoch 2 step 0, taken on 2 workers (2 replicas), on 3 " \
           "workers (3 replicas)" in log, log[-3000:]
    # Backups every 3 steps of 6: the kills after batches 4 and 1 resume at step 3 and 0.
    assert _starts(out) == [(1, 2, 0, 0), (2, 2, 1, 3), (3, 3, 2, 0)]
    difference = _assert_close(reference, out)
    print(f"mirrored x2 -> 2 workers: first step {to_two:.1f} s after the kill; 2 -> 3 "
          f"workers: {_resume_seconds(out, 2):.1f} s; final weights within {difference:.1e}")


def _discovery(tmp_path, count):
    slots = tmp_path / "slots"
    slots.write_text(f"{count}\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {slots}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, slots


@pytest.mark.multiworker
def test_the_elastic_launcher_shrinks_after_a_failure_and_grows_at_a_backup(reference, tmp_path):
    """2 workers; worker 1 dies at epoch 1 and its slot with it: 1 worker resumes. The test
    then offers 3: the group grows at the next backup and ends as the uninterrupted run."""
    script, slots = _discovery(tmp_path, 2)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "1:3",
               "--discovery_script", str(script), "--discovery_seconds", "0.3",
               "--max_restarts", "1", "--grace_seconds", str(GRACE_SECONDS), "--",
               sys.executable, "-m", SCRIPT, str(out), "--kill", "1:4", "--offer", f"{slots}:1"]
    started = time.monotonic()
    job = subprocess.Popen(command, env=workers.environment(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    log = []
    reader = threading.Thread(target=lambda: log.extend(job.stdout))
    reader.start()
    # Once the group has shrunk, before the one worker's first backup, 3 are offered.
    while not any("2 -> 1 workers" in line for line in log):
        assert job.poll() is None and time.monotonic() - started < 240, "".join(log)[-3000:]
        time.sleep(0.05)
    slots.write_text("3\n")
    assert job.wait(timeout=300) == 0, "".join(log)[-3000:]
    reader.join()
    changes = [line.strip() for line in log if "mgpu-tf launch: elastic:" in line]
    assert changes[0] == "mgpu-tf launch: elastic: starting 2 workers (1:3)."
    assert re.fullmatch(r"mgpu-tf launch: elastic: 2 -> 1 workers after a failure \(exit code "
                        r"137\); resuming from the last backup \(restart 1 of 1\)\.", changes[1])
    assert changes[2] == ("mgpu-tf launch: elastic: 3 workers offered; growing from 1 to 3 "
                          "at the next backup.")
    assert changes[3] == ("mgpu-tf launch: elastic: 1 -> 3 workers at the backup of epoch 2 "
                          "step 0 (3 offered).")
    assert len(changes) == 4, changes
    # Growing is no failure: the chief left at the backup, and the others were stopped.
    assert not [line for line in log if "failed with exit code 75" in line]
    # The kill after batch 4 of epoch 1 resumes at step 3; the one worker's first backup,
    # at the end of the epoch, is where the group grows.
    assert _starts(out) == [(2, 2, 0, 0), (1, 1, 1, 3), (3, 3, 2, 0)]
    resumed = [line for line in log if "mgpu_tf: resuming the backup" in line]
    assert len(resumed) == 1 + 3, resumed  # the one worker, then each of the three
    difference = _assert_close(reference, out)
    print(f"elastic run: {time.monotonic() - started:.1f} s; 2 -> 1 workers: first step "
          f"{_resume_seconds(out, 1):.1f} s after the kill; 1 -> 3 workers: "
          f"{_resume_seconds(out, 2, after_kill=False):.1f} s after the backup's step; final "
          f"weights within {difference:.1e}")


def test_a_worker_that_leaves_for_a_regroup_exits_with_its_code_and_no_traceback():
    code = ("from mgpu_tf.cluster import elastic\n"
            "try:\n    raise elastic.RegroupExit(2, 0)\nexcept elastic.RegroupExit as error:\n"
            "    print(error)\n"
            "raise elastic.RegroupExit(2, 0)\n")
    done = subprocess.run([sys.executable, "-c", code], env=workers.environment(),
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (75, ""), done.stderr[-2000:]
    assert done.stdout == ("left at the backup of epoch 2 step 0: the elastic launcher "
                           "regroups here (exit code 75).\n")


def test_bad_worker_ranges_and_scripts_fail_before_anything_starts(tmp_path):
    for text in ("0", "3:2", "a:b", "1:2:3", "0:2"):
        with pytest.raises(launcher.LaunchError, match="`workers` must be an integer of at"):
            elastic.parse_workers(text)
    assert elastic.parse_workers("2") == (2, 2) and elastic.parse_workers("1:4") == (1, 4)
    with pytest.raises(launcher.LaunchError, match="`discovery_script` must be an executable"):
        elastic.launch_elastic(["true"], "1:2", str(tmp_path / "missing.sh"))
    script, slots = _discovery(tmp_path, 1)
    with pytest.raises(launcher.LaunchError, match="`poll_seconds` must be a positive number"):
        elastic.launch_elastic(["true"], "1:2", str(script), poll_seconds=0)
    slots.write_text("-1\n")
    with pytest.raises(elastic.DiscoveryError, match="The discovery script must print"):
        elastic.launch_elastic(["true"], "1:2", str(script))


def test_discovery_reads_a_count_or_hosts_and_refuses_anything_else(tmp_path):
    script, slots = _discovery(tmp_path, 3)
    assert elastic.discover(str(script)) == (3, [])
    slots.write_text("node1:2\nnode2\n# a comment\n")
    assert elastic.discover(str(script)) == (3, ["node1", "node2"])
    slots.write_text("two workers\n")
    with pytest.raises(elastic.DiscoveryError, match="The discovery script must print a "
                       "worker count, or one 'host' or 'host:slots' per line. Received: "):
        elastic.discover(str(script))


def test_below_the_minimum_the_launcher_waits_then_fails_clearly(tmp_path):
    script, _ = _discovery(tmp_path, 1)
    log = io.StringIO()
    started = time.monotonic()
    code = elastic.launch_elastic([sys.executable, "-c", "pass"], "2:3", str(script),
                                  output=log, poll_seconds=0.1, wait_seconds=0.5)
    assert code == 1 and time.monotonic() - started < 120  # gave up, did not hang
    assert log.getvalue().splitlines() == [
        "mgpu-tf launch: elastic: waiting up to 0.5 s for 2 workers (1 offered).",
        "mgpu-tf launch: elastic: failed: fewer workers than the minimum 2 for 0.5 s "
        "(1 offered). Add hosts, or lower MIN in --workers 2:3."]


def _adaptive_fit(strategy, backup, epochs):
    import keras
    import tensorflow as tf

    import mgpu_tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 3)).astype("float32")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, x[:, :1])), strategy,
                                 12, shuffle_seed=1, weights="adaptive")
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    # The monitor steers the shares (fit refuses an adaptive data set without one), and
    # comes before the backup, which keeps what it decides.
    model.fit(data, epochs=epochs, verbose=0, callbacks=[
        mgpu_tf.callbacks.TrainingMonitor(print_table=False),
        mgpu_tf.callbacks.BackupAndRestore(backup, delete_checkpoint=False)])
    return mgpu_tf.kind_of(strategy).adaptive_shares()[-1]


def test_adaptive_shares_start_again_even_on_another_number_of_replicas(tmp_path, caplog):
    import json

    import mgpu_tf

    backup = tmp_path / "backup"
    _adaptive_fit(mgpu_tf.make_strategy("mirrored", devices=2), backup, 1)
    metadata = json.loads((backup / "training_metadata.json").read_text())
    assert metadata["world"] == {"workers": 1, "replicas": 2, "steps_per_sync": 1,
                                 "shares": [[0.5, 0.5]]}
    assert metadata["steps_per_epoch"] == 4
    # Uneven shares in the backup, as a monitor would have decided them for epoch 1.
    metadata["adaptive"][0]["schedule"]["1"] = [0.75, 0.25]
    (backup / "training_metadata.json").write_text(json.dumps(metadata))
    caplog.set_level("INFO", logger="mgpu_tf")
    shares = _adaptive_fit(mgpu_tf.make_strategy("mirrored", devices=3), backup, 2)
    assert shares.shares_for(1, wait=False) == (1 / 3, 1 / 3, 1 / 3)
    # The resumed epoch's shares are known: its pipelines did not wait for a decision that
    # the epoch before, not run in this fit, would have made.
    assert not [r for r in caplog.records if "no adaptive shares were decided" in r.getMessage()]
    lines = [r.getMessage() for r in caplog.records if "resuming the backup" in r.getMessage()]
    assert lines == ["mgpu_tf: resuming the backup of epoch 1 step 0, taken on 1 worker "
                     "(2 replicas), on 1 worker (3 replicas); global batch and data order "
                     "kept; adaptive shares start again from even or the deployment's "
                     "weights."]


def test_another_number_of_steps_per_epoch_is_refused(tmp_path):
    import json

    import mgpu_tf

    backup = tmp_path / "backup"
    _adaptive_fit(mgpu_tf.make_strategy("mirrored", devices=2), backup, 1)
    metadata = json.loads((backup / "training_metadata.json").read_text())
    metadata["steps_per_epoch"] = 8
    (backup / "training_metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=r"The backup in .* was taken with 8 steps per epoch; "
                       r"this fit has 4\. Received: a data set of 4 steps\."):
        _adaptive_fit(mgpu_tf.make_strategy("mirrored", devices=2), backup, 2)


def test_resuming_in_the_same_world_says_nothing_and_keeps_the_shares(tmp_path, caplog):
    import json

    import mgpu_tf

    backup = tmp_path / "backup"
    _adaptive_fit(mgpu_tf.make_strategy("mirrored", devices=2), backup, 1)
    metadata = json.loads((backup / "training_metadata.json").read_text())
    metadata["adaptive"][0]["schedule"]["1"] = [0.75, 0.25]
    (backup / "training_metadata.json").write_text(json.dumps(metadata))
    caplog.set_level("INFO", logger="mgpu_tf")
    shares = _adaptive_fit(mgpu_tf.make_strategy("mirrored", devices=2), backup, 2)
    assert shares.shares_for(1, wait=False) == (0.75, 0.25)
    assert not [r for r in caplog.records if "resuming the backup" in r.getMessage()]
