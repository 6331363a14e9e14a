"""Which of Keras' test files each run takes, as folders and files of its package's tree.

`ci`: the trainers' tests and the tests that build tf.distribute strategies, plus
`paths_test.py` (this folder's), which drives Keras' trainer through each patch's path.
`full`: the areas the patches touch, for before a release.
"""

__all__ = ["AREAS", "ADDED", "paths"]

_TRAINERS = ("keras/src/trainers",)
_DISTRIBUTE = ("keras/src/backend/tensorflow",
               "keras/src/callbacks/swap_ema_weights_test.py",
               "keras/src/optimizers/multi_optimizer_test.py")
AREAS = {
    "ci": _TRAINERS + _DISTRIBUTE,
    "full": _TRAINERS + ("keras/src/backend/tensorflow", "keras/src/callbacks",
                         "keras/src/optimizers", "keras/src/metrics", "keras/src/losses",
                         "keras/src/layers/normalization", "keras/src/layers/regularization",
                         "keras/src/random", "keras/src/models", "keras/src/saving"),
}
# The harness' own test files (this folder's), run with Keras' in every run.
ADDED = ("paths_test.py",)


def paths(area, tree):
    """The paths (relative to `tree`) a run of `area` takes, those the release has."""
    if area not in AREAS:
        raise ValueError(f"`area` must be one of {', '.join(AREAS)}. Received: area={area!r}")
    return [p for p in AREAS[area] if (tree / p).exists()]
