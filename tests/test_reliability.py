"""Reliability with real workers: lost workers, restart and resume, chief-only writes."""

import json
import os
import pathlib
import re
import sys

import keras
import numpy as np
import pytest

from benchmarks import failure_worker
from mgpu_tf import callbacks
from mgpu_tf.cluster import launcher
from support import workers

FILES = "support.mw_reliability"  # every chief-only writer, run as a module
RESUME = "support.mw_resume"  # every state a restart can lose


@pytest.mark.multiworker
def test_resumes_at_an_epoch_boundary_and_mid_epoch_to_the_uninterrupted_weights(tmp_path):
    """Shuffled data, dropout, Adam and steps_per_sync=4; worker 1 killed twice.

    Backups are owed every 3 steps and taken at the next sync point (every 4th
    step; 8 steps per epoch). The first kill (epoch 1, after its 2nd step) resumes
    from the backup at the end of epoch 0; the second (epoch 2, after its 6th step)
    from the one 4 steps into epoch 2.
    """
    code, outputs = workers.run_workers("-m", 2, RESUME, tmp_path / "clean", "3")
    assert code == 0, outputs
    out = tmp_path / "killed"
    # The survivor catches SIGTERM (TensorFlow's preemption notice) and stays in the
    # collective of its lost peer: each restart waits out the whole grace.
    code = launcher.launch([sys.executable, "-m", RESUME, str(out), "3", "0:1:1", "1:2:5"], 2,
                           env=workers.environment(), max_restarts=2, grace_seconds=1,
                           output=open(tmp_path / "log.txt", "w"))
    assert code == 0, (tmp_path / "log.txt").read_text()[-3000:]
    starts = [line.split() for line in (out / "starts.txt").read_text().splitlines()]
    assert starts == [["0", "0", "0"], ["1", "1", "0"], ["2", "2", "4"]], starts
    clean = failure_worker.weights(tmp_path / "clean" / "final.npz")
    resumed = failure_worker.weights(out / "final.npz")
    # Equal weights need equal dropout masks: the generator's state was restored too.
    assert len(clean) == len(resumed) == 4
    for a, b in zip(clean, resumed):
        np.testing.assert_array_equal(b, a)


@pytest.mark.multiworker
@pytest.mark.parametrize("transport", ["tensorflow", "tcp"])
def test_a_survivor_names_the_lost_worker_and_stops_within_the_timeout(tmp_path, transport):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               MGPU_TF_TEST_TRANSPORT=transport)
    run = failure_worker.run_with_a_kill(tmp_path, env, death_timeout=180, stop_timeout=60)
    assert run.processes[1].returncode == -9
    assert run.processes[0].returncode != 0
    address = run.configs[0]["cluster"]["worker"][1]
    assert f"WorkerLostError: worker 1 ({address}) was lost" in run.output, run.output[-3000:]
    timing = f"named the lost worker after {run.named:.1f} s, stopped after {run.stopped:.1f} s"
    # timeout_seconds=5 in the script: TensorFlow's heartbeats (or the ring) notice the
    # death within it. How soon on a busy machine is benchmarks/bench_failures.py's figure;
    # here, that the survivor named it and stopped (death_timeout and stop_timeout, above,
    # are the limits of a wait that never ends otherwise).
    assert run.named is not None, timing
    print(timing)


@pytest.mark.multiworker
def test_only_the_chief_writes_and_nothing_is_left_half_written(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code, outputs = workers.run_workers("-m", 2, FILES, tmp_path / "out",
                                        env={"TMPDIR": str(scratch)})
    assert code == 0, outputs
    out = tmp_path / "out"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert not [f for f in files if ".tmp-" in f], files
    for expected in ("ckpt/epoch1.weights.h5", "ckpt/epoch2.weights.h5", "ckpt/best.keras",
                     "backup/training_metadata.json", "final.keras"):
        assert expected in files, files
    # One backup: the weights file its metadata names, and no older one.
    assert [f for f in files if f.startswith("backup/weights-")] == [
        "backup/" + json.loads((out / "backup/training_metadata.json").read_text())["weights"]]
    assert any(f.startswith("tb/train/") for f in files)
    assert sum(1 for f in files if f.startswith("tb/train/")) == 1, "one event file per run"
    assert list(scratch.iterdir()) == [], "a worker left its temporary files"
    model = keras.saving.load_model(out / "final.keras")
    assert model.predict(np.zeros((1, 8), "float32"), verbose=0).shape == (1, 1)


def test_chief_path_renames_on_success_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "w.txt"
    with pytest.raises(RuntimeError):
        with callbacks.chief_path(target) as temporary:
            pathlib.Path(temporary).write_text("half")
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    with callbacks.chief_path(target) as temporary:
        assert temporary != str(target) and temporary.endswith("w.txt")
        pathlib.Path(temporary).write_text("whole")
    assert target.read_text() == "whole"
    assert [p.name for p in tmp_path.iterdir()] == ["w.txt"]


def test_one_machine_model_checkpoint_matches_keras(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((8, 2), "float32"), np.ones((8, 1), "float32")
    model.fit(x, y, epochs=2, verbose=0, callbacks=[
        callbacks.ModelCheckpoint(str(tmp_path / "e{epoch}.weights.h5"), save_weights_only=True)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e1.weights.h5", "e2.weights.h5"]
    fresh = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    fresh.load_weights(tmp_path / "e2.weights.h5")
    for a, b in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_the_launcher_restarts_at_most_max_restarts_times(tmp_path):
    import io

    out = io.StringIO()
    command = [sys.executable, "-c",
               "import os, sys; print('start', os.environ['MGPU_TF_RESTART']); sys.exit(3)"]
    assert launcher.launch(command, 1, max_restarts=2, output=out) == 3
    assert re.findall(r"start (\d)", out.getvalue()) == ["0", "1", "2"]
    with pytest.raises(launcher.LaunchError,
                       match="`max_restarts` must be an integer of at least 0"):
        launcher.launch(command, 1, max_restarts=-1)
