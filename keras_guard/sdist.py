"""The installed Keras release's own test files, from its sdist: downloaded once, then cached.

keras-nightly's sdists carry no test files; for a build of it the tests are those of the
newest `keras` release before it (`keras<3.16.0.dev2026102704` picks 3.15.1).
"""

import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile

__all__ = ["CACHE", "installed_keras", "test_tree"]

# Where the test trees are kept, one folder per release: `$KERAS_GUARD_CACHE`, else
# ~/.cache/keras_guard.
CACHE = pathlib.Path(os.environ.get("KERAS_GUARD_CACHE")
                     or pathlib.Path.home() / ".cache" / "keras_guard")
_DISTRIBUTIONS = ("keras", "keras-nightly")
_DONE = ".complete"


def installed_keras():
    """`(distribution, version)` of the Keras this interpreter imports, from its metadata."""
    for name in _DISTRIBUTIONS:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise ValueError("Keras' own tests need Keras installed. Received: no distribution of "
                     f"{', '.join(_DISTRIBUTIONS)}. pip install keras")


def _requirements(distribution, version):
    """The sdists to try, in order: the release itself, then (for builds without test files)
    the newest `keras` release before it."""
    return [f"{distribution}=={version}", f"keras<{version}"]


def _download(requirement, folder):
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
                    "--no-deps", "--dest", str(folder), requirement], check=True)
    (archive,) = pathlib.Path(folder).glob("*.tar.gz")
    return archive


def _extract_tests(archive, tree):
    """Writes the `*_test.py` files of `archive` under `tree`, by their path in the package,
    and its pyproject.toml (pytest's settings); returns how many tests files. No
    `__init__.py` comes along: the tests import the installed Keras."""
    count = 0
    with tarfile.open(archive) as sdist:
        for member in sdist.getmembers():
            parts = pathlib.PurePosixPath(member.name).parts[1:]  # past `keras-3.15.1/`
            if member.isfile() and parts in {("pyproject.toml",)}:
                tree.joinpath(*parts).write_bytes(sdist.extractfile(member).read())
            if member.isfile() and parts and parts[-1].endswith("_test.py"):
                target = tree.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(sdist.extractfile(member).read())
                count += 1
    return count


def test_tree(cache=CACHE):
    """`(folder, release)`: the folder holding the test files of the installed Keras (or of the
    release before a build without them), downloading its sdist the first time; `release` is
    the sdist's name, such as `keras-3.15.1`."""
    distribution, version = installed_keras()
    requirements = _requirements(distribution, version)
    for requirement in requirements:
        tree = _cached(cache, requirement)
        if tree is None:
            with tempfile.TemporaryDirectory() as folder:
                archive = _download(requirement, folder)
                tree = pathlib.Path(cache) / archive.name.removesuffix(".tar.gz")
                tree.mkdir(parents=True, exist_ok=True)
                _extract_tests(archive, tree)
            with open(tree / _DONE, "a", encoding="utf-8") as done:
                done.write(requirement + "\n")  # each requirement that found this release
        if any(tree.rglob("*_test.py")):
            return tree, tree.name
    raise ValueError(f"Keras' own tests need an sdist with test files. Received: none in "
                     f"{' or '.join(requirements)}.")


def _cached(cache, requirement):
    """The folder extracted for `requirement` before, or None."""
    for done in pathlib.Path(cache).glob("*/" + _DONE):
        if requirement in done.read_text().split():
            return done.parent
    return None
