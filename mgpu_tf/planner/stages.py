"""Memory per pipeline stage of a `ModelParallel`: what each of its devices holds in a step.

The stages are the model's own (its cut, micro-batches and recompute mode), measured by
`planner.memory` on one micro-batch of the batch given.

Design: docs/design.md#memory-estimates
"""

import math

from mgpu_tf.model_parallel import stage as stage_lib
from mgpu_tf.planner import memory as memory_lib

__all__ = ["stage_footprints"]


def stage_footprints(model, inputs, *, slots=2):
    """Returns one `Footprint` per stage of `model` (a `ModelParallel`) for the batch `inputs`.

    `inputs` is one batch as the model takes it; `slots` the optimizer's slot variables per
    weight (Adam: 2). A variable counts on the stage that holds it (a tied embedding on its
    first stage). What enters a stage is kept for every micro-batch, what its backward reads
    for each micro-batch, or for one with `recompute`.

    Example:

    ```python
    model = mgpu_tf.ModelParallel(lm, ["CPU:0", "CPU:1"], microbatches=4)
    for footprint in stage_footprints(model, batch, slots=2):
        print(footprint)
    ```
    """
    flat = stage_lib.bind_inputs(model.graph, inputs)
    batch = int(flat[0].shape[0])
    rows = math.ceil(batch / model.microbatches)
    memory = memory_lib.measure_graph(model.graph, [tuple(x.shape[1:]) for x in flat],
                                      sample_batch=rows)
    counts = [len(stage.units) for stage in model.stages.stages]
    return memory.stage_footprints(counts, batch, slots, model.recompute, model.microbatches)
