"""A job's log: TensorFlow's own lines kept out unless asked for, the toolkit's own shown.

`setup_logging()` is the one call that does it. The main job, `mgpu_tf.flags`' `define_flags`,
the `mgpu-tf` commands that load TensorFlow, `simulate_devices` and `make_strategy` make it; a
script makes it before importing TensorFlow to leave out the lines TensorFlow writes on import,
which `TF_CPP_MIN_LOG_LEVEL` does not reach (abseil/abseil-cpp#1718).

Design: docs/design.md#native-logs
"""

import contextlib
import logging
import os
import re
import sys
import tempfile

__all__ = ["LEVEL_VARIABLE", "QUIET_LEVEL", "is_harmless_error", "is_start_up_noise",
           "setup_logging"]

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"
# A C++ line at a level, in absl's format (`I0000 00:00:...  123 port.cc:153] `) or, for
# lines XLA writes before absl is set up on TensorFlow 2.18-2.19, in TensorFlow's own
# (`2026-12-03 20:01:07.885440: E external/.../cuda_fft.cc:477] `).
def _cpp_line(levels):
    return (rf"(?:[{levels}]\d{{4}} [\d:.]+\s+\d+ |\d{{4}}-\d\d-\d\d [\d:.]+: [{levels}] )"
            r"\S+\.cc:\d+\] ")


_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    # An INFO or WARNING line of C++ (a `.cc` file; Python's absl lines name a `.py`).
    rf"|{_cpp_line('IW')}"
    # No GPU driver: mgpu_tf's own line says what `auto` chose without a GPU. The CUDA
    # plugins registering twice as TensorFlow 2.18-2.19 load: harmless, with or without one.
    rf"|{_cpp_line('E')}"
    r"(?:failed call to cuInit: |Unable to register cu(?:FFT|DNN|BLAS) factory: )")
# The lines TensorFlow 2.22 writes below an error it logs (the cuInit one above): the source
# location of the status, its file, and an empty line.
_NOISE_DETAIL = re.compile(r"=== Source Location Trace: ===\s*$|external/\S+\.cc:\d+\s*$|\s*$")
# An error TensorFlow logs in a good run: a worker's last heartbeat to the coordination
# service of a chief that has finished first, at the end of a multi-worker job.
_HARMLESS = re.compile(
    r"E\d{4} [\d:.]+\s+\d+ \S+\.cc:\d+\] \S*StartAbort UNAVAILABLE: Failed to send RPC to "
    r"coordination service")
# The lines gRPC adds below it.
_HARMLESS_DETAIL = re.compile(
    r"Additional GRPC error information from remote target |:UNKNOWN:Error received from peer ")


class _UnlessVerbose(logging.Filter):
    """Passes a record of TensorFlow's Python logger at WARNING and up, or when `-v` was given."""

    def filter(self, record):
        if record.levelno >= logging.WARNING:
            return True
        from absl import flags  # parsed by the time TensorFlow logs while training

        return "verbosity" in flags.FLAGS and bool(flags.FLAGS["verbosity"].present)


class _UnlessRootShows(logging.Handler):
    """Writes a record to stderr when the root logger has no handler to show it."""

    def handle(self, record):
        return False if logging.getLogger().handlers else super().handle(record)

    def emit(self, record):
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def _root_has_no_handlers(record):
    return not logging.getLogger().handlers


def is_start_up_noise(line, *, after=False):
    """True for a line TensorFlow writes as it loads or finds its devices, which it drops;
    `after` one, also for the detail TensorFlow 2.22 writes below it."""
    return bool(_NOISE.match(line) or (after and _NOISE_DETAIL.match(line)))


def is_harmless_error(line, *, after=False):
    """True for an error TensorFlow logs in a good multi-worker run, or, `after` one, its detail."""
    return bool(_HARMLESS.match(line) or (after and _HARMLESS_DETAIL.match(line)))


def setup_logging(*, verbose=False):
    """Sets up a job's log: TensorFlow's own lines out, the toolkit's INFO lines shown once.

    Call it first, before importing TensorFlow or Keras, so that the lines TensorFlow
    writes while it loads stay out too; calling it again changes nothing. It imports
    TensorFlow and lists its devices, so that what those write to standard error is
    filtered then, and only then: nothing of the process' standard error is redirected
    after it returns. Unless `verbose`, or `TF_CPP_MIN_LOG_LEVEL=0` asks for every line,
    TensorFlow's C++ lines below errors and its Python INFO lines (absl's `-v` shows them)
    stay out; a `TF_CPP_MIN_LOG_LEVEL` set by hand is kept.

    Example:

    ```python
    import mgpu_tf
    mgpu_tf.setup_logging()  # before TensorFlow and Keras
    import tensorflow as tf
    ```

    Args:
        verbose: keep every line TensorFlow writes. Defaults to `False`.
    """
    _show_own_lines()
    quiet = not verbose and os.environ.get(LEVEL_VARIABLE, QUIET_LEVEL).strip() != "0"
    if quiet:
        os.environ.setdefault(LEVEL_VARIABLE, QUIET_LEVEL)
    with _held_stderr(is_start_up_noise) if quiet else contextlib.nullcontext():
        import tensorflow as tf

        tf.config.list_physical_devices()  # the platforms' start (cuInit), without the runtime
    tensorflow = tf.get_logger()  # its handler exists from here on
    if quiet and _PYTHON_INFO not in tensorflow.filters:
        tensorflow.addFilter(_PYTHON_INFO)
    # absl's app.run gives the root logger a handler: TensorFlow's own steps aside, at
    # each record, so that a line shows once.
    for handler in tensorflow.handlers:
        if _root_has_no_handlers not in handler.filters:
            handler.addFilter(_root_has_no_handlers)


_PYTHON_INFO = _UnlessVerbose()


def _show_own_lines():
    """Shows the "mgpu_tf" logger's INFO lines (what `auto` chose), unless already set up."""
    logger = logging.getLogger("mgpu_tf")
    if logger.handlers or logger.level != logging.NOTSET:
        return
    logger.setLevel(logging.INFO)
    handler = _UnlessRootShows()
    handler.setFormatter(logging.Formatter("%(levelname)s:%(message)s"))
    logger.addHandler(handler)


@contextlib.contextmanager
def _held_stderr(drop):
    """Holds what the block writes to file descriptor 2 in a file, then writes it out less
    the lines `drop` is true for."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no standard error to filter (a detached process)
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept, dropped = [], False
            for line in held:
                dropped = drop(line.decode(errors="replace"), after=dropped)
                if not dropped:
                    kept.append(line)
            if kept:
                os.write(2, b"".join(kept))
