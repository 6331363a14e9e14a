"""The workers' standard error stays apart from their output, unless a caller captures both."""

import io
import re
import subprocess
import sys

from mgpu_tf.cluster import launcher
from support import workers

_SCRIPT = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"


def test_a_shell_can_separate_the_workers_errors():
    result = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "2", "--",
         sys.executable, "-c", _SCRIPT],
        env=workers.environment(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] to stdout", "[1] to stdout"]
    assert sorted(result.stderr.splitlines()) == ["[0] to stderr", "[1] to stderr"]


def test_a_caller_capturing_the_output_gets_both_or_chooses():
    merged = io.StringIO()
    assert launcher.launch([sys.executable, "-c", _SCRIPT], 1, output=merged) == 0
    assert sorted(merged.getvalue().splitlines()) == ["[0] to stderr", "[0] to stdout"]
    out, err = io.StringIO(), io.StringIO()
    assert launcher.launch([sys.executable, "-c", _SCRIPT], 1, output=out, errors=err) == 0
    assert out.getvalue() == "[0] to stdout\n"
    assert err.getvalue() == "[0] to stderr\n"


# Two epochs of Keras' own progress bar, redrawn after each step as in `fit`.
_PROGRESS = """
import time
import keras

for epoch in range(2):
    print(f"Epoch {epoch + 1}/2")
    bar = keras.utils.Progbar(4)
    for step in range(4):
        time.sleep(0.1)
        bar.update(step + 1)
"""


def test_each_workers_progress_bar_shows_as_one_line_per_epoch():
    out = io.StringIO()
    code = launcher.launch([sys.executable, "-c", _PROGRESS], 2, output=out,
                           errors=io.StringIO(), env=workers.environment())
    assert code == 0
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # Keras' bold and colours
    for index in (0, 1):
        lines = [line for line in shown.splitlines() if line.startswith(f"[{index}] ")]
        assert len(lines) == 4, lines  # per epoch: its title and the bar's last redraw
        assert [line.split()[1] for line in lines] == ["Epoch", "4/4", "Epoch", "4/4"], lines
        assert "\r" not in "".join(lines)


# What TensorFlow 2.21 logs on worker 1 at the end of a good 2-worker job: its last heartbeat
# finds the chief's coordination service gone.
_GOODBYE = (
    "E0000 00:00:1796322465.123473   14191 base_collective_executor.cc:252] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC to coordination "
    "service. Either the leader task was preempted/died/restarted unexpectedly or this task "
    "is experiencing network issues.\n"
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while "
    "calling /tensorflow.CoordinationService/Heartbeat:\n"
    ":UNKNOWN:Error received from peer  {grpc_message:\"failed to connect to all addresses\", "
    "grpc_status:14}\n")
_LEAVE = ("import os, sys; sys.stderr.write({goodbye!r}); print('done'); "
          "sys.exit(int(os.environ['EXIT_CODE']))")


def test_the_coordination_services_goodbye_shows_only_when_the_job_fails():
    script = _LEAVE.format(goodbye=_GOODBYE)
    good, bad = io.StringIO(), io.StringIO()
    assert launcher.launch([sys.executable, "-c", script], 1, output=good,
                           env=workers.environment({"EXIT_CODE": "0"})) == 0
    assert good.getvalue() == "[0] done\n"
    assert launcher.launch([sys.executable, "-c", script], 1, output=bad,
                           env=workers.environment({"EXIT_CODE": "3"})) == 3
    lines = bad.getvalue().splitlines()
    assert [line for line in lines if line.startswith("[0] ")] == [
        "[0] done", *("[0] " + line for line in _GOODBYE.splitlines())], lines
    assert lines[-1].startswith("mgpu-tf launch: worker 0 failed with exit code 3"), lines



# What the chief may log at the end of a good job when worker 1's interpreter ended before
# its TensorFlow runtime said goodbye: the coordination service takes the silence for a crash
# (copied from a 2-worker run; under the tensorflow transport its ring logs the second line).
_CRASHED = (
    "E0000 00:00:1796663145.095525    8245 base_collective_executor.cc:252] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported from /job:worker/task:1: "
    "The following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\n"
    "The tasks have crashed. Check the task logs for an earlier error, or scheduler events "
    "(e.g. preemption, eviction) to debug further. [type.googleapis.com/tensorflow."
    "CoordinationServiceError='\\\"\\n\\n\\x06worker\\x10\\x01']\n"
    "E0000 00:00:1796663145.095593    8245 ring_alg.cc:291] Aborting RingReduce with "
    "UNAVAILABLE: Collective ops is aborted by: Error reported from /job:worker/task:1: The "
    "following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\n"
    "The tasks have crashed. Check the task logs for an earlier error, or scheduler events "
    "(e.g. preemption, eviction) to debug further.\n"
    "The error could be from a previous operation. Restart your program to reset. "
    "[type.googleapis.com/tensorflow.DerivedStatus='']\n")


def test_a_crash_report_after_a_good_job_shows_only_when_the_job_fails():
    script = _LEAVE.format(goodbye=_CRASHED)
    good, bad = io.StringIO(), io.StringIO()
    assert launcher.launch([sys.executable, "-c", script], 1, output=good,
                           env=workers.environment({"EXIT_CODE": "0"})) == 0
    assert good.getvalue() == "[0] done\n"
    assert launcher.launch([sys.executable, "-c", script], 1, output=bad,
                           env=workers.environment({"EXIT_CODE": "3"})) == 3
    lines = bad.getvalue().splitlines()
    assert [line for line in lines if line.startswith("[0] ")] == [
        "[0] done", *("[0] " + line for line in _CRASHED.splitlines())], lines
