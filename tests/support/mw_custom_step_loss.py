"""Worker script: a model's own train and test steps under make_strategy("multi_worker").

Usage: `python -m support.mw_custom_step_loss`. Trains `support.own_steps.build()` and
prints `fit <log>:` (the epochs' logs), `evaluate <log>:`, and `weights:`; then fits each
of `support.guide_steps.KINDS` and prints `guide <kind> fit <log>:`.
"""

import sys

import numpy as np

from support import guide_steps, own_steps
from support.mw_equivalence import global_batches


def main():
    import mgpu_tf

    strategy = mgpu_tf.make_strategy("multi_worker")
    x, y = own_steps.data()
    batches = global_batches(x, y, own_steps.GLOBAL_BATCH)
    with strategy.scope():
        model = own_steps.build()
    history = model.fit(batches, epochs=own_steps.EPOCHS, shuffle=False, verbose=0)
    for name, values in history.history.items():
        print(f"fit {name}:", " ".join(f"{v:.9e}" for v in values))
    for name, value in model.evaluate(batches, verbose=0, return_dict=True).items():
        print(f"evaluate {name}: {value:.9e}")
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    print("weights:", " ".join(f"{v:.9e}" for v in weights))
    x, y = guide_steps.data()
    batches = global_batches(x, y, guide_steps.GLOBAL_BATCH)
    for kind in guide_steps.KINDS:
        with strategy.scope():
            model = guide_steps.build(kind)
        history = model.fit(batches, epochs=guide_steps.EPOCHS, shuffle=False, verbose=0)
        for name, values in history.history.items():
            print(f"guide {kind} fit {name}:", " ".join(f"{v:.9e}" for v in values))
    print("done")


if __name__ == "__main__":
    sys.exit(main())
