"""Elastic local worker groups: as many workers as a discovery script offers, MIN to MAX.

After a failure the group starts again on the workers offered (down to MIN); when more are
offered it grows, up to MAX, once the chief says a backup is complete. Training resumes from
its backup (`mgpu_tf.callbacks.BackupAndRestore`). Every change is logged in one line.

Design: docs/reliability.md#elastic-training
"""

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time

from mgpu_tf.cluster import interrupt
from mgpu_tf.cluster import launcher
from mgpu_tf.cluster.launch_command import LaunchError

__all__ = ["BACKUP_MARKER_VARIABLE", "REGROUP_EXIT", "REGROUP_SUFFIX", "DiscoveryError",
           "RegroupExit", "parse_workers", "discover", "launch_elastic"]

# Set by the elastic launcher: the file the chief rewrites after each complete backup,
# `epoch steps_done epochs time`. While a file of this name plus REGROUP_SUFFIX exists, the
# chief leaves right after its next backup (but the last), with exit code REGROUP_EXIT.
BACKUP_MARKER_VARIABLE = "MGPU_TF_BACKUP_MARKER"
REGROUP_SUFFIX = ".regroup"
REGROUP_EXIT = 75

_SCRIPT_SECONDS = 30.0
# `host` or `host:slots`: a name or IPv4 address, or an IPv6 address in brackets.
_HOST_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])(?::(\d+))?")


class DiscoveryError(LaunchError):
    """The discovery script failed or printed something that is not a worker count."""


class RegroupExit(SystemExit):
    """`BackupAndRestore` leaves `fit` at the backup (`epoch`, `steps_done`) the elastic
    launcher regroups at; uncaught, the process ends with `REGROUP_EXIT`, no traceback."""

    def __init__(self, epoch, steps_done):
        super().__init__(REGROUP_EXIT)
        self.epoch, self.steps_done = epoch, steps_done

    def __str__(self):
        return (f"left at the backup of epoch {self.epoch} step {self.steps_done}: the "
                f"elastic launcher regroups here (exit code {REGROUP_EXIT}).")


def parse_workers(text):
    """`(minimum, maximum)` of `--workers N` or `--workers MIN:MAX`.

    Raises:
        LaunchError: unless both are integers with `1 <= MIN <= MAX`.
    """
    parts = str(text).split(":")
    try:
        minimum, maximum = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
    except ValueError:
        minimum, maximum = 0, -1
    if not 1 <= minimum <= maximum:
        raise LaunchError(
            "`workers` must be an integer of at least 1, or a range MIN:MAX with "
            f"1 <= MIN <= MAX. Received: workers={text!r}. Use e.g. 2 or 1:4.")
    return minimum, maximum


def discover(script):
    """Runs the discovery script; returns `(slots, hosts)` it offers now.

    The script prints one integer (the workers that can run), or one line per host,
    `host` or `host:slots` (Horovod's format), whose slots are added up.

    Raises:
        DiscoveryError: when it fails, hangs for 30 s, or prints anything else.
    """
    try:
        done = subprocess.run([script], capture_output=True, text=True,
                              timeout=_SCRIPT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DiscoveryError(f"The discovery script must run and exit. Received: {error}. "
                             f"Check {script!r}.") from None
    if done.returncode:
        raise DiscoveryError(
            f"The discovery script must exit with 0. Received: exit code {done.returncode}"
            f" ({done.stderr.strip()[-200:]!r}). Check {script!r}.")
    lines = [line.split("#")[0].strip() for line in done.stdout.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) == 1 and lines[0].isdigit():
        return int(lines[0]), []
    hosts, slots = [], 0
    for line in lines:
        match = _HOST_LINE.fullmatch(line)
        host, count = match.groups() if match else (None, None)
        if not match or count == "0":
            raise DiscoveryError(
                "The discovery script must print a worker count, or one 'host' or "
                f"'host:slots' per line. Received: {done.stdout.strip()[:200]!r}. "
                "Print e.g. 2, or node1:2 and node2:1 on two lines.")
        hosts.append(host)
        slots += int(count or 1)
    return slots, hosts


def _check_script(script):
    if not isinstance(script, (str, os.PathLike)) or not os.path.isfile(script) \
            or not os.access(script, os.X_OK):
        raise LaunchError(
            "`discovery_script` must be an executable file. Received: "
            f"discovery_script={script!r}. Give its path and chmod +x it.")


class _Growth:
    """Asks the script while the group runs; with more workers offered, asks the chief
    to leave at its next backup. Called by the group: True once it has left there."""

    def __init__(self, script, count, maximum, marker, poll_seconds, say):
        self.script, self.count, self.maximum = script, count, maximum
        self.marker, self.poll_seconds, self.say = marker, poll_seconds, say
        self.target, self.offered, self.seen, self.at = None, None, None, None
        self._next, self._error = time.monotonic() + poll_seconds, None

    def __call__(self):
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self.poll_seconds
            self._ask()
        return self.ready()

    def ready(self):
        """True when a backup was completed since the regroup was asked for."""
        if self.target is None:
            return False
        now = _read(self.marker)
        if now in (None, self.seen):
            return False
        epoch, steps, epochs = (int(v) for v in now.split()[:3])
        if epochs and epoch >= epochs:
            return False  # the last backup: training ends without regrouping
        self.at = (epoch, steps)
        return True

    def _ask(self):
        try:
            self.offered = discover(self.script)[0]
            self._error = None
        except DiscoveryError as error:
            if str(error) != self._error:
                self.say(f"discovery failed, keeping {self.count} workers: {error}")
            self._error = str(error)
            return
        target = min(self.offered, self.maximum)
        request = self.marker + REGROUP_SUFFIX
        if target > self.count and self.target is None:
            self.target, self.seen = target, _read(self.marker)
            with open(request, "w"):
                pass
            self.say(f"{self.offered} workers offered; growing from {self.count} to "
                     f"{target} at the next backup.")
        elif self.target is not None and target <= self.count:
            self.say(f"{self.offered} workers offered; staying at {self.count}.")
            self.target = None
            _remove(request)
        elif self.target is not None:
            self.target = target


def _remove(path):
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def launch_elastic(command, workers, discovery_script, *, port=None, host="127.0.0.1",
                   env=None, output=None, errors=None, grace_seconds=10.0, max_restarts=0,
                   poll_seconds=1.0, wait_seconds=600.0):
    """Runs `command` on as many local workers as `discovery_script` offers, MIN to MAX.

    The options are `launcher.launch`'s, and `mgpu-tf launch --workers MIN:MAX
    --discovery_script S`'s (docs/cli.md).

    Example:

    ```python
    launch_elastic([sys.executable, "train.py"], "1:4", "./discover.sh", max_restarts=3)
    ```

    Args:
        command: the program and its arguments, a list of strings.
        workers: `"MIN:MAX"`, or `(MIN, MAX)`.
        discovery_script: an executable that prints the workers that can run now.
        max_restarts: starts after a failure (growing is not one). Defaults to `0`.
        poll_seconds: how often the script is asked. Defaults to `1`.
        wait_seconds: how long to wait for MIN workers before failing. Defaults to `600`.

    Returns:
        0 when training ended, else the exit code of the last failure (1 when fewer than
        MIN workers were offered for `wait_seconds`; 130 on Ctrl-C, 143 on SIGTERM).

    Raises:
        LaunchError: for a bad command, range, script (`DiscoveryError` when it cannot
            answer) or time, before anything starts.
    """
    minimum, maximum = parse_workers(
        workers if isinstance(workers, str) else ":".join(map(str, workers)))
    _check_script(discovery_script)
    launcher.check_request(command, maximum, port, host, env, max_restarts, grace_seconds)
    for name, value in (("poll_seconds", poll_seconds), ("wait_seconds", wait_seconds)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise LaunchError(f"`{name}` must be a positive number of seconds. Received: "
                              f"{name}={value!r}")
    discover(discovery_script)  # a script that cannot answer fails here, before any start
    output, errors = launcher.streams(output, errors)
    launcher.warn_if_reachable(host, output)

    def say(message):
        output.write(f"mgpu-tf launch: elastic: {message}\n")
        output.flush()

    folder = tempfile.mkdtemp(prefix="mgpu_tf-elastic-")
    marker = os.path.join(folder, "backup")
    base = dict(launcher.base_environment(env), **{BACKUP_MARKER_VARIABLE: marker})
    try:
        count = _offered(discovery_script, minimum, maximum, wait_seconds, poll_seconds, say)
        if count is None:
            return 1
        say(f"starting {count} workers ({minimum}:{maximum}).")
        start = restarts = 0
        interrupted = interrupt.Interrupt()
        while True:
            growth = _Growth(discovery_script, count, maximum, marker, poll_seconds, say)
            code = launcher.run_group(
                command, launcher.worker_tf_configs(count, port=port, host=host),
                dict(base, **{launcher.RESTART_VARIABLE: str(start)}), output, grace_seconds,
                errors=errors, stop_when=growth, interrupted=interrupted)
            start += 1
            _remove(marker + REGROUP_SUFFIX)
            if code == launcher.REGROUP:
                say(f"{count} -> {growth.target} workers at the backup of epoch "
                    f"{growth.at[0]} step {growth.at[1]} ({growth.offered} offered).")
                count = growth.target
                continue
            if code == 0 or interrupted.is_set() or restarts == max_restarts:
                return code
            restarts += 1
            offered = _offered(discovery_script, minimum, maximum, wait_seconds,
                               poll_seconds, say)
            if offered is None:
                return 1
            say(f"{count} -> {offered} workers after a failure (exit code {code}); resuming "
                f"from the last backup (restart {restarts} of {max_restarts}).")
            count = offered
    except KeyboardInterrupt:  # while waiting for workers; a running group returns 130
        say("interrupted.")
        return 130
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _offered(script, minimum, maximum, wait_seconds, poll_seconds, say):
    """Workers to start, `min(offered, maximum)`, once at least `minimum`; `None` on timeout."""
    deadline, told = time.monotonic() + wait_seconds, None
    while True:
        try:
            offered = discover(script)[0]
        except DiscoveryError as error:
            offered, why = 0, str(error)
        else:
            why = f"{offered} offered"
        if offered >= minimum:
            return min(offered, maximum)
        if time.monotonic() >= deadline:
            say(f"failed: fewer workers than the minimum {minimum} for {wait_seconds:g} s "
                f"({why}). Add hosts, or lower MIN in --workers {minimum}:{maximum}.")
            return None
        if why != told:
            say(f"waiting up to {wait_seconds:g} s for {minimum} workers ({why}).")
            told = why
        time.sleep(poll_seconds)
