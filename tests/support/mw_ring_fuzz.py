"""Two workers train over the tcp ring; worker 1 reaches the ring `DELAY` seconds late.

    python -m support.mw_ring_fuzz OUT_DIR DELAY

Meanwhile worker 0's listener waits for it, and a test can knock on it: worker 0 writes the
listener's port to OUT_DIR/port, and, once trained, how many connections its ring refused to
OUT_DIR/refused. The chief writes its final weights to OUT_DIR/final.npz.
"""

import json
import os
import pathlib
import sys
import time

import numpy as np

import mgpu_tf
from mgpu_tf.comm import ring
from support import regression
from support import workers

EXAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS = 96, 6, 16, 2


class _LateRing(ring.Ring):
    made = []

    def __init__(self, rank, peers, listener, **kwargs):
        if rank == 0:
            workers.publish(OUT / "port", str(listener.getsockname()[1]))
        else:
            time.sleep(DELAY)
        super().__init__(rank, peers, listener, **kwargs)
        _LateRing.made.append(self)


def main():
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    ring.Ring = _LateRing  # what mgpu_tf.comm.transport makes
    strategy = mgpu_tf.make_strategy("multi_worker", transport="tcp", timeout_seconds=60)
    data = regression.sharded(strategy, EXAMPLES, FEATURES, GLOBAL_BATCH, shuffle_seed=3)
    model = regression.compiled_model(strategy, FEATURES, 8)
    model.fit(data, epochs=EPOCHS, verbose=0, shuffle=False,
              callbacks=[mgpu_tf.callbacks.DataOrder()])
    if index == 0:
        workers.publish(OUT / "refused", str(sum(r.refused for r in _LateRing.made)))
        np.savez(OUT / "final.npz", *model.get_weights())


if __name__ == "__main__":
    OUT, DELAY = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    OUT.mkdir(parents=True, exist_ok=True)
    main()
