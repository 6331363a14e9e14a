"""Runs the elastic Ray Train script of docs/deployment.md on a local 3-node Ray cluster.

Usage: `python -m support.ray_elastic_job SCRIPT OUT_DIR RAY_TEMP_DIR`.

A head without CPUs and two nodes of one CPU each. At epoch 1, step 5 both workers wait
and the node of world rank 1 is removed, its processes killed (Ray shrinks to 1 worker);
at epoch 2, step 2 the one worker waits and a node of one CPU is added (Ray grows to 2).
The chief appends `workers epoch steps_done` to OUT_DIR/starts.txt at each start and
keeps its first step's time in OUT_DIR/first-N; the faults' times go to
OUT_DIR/removed_at and OUT_DIR/added_at.
"""

import json
import os
import pathlib
import runpy
import sys
import threading
import time

import keras
import ray
import ray.train
from ray.cluster_utils import Cluster

from support import workers

__all__ = ["Faults", "main"]

# Where a group of N workers waits for the driver's fault: N -> (epoch, batch), 0-based.
_WAITS = {2: (1, 4), 1: (2, 1)}


class Faults(keras.callbacks.Callback):
    """Each worker's part: the chief's start and clock records, and the waits."""

    def __init__(self, out):
        super().__init__()
        self.out, self.epoch, self.wait_at, self.first = pathlib.Path(out), 0, None, None

    def on_train_begin(self, logs=None):
        context = ray.train.get_context()
        self.rank, world = context.get_world_rank(), context.get_world_size()
        metadata = self.out / "backup" / "training_metadata.json"
        where = json.loads(metadata.read_text()) if metadata.exists() else None
        # The 2-worker group waits only on its first start, before any backup.
        if world == 1 or where is None:
            self.wait_at = _WAITS.get(world)
        self.tag = f"{world}-{self.rank}"
        if self.rank == 0:
            where = where or {"epoch": 0, "steps_done": 0}
            with open(self.out / "starts.txt", "a") as f:
                f.write(f"{world} {where['epoch']} {where['steps_done']}\n")
            self.number = len((self.out / "starts.txt").read_text().splitlines()) - 1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.rank == 0 and self.first is None:
            self.first = time.time()
            (self.out / f"first-{self.number}").write_text(f"{self.first}\n")
        if (self.epoch, batch) == self.wait_at:
            # The driver reads it as soon as the name appears.
            workers.publish(self.out / f"wait-{self.tag}",
                            f"{ray.get_runtime_context().get_node_id()}\n")
            while True:  # until Ray stops this worker
                time.sleep(0.1)


def _stage(started, what):
    """One line per stage, so that a run cut short by its timeout shows where it stood."""
    print(f"ray_elastic_job: {time.time() - started:6.1f} s {what}", flush=True)


def _wait_for(training, *paths):
    while not all(p.exists() for p in paths):
        if not training.is_alive():
            raise RuntimeError(f"Training ended before {[str(p) for p in paths]} appeared.")
        time.sleep(0.05)


def _faults(cluster, out, nodes, training, started):
    _wait_for(training, out / "wait-2-0", out / "wait-2-1")
    node_id = (out / "wait-2-1").read_text().strip()
    (out / "removed_at").write_text(f"{time.time()}\n")
    cluster.remove_node(next(n for n in nodes if n.node_id == node_id), allow_graceful=False)
    _stage(started, "2 workers at epoch 1, step 5: the node of rank 1 removed")
    _wait_for(training, out / "wait-1-0")
    (out / "added_at").write_text(f"{time.time()}\n")
    cluster.add_node(num_cpus=1)
    _stage(started, "1 worker at epoch 2, step 2: a node added")


def main(script, out, temp_dir):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = runpy.run_path(script)
    os.environ["RAY_TMPDIR"] = temp_dir  # Ray's files, its socket paths short
    # A group Ray cannot place (its view of the nodes is up to 20 s old) gives up sooner.
    os.environ.setdefault("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "15")
    started = time.time()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    ray.init(address=cluster.address)
    _stage(started, "the cluster of a head and 2 nodes is up")
    trainer = recipe["make_trainer"](str(out), callbacks=[Faults(out)])
    outcome = {}

    def fit():
        try:
            outcome["result"] = trainer.fit()
        except BaseException as error:  # raised again by the main thread
            outcome["error"] = error

    # Ray adds nodes from the main thread only: the faults run here, training beside.
    training = threading.Thread(target=fit, daemon=True)
    training.start()
    try:
        _faults(cluster, out, nodes, training, started)
        training.join()
        _stage(started, "fit returned")
        if "error" in outcome:
            raise outcome["error"]
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
