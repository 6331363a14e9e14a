"""Every checkpoint path resumes sharded Adam (and steps_per_sync's sums) whole.

Each path saves one pass of training into the pass' end (with steps_per_sync=2, one step
into a window), a fresh process restores it and trains the second pass, and the weights
match the uninterrupted run's. A path that cannot hold some state raises instead.
"""

import os

import h5py
import keras
import numpy as np
import pytest

import mgpu_tf

from support import checkpoint_paths as problem
from support import compare
from support import tolerance
from support import workers

# make_strategy refuses shard_optimizer_state before Keras 3.10.
pytestmark = pytest.mark.skipif(
    tuple(int(part) for part in keras.__version__.split(".")[:2]) < (3, 10),
    reason=f"shard_optimizer_state needs Keras 3.10 or later; Keras {keras.__version__} refuses it")

# Two passes of three steps; a gradient's sums run over the widths 3, 4, 2 and the batch.
BOUND = tolerance.training(2 * problem.STEPS, 3 + 4 + 2 + problem.BATCH, optimizer="adam")


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """`(uninterrupted weights by steps_per_sync, resumed weights by (path, steps_per_sync))`."""
    saved = tmp_path_factory.mktemp("saved")
    references = {}
    for steps_per_sync in (1, 2):
        references[steps_per_sync] = problem.save(str(saved), steps_per_sync)
    out = saved / "resumed.npz"
    result = workers.run_python(problem.__file__, saved, out, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = {}
    with np.load(out) as arrays:
        for key in sorted(arrays.files, key=lambda k: int(k.rpartition("|")[2])):
            path, steps_per_sync, _ = key.split("|")
            resumed.setdefault((path, int(steps_per_sync)), []).append(arrays[key])
    return references, resumed


@pytest.mark.parametrize("path, steps_per_sync", [
    (path, steps_per_sync) for path, options in problem.PATHS.items()
    for steps_per_sync in options])
def test_a_fresh_process_resumes_to_the_uninterrupted_weights(resumed, path, steps_per_sync):
    references, runs = resumed
    difference = compare.relative_difference(runs[path, steps_per_sync],
                                             references[steps_per_sync])
    assert difference <= BOUND, (path, steps_per_sync, difference)


def test_the_bound_rejects_a_resume_without_the_slots(resumed):
    references, runs = resumed
    zeroed = {"zeroed slots": runs[problem.WEIGHTS_ONLY, 1]}
    assert tolerance.rejects(BOUND, references[1], zeroed, compare.relative_difference) == []


def test_the_sharded_slots_are_listed_in_optimizer_variables():
    model = problem.build(problem.strategy_for(1))
    model.optimizer.build(model.trainable_variables)
    names = [v.path.rpartition("/")[2] for v in model.optimizer.variables]
    assert names == ["iteration", "learning_rate", "sharded_params_momentum",
                     "sharded_params_velocity"]


@pytest.fixture(scope="module")
def mid_window():
    """A model one step into a window of steps_per_sync=2: 3 steps in (9 after the callback's
    case, one step into a window again)."""
    return problem.train(problem.build(problem.strategy_for(2)), 1)


@pytest.mark.parametrize("save", [
    lambda model, folder: model.save_weights(os.path.join(folder, "m.weights.h5")),
    lambda model, folder: model.save(os.path.join(folder, "m.keras")),
    # Its backup after the next pass (6 steps in) is at a sync point; after the second (9) not.
    lambda model, folder: problem.train(model, 2, [keras.callbacks.BackupAndRestore(folder)]),
], ids=["model.save_weights", "model.save", "keras.callbacks.BackupAndRestore"])
def test_a_keras_file_mid_window_raises_naming_what_holds_the_sums(mid_window, tmp_path, save):
    with pytest.raises(ValueError, match=r"A Keras file .* cannot hold the gradient sums of "
                                         r"steps_per_sync=2, and 1 step\(s\)"):
        save(mid_window, str(tmp_path))



def test_under_loss_scaling_a_weights_file_holds_the_inner_slots_unsharded(tmp_path):
    saved = keras.mixed_precision.dtype_policy()
    try:
        strategy = mgpu_tf.make_strategy("mirrored", devices=2, shard_optimizer_state=True,
                                         precision="mixed_float16")
        model = problem.train(problem.build(strategy), 1)
    finally:
        keras.mixed_precision.set_dtype_policy(saved)
    path = str(tmp_path / "m.weights.h5")
    model.save_weights(path)
    with h5py.File(path) as f:
        outer = [np.asarray(f["optimizer/vars"][k]) for k in sorted(f["optimizer/vars"], key=int)]
        inner = [np.asarray(f["optimizer/inner_optimizer/vars"][k])
                 for k in sorted(f["optimizer/inner_optimizer/vars"], key=int)]
    # The loss scaling's own four, then what an unsharded inner optimizer writes.
    weights = [w.shape for w in model.get_weights()]
    assert [a.shape for a in inner[2:]] == [s for s in weights for _ in range(2)]
    assert len(outer) == 4 + len(inner)
    for a, b in zip(outer[4:], inner):
        np.testing.assert_array_equal(a, b)
