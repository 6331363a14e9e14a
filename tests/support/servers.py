"""Real servers the tests run against, brought onto the machine by the test that needs them.

The README's test command must pass on a fresh Debian machine, so a server missing there is
installed from Debian's packages when the tests run as root (as on CI and a fresh machine), and
the test fails with the command to run otherwise.
"""

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile

__all__ = ["prometheus_binary"]

# Debian's package and the command it puts on PATH.
_PROMETHEUS = ("prometheus", "prometheus")


def prometheus_binary():
    """The path of the `prometheus` server, installed from Debian's package when missing."""
    return _debian_command(*_PROMETHEUS)


def _debian_command(package, command):
    found = shutil.which(command)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(
            f"`{command}` is not installed and this user cannot install it. "
            f"Run `sudo apt-get install {package}` (Debian's package), then the tests again.")
    # Two test processes may ask at once: one installs, the other waits and finds it.
    with _lock(f"mgpu_tf-tests-apt-{package}"):
        found = shutil.which(command)
        if found:
            return found
        environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for step in (["apt-get", "update", "-qq"],
                     ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]):
            done = subprocess.run(step, env=environment, capture_output=True, text=True,
                                  timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"Installing Debian's `{package}` failed at "
                                   f"`{' '.join(step)}`:\n{done.stdout[-2000:]}"
                                   f"{done.stderr[-2000:]}")
    found = shutil.which(command)
    if found is None:
        raise RuntimeError(f"Debian's `{package}` installed, but `{command}` is not on PATH.")
    return found


@contextlib.contextmanager
def _lock(name):
    with open(os.path.join(tempfile.gettempdir(), name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
