"""The supported range: the package's metadata, the check at import and `mgpu-tf env`'s line."""

import importlib.metadata
import os
import subprocess
import sys
import tomllib

import keras
import pytest
import tensorflow as tf
from packaging.requirements import Requirement

from mgpu_tf.compat import releases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _metadata():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        return tomllib.load(file)["project"]


def _requirement(name):
    return next(Requirement(r) for r in _metadata()["dependencies"]
                if Requirement(r).name == name)


def test_pip_refuses_a_tensorflow_below_the_floor():
    specifier = _requirement("tensorflow").specifier
    assert not specifier.contains("2.17.1")
    assert specifier.contains("2.18.0")


def test_keras_comes_from_tensorflow_alone():
    # A requirement on `keras` would install a second distribution of the package beside
    # the keras-nightly a TensorFlow release candidate requires.
    names = {Requirement(r).name.lower() for r in _metadata()["dependencies"]}
    assert not names & {"keras", "keras-nightly"}
    # The installed TensorFlow's own metadata requires a Keras 3, the one installed.
    required = [Requirement(r) for r in importlib.metadata.requires("tensorflow") or []
                if Requirement(r).name in ("keras", "keras-nightly") and not Requirement(r).marker]
    assert required, importlib.metadata.requires("tensorflow")
    for requirement in required:
        assert requirement.specifier.contains(keras.__version__, prereleases=True), requirement
        assert not requirement.specifier.contains("2.15.0", prereleases=True), requirement


def test_the_classifiers_claim_only_the_python_the_matrix_runs():
    tested = f"{sys.version_info.major}.{sys.version_info.minor}"
    claimed = {c.rpartition(" :: ")[2] for c in _metadata()["classifiers"]
               if c.startswith("Programming Language :: Python :: 3.")}
    assert claimed == {tested}
    # Nothing older than the tested Python installs.
    older = f"{sys.version_info.major}.{sys.version_info.minor - 1}"
    assert not Requirement(f"python{_metadata()['requires-python']}").specifier.contains(older)


@pytest.mark.parametrize("tensorflow_version, keras_version, expected", [
    ("2.18.1", "3.8.0", "tested"),
    ("2.21.0", "3.15.1", "tested"),
    ("2.20.0", "3.13.0", "tested"),
    ("2.21.0", "3.8.0", "untested"),
    ("2.22.0rc0", "3.16.0.dev2026102704", "tested"),
    ("2.23.0.dev20261026", "3.17.0.dev2026120104", "untested-newer"),
    ("2.21.0", "3.17.0", "untested-newer"),
    ("2.17.1", "3.15.1", "unsupported"),
    ("2.21.0", "3.7.0", "unsupported"),
    ("2.16.2", "3.3.3", "unsupported"),
])
def test_status_of_a_pair(tensorflow_version, keras_version, expected):
    assert releases.status(tensorflow_version, keras_version) == expected
    assert releases.status_text(tensorflow_version, keras_version).startswith(f"{expected}: ")


def test_an_unsupported_pair_says_what_to_install():
    assert releases.status_text("2.21.0", "3.7.0").endswith(
        "pip install 'tensorflow>=2.18' 'keras>=3.8'")


def test_a_version_without_major_minor_is_refused():
    with pytest.raises(ValueError, match="`version` must start with major.minor"):
        releases.status("2", "3.15.1")


def _import_with(tmp_path, distributions):
    """`import mgpu_tf` with `distributions` ({name: version}) installed in front, as
    `pip install --no-deps --target` leaves them: a dist-info folder found first."""
    for name, version in distributions.items():
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))
    return subprocess.run([sys.executable, "-c", "import mgpu_tf"], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("distributions, received", [
    ({"keras": "3.7.0"}, "keras==3.7.0"),
    ({"tensorflow": "2.17.1"}, "tensorflow==2.17.1"),
    ({"tensorflow": "2.16.2", "keras": "3.3.3"}, "tensorflow==2.16.2, keras==3.3.3"),
])
def test_import_below_the_floor_says_so_in_one_line(tmp_path, distributions, received):
    result = _import_with(tmp_path, distributions)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].endswith(
        f"mgpu_tf supports TensorFlow 2.18 + Keras 3.8 and newer. Received: {received}. "
        "pip install 'tensorflow>=2.18' 'keras>=3.8'"), lines[0]


def test_import_at_the_floor_says_nothing(tmp_path):
    result = _import_with(tmp_path, {"tensorflow": "2.18.0", "keras": "3.8.0"})
    assert (result.returncode, result.stderr) == (0, "")


def test_env_says_whether_the_installed_pair_is_in_the_declared_range():
    """The line of `mgpu-tf env` against the metadata's range, whatever pair is installed."""
    script = ("from mgpu_tf.cli import env\n"
              "print(dict(env.environment_report())['release pair'])")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    declared = (_requirement("tensorflow").specifier.contains(tf.__version__, prereleases=True)
                and releases.status(tf.__version__, keras.__version__) != "unsupported")
    if not declared:
        assert line.startswith("unsupported: "), line
    else:
        assert line.startswith(("tested: ", "untested: ", "untested-newer: ")), line
    minor = ".".join(keras.__version__.split(".")[:2])
    assert f"Keras {minor}" in line, line
