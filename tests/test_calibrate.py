"""`mgpu-tf calibrate`: per-worker speeds in, shard weights out."""

import io
import json
import math
import re
import sys
import textwrap

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
            "done: strategy=mirrored replicas=1 examples_per_sec=812.5 test_loss=0.1 "
            "test_accuracy=0.9")
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
    assert re.search(r"^0\s+812\.0\s+-\s+2$", out, re.MULTILINE)


@pytest.mark.parametrize("args, match", [
    (["--speeds", "812,x"], "--speeds must be comma-separated positive numbers"),
    (["--speeds", "812,0"], "--speeds must be comma-separated positive numbers"),
    (["--speeds", "1,2", "--workers", "2"], "Pass --speeds, or --workers with a command"),
    ([], "Pass --workers N with a command to measure"),
    (["--workers", "0", "--", "python", "x.py"], "`workers` must be an integer of at least 1"),
    (["--workers", "2"], "`command` must be a non-empty list"),
    (["--workers", "2", "--repeats", "1", "--", "x"],
     "--repeats must be at least 2. Received: --repeats=1"),
    (["--workers", "2", "--max_spread", "0", "--", "x"],
     "--max_spread must be above 0. Received: --max_spread=0.0"),
])
def test_bad_arguments_fail_at_once(capsys, args, match):
    assert cli_main(["calibrate", *args]) == 2
    assert match in capsys.readouterr().err


def test_a_worker_without_a_speed_line_is_named():
    command = [sys.executable, "-c", "print('hello')"]
    with pytest.raises(calibrate.CalibrationError,
                       match=r"worker 0 printed no 'examples_per_sec=X' line \(run 1 of 6\)"):
        calibrate.calibrate(command, 2)


def test_a_failing_worker_stops_the_calibration():
    command = [sys.executable, "-c", "import sys; print('examples_per_sec=5'); sys.exit(3)"]
    with pytest.raises(calibrate.CalibrationError,
                       match=r"worker 0 exited with code 3 \(run 1 of 6\)"):
        calibrate.calibrate(command, 2)


# A job that reports, run after run, the speeds SPEEDS.json lists for its worker, and
# notes when each run started and ended.
_JOB = textwrap.dedent("""
    import json, os, sys, time
    folder = sys.argv[1]
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    plan = json.load(open(os.path.join(folder, "speeds.json")))
    log = os.path.join(folder, f"runs{index}")
    run = len(open(log).read().splitlines()) if os.path.exists(log) else 0
    start = time.time()
    time.sleep(plan.get("sleep", 0.3))
    with open(log, "a") as f:
        f.write(f"{start} {time.time()}\\n")
    speeds = plan[str(index)]
    print(f"calibrate: examples_per_sec={speeds[run % len(speeds)]}" + plan.get("extra", ""))
""")


def _job(tmp_path, **plan):
    (tmp_path / "job.py").write_text(_JOB)
    (tmp_path / "speeds.json").write_text(json.dumps(plan))
    return [sys.executable, str(tmp_path / "job.py"), str(tmp_path)]


def _intervals(tmp_path, workers):
    return [tuple(map(float, line.split())) for i in range(workers)
            for line in (tmp_path / f"runs{i}").read_text().splitlines()]


def test_workers_run_one_after_another_several_times(tmp_path):
    command = _job(tmp_path, **{"0": [100, 104, 102], "1": [50, 51, 52]})
    result = calibrate.calibrate(command, 2, repeats=3)
    assert result.runs == ((100.0, 104.0, 102.0), (50.0, 51.0, 52.0))
    assert result.speeds == [102.0, 51.0]
    assert result.spreads == pytest.approx([4 / 102, 2 / 51])
    intervals = sorted(_intervals(tmp_path, 2))
    assert len(intervals) == 6
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert end <= start, f"two workers ran at once: {intervals}"


def test_the_cli_prints_each_workers_median_and_spread(capsys, tmp_path):
    command = _job(tmp_path, **{"0": [100, 104, 102], "1": [50, 51, 52]})
    assert cli_main(["calibrate", "--workers", "2", "--", *command]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^worker\s+examples/sec\s+spread\s+weight$", out, re.MULTILINE)
    assert re.search(r"^0\s+102\.0\s+3\.9%\s+2$", out, re.MULTILINE), out
    assert re.search(r"^1\s+51\.0\s+3\.9%\s+1$", out, re.MULTILINE), out
    assert out.splitlines()[-1] == "MGPU_TF_SHARD_WEIGHTS=2,1"
    assert "run 6/6: worker 1: 52.0 examples/s" in err


def test_runs_too_far_apart_are_refused(tmp_path):
    command = _job(tmp_path, **{"0": [100, 130, 100], "1": [50, 51, 52]})
    with pytest.raises(calibrate.CalibrationError,
                       match=r"Calibration needs repeatable figures: each worker's runs may "
                       r"differ by at most max_spread=10% of their median. Received: worker 0 "
                       r"ran at 100.0, 130.0, 100.0 examples/s, a 30% spread."):
        calibrate.calibrate(command, 2)
    calibrate.calibrate(command, 2, max_spread=0.35)  # accepted when asked to


def test_a_run_timed_over_too_little_work_is_refused(tmp_path):
    command = _job(tmp_path, extra=" timed_seconds=0.2", **{"0": [100, 100, 100]})
    with pytest.raises(calibrate.CalibrationError,
                       match=r"Calibration needs at least 1 s of timed work per run "
                       r"\(min_seconds=1\): .* Received: worker 0 timed 0.2 s"):
        calibrate.calibrate(command, 1)
    assert calibrate.calibrate(command, 1, min_seconds=0.1).speeds == [100.0]


def test_a_run_that_never_ends_is_stopped_and_explained(tmp_path):
    command = _job(tmp_path, sleep=300, **{"0": [100]})
    with pytest.raises(calibrate.CalibrationError,
                       match=r"worker 0 did not finish in 1 seconds \(run 1 of 2\); "
                       r"calibration runs each worker alone, so a job that waits for the "
                       r"others \(--strategy=multi_worker\) never ends"):
        calibrate.calibrate(command, 1, repeats=2, timeout_seconds=1, grace_seconds=1)


@pytest.mark.multiworker
def test_each_worker_is_timed_and_weighed_by_its_speed():
    # Worker 0 sleeps 0.1 s after each step. Worker 1 times 20 steps of a small model, a few
    # hundredths of a second, so its runs are let spread widely. Which worker is faster is
    # the calibration's figure, not asserted: here, one positive speed per worker, and the
    # weights those speeds make by hand (the slowest 1, the others in proportion).
    # Two runs of each: test_workers_run_one_after_another_several_times checks repeats.
    result = calibrate.calibrate([sys.executable, "-m", "support.calibrate_job", "0", "0.1"],
                                 2, repeats=2, env=workers.environment(), output=io.StringIO(),
                                 max_spread=5.0)
    speeds = result.speeds
    assert len(speeds) == 2 and all(math.isfinite(s) and s > 0 for s in speeds), speeds
    weights = calibrate.propose_weights(speeds)
    assert weights == [round(s / min(speeds), 2) for s in speeds], (weights, speeds)
