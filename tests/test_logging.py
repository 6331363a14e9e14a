"""Log lines show once: the toolkit's own INFO lines in plain scripts and under absl,
TensorFlow's without the copy absl's handler added. A job with the strategy flags leaves
TensorFlow's own INFO lines out unless asked for."""

import subprocess
import sys
import textwrap

import pytest

from support import workers

PLAIN = """
import mgpu_tf
mgpu_tf.make_strategy("auto")
"""

ABSL = """
from absl import app
import tensorflow as tf
import mgpu_tf
from mgpu_tf import flags as mgpu_flags

mgpu_flags.define_flags()

def main(argv):
    mgpu_flags.make_strategy_from_flags()
    tf.get_logger().info("a line from TensorFlow")

app.run(main)
"""

# A user's job with the strategy flags, imported before TensorFlow (as the docs ask), and a
# mirrored fit.
FIT = """
from absl import app
from mgpu_tf import flags as mgpu_flags
import keras
import numpy as np
import tensorflow as tf

mgpu_flags.define_flags()

def main(argv):
    strategy = mgpu_flags.make_strategy_from_flags()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((16, 4)), np.ones((16, 1)), batch_size=8, epochs=1, verbose=0)
    tf.get_logger().warning("a warning from TensorFlow")

app.run(main)
"""
# TensorFlow's C++ start-up lines, and its Python INFO lines of a mirrored step.
NATIVE = ("cpu_feature_guard", "cudart_stub", "cuInit")
PYTHON = ("cross_device_ops",)


def _stderr(tmp_path, source):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(source))
    result = workers.run_python(script, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def test_a_plain_script_shows_what_auto_chose_once(tmp_path):
    lines = [line for line in _stderr(tmp_path, PLAIN).splitlines()
             if "strategy 'auto' chose" in line]
    assert len(lines) == 1, lines


def test_under_absl_each_line_shows_once(tmp_path):
    stderr = _stderr(tmp_path, ABSL)
    chose = [line for line in stderr.splitlines() if "strategy 'auto' chose" in line]
    tensorflow = [line for line in stderr.splitlines() if "a line from TensorFlow" in line]
    assert len(chose) == 1, chose
    assert len(tensorflow) == 1, tensorflow


def test_the_main_job_names_its_sharding_choice_once():
    # Its training and test data sets make the same choice.
    result = workers.run_python("-m", "mgpu_tf.train", "--dataset=synthetic", "--epochs=1",
                                "--synthetic_examples=512", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    chose = [line for line in result.stderr.splitlines()
             if "sharding policy 'auto' chose" in line]
    assert len(chose) == 1, chose


def test_setting_tf_cpp_min_log_level_brings_tensorflows_start_up_lines_back():
    # The main job hides them by default (tests/test_train.py); a user who sets the
    # variable gets TensorFlow's own behaviour. At level 3 the lines written before
    # absl::InitializeLog() still show: the reason the job filters them itself
    # (abseil/abseil-cpp#1718); when this fails, TensorFlow honours the level alone.
    result = workers.run_python("-m", "mgpu_tf.train", "--devices=/gpu:0",
                                env={"TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert "All log messages before absl::InitializeLog() is called" in result.stderr, lines
    assert lines[-1].startswith("FATAL mgpu_tf.train: `devices` names '/gpu:0'"), lines


def _run_as_a_user(tmp_path, source, *args, **variables):
    """The script's standard error, run without the TF_CPP_MIN_LOG_LEVEL that CI sets,
    with `variables`."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(source))
    env = {k: v for k, v in workers.environment().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, str(script), *args], env={**env, **variables},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def _fit_stderr(tmp_path, *args, **variables):
    return _run_as_a_user(tmp_path, FIT, "--strategy=mirrored", "--simulate_devices=2", *args,
                          **variables)


def test_make_strategy_leaves_the_runtimes_start_up_lines_out(tmp_path):
    # Without the flags TensorFlow is imported first (its import lines show), but
    # make_strategy starts the runtime: no `failed call to cuInit` on this CPU-only machine.
    stderr = _run_as_a_user(tmp_path, PLAIN)
    assert "cuInit" not in stderr, stderr[-3000:]
    assert "strategy 'auto' chose" in stderr, stderr[-3000:]


def _shown(stderr, markers):
    return [marker for marker in markers if marker in stderr]


def test_a_job_with_the_flags_leaves_tensorflows_info_lines_out(tmp_path):
    stderr = _fit_stderr(tmp_path)
    assert _shown(stderr, NATIVE + PYTHON) == [], stderr[-3000:]
    assert "a warning from TensorFlow" in stderr, stderr[-3000:]


@pytest.mark.parametrize("args, variables, markers", [
    (["--verbosity=0"], {}, PYTHON),
    ([], {"TF_CPP_MIN_LOG_LEVEL": "0"}, NATIVE + PYTHON),
], ids=["verbosity", "tf_cpp_min_log_level"])
def test_verbosity_or_tensorflows_variable_brings_them_back(tmp_path, args, variables, markers):
    stderr = _fit_stderr(tmp_path, *args, **variables)
    assert _shown(stderr, markers) == list(markers), stderr[-3000:]
    assert "a warning from TensorFlow" in stderr, stderr[-3000:]
