"""Workarounds for upstream bugs, each guarded by the versions it is for."""

__all__ = ["apply_multi_worker_fixes"]


def apply_multi_worker_fixes():
    """Makes Keras `fit`, `evaluate` and `predict` work under MultiWorkerMirroredStrategy."""
