"""The main job, run as a user runs it: a fresh process per strategy."""

import re
import subprocess
import sys

import pytest

from workers import run_python, run_workers

_DONE = re.compile(r"^done: strategy=(\w+) replicas=(\d+) examples_per_sec=([\d.]+) "
                   r"loss=([\d.]+) accuracy=([\d.]+)$")


def _done(stdout):
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    match = _DONE.match(lines[-1])
    assert match, f"last line is not the done line: {lines[-1]!r}"
    assert sum(1 for line in lines if line.startswith("done:")) == 1
    strategy, replicas, speed, loss, accuracy = match.groups()
    return strategy, int(replicas), float(speed), float(loss), float(accuracy)


@pytest.mark.parametrize("argv, strategy, replicas", [
    ([], "default", 1),
    (["--strategy=mirrored", "--simulate_devices=2"], "mirrored", 2),
])
def test_main_job_learns_the_digits(argv, strategy, replicas):
    result = run_python("-m", "mgpu_tf.train", "--epochs=4", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    got = _done(result.stdout)
    assert got[:2] == (strategy, replicas)
    assert got[2] > 0
    assert got[4] > 0.8, f"accuracy {got[4]} after 4 epochs: the model did not learn"


@pytest.mark.multiworker
def test_main_job_under_two_local_workers():
    code, outputs = run_workers("-m", 2, "mgpu_tf.train", "--strategy=multi_worker", "--epochs=4")
    assert code == 0, outputs
    results = [_done(outputs[i]) for i in (0, 1)]
    for result in results:
        assert result[:2] == ("multi_worker", 2)
        assert result[4] > 0.8
    assert results[0][3:] == results[1][3:], "workers disagree on the final loss/accuracy"


def test_bad_flag_fails_fast_with_the_message():
    result = subprocess.run([sys.executable, "-m", "mgpu_tf.train", "--strategy=mirrored",
                             "--all_reduce=ring"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "`all_reduce` for mirrored must be one of" in result.stderr
    assert "Epoch" not in result.stdout


def test_indivisible_global_batch_names_both_numbers():
    result = run_python("-m", "mgpu_tf.train", "--strategy=mirrored", "--simulate_devices=4",
                        "--global_batch_size=30", "--epochs=1")
    assert result.returncode != 0
    assert ("`global_batch_size` must be divisible by the number of replicas (4). "
            "Received: global_batch_size=30. Use 28 or 32") in result.stderr
