"""Worker script: the tiny KerasHub task models trained by `fit` under 2 workers.

Usage: `python -m support.mw_kerashub WEIGHTS.npz OUT_DIR TRANSPORT`. WEIGHTS.npz holds each
model's initial weights as `<model>_<i>`; each model of `TRAINED[TRANSPORT]` trains one
epoch of its raw examples from `shard_dataset` (global batch `GLOBAL_BATCH`, preprocessed in
each worker's pipeline), and each worker writes `OUT_DIR/<model>_worker<index>.npz`: the
trained weights, and for the models of `EVALUATED`, as `evaluate`, what evaluate gives on
the same data.
"""

import pathlib
import sys

import numpy as np

GLOBAL_BATCH = 8
# The models each transport's workers train. The tcp ring, the toolkit's own: every one.
# TensorFlow's collectives: each kind of gradient these models make that the suite's other
# tests on that transport do not, an untied embedding's rows with a classifier's labels
# (BERT), a tied embedding's rows summed with a dense product (GPT-2), and rows of a lookup
# broadcast over the batch (ViT); Llama's are BERT's kind, ResNet's dense ones.
TRAINED = {"tcp": ("bert", "gpt2", "llama", "vit", "resnet"),
           "tensorflow": ("bert", "gpt2", "vit")}
# The models whose evaluate is checked: a classifier's strings and labels, a causal LM's
# strings alone (each evaluate traces another function in every worker).
EVALUATED = ("bert", "gpt2")


def load_initial(path, name):
    """The initial weights of model `name` in WEIGHTS.npz, in order."""
    with np.load(path) as data:
        count = sum(key.startswith(f"{name}_") for key in data.files)
        return [data[f"{name}_{i}"] for i in range(count)]


def main(weights_path, out_dir, transport):
    import keras_hub  # noqa: F401  (imported before the strategy, as a user's program does)

    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster
    from support import kerashub_models

    strategy = mgpu_tf.make_strategy("multi_worker", transport=transport)
    index = cluster.detect_cluster().task_index
    for name in TRAINED[transport]:
        with strategy.scope():
            model = kerashub_models.build(name)
        model.set_weights(load_initial(weights_path, name))
        model.fit(mgpu_tf.shard_dataset(kerashub_models.examples(name), strategy, GLOBAL_BATCH),
                  epochs=1, verbose=0)
        saved = {}
        if name in EVALUATED:
            saved["evaluate"] = np.ravel(model.evaluate(mgpu_tf.shard_dataset(
                kerashub_models.examples(name), strategy, GLOBAL_BATCH, training=False),
                verbose=0))
        np.savez(pathlib.Path(out_dir) / f"{name}_worker{index}.npz", *model.get_weights(),
                 **saved)
        print(f"worker {index}: {name} done")


if __name__ == "__main__":
    main(*sys.argv[1:])
