"""Keras' own test files, run against mgpu_tf's patches: the guard where the patches act.

`python -m keras_guard.run` (or `nox -s keras_guard`) runs the installed Keras release's
test files three times: Keras alone, with every patch installed, and under
`make_strategy("mirrored")` on 2 simulated devices; docs/compatibility.md explains the checks.
"""

__all__ = []
