"""Worker script: sparse gradients (an Embedding's `tf.IndexedSlices`) on two workers.

Usage: `python -m support.mw_sparse OUT_DIR [RUN ...]` (RUN: `optimizer/option`; all of
`RUNS` by default). One `make_strategy("multi_worker")` with its
default options (transport "auto": the tcp ring between these CPU workers); each run of
`RUNS` compiles the embedding model of `build` with one optimizer of `OPTIMIZERS`, gets that
run's communication options through `mgpu_tf.comm.prepare.install` (as `make_strategy`'s
options reach a model at `compile`) and trains it with `fit` on `shard_dataset`'s batches;
then `bert`, a tiny KerasHub BERT classifier with Adam. Each worker writes
OUT_DIR/worker<index>.pkl: `{run: {"weights", "initial", "error"}}`, and `"transport"`, what
"auto" chose.
"""

import pathlib
import pickle
import sys

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 8
STEPS = 4
VOCABULARY, LENGTH, WIDTH, CLASSES = 12, 6, 4, 3
BERT_VOCABULARY, BERT_LENGTH, BERT_STEPS = 100, 8, 4

OPTIMIZERS = ("sgd_momentum", "adam", "adamw", "rmsprop", "adagrad", "lion")
OPTIONS = {
    "default": {},
    "buckets": {"bucket_bytes": 64},
    "float16": {"compression": "float16"},
    "bfloat16": {"compression": "bfloat16"},
    "steps_per_sync": {"steps_per_sync": 2},
    "sharded": {"shard_optimizer_state": True},
    "collectives": {"transport": "tensorflow"},
}
# Every optimizer where the option changes how the rows travel or are kept (the default
# path, accumulation, sharding); the options that only change the wire, with two each.
RUNS = ([(o, n) for n in ("default", "steps_per_sync", "sharded") for o in OPTIMIZERS]
        + [("adam", "buckets"), ("adagrad", "buckets"), ("adam", "float16"),
           ("rmsprop", "float16"), ("adamw", "bfloat16"), ("lion", "bfloat16"),
           ("adam", "collectives")])


def make_optimizer(name):
    """A Keras optimizer of `OPTIMIZERS`, with a learning rate that moves the weights."""
    if name == "sgd_momentum":
        return keras.optimizers.SGD(0.1, momentum=0.9)
    return {"adam": keras.optimizers.Adam, "adamw": keras.optimizers.AdamW,
            "rmsprop": keras.optimizers.RMSprop, "adagrad": keras.optimizers.Adagrad,
            "lion": keras.optimizers.Lion}[name](0.05)


def build():
    """Embedding, mean over the sequence, Dense; fixed initial weights."""
    keras.utils.set_random_seed(7)
    return keras.Sequential([keras.Input((LENGTH,), dtype="int32"),
                             keras.layers.Embedding(VOCABULARY, WIDTH, name="embedding"),
                             keras.layers.GlobalAveragePooling1D(),
                             keras.layers.Dense(CLASSES, name="logits")])


def problem(steps=STEPS):
    """Token ids with repeats inside a batch and rows some batches miss; their labels."""
    rng = np.random.RandomState(3)
    x = rng.randint(0, VOCABULARY - 2, size=(steps * GLOBAL_BATCH, LENGTH)).astype("int32")
    x[: 2 * GLOBAL_BATCH, 0] = VOCABULARY - 1  # a row only the first batches touch
    y = (x.sum(axis=1) % CLASSES).astype("int32")
    return x, y


def build_bert():
    """A tiny KerasHub BERT classifier (backbone and a Dense head), no dropout."""
    import keras_hub

    keras.utils.set_random_seed(7)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=BERT_VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=BERT_LENGTH, dropout=0.0)
    return keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None,
                                               dropout=0.0)


def bert_problem():
    """BERT's inputs as a dict (token ids with repeats, segments, padding) and labels."""
    rng = np.random.RandomState(5)
    n = BERT_STEPS * GLOBAL_BATCH
    tokens = rng.randint(1, 30, size=(n, BERT_LENGTH)).astype("int32")
    mask = np.ones((n, BERT_LENGTH), bool)
    mask[::2, -2:] = False
    tokens[~mask] = 0
    x = {"token_ids": tokens, "segment_ids": np.zeros_like(tokens), "padding_mask": mask}
    y = (tokens[:, 0] % 2).astype("int32")
    return x, y


def as_functional(task):
    """A KerasHub task as a plain functional model (its `fit` takes arrays only)."""
    return keras.Model(task.inputs, task.outputs)


def _train(strategy, model_fn, optimizer, data, install):
    import mgpu_tf
    from mgpu_tf.comm import optimizer_step
    from mgpu_tf.comm import prepare

    x, y = data
    with strategy.scope():
        model, optimizer = model_fn(), optimizer()
        initial = [np.asarray(w) for w in model.get_weights()]
        # Before compile, whose own install (the strategy's default options) then keeps these.
        prepare.install(optimizer, strategy, **install)
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
    model.fit(mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                    GLOBAL_BATCH), epochs=1, verbose=0)
    hook = optimizer_step.find(optimizer)
    return {"weights": [np.asarray(w) for w in model.get_weights()], "initial": initial,
            "error": None, "communication": None if hook is None else str(hook.communication)}


def main(out_dir, *runs):
    import mgpu_tf
    from mgpu_tf.base import kind as kind_lib
    from mgpu_tf.cluster import detect as cluster

    strategy = mgpu_tf.make_strategy("multi_worker")
    results = {}
    for optimizer, option in [tuple(r.split("/")) for r in runs] or RUNS:
        install = {"transport": "auto", **OPTIONS[option]}
        try:
            results[(optimizer, option)] = _train(strategy, build, lambda: make_optimizer(optimizer),
                                                  problem(), install)
        except ValueError as error:  # a refusal: the same on both workers
            results[(optimizer, option)] = {"error": str(error)}
    results["bert"] = _train(strategy, lambda: as_functional(build_bert()),
                             lambda: keras.optimizers.Adam(1e-2), bert_problem(), {"transport": "auto"})
    results["transport"] = kind_lib.kind_of(strategy).transport
    index = cluster.detect_cluster().task_index
    with open(pathlib.Path(out_dir) / f"worker{index}.pkl", "wb") as file:
        pickle.dump(results, file)
    print(f"worker {index}: {len(results)} runs done")


if __name__ == "__main__":
    main(*sys.argv[1:])
