"""`mgpu-tf`'s parsing: one spelling of options, the sub-command's usage for a wrong one,
`--version`, and the hint for a command given without `--`."""

import re

import pytest

import mgpu_tf
from mgpu_tf.cli import main as cli_main
from mgpu_tf.cli import app

_COMMANDS = ("launch", "env", "k8s", "calibrate", "bench", "plan")


def _exit(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_version_prints_the_package_version(capsys):
    code, out, _ = _exit(capsys, ["--version"])
    assert code == 0
    assert out == f"mgpu-tf {mgpu_tf.__version__}\n"


@pytest.mark.parametrize("command", _COMMANDS)
def test_usage_spells_every_option_with_underscores(capsys, command):
    code, out, _ = _exit(capsys, [command, "--help"])
    usage = out.split("\n\n")[0]
    assert code == 0 and usage.startswith(f"usage: mgpu-tf {command}")
    options = re.findall(r"(?<![\w-])--[a-z][\w-]*", usage)
    assert [o for o in options if "-" in o[2:]] == [], usage


@pytest.mark.parametrize("argv, name, value", [
    (["launch", "--workers", "2", "--grace-seconds", "3", "--", "x"], "grace_seconds", 3.0),
    (["launch", "--workers", "2", "--max-restarts", "1", "--", "x"], "max_restarts", 1),
    (["k8s", "--image", "i", "--gpus_per_worker", "2"], "gpus_per_worker", 2),
    (["k8s", "--image", "i", "--gpus-per-worker", "2"], "gpus_per_worker", 2),
    (["k8s", "--image", "i", "--node_pool", "a:1"], "node_pools", ["a:1"]),
    (["k8s", "--image", "i", "--node-pool", "a:1"], "node_pools", ["a:1"]),
    (["plan", "--model", "m:f", "--global_batch_size", "8"], "global_batch_size", 8),
    (["plan", "--model", "m:f", "--global-batch-size", "8"], "global_batch_size", 8),
    (["plan", "--model", "m:f", "--global_batch_size", "8", "--device_memory", "1GiB"],
     "device_memory", "1GiB"),
    (["plan", "--model", "m:f", "--global_batch_size", "8", "--no_measure"], "no_measure", True),
    (["bench", "--global_batch_size", "64"], "global_batch", 64),
    (["bench", "--global-batch", "64"], "global_batch", 64),
    (["bench", "--jit-compile", "true"], "jit_compile", "true"),
    (["calibrate", "--workers", "2", "--max-spread", "0.2", "--", "x"], "max_spread", 0.2),
])
def test_each_option_takes_both_spellings(argv, name, value):
    assert getattr(app._parser().parse_args(argv), name) == value


_REQUIRED = {"launch": ["--workers", "2"], "k8s": ["--image", "i"],
             "plan": ["--model", "m:f", "--global_batch_size", "8"]}


@pytest.mark.parametrize("command", _COMMANDS)
def test_a_wrong_option_is_answered_by_the_sub_commands_usage(capsys, command):
    code, _, err = _exit(capsys, [command, *_REQUIRED.get(command, []), "--bogus"])
    assert code == 2
    assert err.startswith(f"usage: mgpu-tf {command}"), err
    assert f"mgpu-tf {command}: error: unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("command", [
    ["python", "-m", "mgpu_tf.train", "--strategy=multi_worker"],  # with options of its own
    ["python", "train.py"],                                          # without
])
@pytest.mark.parametrize("sub", [["launch", "--workers", "2"], ["calibrate", "--workers", "2"],
                                 ["k8s", "--image", "i", "--workers", "2"]])
def test_a_command_without_double_dash_is_refused_alike(capsys, sub, command):
    code, out, err = _exit(capsys, [*sub, *command])
    assert code == 2 and out == ""
    assert (f"mgpu-tf {sub[0]}: error: the command must come after `--`, with or without "
            f"options of its own. Received: {' '.join(command)}. Fix: put the command after "
            f"`--`: mgpu-tf {sub[0]} [OPTIONS] -- COMMAND [ITS OPTIONS]") in err, err


def test_a_wrong_option_before_double_dash_gets_no_hint(capsys):
    code, _, err = _exit(capsys, ["launch", "--workers", "2", "--restarts=1", "--", "x"])
    assert code == 2 and "unrecognized arguments: --restarts=1." in err
    assert "after `--`" not in err


def test_env_help_has_a_description(capsys):
    code, out, _ = _exit(capsys, ["env", "--help"])
    assert code == 0
    assert "Print what a bug report needs" in out
