"""TensorFlow's own log lines, kept out of a job's output unless asked for.

`quiet_start()` drops the C++ lines `TF_CPP_MIN_LOG_LEVEL` does not reach
(abseil/abseil-cpp#1718), and TensorFlow's Python INFO lines unless absl's `-v` is given.

Design: docs/design.md#native-logs
"""

import atexit
import logging
import os
import re
import sys
import threading

__all__ = ["LEVEL_VARIABLE", "QUIET_LEVEL", "is_start_up_noise", "quiet_start"]

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"
_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    # An INFO or WARNING line of C++ (a `.cc` file; Python's absl lines name a `.py`).
    r"|[IW]\d{4} [\d:.]+\s+\d+ \S+\.cc:\d+\] "
    # No GPU driver: mgpu_tf's own line says what `auto` chose without a GPU.
    r"|E\d{4} [\d:.]+\s+\d+ \S+\.cc:\d+\] failed call to cuInit: ")


class _UnlessVerbose(logging.Filter):
    """Passes a record of TensorFlow's Python logger at WARNING and up, or when `-v` was given."""

    def filter(self, record):
        if record.levelno >= logging.WARNING:
            return True
        from absl import flags  # parsed by the time TensorFlow logs while training

        return "verbosity" in flags.FLAGS and bool(flags.FLAGS["verbosity"].present)


_PYTHON_INFO = _UnlessVerbose()


def is_start_up_noise(line):
    """True for a start-up line `quiet_start` drops."""
    return bool(_NOISE.match(line))


class _Filter:
    """Standard error (file descriptor 2) through a pipe, less the start-up noise."""

    def __init__(self):
        sys.stderr.flush()
        self._stderr = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._forward, args=(read,), daemon=True)
        self._thread.start()
        atexit.register(self.release)

    def _forward(self, read):
        with os.fdopen(read, "rb") as pipe:
            for line in pipe:
                if not is_start_up_noise(line.decode(errors="replace")):
                    os.write(self._stderr, line)

    def release(self):
        """Gives standard error back; safe to call more than once."""
        if self._thread is None:
            return
        sys.stderr.flush()
        os.dup2(self._stderr, 2)  # the pipe's last writer closes: the thread reads to the end
        self._thread.join(timeout=10)
        self._thread = None
        os.close(self._stderr)


class _Nothing:
    def release(self):
        pass


def quiet_start(environ=os.environ):
    """Quiets TensorFlow unless `TF_CPP_MIN_LOG_LEVEL` is set; call before importing it.

    Returns an object whose `release()` ends the filtering of standard error (call it once
    the strategy is built); the filtering also ends at exit. TensorFlow's Python INFO
    lines stay hidden for the life of the process, unless absl's `-v`/`--verbosity` is given.
    """
    if LEVEL_VARIABLE in environ:
        return _Nothing()
    environ[LEVEL_VARIABLE] = QUIET_LEVEL
    logging.getLogger("tensorflow").addFilter(_PYTHON_INFO)
    try:
        return _Filter()
    except OSError:  # no file descriptor 2 to filter (a detached process)
        return _Nothing()
