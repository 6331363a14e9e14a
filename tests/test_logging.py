"""Log lines show once: the toolkit's own INFO lines in plain scripts and under absl,
TensorFlow's without the copy absl's handler added. A job with the strategy flags leaves
TensorFlow's own INFO lines out unless asked for."""

import os
import pathlib
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
    # A warning: TensorFlow's INFO lines stay out of a job's log at the level CI sets too.
    tf.get_logger().warning("a line from TensorFlow")

app.run(main)
"""

# A user's job with the strategy flags, its log set up before TensorFlow is imported (as the
# docs ask), and a mirrored fit with the flags' compile options.
FIT = """
import mgpu_tf
mgpu_tf.setup_logging()
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
        model.compile(optimizer="sgd", loss="mse", **mgpu_flags.compile_options())
    model.fit(np.ones((16, 4)), np.ones((16, 1)), batch_size=8, epochs=1, verbose=0)
    tf.get_logger().warning("a warning from TensorFlow")

app.run(main)
"""
# TensorFlow's C++ start-up lines, and its Python INFO lines of a mirrored step.
NATIVE = ("cpu_feature_guard", "cudart_stub", "cuInit")
# Of those, the lines TensorFlow writes while it is imported, whatever the level.
ON_IMPORT = ("absl::InitializeLog", "oneDNN custom operations", "cudart_stub")
PYTHON = ("cross_device_ops",)


def _stderr(tmp_path, source):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(source))
    result = workers.run_python(script, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def test_under_absl_each_line_shows_once(tmp_path):
    stderr = _stderr(tmp_path, ABSL)
    chose = [line for line in stderr.splitlines() if "strategy 'auto' chose" in line]
    tensorflow = [line for line in stderr.splitlines() if "a line from TensorFlow" in line]
    assert len(chose) == 1, chose
    assert len(tensorflow) == 1, tensorflow


def test_tf_cpp_min_log_level_0_brings_tensorflows_start_up_lines_back():
    # The main job hides them by default (tests/test_train.py); a user who asks for every
    # line gets TensorFlow's own behaviour.
    result = workers.run_python("-m", "mgpu_tf.train", "--devices=/gpu:0",
                                env={"TF_CPP_MIN_LOG_LEVEL": "0"}, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert "All log messages before absl::InitializeLog() is called" in result.stderr, lines
    # The flag is refused at parse time, in absl's FATAL line and its hint.
    assert lines[-2].startswith("FATAL Flags parsing error: flag --devices=/gpu:0: `devices` "
                                "names '/gpu:0'"), lines
    assert lines[-1] == "Pass --helpshort or --helpfull to see help on flags.", lines


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


@pytest.fixture(scope="module")
def plain_stderr(tmp_path_factory):
    """PLAIN's standard error, run as a user runs it: one process for the checks below."""
    return _run_as_a_user(tmp_path_factory.mktemp("plain"), PLAIN)


def test_a_plain_script_shows_what_auto_chose_once(plain_stderr):
    lines = [line for line in plain_stderr.splitlines() if "strategy 'auto' chose" in line]
    assert len(lines) == 1, lines


def test_make_strategy_leaves_the_runtimes_start_up_lines_out(plain_stderr):
    # Without the flags TensorFlow is imported first (its import lines show), but
    # make_strategy starts the runtime: no `failed call to cuInit` on this CPU-only machine.
    assert "cuInit" not in plain_stderr, plain_stderr[-3000:]
    assert "strategy 'auto' chose" in plain_stderr, plain_stderr[-3000:]


def _shown(stderr, markers):
    return [marker for marker in markers if marker in stderr]


@pytest.fixture(scope="module")
def switches_stderr(tmp_path_factory):
    """FIT's standard error with Keras' speed switches on: one process for the checks below."""
    return _fit_stderr(tmp_path_factory.mktemp("switches"), "--steps_per_execution=2",
                       "--jit_compile=true")


def test_a_job_with_the_flags_leaves_tensorflows_info_lines_out(switches_stderr):
    assert _shown(switches_stderr, NATIVE + PYTHON) == [], switches_stderr[-3000:]
    assert "a warning from TensorFlow" in switches_stderr, switches_stderr[-3000:]


@pytest.mark.parametrize("args, variables, markers", [
    (["--verbosity=0"], {}, PYTHON),
    ([], {"TF_CPP_MIN_LOG_LEVEL": "0"}, NATIVE + PYTHON),
], ids=["verbosity", "tf_cpp_min_log_level"])
def test_verbosity_or_tensorflows_variable_brings_them_back(tmp_path, args, variables, markers):
    stderr = _fit_stderr(tmp_path, *args, **variables)
    assert _shown(stderr, markers) == list(markers), stderr[-3000:]
    assert "a warning from TensorFlow" in stderr, stderr[-3000:]


def _readme_script():
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## In a script", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_script_leaves_tensorflows_own_lines_out(tmp_path):
    stderr = _run_as_a_user(tmp_path, _readme_script())
    shown = _shown(stderr, (*ON_IMPORT, *NATIVE, "GeneratorDatasetOp", "patched Keras"))
    assert shown == [], stderr[-3000:]


# TensorFlow first: its import lines are out of reach, the runtime's are not.
TENSORFLOW_FIRST = """
import tensorflow as tf
import mgpu_tf

mgpu_tf.simulate_devices(2)
mgpu_tf.make_strategy("mirrored")
"""


def test_a_script_importing_tensorflow_first_still_leaves_the_runtimes_lines_out(tmp_path):
    stderr = _run_as_a_user(tmp_path, TENSORFLOW_FIRST)
    # The test reads real output: TensorFlow's import lines. (Its oneDNN line is printed only
    # on CPUs with AVX-512 VNNI and the like, not on AVX2 machines.)
    assert _shown(stderr, ON_IMPORT), stderr[-3000:]
    assert "cuInit" not in stderr, stderr[-3000:]


IMPORTS = """
import logging
import os

stderr = os.readlink("/proc/self/fd/2")
import mgpu_tf
from mgpu_tf import flags
import sys
assert "tensorflow" not in sys.modules  # its import lines come after define_flags()
print(logging.getLogger("mgpu_tf").handlers, logging.getLogger("mgpu_tf").level,
      os.readlink("/proc/self/fd/2") == stderr, "TF_CPP_MIN_LOG_LEVEL" in os.environ)
"""


# The README's second command, with the level the notebooks and CI set: TensorFlow's lines
# written before absl::InitializeLog() and its Python INFO lines stay out all the same.
def test_simulate_devices_as_the_first_call_leaves_tensorflows_own_lines_out(tmp_path):
    # The README's own order: simulate_devices before make_strategy, TensorFlow not imported.
    stderr = _run_as_a_user(tmp_path, """
        import mgpu_tf
        mgpu_tf.simulate_devices(2)
        import tensorflow as tf
        assert len(tf.config.list_logical_devices("CPU")) == 2
    """)
    assert _shown(stderr, (*ON_IMPORT, *NATIVE)) == [], stderr[-3000:]


def test_a_level_set_by_hand_keeps_the_filter(tmp_path, level="2"):
    env = {k: v for k, v in workers.environment().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.train", "--strategy=mirrored", "--simulate_devices=2",
         "--epochs=1", "--synthetic_examples=512"],
        env={**env, "TF_CPP_MIN_LOG_LEVEL": level}, cwd=tmp_path, capture_output=True,
        text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = _shown(result.stderr, (*ON_IMPORT, *NATIVE, *PYTHON, "Source Location Trace"))
    assert shown == [], result.stderr[-3000:]
    assert "done: strategy=mirrored replicas=2" in result.stdout, result.stdout[-3000:]


# The absl recipe of docs/getting-started.md, importing nothing of TensorFlow's first, with
# a fit on a generator's data set (whose C++ lines TensorFlow writes mid-run).
ABSL_RECIPE = """
from absl import app
from mgpu_tf import flags as mgpu_flags

mgpu_flags.define_flags()

def main(argv):
    import keras
    import numpy as np
    import tensorflow as tf

    strategy = mgpu_flags.make_strategy_from_flags()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    examples = tf.data.Dataset.from_generator(
        lambda: ((np.ones(4, "float32"), np.ones(1, "float32")) for _ in range(16)),
        output_signature=(tf.TensorSpec([4]), tf.TensorSpec([1])))
    model.fit(examples.batch(8), epochs=2, verbose=0)

app.run(main)
"""


def test_the_absl_recipe_leaves_tensorflows_own_lines_out(tmp_path):
    stderr = _run_as_a_user(tmp_path, ABSL_RECIPE, "--strategy=mirrored", "--simulate_devices=2")
    shown = _shown(stderr, (*ON_IMPORT, *NATIVE, *PYTHON, "dataset.cc", "generator_dataset_op",
                            "Source Location Trace"))
    assert shown == [], stderr[-3000:]


def _first_cells():
    """The distinct first code cells of the notebooks."""
    import json

    folder = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
    cells = {}
    for notebook in sorted(folder.glob("*.ipynb")):
        code = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
        cells.setdefault("".join(code[0]["source"]), notebook.stem)
    return [pytest.param(source, id=name) for source, name in cells.items()]


@pytest.mark.parametrize("source", _first_cells())
def test_a_notebooks_first_cell_leaves_tensorflows_own_lines_out(tmp_path, source):
    stderr = _run_as_a_user(tmp_path, source)
    assert _shown(stderr, (*ON_IMPORT, *NATIVE, "Source Location Trace")) == [], stderr[-3000:]


def test_start_up_details_below_a_dropped_error_are_dropped_too():
    from mgpu_tf.compat import native_logs

    # As TensorFlow 2.22.0rc0 writes them on a machine without a GPU driver.
    cuinit = ("E0000 00:00:1796662425.448557   19726 cuda_platform.cc:57] failed call to cuInit: "
              "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)")
    details = ["=== Source Location Trace: === ",
               "external/xla/xla/stream_executor/cuda/cuda_status.cc:50", ""]
    assert native_logs.is_start_up_noise(cuinit)
    assert all(native_logs.is_start_up_noise(line, after=True) for line in details)
    # Without a dropped line above them they are the program's own.
    assert not any(native_logs.is_start_up_noise(line) for line in details)


def test_importing_the_toolkit_sets_up_no_logging():
    env = {k: v for k, v in workers.environment().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", IMPORTS], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["[]", "0", "True", "False"], result.stdout


def test_mgpu_tf_plan_leaves_tensorflows_own_lines_out(tmp_path):
    (tmp_path / "my_models.py").write_text(textwrap.dedent("""
        import keras

        def build():
            return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    """))
    env = {k: v for k, v in workers.environment().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "plan", "--model", "my_models:build",
         "--global_batch_size", "32", "--devices", "2", "--device_throughput", "100"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _shown(result.stderr, (*ON_IMPORT, *NATIVE)) == [], result.stderr[-3000:]


def test_a_mirrored_job_with_keras_speed_switches_shows_no_patch_or_autograph_lines(
        switches_stderr):
    stderr = switches_stderr
    shown = _shown(stderr, ("patched Keras", "AutoGraph", "Local rendezvous",
                            "GeneratorDatasetOp", *ON_IMPORT, *NATIVE))
    assert shown == [], stderr[-3000:]
    assert "a warning from TensorFlow" in stderr, stderr[-3000:]
    # The one INFO line of the patches: Keras alone would refuse these switches here.
    told = [line for line in stderr.splitlines() if "through mgpu_tf's train step" in line]
    assert len(told) == 1 and "steps_per_execution=2 and jit_compile=True" in told[0], stderr


# What TensorFlow 2.18.1 and 2.19.1 write as they load on a machine without a GPU, as
# recorded there: XLA's lines come in TensorFlow's own format, before absl's is set up.
RECORDED_START_UP = (
    "2026-12-03 20:01:07.885440: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:477]"
    " Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when"
    " one has already been registered",
    "E0000 00:00:1796328067.914183    7406 cuda_dnn.cc:8310] Unable to register cuDNN factory:"
    " Attempting to register factory for plugin cuDNN when one has already been registered",
    "E0000 00:00:1796328067.923016    7406 cuda_blas.cc:1418] Unable to register cuBLAS factory:"
    " Attempting to register factory for plugin cuBLAS when one has already been registered",
    "2026-12-03 20:01:11.934314: E external/local_xla/xla/stream_executor/cuda/"
    "cuda_driver.cc:152] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit:"
    " UNKNOWN ERROR (303)",
    "2026-12-03 20:01:13.859248: I tensorflow/core/util/port.cc:153] oneDNN custom operations"
    " are on.",
)


@pytest.mark.parametrize("line", RECORDED_START_UP)
def test_older_tensorflows_start_up_lines_are_noise(line):
    from mgpu_tf.compat import native_logs

    assert native_logs.is_start_up_noise(line)


@pytest.mark.parametrize("line", [
    "E0000 00:00:1796328067.914183    7406 cuda_dnn.cc:8310] Could not create cuDNN handle",
    "2026-12-03 20:01:11.934314: E tensorflow/core/framework/op_kernel.cc:1857] OP_REQUIRES "
    "failed at example.cc:12 : INVALID_ARGUMENT: bad input",
    "F0000 00:00:1796328067.914183    7406 port.cc:153] Check failed",
])
def test_a_real_error_is_not_noise(line):
    from mgpu_tf.compat import native_logs

    assert not native_logs.is_start_up_noise(line)
