"""Worker script: the multi-worker cells of the combination matrix, in sequence, in one process.

Usage: `python -m support.mw_combinations CELLS.json OUT_DIR PAIR`. A process makes one
strategy (TensorFlow allows one multi-worker communicator per process). With PAIR `tcp` it is
`make_strategy("multi_worker")` (its default transport "auto" takes the tcp ring here), with
`tensorflow` `make_strategy("multi_worker", transport="tensorflow")`; each cell's optimizer
gets the cell's toolkit options and transport with `mgpu_tf.comm.prepare.install` before
`compile` (whose own install, of the strategy's options, then keeps them). With PAIR `hybrid`, each worker splits its CPU into 2 devices and makes
`make_strategy("hybrid", devices_per_worker=2, microbatches=2)`; a cell's toolkit options go
to `make_strategy`, whose option table refuses them before building anything. Each
worker writes OUT_DIR/worker<index>.pkl: one result per cell, `{"weights", "loss",
"val_loss", "masks", "error", "seconds"}`.
"""

import functools
import gc
import json
import pathlib
import pickle
import sys
import time

from support import combinations_run


HYBRID = {"devices_per_worker": 2, "microbatches": 2}


@functools.cache
def _batch_norm_refusal(strategy):
    """What `prepare_model` says of a BatchNormalization under `strategy` (no optimizer
    plays a part), asked once."""
    from support import combinations_default

    return combinations_default.refusal(strategy, ("batch_norm",))


def _default_path(cell, strategy, data, pair):
    """A cell of the default path: optimizer `cell["default_path"]`, a branch of each layer
    kind the strategy takes, and what `prepare_model` says of a BatchNormalization."""
    from support import combinations_default

    layers = combinations_default.LAYERS if pair != "hybrid" else tuple(
        layer for layer in combinations_default.LAYERS if layer != "batch_norm")
    result = {"error": None, "refusal": _batch_norm_refusal(strategy)}
    try:
        result.update(combinations_default.train(cell["default_path"], strategy, data, layers))
    except Exception as error:  # noqa: BLE001 - reported by the test of the cell
        result["error"] = f"{type(error).__name__}: {error}"
    return result


def _cell(cell, strategy, data, pair):
    import mgpu_tf

    if "default_path" in cell:
        return _default_path(cell, strategy, data, pair)
    result = {"masks": None, "error": None}
    options = combinations_run.toolkit_options(cell)
    if pair in ("tcp", "tensorflow"):
        options["transport"] = pair
    try:
        if pair == "hybrid":
            if options:  # refused by the option table, before any runtime starts
                mgpu_tf.make_strategy("hybrid", **HYBRID, **options)
            result.update(combinations_run.train(cell, strategy, data))
        else:
            result.update(combinations_run.train(cell, strategy, data, install=options))
    except ValueError as error:  # a refusal: before any collective, on every worker alike
        result["error"] = str(error)
        return result
    if cell["layer"] == "dropout":
        draw = combinations_run.pipeline_masks if pair == "hybrid" else combinations_run.masks
        result["masks"] = draw(strategy)
    return result


def _strategy(pair):
    import mgpu_tf

    if pair == "hybrid":
        mgpu_tf.simulate_devices(HYBRID["devices_per_worker"])
        return mgpu_tf.make_strategy("hybrid", **HYBRID)
    # tcp: the default options, whose transport "auto" takes the ring between CPU workers.
    return mgpu_tf.make_strategy("multi_worker", **({} if pair == "tcp" else {"transport": pair}))


def main(cells_path, out_dir, pair):
    from mgpu_tf.cluster import detect as cluster

    strategy = _strategy(pair)
    from support import combinations_default

    data = combinations_run.problem()
    default_data = combinations_default.problem()
    results = []
    for cell in json.loads(pathlib.Path(cells_path).read_text()):
        started = time.monotonic()
        results.append(_cell(cell, strategy, default_data if "default_path" in cell else data,
                             pair))
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
