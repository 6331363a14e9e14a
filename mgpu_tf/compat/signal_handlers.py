"""The process' C-level signal handlers, which TensorFlow's preemption notifier replaces.

TensorFlow (2.18-2.21) installs its `SigtermNotifier` with `std::signal` once a multi-worker
strategy exists: SIGTERM then only sets a flag. These functions read, put back and call such
handlers through libc's `sigaction` (Linux; elsewhere they report none).

Design: docs/reliability.md#sigterm-and-ctrl-c
"""

import ctypes
import ctypes.util
import os
import signal
import sys

__all__ = ["available", "c_handler", "call_c_handler", "copy_c_handler", "die_by", "is_function"]

class _SigAction(ctypes.Structure):
    # glibc's `struct sigaction`: handler, a 1024-bit mask, flags, restorer.
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc if hasattr(libc, "sigaction") else None
    except OSError:
        return None


_LIBC = _libc()


def available():
    """True where the C-level handlers can be read and set (Linux with glibc)."""
    return _LIBC is not None


def _action(signum):
    action = _SigAction()
    if _LIBC.sigaction(int(signum), None, ctypes.byref(action)) != 0:
        raise OSError(ctypes.get_errno(), f"sigaction({int(signum)}) failed")
    return action


def c_handler(signum):
    """The address of the C function that handles `signum` now; 0 for SIG_DFL, 1 for
    SIG_IGN, and None where it cannot be read."""
    if _LIBC is None:
        return None
    return _action(signum).handler or 0


def is_function(address):
    """True for a handler address that is a function, not SIG_DFL, SIG_IGN or unknown."""
    return address is not None and address not in (0, 1)


def copy_c_handler(source, target):
    """Makes `target` handled as `source` is (handler, mask and flags); returns the
    address of the handler `target` had, or None where handlers cannot be set."""
    if _LIBC is None:
        return None
    action, old = _action(source), _SigAction()
    if _LIBC.sigaction(int(target), ctypes.byref(action), ctypes.byref(old)) != 0:
        raise OSError(ctypes.get_errno(), f"sigaction({int(target)}) failed")
    return old.handler or 0


def call_c_handler(address, signum):
    """Calls the C handler at `address` for `signum`, as the kernel would have.

    TensorFlow's notifier handler (installed by `std::signal`, so it takes the signal
    number only) just stores a flag, so calling it from Python is safe.
    """
    if is_function(address):
        ctypes.CFUNCTYPE(None, ctypes.c_int)(address)(int(signum))


def die_by(signum):
    """Ends the process now, as `signum` with its default action would: from any thread,
    without Python's shutdown (whose handlers may wait on other processes)."""
    if _LIBC is not None:
        action = _SigAction()  # SIG_DFL, nothing masked
        _LIBC.sigaction(int(signum), ctypes.byref(action), None)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
    os.kill(os.getpid(), signal.SIGKILL)  # where the default action cannot be set
