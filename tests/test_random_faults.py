"""Faults injected from outside into training with restarts: seeded cases of
benchmarks/bench_faults.py (docs/reliability.md, "Random faults")."""

import pytest

from benchmarks import bench_faults, fault_worker
from support import tolerance


@pytest.mark.multiworker
def test_two_faults_at_once_twice_end_with_the_uninterrupted_weights(tmp_path):
    """A kill -9 with the other worker's ring cut, then a SIGSTOP longer than the
    heartbeat timeout with a full disk on the chief: the launcher restarts twice, the
    backup left behind loads, and the final weights are the uninterrupted run's."""
    reference = bench_faults.run_once(tmp_path / "reference", [], max_restarts=0,
                                      elastic=False, hard_timeout=300)
    assert reference["code"] == 0, reference["output"][-3000:]
    events = [{"faults": [("kill9", 1), ("ring_close", 0)], "moment": "training",
               "delay": 0.2, "shrink": False},
              {"faults": [("stop", 1), ("disk_full", 0)], "moment": "training",
               "delay": 0.2, "shrink": False}]
    result = bench_faults.run_once(tmp_path / "faults", events, max_restarts=2,
                                   elastic=False, hard_timeout=600)
    result["out"] = tmp_path / "faults"
    assert len(result["fired"]) == 4, (result["fired"], result["output"][-3000:])
    steps = fault_worker.EPOCHS * fault_worker.STEPS_PER_EPOCH
    bound = tolerance.training(steps, fault_worker.TERMS, optimizer="adam")
    said = bench_faults.outcome(
        result, fault_worker.weights(tmp_path / "reference" / "final.npz"), bound)
    assert said == "same weights", (said, result["output"][-3000:])
    assert result["loads"]
    assert sum("restarting all 2 workers" in line for line in result["launcher_lines"]) == 2


def test_a_backup_dir_that_does_not_load_is_seen(tmp_path):
    """The check of the backup directory itself: a truncated weights file fails it."""
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "training_metadata.json").write_text('{"weights": "weights-1-0.weights.h5"}')
    (backup / "weights-1-0.weights.h5").write_bytes(b"\x89HDF\r\n")
    assert bench_faults.check_backup(backup) == (False, 0)
    assert bench_faults.check_backup(tmp_path / "none") == (True, 0)
