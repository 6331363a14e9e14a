"""Checks of a launch's command before any worker starts: its program and its script exist.

Design: docs/design.md#local-launcher
"""

import os
import re
import shutil

__all__ = ["LaunchError", "check_command"]


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
