"""Checks of a launch request before any worker starts: its program and its script exist, the
workers fit the open-file limit, and the stop's grace is a time.

Design: docs/design.md#local-launcher
"""

import math
import numbers
import os
import re
import resource
import shutil

__all__ = ["LaunchError", "check_command", "check_grace", "check_open_files"]

# Files the launcher holds open per worker while the group runs: the worker's stdout and
# stderr pipes.
FILES_PER_WORKER = 2
# Files a start opens for a moment beyond those (`Popen`'s pipe ends and error pipe).
_SPARE_FILES = 8


class LaunchError(ValueError):
    """A launch request that cannot start (bad command, worker count or port)."""


def check_command(command, env):
    """Raises `LaunchError` unless `command` is a list of strings whose program and script exist."""
    if isinstance(command, str) or not isinstance(command, (list, tuple)) or not command:
        raise LaunchError(
            "`command` must be a non-empty list of program arguments (put it after `--` "
            f"on the command line). Received: command={command!r}"
        )
    if not all(isinstance(part, str) for part in command):
        raise LaunchError(f"`command` must hold strings only. Received: command={command!r}")
    _check_program(command, env)
    _check_script(command)


def _check_program(command, env):
    """Raises `LaunchError` unless `command[0]` is a program this machine can start."""
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not os.path.isfile(program):
            what = "is a folder" if os.path.isdir(program) else "does not exist"
            raise LaunchError(
                "The command's program must be a file. Received: command[0]="
                f"{program!r}, which {what}. Check the path.")
        if not os.access(program, os.X_OK):
            raise LaunchError(
                f"The command's program must be executable. Received: command[0]={program!r}, "
                f"which is not. Run it through its interpreter (python {program}), or make it "
                f"executable (chmod +x {program}).")
        return
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise LaunchError(
            "The command's program must be found on PATH. Received: command[0]="
            f"{program!r}, which is not. Check its spelling, or give its path.")


_PYTHON = re.compile(r"python[0-9.]*")
# Interpreter options whose value is the next argument when not attached (`-W error`).
_PYTHON_VALUE_OPTIONS = ("W", "X")


def _python_script(command):
    """The script a `python [OPTIONS] FILE ...` command runs, or `None` (`-c`, `-m`, stdin)."""
    if not _PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    args = iter(command[1:])
    for arg in args:
        if arg == "-" or arg in ("--help", "--version"):
            return None
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                next(args, None)
            continue
        if not arg.startswith("-"):
            return arg
        for k, letter in enumerate(arg[1:], 1):
            if letter in "cm":
                return None
            if letter in _PYTHON_VALUE_OPTIONS:
                if k == len(arg) - 1:
                    next(args, None)
                break
    return None


def _check_script(command):
    """Raises `LaunchError` unless the script of a `python FILE` command is a file."""
    script = _python_script(command)
    if script is None or os.path.isfile(script):
        return
    what = "is a folder" if os.path.isdir(script) else "does not exist"
    raise LaunchError(
        f"The script that {command[0]} runs must be a file. Received: {script!r}, which "
        f"{what} (in {os.getcwd()}). Check the path, or give -m MODULE for a module.")


def check_grace(grace_seconds):
    """Raises `LaunchError` unless `grace_seconds` is a finite number of seconds, 0 or more."""
    if (isinstance(grace_seconds, bool) or not isinstance(grace_seconds, numbers.Real)
            or not 0 <= grace_seconds < math.inf):
        raise LaunchError(
            "`grace_seconds` must be a number of seconds of at least 0 (how long a stopped "
            f"worker gets before SIGKILL). Received: grace_seconds={grace_seconds!r}. "
            "Use e.g. 10, or 0 to kill at once.")


def check_open_files(workers):
    """Raises `LaunchError` when `workers` workers need more files than this process may open.

    The launcher keeps `FILES_PER_WORKER` pipes open per worker while the group runs: past
    the soft `RLIMIT_NOFILE` a start fails midway with EMFILE, after forking hundreds.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return
    try:
        already = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: stdin, stdout and stderr at least
        already = 3
    need = FILES_PER_WORKER * workers + already + _SPARE_FILES
    if need <= soft:
        return
    most = max(0, (soft - already - _SPARE_FILES) // FILES_PER_WORKER)
    raise_it = f"`ulimit -n {need}` in the shell that launches"
    if hard != resource.RLIM_INFINITY and need > hard:
        raise_it += f", once the hard limit ({hard}) is raised in /etc/security/limits.conf"
    raise LaunchError(
        f"`workers` must fit this process' open-file limit ({soft}, `ulimit -n`): the "
        f"launcher keeps {FILES_PER_WORKER} pipes open per worker (its stdout and stderr), so "
        f"{workers} workers need {need} files with the {already} already open. Received: "
        f"workers={workers}. Use at most {most} workers, or raise the limit: {raise_it}.")
