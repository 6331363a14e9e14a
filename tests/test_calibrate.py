"""`mgpu-tf calibrate`: per-worker speeds in, shard weights out."""

import io
import re
import sys

import pytest

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import calibrate
from support import workers


def test_propose_weights_against_hand_computed_ratios():
    assert calibrate.propose_weights([800.0, 400.0, 400.0]) == [2.0, 1.0, 1.0]
    assert calibrate.propose_weights([300, 900, 450]) == [1.0, 3.0, 1.5]
    assert calibrate.propose_weights([1000.0, 3000.0], digits=1) == [1.0, 3.0]


def test_parse_speed_takes_the_last_figure():
    text = ("Epoch 1\nexamples_per_sec=5\n"
            "done: strategy=mirrored replicas=1 examples_per_sec=812.5 loss=0.1 accuracy=0.9")
    assert calibrate.parse_speed(text) == 812.5
    assert calibrate.parse_speed("calibrate: examples_per_sec=1.5e3") == 1500.0
    assert calibrate.parse_speed("no figure") is None


@pytest.mark.parametrize("speeds, match", [
    ([], "`speeds` must list one speed per worker"),
    ("812", "`speeds` must list one speed per worker"),
    ([812.0, 0.0], "Every speed must be a positive number"),
    ([812.0, float("nan")], "Every speed must be a positive number"),
])
def test_bad_speeds(speeds, match):
    with pytest.raises(calibrate.CalibrationError, match=match):
        calibrate.propose_weights(speeds)


def test_given_speeds_print_the_weights(capsys):
    assert cli_main(["calibrate", "--speeds", "812,406,406"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "MGPU_TF_SHARD_WEIGHTS=2,1,1"
    assert re.search(r"^0\s+812\.0\s+2$", out, re.MULTILINE)


@pytest.mark.parametrize("args, match", [
    (["--speeds", "812,x"], "--speeds must be comma-separated positive numbers"),
    (["--speeds", "812,0"], "--speeds must be comma-separated positive numbers"),
    (["--speeds", "1,2", "--workers", "2"], "Pass --speeds, or --workers with a command"),
    ([], "Pass --workers N with a command to measure"),
    (["--workers", "0", "--", "python", "x.py"], "`workers` must be an integer of at least 1"),
    (["--workers", "2"], "`command` must be a non-empty list"),
])
def test_bad_arguments_fail_at_once(capsys, args, match):
    assert cli_main(["calibrate", *args]) == 2
    assert match in capsys.readouterr().err


def test_a_worker_without_a_speed_line_is_named():
    command = [sys.executable, "-c", "print('hello')"]
    with pytest.raises(calibrate.CalibrationError,
                       match="worker 0 printed no 'examples_per_sec=X' line"):
        calibrate.calibrate(command, 2)


def test_a_failing_worker_stops_the_calibration():
    command = [sys.executable, "-c", "import sys; print('examples_per_sec=5'); sys.exit(3)"]
    with pytest.raises(calibrate.CalibrationError, match="the workers exited with code 3"):
        calibrate.calibrate(command, 2)


@pytest.mark.multiworker
def test_a_slower_worker_gets_a_smaller_weight():
    # Worker 0 sleeps 0.1 s after each step: a GPU several times slower than worker 1's.
    speeds = calibrate.calibrate([sys.executable, "-m", "support.calibrate_job", "0", "0.1"], 2,
                                 env=workers.environment(), output=io.StringIO())
    weights = calibrate.propose_weights(speeds)
    assert weights[0] == 1.0
    assert weights[1] > 3.0, f"speeds {speeds} do not show the slow worker"
