"""`mgpu-tf`'s answers to bad input: a near miss named, a refusal before anything starts, the
rule, what was received and the fix."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import launcher


def _exit(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _marking_command(path):
    """A worker command that leaves `path` behind when it starts."""
    return [sys.executable, "-c", f"open({str(path)!r}, 'w').close()"]


@pytest.mark.parametrize("argv, line", [
    (["launch", "--workerz", "2", "--", "true"],
     "mgpu-tf launch: error: unrecognized arguments: --workerz. Did you mean --workers?"),
    (["launch", "--workers", "2", "--grace-secondz", "3", "--", "true"],
     "mgpu-tf launch: error: unrecognized arguments: --grace-secondz. Did you mean "
     "--grace_seconds?"),
    (["plan", "--modle", "m:f", "--global_batch_size", "8"],
     "mgpu-tf plan: error: unrecognized arguments: --modle. Did you mean --model?"),
    (["k8s", "--image", "i", "--gpu_per_worker=2"],
     "mgpu-tf k8s: error: unrecognized arguments: --gpu_per_worker=2. Did you mean "
     "--gpus_per_worker?"),
    (["env", "-v", "--verbos"],
     "mgpu-tf env: error: unrecognized arguments: --verbos. Did you mean --verbose?"),
])
def test_a_misspelt_option_gets_the_nearest_name(capsys, argv, line):
    code, out, err = _exit(capsys, argv)
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == line, err


def test_a_misspelt_command_gets_the_nearest_name(capsys):
    code, out, err = _exit(capsys, ["lauch", "--workers", "2"])
    assert code == 2 and out == ""
    line = err.splitlines()[-1]
    assert line.startswith("mgpu-tf: error: the command must be one of launch, env, k8s, "), err
    assert line.endswith(". Received: 'lauch'. Did you mean launch?"), err


@pytest.mark.parametrize("grace", ["-1", "nan", "inf"])
def test_a_grace_that_is_no_time_is_refused_before_any_worker_starts(capsys, tmp_path, grace):
    marker = tmp_path / "ran"
    code = cli_main(["launch", "--workers", "2", "--grace_seconds", grace, "--",
                     *_marking_command(marker)])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert err.startswith("mgpu-tf launch: `grace_seconds` must be a number of seconds of at "
                          "least 0 (how long a stopped worker gets before SIGKILL). Received: "
                          f"grace_seconds={float(grace)!r}. Use e.g. 10"), err


def test_the_python_launch_refuses_a_negative_grace():
    with pytest.raises(launcher.LaunchError, match="`grace_seconds` must be a number"):
        launcher.launch(["true"], 1, grace_seconds=-1)


def test_more_workers_than_the_open_file_limit_allows_are_refused_before_any_starts(tmp_path):
    # 64 files: 2 pipes a worker leave room for fewer than 30 workers.
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        from mgpu_tf.cli import main
        sys.exit(main(["launch", "--workers", "100", "--grace_seconds", "1", "--",
                       sys.executable, "-c", "open({str(tmp_path)!r} + '/ran', 'a').close()"]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "ran").exists()
    assert done.stderr.startswith(
        "mgpu-tf launch: `workers` must fit this process' open-file limit (64, `ulimit -n`): "
        "the launcher keeps 2 pipes open per worker (its stdout and stderr), so 100 workers "
        "need "), done.stderr
    assert "Received: workers=100. Use at most " in done.stderr
    assert "`ulimit -n " in done.stderr


def test_calibrate_refuses_before_it_announces_the_run(capsys, tmp_path):
    marker = tmp_path / "ran"
    code = cli_main(["calibrate", "--workers", "2", "--repeats", "1", "--",
                     *_marking_command(marker)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and not marker.exists()
    assert err == "mgpu-tf calibrate: --repeats must be at least 2. Received: --repeats=1\n"


def test_calibrate_checks_the_command_before_it_announces_the_run(capsys):
    code = cli_main(["calibrate", "--workers", "2", "--", "no-such-program"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("mgpu-tf calibrate: The command's program must be found on PATH.")
