"""Test session set-up: four logical CPU devices, a clean environment per test, GPU skips.

TensorFlow's logical devices can be set only before its runtime starts, once per
process, so the whole session gets four; tests needing another count run a subprocess.
The session starts without the cluster variables of the machine it runs on (TF_CONFIG,
SLURM's, Kubernetes', MGPU_TF_*), and each test gets the variables back as they were.
Processes a test starts find `tests/support` as this session does, through PYTHONPATH,
and start through `support/startup/sitecustomize.py`.
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
# support/startup: each process' sitecustomize (a cheaper TensorFlow import).
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_TESTS.parent), str(_TESTS), str(_TESTS / "support" / "startup")]
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
    slow collection warns with the test's name. What survives is then frozen, so the next
    test's collection walks only what that test made (a walk of the whole heap cost about
    0.3 s of CPU a test); the last test of a file unfreezes first, which also frees what
    the file's module fixtures held.
    """
    # pytest's own faulthandler_timeout, when set, keeps the one timer faulthandler has.
    dump = not float(item.config.getini("faulthandler_timeout") or 0)
    if dump:
        faulthandler.dump_traceback_later(2 * _SLOW_COLLECTION_SECONDS, file=sys.__stderr__)
    started = time.monotonic()
    try:
        if nextitem is None or nextitem.path != item.path:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
    finally:
        if dump:
            faulthandler.cancel_dump_traceback_later()
    seconds = time.monotonic() - started
    if seconds > _SLOW_COLLECTION_SECONDS:
        warnings.warn(f"collecting the garbage of {item.nodeid} took {seconds:.0f} s")


# Seconds each file takes alone (`python -m pytest tests/FILE -n 0`; docs/benchmarks.md, "Test
# suite time"). The longest go first, so that the test processes end together on short
# files; a file not listed counts as `_UNMEASURED_SECONDS`.
_SECONDS = {
    "test_snippets.py": 80, "test_elastic.py": 80, "test_logging.py": 70,
    "test_combinations.py": 350, "test_random_faults.py": 120, "test_buckets.py": 100,
    "test_checkpoint_paths.py": 60, "test_signals.py": 60, "test_soak.py": 60,
    "test_keras_steps.py": 108, "test_reliability.py": 61, "test_train.py": 56,
    "test_ray_elastic.py": 108, "test_notebooks.py": 113, "test_adaptive_shards.py": 113,
    "test_matrix.py": 97, "test_compression.py": 87, "test_deployment_docs.py": 85,
    "test_cli_test.py": 70, "test_sharded_state.py": 68, "test_custom_loop.py": 63,
    "test_precision.py": 57, "test_sharding_workers.py": 53, "test_calibrate.py": 52,
    "test_closed_ports.py": 50, "test_bench_cli.py": 47, "test_kubernetes.py": 44,
    "test_ray.py": 44, "test_sharding.py": 38, "test_accumulation.py": 37,
    "test_planner_verified.py": 37, "test_hybrid.py": 60, "test_cli_env.py": 36,
    "test_metrics.py": 35, "test_compat_private.py": 32, "test_detect.py": 30,
    "test_compat.py": 26, "test_equivalence.py": 24, "test_launcher_streams.py": 22,
    "test_model_parallel_training.py": 20, "test_kubernetes_metrics.py": 19,
    "test_keras_train_step.py": 18, "test_flags.py": 18, "test_monitor.py": 15,
    "test_model_parallel_real_models.py": 15, "test_planner_memory.py": 13,
    "test_strategies.py": 12, "test_public_names.py": 11, "test_compat_metric_sums.py": 10,
    "test_releases.py": 10, "test_layout.py": 10, "test_model_parallel_recompute.py": 10,
    "test_in_memory.py": 9, "test_data_order.py": 9, "test_docs_site.py": 9,
    "test_model_parallel_errors.py": 9, "test_weighted_logs.py": 9,
    "test_model_parallel_batchnorm.py": 8, "test_stubs.py": 8, "test_epoch_boundaries.py": 7,
    "test_step_watchdog.py": 32, "test_bench_models.py": 37,
    "test_iterator_release.py": 16,
    "test_ring.py": 7, "test_tolerance.py": 7, "test_cli_inputs.py": 7, "test_properties.py": 6,
    "test_adaptive_settle.py": 5, "test_launcher_errors.py": 5,
    "test_model_parallel_balance.py": 5, "test_devices.py": 5, "test_compute_curve.py": 5,
    "test_planner.py": 4, "test_model_parallel_placement.py": 4, "test_patches.py": 4,
    "test_planner_sharded.py": 4, "test_planner_speed.py": 4, "test_backup_dir.py": 3,
    "test_bench_switches.py": 3, "test_model_parallel_planner.py": 3,
    "test_compat_collectives.py": 9, "test_bad_inputs.py": 2, "test_options_table.py": 2,
    "test_launcher.py": 2, "test_cluster.py": 2, "test_chief.py": 1, "test_registry.py": 1,
    "test_sharding_plan.py": 1, "test_cli_parsing.py": 1, "test_transport.py": 1,
    "test_kerashub.py": 240, "test_sparse.py": 80, "test_kerashub_pipeline.py": 45,
    "test_pipeline_graphs.py": 22, "test_lost_worker_report.py": 10, "test_waiting.py": 5,
    "test_resumed_progress.py": 5, "test_docs_claims.py": 3, "test_keras_guard.py": 3,
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
