"""Test session set-up: four logical CPU devices, a clean environment per test, GPU skips.

TensorFlow's logical devices can be set only before its runtime starts, once per
process, so the whole session gets four; tests needing another count run a subprocess.
The session starts without the cluster variables of the machine it runs on (TF_CONFIG,
SLURM's, Kubernetes', MGPU_TF_*), and each test gets the variables back as they were.
Processes a test starts find `tests/support` as this session does, through PYTHONPATH.
"""

import contextlib
import faulthandler
import gc
import os
import pathlib
import sys
import time
import warnings

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


def pytest_collection_finish(session):
    """Takes what the imports made (TensorFlow, Keras, the test modules: about 400,000
    objects) out of the garbage collector's view: they live as long as the session, and
    every full collection would otherwise walk them again (0.15 s of CPU each)."""
    if _runs_tests(session.config):
        gc.freeze()


# A garbage collection that takes longer than this warns; one still running after twice as
# long prints every thread's stack.
_SLOW_COLLECTION_SECONDS = 30


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Collects each test's garbage as the test ends, its fixtures torn down.

    Freeing the TensorFlow objects of a test that trained under a strategy (models,
    distributed data sets and their iterators) waits on TensorFlow's threads with nearly
    no CPU: about 1-5 s when collected as the test ends, 30 s to minutes when a full
    collection finds them tests later, in whatever test (or file) allocates then.
    Collecting here keeps the wait short and on the test that made the objects, and a
    slow collection warns with the test's name.
    """
    # pytest's own faulthandler_timeout, when set, keeps the one timer faulthandler has.
    dump = not float(item.config.getini("faulthandler_timeout") or 0)
    if dump:
        faulthandler.dump_traceback_later(2 * _SLOW_COLLECTION_SECONDS, file=sys.__stderr__)
    started = time.monotonic()
    try:
        gc.collect()
    finally:
        if dump:
            faulthandler.cancel_dump_traceback_later()
    seconds = time.monotonic() - started
    if seconds > _SLOW_COLLECTION_SECONDS:
        warnings.warn(f"collecting the garbage of {item.nodeid} took {seconds:.0f} s")


# Seconds each file takes alone (`python -m pytest tests/FILE -n 0`; docs/benchmarks.md, "Test
# suite time"). The longest go first, so that the two test processes end together on short
# files; a file not listed counts as `_UNMEASURED_SECONDS`.
_SECONDS = {
    "test_elastic.py": 243, "test_keras_steps.py": 163, "test_reliability.py": 149,
    "test_train.py": 141, "test_ray_elastic.py": 133, "test_notebooks.py": 113,
    "test_bench_cli.py": 47, "test_ray.py": 44,
}
_UNMEASURED_SECONDS = 10


def pytest_collection_modifyitems(config, items):
    """Runs the longest files first; skips tests marked `gpu` (or `gpu(n)`: n GPUs) when
    TensorFlow sees fewer GPUs.

    Listing physical devices does not start TensorFlow's runtime, so the session can
    still split its devices afterwards.
    """
    import tensorflow as tf

    items.sort(key=lambda item: -_SECONDS.get(item.path.name, _UNMEASURED_SECONDS))
    present = len(tf.config.list_physical_devices("GPU"))
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        needed = marker.args[0] if marker.args else 1
        if present < needed:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {needed} GPU(s); TensorFlow sees {present}"))
