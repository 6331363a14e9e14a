"""Moved to support/mw_keras_loop.py. This script stays only until tests/test_compat.py
runs `run_workers("-m", 2, "support.mw_keras_loop")`; then delete it."""

import runpy

runpy.run_module("support.mw_keras_loop", run_name="__main__", alter_sys=True)
