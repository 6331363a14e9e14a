"""The local launcher: TF_CONFIG per worker, prefixed output, failures, Ctrl-C, no orphans."""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import launcher

_ECHO = [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"]


def _alive(pid, settle_seconds=10.0):
    """Whether `pid` still runs once a SIGKILL sent to it has had time to land.

    SIGKILL is delivered asynchronously: on a loaded machine the target may run for a
    moment after `killpg` returns, so a process only counts as left running if it
    outlives `settle_seconds`. A zombie is dead for our purposes.
    """
    deadline = time.monotonic() + settle_seconds
    while True:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split()[2] == "Z":
                    return False
        except (ProcessLookupError, FileNotFoundError):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def _lines(text):
    return [line for line in text.splitlines() if line]


def test_each_worker_gets_its_own_tf_config_on_free_loopback_ports():
    out = io.StringIO()
    assert launcher.launch(_ECHO, 3, output=out) == 0
    configs = {}
    for line in _lines(out.getvalue()):
        prefix, _, payload = line.partition(" ")
        configs[int(prefix.strip("[]"))] = json.loads(payload)
    assert sorted(configs) == [0, 1, 2]
    hosts = configs[0]["cluster"]["worker"]
    assert len(set(hosts)) == 3 and all(h.startswith("127.0.0.1:") for h in hosts)
    for index, config in configs.items():
        assert config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}


def test_explicit_port_numbers_workers_consecutively():
    configs = launcher.worker_tf_configs(2, port=23000)
    assert configs[1]["cluster"]["worker"] == ["127.0.0.1:23000", "127.0.0.1:23001"]


def test_the_first_failure_is_returned_and_stops_the_others(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        child = subprocess.Popen(["sleep", "300"])
        with open(r"{tmp_path}/tmp%d" % index, "w") as f:
            f.write(str(child.pid))
        os.replace(r"{tmp_path}/tmp%d" % index, r"{tmp_path}/pid%d" % index)
        if index == 1:
            while not all(os.path.exists(r"{tmp_path}/pid%d" % i) for i in range(3)):
                time.sleep(0.05)
            sys.exit(7)
        time.sleep(300)
    """))
    start = time.monotonic()
    code = launcher.launch([sys.executable, str(script)], 3, output=io.StringIO(),
                           grace_seconds=2)
    assert code == 7
    assert time.monotonic() - start < 150  # stopped, not slept to the end (300 s)
    for index in range(3):
        pid = int((tmp_path / f"pid{index}").read_text())
        assert not _alive(pid), f"worker {index}'s child {pid} was left running"


def test_a_worker_killed_by_a_signal_reports_128_plus_the_signal():
    command = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert launcher.launch(command, 1, output=io.StringIO()) == 128 + signal.SIGKILL


@pytest.mark.parametrize("signum, code, said", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "stopped by SIGTERM")])
def test_ctrl_c_or_sigterm_stops_every_worker_and_their_children(tmp_path, signum, code, said):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, subprocess, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        child = subprocess.Popen(["sleep", "300"])
        open(r"{tmp_path}/pid%d" % index, "w").write(str(child.pid))
        print("ready", flush=True)
        time.sleep(300)
    """))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "2", "--grace_seconds",
         "2", "--", sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"pid{i}").exists() for i in range(2)):
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=60)
    # As shells report a process a signal ended: 128 + the signal.
    assert proc.returncode == code, output
    assert f"mgpu-tf launch: {said}; stopped all 2 workers." in output, output
    for index in range(2):
        assert not _alive(int((tmp_path / f"pid{index}").read_text()))


def test_output_lines_carry_the_worker_index():
    command = [sys.executable, "-c", "print('a'); print('b')"]
    out = io.StringIO()
    launcher.launch(command, 2, output=out)
    assert sorted(_lines(out.getvalue())) == ["[0] a", "[0] b", "[1] a", "[1] b"]


def test_binding_wider_than_loopback_warns():
    out = io.StringIO()
    launcher.launch([sys.executable, "-c", "pass"], 1, host="0.0.0.0", output=out)
    assert "accept unauthenticated connections" in out.getvalue()


@pytest.mark.parametrize("command, workers, port, match", [
    ([], 2, None, "`command` must be a non-empty list"),
    ("python train.py", 2, None, "`command` must be a non-empty list"),
    (["python", 3], 2, None, "`command` must hold strings only"),
    (["true"], 0, None, "`workers` must be an integer of at least 1. Received: workers=0"),
    (["true"], 2, 0, "`port` must be between 1 and 65534"),
    (["true"], 2, 65535, "`port` must be between 1 and 65534"),
])
def test_bad_requests_fail_before_starting_anything(command, workers, port, match):
    with pytest.raises(launcher.LaunchError, match=match):
        launcher.launch(command, workers, port=port, output=io.StringIO())


def test_cli_reports_bad_requests_with_exit_code_2(capsys):
    assert cli_main(["launch", "--workers", "0", "--", "true"]) == 2
    assert "`workers` must be an integer of at least 1" in capsys.readouterr().err
    assert cli_main(["launch", "--workers", "2"]) == 2
    assert "`command` must be a non-empty list" in capsys.readouterr().err


def test_cli_returns_the_workers_exit_code():
    assert cli_main(["launch", "--workers", "2", "--", sys.executable, "-c",
                     "import sys; sys.exit(0)"]) == 0
    assert cli_main(["launch", "--workers", "1", "--", sys.executable, "-c",
                     "import sys; sys.exit(4)"]) == 4
