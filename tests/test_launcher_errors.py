"""The launcher's words: a command that cannot start, and a worker that fails."""

import io
import os
import signal
import sys
import textwrap

import pytest

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import launcher


def _script(tmp_path, body, *, executable=True):
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755 if executable else 0o644)
    return str(path)


@pytest.mark.parametrize("program, match", [
    ("nosuchcmd", "The command's program must be found on PATH. Received: "
                  "command[0]='nosuchcmd'"),
    ("./no/such/job.sh", "The command's program must be a file. Received: "
                         "command[0]='./no/such/job.sh', which does not exist"),
])
def test_a_missing_program_is_one_line_and_exit_code_2(capsys, program, match):
    assert cli_main(["launch", "--workers", "2", "--", program]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("mgpu-tf launch: ") and err.count("\n") == 1, err
    assert match in err and "Traceback" not in out + err


def test_a_script_that_is_not_executable_says_how_to_run_it(capsys, tmp_path):
    script = _script(tmp_path, "exit 0", executable=False)
    assert cli_main(["launch", "--workers", "2", "--", script]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mgpu-tf launch: The command's program must be executable. "
                          f"Received: command[0]={script!r}")
    assert f"chmod +x {script}" in err and err.count("\n") == 1


def test_a_folder_is_not_a_program(tmp_path):
    with pytest.raises(launcher.LaunchError, match="which is a folder"):
        launcher.launch([str(tmp_path)], 1, output=io.StringIO())


def test_the_program_is_looked_up_on_the_workers_path(tmp_path):
    _script(tmp_path, "exit 0")
    with pytest.raises(launcher.LaunchError, match="must be found on PATH"):
        launcher.launch(["job.sh"], 1, env={"PATH": "/nonexistent"}, output=io.StringIO())


def test_a_failing_worker_is_named_with_its_code_and_the_workers_stopped(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        if index == 1:
            time.sleep(0.5)
            sys.exit(7)
        time.sleep(300)
    """))
    out = io.StringIO()
    assert launcher.launch([sys.executable, str(script)], 3, output=out, grace_seconds=2) == 7
    assert out.getvalue().splitlines()[-1] == (
        "mgpu-tf launch: worker 1 failed with exit code 7; stopped the other workers (0, 2).")


def test_a_worker_killed_by_a_signal_is_named_with_the_signal():
    command = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    out = io.StringIO()
    assert launcher.launch(command, 1, output=out) == 128 + signal.SIGKILL
    assert out.getvalue().splitlines()[-1] == (
        f"mgpu-tf launch: worker 0 failed with exit code {128 + signal.SIGKILL} "
        "(killed by SIGKILL).")


def test_the_cli_reports_the_failed_worker(capsys):
    code = cli_main(["launch", "--workers", "2", "--grace_seconds", "2", "--", sys.executable,
                     "-c", "import json, os, sys, time\n"
                     "i = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
                     "sys.exit(4) if i == 0 else time.sleep(300)"])
    assert code == 4
    assert ("mgpu-tf launch: worker 0 failed with exit code 4; stopped the other workers (1)."
            in capsys.readouterr().out)


def test_run_alone_gives_the_worker_its_tf_config_and_runs_no_other():
    out = io.StringIO()
    command = [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"]
    assert launcher.run_alone(command, 1, 3, output=out) == 0
    [line] = out.getvalue().splitlines()
    assert line.startswith("[1] ") and '"task": {"type": "worker", "index": 1}' in line
    assert line.count("127.0.0.1:") == 3


def test_run_alone_stops_a_worker_at_its_time_limit():
    out = io.StringIO()
    command = [sys.executable, "-c", "import time; time.sleep(300)"]
    code = launcher.run_alone(command, 0, 2, output=out, timeout_seconds=1, grace_seconds=1)
    assert code == launcher.TIMED_OUT
    assert out.getvalue() == "mgpu-tf launch: worker 0 did not finish in 1 seconds; stopped.\n"


@pytest.mark.parametrize("index", [-1, 2, True])
def test_run_alone_refuses_an_index_outside_the_group(index):
    with pytest.raises(launcher.LaunchError, match="`index` must be between 0 and 1"):
        launcher.run_alone(["true"], index, 2)


@pytest.mark.parametrize("script_args", [
    ["does_not_exist.py"], ["-u", "does_not_exist.py", "--epochs=2"],
    ["-W", "ignore", "does_not_exist.py"], ["-Xdev", "does_not_exist.py"]])
def test_a_python_script_that_does_not_exist_is_refused_before_any_worker_starts(
        capsys, tmp_path, monkeypatch, script_args):
    monkeypatch.chdir(tmp_path)
    code = cli_main(["launch", "--workers", "2", "--", sys.executable, *script_args])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out  # no worker wrote a line: none started
    assert err == (f"mgpu-tf launch: The script that {sys.executable} runs must be a file. "
                   f"Received: 'does_not_exist.py', which does not exist (in {os.getcwd()}). "
                   "Check the path, or give -m MODULE for a module.\n")


@pytest.mark.parametrize("args", [["-c", "pass"], ["-m", "json.tool", "--help"],
                                  ["-uc", "pass"], ["-W", "error", "-c", "pass"]])
def test_python_without_a_script_file_starts(args):
    out = io.StringIO()
    assert launcher.launch([sys.executable, *args], 1, output=out) == 0, out.getvalue()


def test_a_worker_that_fails_on_its_own_is_not_said_to_be_stopped(tmp_path):
    # Worker 1 ignores SIGTERM and fails by itself after worker 0 has failed; worker 2
    # is still running and is stopped.
    ready = tmp_path / "ready"
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, signal, sys, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        if index == 0:
            while not os.path.exists({str(ready)!r}):
                time.sleep(0.05)
            sys.exit(3)
        if index == 1:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open({str(ready)!r}, "w").close()
            time.sleep(1)
            sys.exit(5)
        time.sleep(300)
    """))
    out = io.StringIO()
    assert launcher.launch([sys.executable, str(script)], 3, output=out, grace_seconds=5) == 3
    assert out.getvalue().splitlines()[-1] == (
        "mgpu-tf launch: worker 0 failed with exit code 3; worker 1 also failed with exit "
        "code 5; stopped worker 2.")
