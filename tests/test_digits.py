"""The bundled digits: the UCI test set as published, and shipped in the wheel."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

import numpy as np

from mgpu_tf.data import load_digits

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_digits_are_the_uci_test_set():
    images, labels = load_digits()
    assert images.shape == (1797, 64) and labels.shape == (1797,)
    assert images.dtype == labels.dtype == np.uint8
    assert images.min() == 0 and images.max() == 16
    # optdigits.names, the class distribution of the test set (optdigits.tes).
    assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert labels[:10].tolist() == list(range(10))
    # The first image, a zero, as every tutorial prints it.
    assert images[0].reshape(8, 8)[:2].tolist() == [[0, 0, 5, 13, 9, 1, 0, 0],
                                                    [0, 0, 13, 15, 10, 15, 5, 0]]


def test_each_call_returns_arrays_of_its_own():
    images, _ = load_digits()
    images[0] = 99
    assert load_digits()[0][0].max() == 15


def test_the_wheel_ships_the_digits_and_every_stub(tmp_path):
    # Built from a copy: setuptools leaves its build/ folder in the tree it builds.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "mgpu_tf", source / "mgpu_tf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.cfg", "README.md"):
        shutil.copy(ROOT / name, source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "--quiet", "--wheel-dir", str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("mgpu_tf-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    stubs = {str(path.relative_to(ROOT)) for path in (ROOT / "mgpu_tf").rglob("__init__.pyi")}
    assert stubs and stubs <= shipped, sorted(stubs - shipped)
    assert "mgpu_tf/data/digits.npz" in shipped
