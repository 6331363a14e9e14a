"""The workers' standard error stays apart from their output, unless a caller captures both."""

import io
import subprocess
import sys

from mgpu_tf.cluster import launcher
from support import workers

_SCRIPT = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"


def test_a_shell_can_separate_the_workers_errors():
    result = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "2", "--",
         sys.executable, "-c", _SCRIPT],
        env=workers.environment(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] to stdout", "[1] to stdout"]
    assert sorted(result.stderr.splitlines()) == ["[0] to stderr", "[1] to stderr"]


def test_a_caller_capturing_the_output_gets_both_or_chooses():
    merged = io.StringIO()
    assert launcher.launch([sys.executable, "-c", _SCRIPT], 1, output=merged) == 0
    assert sorted(merged.getvalue().splitlines()) == ["[0] to stderr", "[0] to stdout"]
    out, err = io.StringIO(), io.StringIO()
    assert launcher.launch([sys.executable, "-c", _SCRIPT], 1, output=out, errors=err) == 0
    assert out.getvalue() == "[0] to stdout\n"
    assert err.getvalue() == "[0] to stderr\n"
