"""A pytest plugin that runs Keras' test files in one mode and records each test's outcome.

`-p keras_guard.plugin --guard-mode=MODE --guard-outcomes=FILE`, with `keras_guard/shim` on
the path. Every mode splits the CPU into 2 logical devices before TensorFlow starts, so the
runs differ only in what the mode adds:

- `alone`: Keras as installed;
- `patched`: every patch of `mgpu_tf.compat.patches` installed, no strategy;
- `mirrored`: each test under its own `make_strategy("mirrored", devices=2)`, set as the
  default strategy (`tf.distribute.experimental_set_strategy`) around it, except the tests
  `differences.OWN_STRATEGY` names, which run with the patches and no default strategy.
"""

import importlib.util
import json
import os
import resource
import sys
import types

import pytest

__all__ = ["MODES", "outcome_of"]

MODES = ("alone", "patched", "mirrored")
DEVICES = 2
# Modules some test files import at their top but use only under another backend (torch's
# tensors, grain's data sets): where absent, a placeholder stands in while such a file is
# imported, and is gone before any test runs, so Keras never sees it.
STAND_INS = ("torch", "grain")
# Names a later Keras gave a class the test files import by its older name: (module, old
# name, new name). While a test file is imported the old name is the class itself, and is
# gone again before any test runs, as the stand-ins are. Keras 3.16 renamed TensorFlow's
# trainer class, which 3.15's trainer_test.py imports (keras-nightly's tests are 3.15's).
RENAMED = (("keras.src.backend.tensorflow.trainer", "TensorFlowTrainer", "Trainer"),)


def pytest_addoption(parser):
    group = parser.getgroup("keras_guard", "Keras' own tests against mgpu_tf's patches")
    group.addoption("--guard-mode", choices=MODES, default="alone",
                    help="alone, patched (every patch, no strategy) or mirrored (a strategy "
                         "of make_strategy per test). Defaults to alone.")
    group.addoption("--guard-outcomes", default=None,
                    help="a JSON file to write {node id: [outcome, message, seconds]} to")
    group.addoption("--guard-area", default=None,
                    help="leave out the tests keras_guard.areas keeps for another area "
                         "(ci: the slowest parametrizations); all collected by default")
    group.addoption("--guard-installed", default=None,
                    help="a JSON file to write the names of the patches in place at the end to")
    group.addoption("--guard-coverage", default=None,
                    help="a coverage data file: records which lines of mgpu_tf/compat run "
                         "(needs the coverage package)")


def pytest_configure(config):
    for marker in ("requires_trainable_backend: needs a backend that trains",
                   "multi_device: needs several devices"):
        config.addinivalue_line("markers", marker)
    data_file = config.getoption("--guard-coverage")
    if data_file:
        import coverage

        import mgpu_tf

        compat = os.path.join(os.path.dirname(mgpu_tf.__file__), "compat")
        recorder = coverage.Coverage(data_file=data_file, include=[f"{compat}/*.py"])
        recorder.start()
        config.stash[_COVERAGE] = recorder
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * DEVICES)
    mode = config.getoption("--guard-mode")
    config.stash[_NOT_INSTALLED] = None
    if mode == "patched":
        from mgpu_tf.compat import patches

        try:
            patches.install()
        except Exception as error:  # each test fails with it, so the report names it
            config.stash[_NOT_INSTALLED] = error
    config.pluginmanager.register(_Recorder(config.getoption("--guard-outcomes")),
                                  "keras_guard_recorder")


def pytest_unconfigure(config):
    installed = config.getoption("--guard-installed")
    if installed:
        from mgpu_tf.compat import patches

        with open(installed, "w", encoding="utf-8") as file:
            json.dump(sorted(patches.installed()), file)
    recorder = config.stash.get(_COVERAGE, None)
    if recorder is not None:
        recorder.stop()
        recorder.save()


def pytest_collection_modifyitems(config, items):
    area = config.getoption("--guard-area")
    if area is None:
        return
    from keras_guard import areas

    left = [item for item in items if not areas.takes(area, item.nodeid)]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if areas.takes(area, item.nodeid)]


_COVERAGE = pytest.StashKey()
_NOT_INSTALLED = pytest.StashKey()


@pytest.fixture(autouse=True)
def guard_strategy(request):
    """Under `--guard-mode=mirrored`, the test's own mirrored strategy as the default one."""
    error = request.config.stash[_NOT_INSTALLED]
    if error is not None:
        raise RuntimeError(f"the patches could not be installed: {error}") from error
    if request.config.getoption("--guard-mode") != "mirrored":
        yield None
        return
    import tensorflow as tf

    import mgpu_tf
    from keras_guard import differences

    # Made for each test: Keras' tf.distribute tests reset TensorFlow's context in setUp.
    strategy = mgpu_tf.make_strategy("mirrored", devices=DEVICES)
    if differences.builds_its_own_strategy(request.node.nodeid):
        yield None
        return
    tf.distribute.experimental_set_strategy(strategy)
    try:
        yield strategy
    finally:
        tf.distribute.experimental_set_strategy(None)


@pytest.fixture
def guard_coverage(request):
    """The coverage data file of this run (`--guard-coverage`), or None: processes a test
    starts record theirs beside it, under its name with a suffix."""
    return request.config.getoption("--guard-coverage")


def _stand_in(name):
    def missing(attribute):
        raise ImportError(f"{name} is not installed: {name}.{attribute} cannot be used here. "
                          f"pip install {name}")

    module = types.ModuleType(name)
    module.__getattr__ = missing
    return module


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    if not isinstance(collector, pytest.Module):
        yield
        return
    absent = [name for name in STAND_INS
              if name not in sys.modules and importlib.util.find_spec(name) is None]
    sys.modules.update({name: _stand_in(name) for name in absent})
    renamed = _old_names()
    try:
        yield
    finally:
        for name in absent:
            sys.modules.pop(name, None)
        for module, old in renamed:
            delattr(module, old)


def _old_names():
    """Sets each old name of `RENAMED` its module lacks; returns `[(module, old name)]` set."""
    done = []
    for module_name, old, new in RENAMED:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if not hasattr(module, old) and hasattr(module, new):
            setattr(module, old, getattr(module, new))
            done.append((module, old))
    return done


def outcome_of(report):
    """`"pass"`, `"fail"`, `"skip"` or None (nothing to record yet) for a pytest report."""
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "skip"
        return {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
    if report.failed:
        return "fail"  # an error in setup or teardown
    if report.when == "setup" and report.skipped:
        return "skip"
    return None


def _message(report):
    """The first `E   ` lines of a failure, joined: what was raised or asserted."""
    if not report.failed:
        return ""
    lines = [line[4:].strip() for line in str(report.longrepr).splitlines()
             if line.startswith("E   ") and line[4:].strip()]
    return (" | ".join(lines[:4]) if lines else str(report.longrepr).splitlines()[-1])[:300]


def _cpu_seconds():
    """CPU seconds this process has used (user + system, every thread's), with those of the
    processes it started and waited for (a test's workers)."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


class _Recorder:
    """Keeps `[outcome, message, seconds, CPU seconds]` by node id and writes them at the end.

    The CPU seconds of a test (its setup, call and teardown) are the process' own, so they
    hold under any load, where the wall-clock seconds grow with it."""

    def __init__(self, path):
        self.path, self.results, self.cpu = path, {}, {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        started = _cpu_seconds()
        yield
        self.cpu[item.nodeid] = round(_cpu_seconds() - started, 3)
        if item.nodeid in self.results:
            self.results[item.nodeid] = self.results[item.nodeid][:3] + [self.cpu[item.nodeid]]

    def pytest_runtest_logreport(self, report):
        outcome = outcome_of(report)
        if outcome is None:
            return
        previous = self.results.get(report.nodeid)
        if previous is not None and previous[0] == "fail":
            return  # a teardown after a failed call keeps the call's message
        seconds = (previous[2] if previous else 0) + report.duration
        self.results[report.nodeid] = [outcome, _message(report), round(seconds, 3)]

    def pytest_collectreport(self, report):
        if report.failed:  # a file that does not import: a failure of each run alike
            self.results[report.nodeid] = ["fail", _message(report), 0.0]

    def pytest_sessionfinish(self):
        if self.path:
            with open(self.path, "w", encoding="utf-8") as file:
                json.dump(self.results, file, indent=0, sort_keys=True)
