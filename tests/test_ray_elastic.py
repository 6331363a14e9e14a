"""Elastic Ray Train: the script of docs/deployment.md on a local 3-node Ray cluster.

One run (tests/support/ray_elastic_job.py): 2 workers, the node of world rank 1 removed
at epoch 1, step 5, a node added back at epoch 2, step 2. Ray shrinks the group to 1
worker, then grows it to 2, and each group resumes from the last `BackupAndRestore`
backup; the final weights must be those of one process training the same model on the
same global batches, to float rounding.
"""

import pathlib
import re
import runpy
import shutil
import subprocess
import sys
import tempfile

import pytest

from support import compare
from support import recipes
from support import tolerance
from support import workers

pytest.importorskip("ray.train")

_DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "deployment.md"
# 4 epochs of 6 steps, 6 -> 16 -> 1 on 24 rows, SGD with momentum.
TOLERANCE = tolerance.training(4 * 6, 6 + 16 + 1 + 16 + 24, optimizer="momentum")


def _recipe():
    section = _DOC.read_text().split("\n### Elastic Ray Train\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"^```python\n(.*?)^```$", section, re.M | re.S).group(1)


# About 100 s alone on an AMD EPYC core pair, most of it Ray's own waits (its view of the
# nodes is refreshed every 20 s); 190 s beside four busy processes (docs/benchmarks.md).
_TIMEOUT = 600


def _report(run):
    """The job's stage lines, then the end of its output (a result or a timeout's)."""
    def text(part):
        return part.decode(errors="replace") if isinstance(part, bytes) else part or ""

    output = text(run.stdout) + text(run.stderr)
    stages = [line for line in output.splitlines() if line.startswith("ray_elastic_job:")]
    return "\n".join(stages) + "\n...\n" + output[-4000:]


def _time(out, name):
    return float((out / name).read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The run's output directory and the recipe's names."""
    directory = tmp_path_factory.mktemp("ray_elastic")
    script = directory / "ray_elastic.py"
    script.write_text(_recipe())
    out = directory / "elastic"
    # Ray's socket paths must stay short: its own directory under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="ray-")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "support.ray_elastic_job", str(script), str(out), temp_dir],
            cwd=directory, env=workers.environment(workers.RAY),
            capture_output=True, text=True, timeout=_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"The Ray job did not end in {_TIMEOUT} s:\n{_report(expired)}")
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert result.returncode == 0, _report(result)
    return out, runpy.run_path(str(script))


def _weights(recipe, path=None):
    """The recipe's model trained by plain Keras in one process, or loaded from `path`."""
    model = recipe["build_model"]()
    if path is not None:
        model.optimizer.build(model.trainable_variables)  # the file holds its state too
        model.load_weights(path)
        return model.get_weights()
    batches = recipe["examples"]().batch(recipe["GLOBAL_BATCH"], drop_remainder=True)
    model.fit(batches, epochs=recipe["EPOCHS"], shuffle=False, verbose=0)
    return model.get_weights()


@pytest.mark.multiworker
def test_ray_shrinks_after_a_lost_node_and_grows_when_one_comes_back(run):
    out, _ = run
    starts = [tuple(int(v) for v in line.split())
              for line in (out / "starts.txt").read_text().splitlines()]
    # (workers, epoch, steps done): backups every 3 steps of 6, so the node lost after
    # step 5 of epoch 1 resumes at step 3, and the node added after step 2 of epoch 2
    # at the epoch's start.
    assert starts == [(2, 0, 0), (1, 1, 3), (2, 2, 0)]
    shrink = _time(out, "first-1") - _time(out, "removed_at")
    grow = _time(out, "first-2") - _time(out, "added_at")
    print(f"Ray Train elastic: 2 -> 1 workers, first step {shrink:.1f} s after the node's "
          f"removal; 1 -> 2 workers, {grow:.1f} s after a node was added")


@pytest.mark.multiworker
def test_the_resized_run_ends_as_one_uninterrupted_process(run):
    out, recipe = run
    weights = _weights(recipe, out / "final.weights.h5")
    difference = compare.relative_difference(weights, _weights(recipe))
    print(f"final weights within {difference:.1e} (relative) of one process; "
          f"tolerance {TOLERANCE:.1e}")
    assert difference < TOLERANCE


def test_tolerance_rejects_a_wrong_update(tmp_path):
    """TOLERANCE holds rounding, not a 1% learning-rate error or one step missing."""
    recipe = recipes.load(tmp_path / "ray_elastic.py", _recipe())

    def weights(learning_rate_factor=1.0, steps=None):
        return recipes.fit(recipe, 0.05 * learning_rate_factor, steps)[0].get_weights()

    wrong = {"learning rate 1% high": weights(1.01), "one step missing": weights(steps=5)}
    assert tolerance.rejects(TOLERANCE, weights(), wrong, compare.relative_difference) == []
