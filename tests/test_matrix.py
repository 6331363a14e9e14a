"""The release matrix (noxfile.py): its explicit test list, and the check of the private names."""

import os
import runpy
import subprocess
import sys

import pytest

from mgpu_tf.compat import releases, versions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def noxfile():
    return runpy.run_path(os.path.join(ROOT, "noxfile.py"))


def test_every_node_id_the_matrix_names_is_a_test(noxfile):
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                             *noxfile["FULL"]], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = set(result.stdout.splitlines())
    named = [n for nodes in noxfile["CAPABILITIES"].values() for n in nodes]
    assert [n for n in named if n not in collected] == []
    for file in noxfile["COMPAT_FILES"] + noxfile["FIX_FILES"]:
        assert any(line.startswith(file + "::") for line in collected), file


def test_ci_runs_the_compat_files_and_one_test_of_each_capability(noxfile):
    subset = noxfile["SUBSET"]
    assert subset[:len(noxfile["COMPAT_FILES"])] == noxfile["COMPAT_FILES"]
    runs = subset[len(noxfile["COMPAT_FILES"]):]
    for capability, nodes in noxfile["CAPABILITIES"].items():
        ran = [n for n in nodes if n in runs or n.partition("::")[0] in noxfile["COMPAT_FILES"]]
        assert len(ran) == 1, (capability, ran)
    assert set(subset) <= set(noxfile["FULL"]) | {n for nodes in noxfile[
        "CAPABILITIES"].values() for n in nodes}


def test_the_ci_pairs_span_the_supported_range(noxfile):
    ci = [(p.tensorflow, p.keras) for p in releases.PAIRS if p.ci]
    assert ("2.18.1", "3.8.0") in ci  # the floor
    assert noxfile["nox"].options.sessions[-1] == "nightly"
    assert {p.session for p in releases.PAIRS if p.ci} < set(noxfile["nox"].options.sessions)


def _record(directory, code):
    env = dict(os.environ, RECORD_PRIVATE_NAMES=str(directory), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests", "support", "startup"),
                                           os.path.join(ROOT, "tests"), ROOT]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def _check(directory):
    return subprocess.run([sys.executable, "-m", "support.private_names", str(directory)],
                          cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                             PYTHONPATH=os.path.join(ROOT, "tests")),
                          capture_output=True, text=True, timeout=120)


def test_a_process_records_the_names_its_accessors_reach(tmp_path):
    _record(tmp_path, "import keras\n"
                      "from mgpu_tf.compat import private\n"
                      "private.sequential_graph(keras.Sequential([keras.Input((2,))]))\n")
    result = _check(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    unreached = result.stdout.strip().partition(": ")[2].split(", ")
    assert "Sequential._functional" not in unreached
    assert "Functional._nodes_by_depth" in unreached
    expected = {n for n in versions.KNOWN if versions.known_for(n)} - {"Sequential._functional"}
    assert set(unreached) == expected


def test_a_test_run_records_from_its_test_processes(tmp_path):
    """As the matrix runs pytest: two test processes, this conftest, workers in other folders."""
    env = dict(os.environ, RECORD_PRIVATE_NAMES=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests", "support", "startup"),
                                           os.path.join(ROOT, "tests")]))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p",
                             "no:cacheprovider", "tests/test_compat_collectives.py"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    unreached = _check(tmp_path).stdout.strip().partition(": ")[2].split(", ")
    assert "CollectiveReplicaLauncher._group_key" not in unreached


def test_the_check_passes_when_every_known_name_was_reached(tmp_path):
    (tmp_path / "1.txt").write_text("\n".join(versions.KNOWN) + "\n")
    result = _check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("every private name known for this release was reached")


def test_the_table_reads_each_sessions_junit_results(noxfile, tmp_path):
    capability = noxfile["CAPABILITIES"]["hybrid"][0]
    module, _, name = capability.partition("::")
    compat = noxfile["COMPAT_FILES"][0]
    (tmp_path / "nightly.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        f'<testcase classname="{module[:-3].replace("/", ".")}" name="{name}">'
        '<failure message="x"/></testcase>'
        f'<testcase classname="{compat[:-3].replace("/", ".")}" name="test_a"/>'
        f'<testcase classname="{compat[:-3].replace("/", ".")}" name="test_b">'
        '<skipped/></testcase>'
        f'<testcase classname="{compat[:-3].replace("/", ".")}" name="test_c">'
        '<error message="y"/></testcase>'
        '</testsuite></testsuites>')
    (tmp_path / "nightly.json").write_text(
        '{"versions": ["2.23.0.dev1", "3.16.0.dev1"], "patches": {"steps": false},'
        ' "failed": 2, "private_name_errors": 1, "install_seconds": 90, "test_seconds": 600}')
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:]
            for line in noxfile["table"](tmp_path).splitlines()}
    assert rows[""] == ["nightly |"]
    assert rows["hybrid"] == ["fail |"]
    assert rows["model_parallel"] == ["not run |"]
    assert rows[f"`{os.path.basename(compat)}` (passed/run)"] == ["1/2 |"]
    assert rows["patch `steps`"] == ["skipped |"]
    assert rows["release"] == ["2.23.0.dev1 + 3.16.0.dev1 |"]
    assert rows["install / tests (min)"] == ["1.5 / 10.0 |"]
    assert rows["failed (of them PrivateNameError)"] == ["2 (1) |"]


def test_a_sessions_counts_name_its_private_name_errors(noxfile, tmp_path):
    (tmp_path / "nightly.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="t1"><failure message="AssertionError">'
        'E  mgpu_tf.compat.private.PrivateNameError: Keras 3.17 has no Trainer.fit'
        '</failure></testcase>'
        '<testcase classname="tests.test_a" name="t2">'
        '<error message="PrivateNameError: gone"/></testcase>'
        '<testcase classname="tests.test_a" name="t3"><failure message="off by 2"/></testcase>'
        '<testcase classname="tests.test_a" name="t4"/>'
        '<testcase classname="tests.test_a" name="t5"><skipped/></testcase>'
        '</testsuite></testsuites>')
    assert noxfile["counts"](tmp_path / "nightly.xml") == {
        "passed": 1, "failed": 3, "skipped": 1, "private_name_errors": 2}
    assert noxfile["counts"](tmp_path / "none.xml")["failed"] == 0


def test_a_pair_session_installs_no_second_keras_or_tensorflow(noxfile):
    # keras-hub requires `keras` and tensorflow-text, which pins a TensorFlow release: in the
    # test extra it would give a pair two Keras distributions, or no install at all.
    project = {"dependencies": ["tensorflow>=2.18", "numpy"],
               "optional-dependencies": {"test": ["pytest>=8", "keras-hub>=0.32",
                                                  "tensorflow-text>=2.20", "keras_nlp"]}}
    kept = noxfile["_requirements"](exclude=noxfile["_PINNED"], project=project)
    assert kept == ["numpy", "pytest>=8"]
    installed = noxfile["_requirements"](exclude=noxfile["_PINNED"])
    assert not [r for r in installed if r.lower().startswith(("keras", "tensorflow"))]
    for pair in releases.PAIRS:
        assert pair.pins[0].startswith("tensorflow==")
        assert pair.pins[1].partition("==")[0] in ("keras", "keras-nightly")
