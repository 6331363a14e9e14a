"""Test session set-up: four logical CPU devices, a clean environment per test, GPU skips.

TensorFlow's logical devices can be set only before its runtime starts, once per
process, so the whole session gets four; tests needing another count run a subprocess.
The session starts without the cluster variables of the machine it runs on (TF_CONFIG,
SLURM's, Kubernetes', MGPU_TF_*), and each test gets the variables back as they were.
Processes a test starts find `tests/support` as this session does, through PYTHONPATH.
"""

import contextlib
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

_TESTS = pathlib.Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_TESTS.parent), str(_TESTS)]
    + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import pytest  # noqa: E402

from support import workers  # noqa: E402

for _name in [n for n in os.environ if workers.is_cluster_variable(n)]:
    del os.environ[_name]

SESSION_DEVICES = 4


def _runs_tests(config):
    """False in the process that only hands files to pytest-xdist's test processes."""
    return config.getoption("dist", "no") == "no" or hasattr(config, "workerinput")


@contextlib.contextmanager
def _native_lines_dropped():
    """Standard error (file descriptor 2) to /dev/null: TensorFlow's C++ start-up lines
    (oneDNN, CUDA) are written before TF_CPP_MIN_LOG_LEVEL applies. An exception still
    shows: it is reported once the block has ended."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def pytest_configure(config):
    if _runs_tests(config):
        with _native_lines_dropped():
            import mgpu_tf

            mgpu_tf.simulate_devices(SESSION_DEVICES)


@pytest.fixture(autouse=True)
def restore_environment():
    """Puts back every variable mgpu_tf reads (TF_CONFIG, SLURM_*, ...) after each test."""
    with workers.cluster_variables_restored():
        yield


# The files that take longest (a minute or more of worker processes, Ray clusters or a
# notebook kernel) go first, so that the two test processes end together on short files.
_LONGEST_FIRST = ("test_keras_steps.py", "test_ray_elastic.py", "test_ray.py", "test_elastic.py",
                  "test_notebooks.py", "test_reliability.py", "test_train.py", "test_bench_cli.py")


def pytest_collection_modifyitems(config, items):
    """Runs the longest files first; skips tests marked `gpu` (or `gpu(n)`: n GPUs) when
    TensorFlow sees fewer GPUs.

    Listing physical devices does not start TensorFlow's runtime, so the session can
    still split its devices afterwards.
    """
    import tensorflow as tf

    first = {name: rank for rank, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))
    present = len(tf.config.list_physical_devices("GPU"))
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        needed = marker.args[0] if marker.args else 1
        if present < needed:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {needed} GPU(s); TensorFlow sees {present}"))
