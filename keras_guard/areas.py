"""Which of Keras' tests each run takes: folders and files of its package's tree, less the
parametrizations an area leaves to another.

`ci`: the trainers' tests and the tests that build tf.distribute strategies, plus
`paths_test.py` (this folder's), which drives Keras' trainer through each patch's path. Of
Keras' trainer tests parametrized by steps per execution, steps per epoch and mode, it keeps
every mode (eager, graph or non-jit, jit) at least once, and the cases where an execution or
an epoch ends short (where the `steps` patch reads its data check), and leaves the other
parametrizations, which repeat the same paths with more steps, to `full`; so it does with
parametrizations by the kind of array a data adapter takes (float64 beside float32, JAX's
arrays beside NumPy's and TensorFlow's), which reach the strategy as the same tensors.
`full`: every test of the areas the patches touch, for before a release.
"""

import fnmatch
import itertools

__all__ = ["ADDED", "AREAS", "FAMILIES", "LEFT_TO_FULL", "LEFT_TO_FULL_PATTERNS",
           "family_names", "paths", "takes"]

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

_TRAINER_TEST = "keras/src/trainers/trainer_test.py::TestTrainer::"
_MODES = ("eager", "non_jit", "jit")
_EPOCH_CASES = ("match_one_epoch", "match_multi_epoch", "not_match_too_low",
                "not_match_but_high_enough")

# Keras' parametrized trainer tests (keras/src/trainers/trainer_test.py, 3.15): (test name,
# its cases, its modes (empty: none), the (case, mode) pairs the `ci` area keeps). Their
# node ids are `<name>_<case>_<mode>`.
FAMILIES = (
    ("test_steps_per_execution_steps_count", ("3", "101"), _MODES,
     {("3", mode) for mode in _MODES}),
    ("test_steps_per_execution_unrolled_steps_steps_count", ("3", "8", "32"), (),
     {("3", None)}),
    ("test_steps_per_execution_steps_count_unknown_dataset_size", ("3", "101"), _MODES,
     {("3", "eager"), ("3", "non_jit"), ("101", "jit")}),
    ("test_steps_per_execution_steps_per_epoch", _EPOCH_CASES, _MODES,
     {("match_one_epoch", "eager"), ("not_match_too_low", "jit"),
      ("not_match_but_high_enough", "non_jit")}),
    ("test_steps_per_epoch", _EPOCH_CASES, _MODES,
     {("match_one_epoch", "non_jit"), ("not_match_too_low", "eager"),
      ("not_match_but_high_enough", "jit")}),
    ("test_steps_per_execution_steps_per_epoch_unknown_data_size",
     ("match", "not_match_too_low", "not_match_but_high_enough"), _MODES,
     {("match", "jit"), ("not_match_too_low", "non_jit"),
      ("not_match_but_high_enough", "eager")}),
)


def family_names(name, cases, modes):
    """`{(case, mode): test name}` of a family of `FAMILIES` (mode None when it has none)."""
    return {(case, mode): "_".join(part for part in (name, case, mode) if part)
            for case, mode in itertools.product(cases, modes or (None,))}


# Node ids the `ci` area leaves to `full`.
LEFT_TO_FULL = {
    "ci": frozenset(_TRAINER_TEST + test
                    for name, cases, modes, kept in FAMILIES
                    for pair, test in family_names(name, cases, modes).items()
                    if pair not in kept),
    "full": frozenset(),
}


_ARRAYS = "keras/src/trainers/data_adapters/array_data_adapter_test.py::TestArrayDataAdapter::"
# Node id patterns (fnmatch's) the `ci` area leaves to `full`, with why.
LEFT_TO_FULL_PATTERNS = {
    "ci": (
        # Each kind of array in float64 too: the adapter's cast, no strategy in it.
        _ARRAYS + "test_basic_flow_*_float64_*",
        _ARRAYS + "test_basic_flow_jax_*",
        # Sparse JAX arrays: the adapters make them the tf.SparseTensor scipy's become.
        _TRAINER_TEST + "test_*_sparse_jax_*",
        # PyDataset read by threads, with class weights or without end: the plain,
        # endless and weighted cases stay.
        _TRAINER_TEST + "test_fit_with_data_adapter_py_dataset_multithreading_*",
        _TRAINER_TEST + "test_fit_with_data_adapter_py_dataset_infinite_cw",
        # Validation split with steps_per_epoch: its jit mode stays, and each mode without.
        _TRAINER_TEST + "test_fit_with_val_split_steps_per_epoch_eager",
        _TRAINER_TEST + "test_fit_with_val_split_steps_per_epoch_graph_fn",
        # predict with one step an execution: the cases with 50 stay, where `steps` acts.
        _TRAINER_TEST + "test_predict_preserve_order_1_*",
        _TRAINER_TEST + "test_predict_generator_1_*",
    ),
    "full": (),
}


def paths(area, tree):
    """The paths (relative to `tree`) a run of `area` takes, those the release has."""
    if area not in AREAS:
        raise ValueError(f"`area` must be one of {', '.join(AREAS)}. Received: area={area!r}")
    return [p for p in AREAS[area] if (tree / p).exists()]


def takes(area, nodeid):
    """True when a run of `area` takes the test `nodeid` of its files."""
    if area not in AREAS:
        raise ValueError(f"`area` must be one of {', '.join(AREAS)}. Received: area={area!r}")
    return nodeid not in LEFT_TO_FULL[area] and not any(
        fnmatch.fnmatchcase(nodeid, pattern) for pattern in LEFT_TO_FULL_PATTERNS[area])
