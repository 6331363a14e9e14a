"""Which private Keras/TensorFlow names (`versions.KNOWN`) the processes of a test run reached.

With `RECORD_PRIVATE_NAMES` naming a directory and `tests/support/startup` on PYTHONPATH,
every Python process (the test session and the workers it starts) appends each name its
accessors check to a file of its own there. The release matrix (noxfile.py) then asks
`python -m support.private_names DIRECTORY`, which fails naming each name known for the
installed releases that no process reached.
"""

import os
import pathlib
import sys

__all__ = ["VARIABLE", "install", "missing", "reached"]

VARIABLE = "RECORD_PRIVATE_NAMES"


def install(directory):
    """Records in `directory` each name this process' accessors check, once each."""
    from mgpu_tf.compat import versions

    original = versions.known_for
    path = pathlib.Path(directory) / f"{os.getpid()}.txt"
    seen = set()

    def known_for(name, version=None):
        # Every accessor asks about the installed release (`version=None`) before its name.
        if version is None and name not in seen:
            seen.add(name)
            with open(path, "a") as out:
                out.write(name + "\n")
        return original(name, version)

    versions.known_for = known_for


def reached(directory):
    """The names recorded by every process in `directory`."""
    return {line for file in pathlib.Path(directory).glob("*.txt")
            for line in file.read_text().splitlines() if line}


def missing(directory):
    """The names of `KNOWN` that are known for the installed releases and no process reached."""
    from mgpu_tf.compat import versions

    found = reached(directory)
    return sorted(name for name in versions.KNOWN
                  if versions.known_for(name) and name not in found)


def _main(argv):
    if len(argv) != 1 or not pathlib.Path(argv[0]).is_dir():
        print(f"usage: python -m support.private_names DIRECTORY. Received: {argv}")
        return 2
    gone = missing(argv[0])
    if gone:
        print(f"{len(gone)} private names known for this release were reached by no test: "
              + ", ".join(gone))
        return 1
    print(f"every private name known for this release was reached "
          f"({len(reached(argv[0]))} recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
