"""Worker script: the multi-worker cells of the combination matrix, in sequence, in one process.

Usage: `python -m support.mw_combinations CELLS.json OUT_DIR TRANSPORT`. A process makes one
strategy (`make_strategy("multi_worker")`: TensorFlow allows one per process) and gives each
cell's model the cell's toolkit options with `mgpu_tf.comm.prepare.install`, as
`make_strategy`'s options do at `compile`, over `TRANSPORT` (`tensorflow` or `tcp`). Each
worker writes OUT_DIR/worker<index>.pkl: one result per cell, `{"weights", "loss",
"val_loss", "masks", "error", "seconds"}`.
"""

import gc
import json
import pathlib
import pickle
import sys
import time

from support import combinations_run


def _cell(cell, strategy, data, transport):
    result = {"masks": None, "error": None}
    options = combinations_run.toolkit_options(cell)
    if transport == "tcp":
        options["transport"] = "tcp"
    try:
        result.update(combinations_run.train(cell, strategy, data, install=options))
    except ValueError as error:  # a refusal: before any collective, on every worker alike
        result["error"] = str(error)
        return result
    if cell["layer"] == "dropout":
        result["masks"] = combinations_run.masks(strategy)
    return result


def main(cells_path, out_dir, transport):
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster

    strategy = mgpu_tf.make_strategy("multi_worker")
    data = combinations_run.problem()
    results = []
    for cell in json.loads(pathlib.Path(cells_path).read_text()):
        started = time.monotonic()
        results.append(_cell(cell, strategy, data, transport))
        # The cell's TensorFlow objects freed now: found by a later collection, inside
        # another cell's step, they took over a minute (tests/conftest.py says why).
        gc.collect()
        results[-1]["seconds"] = time.monotonic() - started
    index = cluster.detect_cluster().task_index
    with open(pathlib.Path(out_dir) / f"worker{index}.pkl", "wb") as file:
        pickle.dump(results, file)
    print(f"worker {index}: {len(results)} cells done")


if __name__ == "__main__":
    main(*sys.argv[1:])
