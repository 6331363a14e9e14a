"""Ray Train: the recipe of docs/deployment.md, run on a local Ray instance.

One run of two Ray Train workers is checked several ways: both workers' losses
agree with each other and with one process training the same model on the same
global batches; each epoch's report carries a checkpoint from world rank 0 only
(Ray's own log of every worker's reports); the last checkpoint holds the trained
model. The reporter's argument checks need no Ray instance.
"""

import ast
import pathlib
import re
import runpy
import shutil
import subprocess
import sys
import tempfile

import keras
import numpy as np
import pytest

from support import compare
from support import recipes
from support import tolerance
from support import workers

pytest.importorskip("ray.train")

_DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "deployment.md"
# The recipe: 2 epochs of 28 steps, 64 -> 32 -> 10 on 64 rows, SGD.
TOLERANCE = tolerance.training(2 * 28, 64 + 32 + 10 + 32 + 64)


def _recipe():
    section = _DOC.read_text().split("\n## Ray Train\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"^```python\n(.*?)^```$", section, re.M | re.S).group(1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The recipe's output, its script's names and where it ran."""
    directory = tmp_path_factory.mktemp("ray")
    script = directory / "ray_digits.py"
    script.write_text(_recipe())
    # Ray's socket paths must stay short: its own directory under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="ray-")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "support.ray_recipe", str(script), temp_dir],
            cwd=directory, env=workers.environment(workers.RAY),
            capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output, runpy.run_path(str(script)), directory


@pytest.fixture(scope="module")
def reference(run):
    """Losses and weights of the recipe's model trained by plain Keras in one process."""
    _, recipe, _ = run
    model = recipe["build_model"]()
    batches = recipe["examples"]().batch(recipe["GLOBAL_BATCH"], drop_remainder=True)
    history = model.fit(batches, epochs=recipe["EPOCHS"], shuffle=False, verbose=0)
    return history.history["loss"], model.get_weights()


@pytest.mark.multiworker
def test_ray_workers_train_as_one_process(run, reference):
    output, recipe, _ = run
    losses = {int(rank): ast.literal_eval(values) for rank, values in
              re.findall(r"worker (\d+) loss per epoch: (\[.*?\])", output)}
    assert sorted(losses) == list(range(recipe["WORKERS"])), output[-4000:]
    expected, _ = reference
    assert len(expected) == recipe["EPOCHS"] and expected[-1] < expected[0]
    for rank, values in losses.items():
        np.testing.assert_allclose(values, expected, rtol=TOLERANCE, err_msg=f"worker {rank}")


@pytest.mark.multiworker
def test_only_world_rank_0_reports_a_checkpoint(run):
    output, recipe, directory = run
    # Ray logs each report of each worker: "Reporting training result N: ... from rank R".
    reports = set(re.findall(
        r"Reporting training result (\d+): TrainingReport\(checkpoint=(None|Checkpoint)"
        r".*? from rank (\d+)", output))
    epochs = range(1, recipe["EPOCHS"] + 1)
    assert reports == ({(str(e), "Checkpoint", "0") for e in epochs}
                       | {(str(e), "None", "1") for e in epochs}), output[-4000:]
    saved = sorted(p for p in (directory / "ray_results" / "digits").glob("checkpoint_*")
                   if p.is_dir())
    assert [sorted(p.name for p in c.iterdir()) for c in saved] == [["model.keras"]] * len(
        epochs)


@pytest.mark.multiworker
def test_the_checkpoint_holds_the_trained_model(run, reference):
    output, _, _ = run
    path = re.search(r"^checkpoint: (\S+)$", output, re.M).group(1)
    model = keras.models.load_model(pathlib.Path(path) / "model.keras")
    _, weights = reference
    assert compare.relative_difference(model.get_weights(), weights) < TOLERANCE


@pytest.mark.parametrize("kwargs, error, match", [
    ({"checkpoint": "yes"}, TypeError, "`checkpoint` must be True or False"),
    ({"filename": "model.h5"}, ValueError, "`filename` must be a file name ending in .keras"),
    ({"filename": "out/model.keras"}, ValueError, "`filename` must be a file name"),
])
def test_reporter_refuses_bad_arguments(kwargs, error, match):
    from mgpu_tf.cluster.ray_train import RayReporter

    with pytest.raises(error, match=match):
        RayReporter(**kwargs)


def test_tolerance_rejects_a_wrong_update(tmp_path):
    """TOLERANCE holds rounding, not a 1% learning-rate error or one step missing."""
    recipe = recipes.load(tmp_path / "ray_digits.py", _recipe())

    def losses(learning_rate_factor=1.0, steps=None):
        history = recipes.fit(recipe, 0.1 * learning_rate_factor, steps)[1]
        return [np.array(history.history["loss"])]

    wrong = {"learning rate 1% high": losses(1.01), "one step missing": losses(steps=27)}
    assert tolerance.rejects(TOLERANCE, losses(), wrong, compare.relative_difference) == []
