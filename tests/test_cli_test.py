"""`mgpu-tf test`: every strategy row ends on the default run's weights, and a broken row
fails the command by name.

One full run and one run with a failing and a skewed row, each checked several ways
against weights this file trains itself with plain Keras and a tolerance counted by hand.
"""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from mgpu_tf.cli import app
from mgpu_tf.cli import proof
from support import compare
from support import tolerance

ROWS = ["default", "mirrored", "multi_worker", "tcp", "model_parallel", "sharded"]
STEPS, GLOBAL_BATCH = 20, 32  # 2 epochs of 10 steps, 16 examples a replica on 2
# The sums behind one gradient: widths 16, 32, 32 forward and 4, 32, 32 back, and the batch.
TERMS = 16 + 32 + 32 + 4 + 32 + 32 + GLOBAL_BATCH
BOUND = tolerance.training(STEPS, TERMS, optimizer="momentum")


def _command(tmp_path, *options):
    out = tmp_path / "weights.npz"
    done = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "test", f"--weights_out={out}", *options],
        capture_output=True, text=True, timeout=900)
    with np.load(out) as saved:
        weights = {row: [saved[f"{row}/{i}"] for i in range(6)] for row in ROWS
                   if f"{row}/0" in saved.files}
    return done, weights


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Every row, as JSON, and the weights each row trained."""
    done, weights = _command(tmp_path_factory.mktemp("full"), "--json")
    return done, json.loads(done.stdout), weights


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory):
    """model_parallel failing on purpose, sharded with a 1% larger learning rate."""
    return _command(tmp_path_factory.mktemp("broken"), "--only=model_parallel,sharded",
                    "--fail_row=model_parallel", "--skew_row=sharded")


@pytest.fixture(scope="module")
def plain_keras():
    """The default run's weights, trained here by plain Keras on the rows' data."""
    problem = proof.Problem(STEPS // 2, GLOBAL_BATCH)
    x, y = problem.data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="tanh"),
                              keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(4)])
    model.set_weights(problem.initial_weights())
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    trained = model.get_weights()
    assert compare.relative_difference(trained, problem.initial_weights()) > 100 * BOUND
    return trained


def test_every_row_passes(full_run):
    done, run, _ = full_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["row"] for r in run["rows"]] == ROWS
    assert all(r["same_as_default"] and r["error"] is None for r in run["rows"])
    assert all(r["examples_per_sec"] > 0 for r in run["rows"])
    for index, row in enumerate(ROWS):  # progress, one line as each row ends
        assert f"[{index + 1}/6] {row}: ok in " in done.stderr


def test_rows_devices(full_run):
    rows = {r["row"]: r for r in full_run[1]["rows"]}
    assert rows["default"]["devices"] == "1 x CPU"
    for row in ("mirrored", "model_parallel", "sharded"):
        assert rows[row]["devices"] == "2 x CPU (simulated)"
    for row in ("multi_worker", "tcp"):
        assert rows[row]["devices"] == "2 workers x 1 CPU"
    assert [rows[r]["replicas"] for r in ROWS] == [1, 2, 2, 2, 1, 2]


def test_tolerance_is_the_counted_bound(full_run):
    assert full_run[1]["tolerance"] == pytest.approx(BOUND, rel=1e-12)
    assert (full_run[1]["global_batch"], full_run[1]["steps"]) == (GLOBAL_BATCH, STEPS)


def test_every_row_trains_plain_keras_weights(full_run, plain_keras):
    _, run, weights = full_run
    assert set(weights) == set(ROWS)
    for row in ROWS:
        assert compare.relative_difference(weights[row], plain_keras) < BOUND, row


def test_reported_difference_is_the_weights(full_run):
    _, run, weights = full_run
    for r in run["rows"]:
        expected = compare.relative_difference(weights[r["row"]], weights["default"])
        assert r["max_difference"] == pytest.approx(expected, rel=1e-6, abs=1e-12), r["row"]


def test_broken_rows_fail_by_name(broken_run):
    done, _ = broken_run
    assert done.returncode == 1
    assert "row model_parallel failed: row model_parallel must exit with 0" in done.stderr
    assert "RuntimeError: row 'model_parallel' failed on purpose" in done.stderr
    assert "row sharded failed: the trained weights differ from the default run's" in (
        done.stderr)
    assert "row default failed" not in done.stderr
    table = {line.split()[0]: line for line in done.stdout.splitlines()[1:4]}
    assert "error" in table["model_parallel"] and " no (" in table["sharded"]
    assert " yes (0.0e+00)" in table["default"]


def test_skewed_row_is_outside_the_bound(broken_run, plain_keras):
    """The 1% wrong update is seen by the test's own reference too, not only by the command."""
    _, weights = broken_run
    assert set(weights) == {"default", "sharded"}
    assert compare.relative_difference(weights["default"], plain_keras) < BOUND
    assert compare.relative_difference(weights["sharded"], plain_keras) > 10 * BOUND


@pytest.mark.parametrize("options, message", [
    (["--only=mirrored,nccl"], "--only must name rows among default, mirrored"),
    (["--skew_row=default"], "--skew_row cannot be the default row"),
    (["--only=tcp", "--fail_row=sharded"], "--fail_row must name a row that runs: default, tcp"),
    (["--weights_out=/no/such/folder/w.npz"], "--weights_out must be a .npz file"),
    (["--timeout_seconds=0"], "--timeout_seconds must be positive"),
])
def test_bad_options_fail_before_any_row(capsys, options, message):
    assert app.main(["test", *options]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"mgpu-tf test: {message}")
    assert "Received: " in captured.err and "[1/" not in captured.err
