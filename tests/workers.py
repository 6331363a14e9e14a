"""Moved to support/workers.py. This name stays only until tests/test_compat.py and
tests/test_reliability.py import `from support import workers`; then delete it."""

from support.workers import run_python, run_workers  # noqa: F401
