"""The supported TensorFlow and Keras releases: the floor, and the pairs the release matrix runs.

Standard library only: `noxfile.py` reads it by path, and `import mgpu_tf` checks the floor
from the installed packages' metadata before TensorFlow loads.

Design: docs/compatibility.md
"""

import dataclasses
import enum
import importlib.metadata
import logging
import re

__all__ = ["FLOOR", "PAIRS", "Pair", "Status", "check_floor", "installed_version", "owners",
           "status", "status_text"]

# The oldest releases supported: the package's metadata requires them (pyproject.toml).
FLOOR = {"tensorflow": (2, 18), "keras": (3, 8)}

# The distributions that install each library's import package, the usual one first.
_DISTRIBUTIONS = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly", "tf-nightly-cpu",
                                 "tensorflow-macos", "tensorflow-intel"),
                  "keras": ("keras", "keras-nightly")}
_NAMES = {"tensorflow": "TensorFlow", "keras": "Keras"}


@dataclasses.dataclass(frozen=True)
class Pair:
    """A TensorFlow and Keras release that the matrix tests; `ci`: `.ci/run` runs it.

    `keras_distribution` is the distribution that installs that Keras: `keras`, or
    `keras-nightly` for the Keras a TensorFlow release candidate depends on.
    """

    tensorflow: str
    keras: str
    ci: bool
    keras_distribution: str = "keras"

    @property
    def pins(self):
        """The pip requirements that install the pair, such as `tensorflow==2.18.1`."""
        return (f"tensorflow=={self.tensorflow}", f"{self.keras_distribution}=={self.keras}")

    @property
    def session(self):
        """The nox session's name, such as `tf2.18-keras3.8`."""
        return f"tf{_minor_text(self.tensorflow)}-keras{_minor_text(self.keras)}"


# Newest first. CI runs the floor, Colab's pair and the newest TensorFlow with the Keras it
# depends on (a release candidate and keras-nightly, pinned, until both are released: then
# the pair moves to them); the others run before a release (docs/compatibility.md).
PAIRS = (
    Pair("2.22.0rc0", "3.16.0.dev2026102704", ci=True, keras_distribution="keras-nightly"),
    Pair("2.21.0", "3.15.1", ci=False),
    Pair("2.21.0", "3.14.1", ci=False),
    Pair("2.20.0", "3.13.2", ci=True),
    Pair("2.20.0", "3.12.4", ci=False),
    Pair("2.19.1", "3.11.3", ci=False),
    Pair("2.19.1", "3.10.0", ci=False),
    Pair("2.18.1", "3.9.2", ci=False),
    Pair("2.18.1", "3.8.0", ci=True),
)


class Status(str, enum.Enum):
    """Where an installed TensorFlow and Keras stand against the supported releases."""

    TESTED = "tested"
    UNTESTED = "untested"
    UNTESTED_NEWER = "untested-newer"
    UNSUPPORTED = "unsupported"

    def __str__(self):
        return self.value


def _minor(version):
    match = re.match(r"(\d+)\.(\d+)", str(version).strip())
    if match is None:
        raise ValueError(f"`version` must start with major.minor, such as '3.15.1'. "
                         f"Received: version={version!r}")
    return int(match[1]), int(match[2])


def _minor_text(version):
    return "%d.%d" % _minor(version)


def status(tensorflow_version, keras_version):
    """Returns the `Status` of TensorFlow `tensorflow_version` with Keras `keras_version`.

    Tested: the matrix runs their minor releases together; unsupported: one is below `FLOOR`;
    untested-newer: one is newer than every pair of the matrix; untested: the rest.
    Raises `ValueError` for a version not starting with `major.minor`.
    """
    tensorflow, keras = _minor(tensorflow_version), _minor(keras_version)
    if tensorflow < FLOOR["tensorflow"] or keras < FLOOR["keras"]:
        return Status.UNSUPPORTED
    if (tensorflow, keras) in {(_minor(p.tensorflow), _minor(p.keras)) for p in PAIRS}:
        return Status.TESTED
    if (tensorflow > max(_minor(p.tensorflow) for p in PAIRS)
            or keras > max(_minor(p.keras) for p in PAIRS)):
        return Status.UNTESTED_NEWER
    return Status.UNTESTED


def status_text(tensorflow_version, keras_version):
    """The `Status` of the pair and what it means, in one line (`mgpu-tf env`'s)."""
    found = status(tensorflow_version, keras_version)
    pair = (f"TensorFlow {_minor_text(tensorflow_version)} + "
            f"Keras {_minor_text(keras_version)}")
    floor = _floor_text()
    return {
        Status.TESTED: f"tested: the release matrix runs {pair} (docs/compatibility.md)",
        Status.UNTESTED: f"untested: {pair} is in the supported range ({floor} and newer), "
                         "a combination the release matrix does not run",
        Status.UNTESTED_NEWER: f"untested-newer: {pair} is newer than every pair the release "
                               "matrix runs; private names are tried after a warning",
        Status.UNSUPPORTED: f"unsupported: {pair} is below the supported {floor}; "
                            f"pip install '{_requirement('tensorflow')}' '{_requirement('keras')}'",
    }[found]


def _floor_text():
    return " + ".join(f"{_NAMES[library]} {major}.{minor}"
                      for library, (major, minor) in FLOOR.items())


def _requirement(library):
    return "%s>=%d.%d" % (library, *FLOOR[library])


def installed_version(library):
    """The installed version of `library` from its metadata (TensorFlow does not load), or None."""
    for distribution in _DISTRIBUTIONS[library]:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def owners(package):
    """`[(distribution, version), ...]` of the installed distributions that install the import
    package `package` (such as "keras"), from their metadata, the first found first."""
    found = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if not name or re.sub(r"[-_.]+", "-", name).lower() in found:
            continue
        top_level = distribution.read_text("top_level.txt")
        if top_level is not None:
            owns = package in top_level.split()
        else:  # no top_level.txt: the files the installer recorded
            owns = any(file.parts[:1] == (package,) for file in distribution.files or ())
        if owns:
            found[re.sub(r"[-_.]+", "-", name).lower()] = (name, distribution.version)
    return list(found.values())


def check_floor(logger=None):
    """Logs, and returns, one line when the installed TensorFlow or Keras is below `FLOOR`.

    pip refuses such a release; this is for one forced by hand. Returns None otherwise.
    """
    below = []
    for library in FLOOR:
        version = installed_version(library)
        # A version without major.minor is some local build: left for the private names' checks.
        if version is not None and re.match(r"\d+\.\d+", version) and (
                _minor(version) < FLOOR[library]):
            below.append(f"{library}=={version}")
    if not below:
        return None
    line = (f"mgpu_tf supports {_floor_text()} and newer. Received: {', '.join(below)}. "
            f"pip install '{_requirement('tensorflow')}' '{_requirement('keras')}'")
    (logger or logging.getLogger("mgpu_tf")).warning(line)
    return line
