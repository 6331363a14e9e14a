"""Training one cell of the combination matrix: under the toolkit, and on one device alone.

A cell is a dict of factor to level (`mgpu_tf.comm.combinations.FACTORS`). `train(cell,
strategy)` trains the cell's tiny model under a strategy with the cell's options;
`reference(cell)` trains the same model with plain Keras on one device, on the same global
batches, with the Keras options only. Both return `{"weights", "loss", "val_loss"}`.
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 8
STEPS = 4  # steps of one epoch: a multiple of every accumulation and execution length
VALIDATION_STEPS = 2
CLASSES = 3
LEARNING_RATE = 0.1
# The sums behind one gradient, batch rows aside: widths 4 (or 16), 8, 3 forward and back.
TERMS = 16 + 8 + 3 + 3 + 8 + 16
CLASS_WEIGHT = {0: 1.0, 1: 2.0, 2: 0.5}

_KERAS_OPTIONS = {
    "clipnorm": {"clipnorm": 0.05}, "global_clipnorm": {"global_clipnorm": 0.05},
    "clipvalue": {"clipvalue": 0.01}, "none": {},
}


def problem():
    """Training and validation arrays: integer features in [0, 5), so Embedding reads them too."""
    rng = np.random.RandomState(11)
    n, v = STEPS * GLOBAL_BATCH, VALIDATION_STEPS * GLOBAL_BATCH
    x = rng.randint(0, 5, size=(n + v, 4)).astype("float32")
    y = ((x[:, 0] + 2 * x[:, 1] + x[:, 3]) % CLASSES).astype("int32")
    w = rng.uniform(0.2, 2.0, size=n + v).astype("float32")
    return {"x": x[:n], "y": y[:n], "w": w[:n], "xv": x[n:], "yv": y[n:]}


class InferenceDropout(keras.layers.Dropout):
    """Dropout in inference mode whatever `training` says: what random cells compare."""

    def call(self, inputs, training=False):
        return super().call(inputs, training=False)


def _layers(cell):
    dense = [keras.layers.Dense(8, activation="tanh", name="hidden")]
    kind = cell["layer"]
    if kind == "batch_norm":
        # synchronized: the batch's statistics over all replicas, as on one device.
        return [keras.layers.Dense(8, name="hidden"),
                keras.layers.BatchNormalization(synchronized=True, name="norm"),
                keras.layers.Activation("tanh")]
    if kind == "dropout":
        return dense + [InferenceDropout(0.5, seed=3, name="dropout")]
    if kind == "embedding":
        return [keras.layers.Embedding(5, 4, name="embedding"), keras.layers.Flatten()] + dense
    return dense


def build(cell):
    """The cell's model, with initial weights that depend on its layer only."""
    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input((4,)), *_layers(cell),
                             keras.layers.Dense(CLASSES, name="logits"),
                             keras.layers.Activation("linear", dtype="float32")])


def optimizer(cell):
    """SGD with momentum and the cell's Keras options."""
    options = dict(_KERAS_OPTIONS[cell["clipping"]])
    if cell["weight_decay"]:
        options["weight_decay"] = 0.05
    if cell["use_ema"]:
        options.update(use_ema=True, ema_momentum=0.5)
    if cell["gradient_accumulation_steps"] > 1:
        options["gradient_accumulation_steps"] = cell["gradient_accumulation_steps"]
    if cell["loss_scale_factor"] is not None:
        options["loss_scale_factor"] = cell["loss_scale_factor"]
    return keras.optimizers.SGD(LEARNING_RATE, momentum=0.5, **options)


def _loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _precision(cell):
    keras.mixed_precision.set_global_policy(cell["precision"])


def _result(model, history):
    inner = getattr(model, "model", model)  # a ModelParallel holds the Keras model
    return {"weights": [np.asarray(w) for w in inner.get_weights()],
            "loss": history.history["loss"], "val_loss": history.history.get("val_loss")}


def toolkit_options(cell):
    """The `make_strategy` options of a cell (`install`'s, under multi_worker)."""
    out = {}
    if cell["steps_per_sync"] > 1:
        out["steps_per_sync"] = cell["steps_per_sync"]
    if cell["compression"] != "none":
        out["compression"] = cell["compression"]
    if cell["shard_optimizer_state"]:
        out["shard_optimizer_state"] = True
    return out


def _callbacks(cell, directory):
    import mgpu_tf

    name = cell["callback"]
    if name == "DataOrder":
        return [mgpu_tf.callbacks.DataOrder()]
    if name == "TrainingMonitor":
        return [mgpu_tf.callbacks.TrainingMonitor(print_table=False)]
    if name == "BackupAndRestore":
        return [mgpu_tf.callbacks.BackupAndRestore(directory)]
    return []


def _examples(data, cell, suffix=""):
    x, y = data["x" + suffix], data["y" + suffix]
    if cell["data"] == "sample_weight" and not suffix:
        return tf.data.Dataset.from_tensor_slices((x, y, data["w"]))
    return tf.data.Dataset.from_tensor_slices((x, y))


def train(cell, strategy, data, *, install=None):
    """Trains `cell` under `strategy` with `fit` on `shard_dataset`'s batches.

    Args:
        install: options for `mgpu_tf.comm.prepare.install` before `compile` (multi_worker
            cells, whose process makes one strategy); `None` when `strategy` carries them.
    """
    import mgpu_tf
    from mgpu_tf.comm import prepare

    _precision(cell)
    try:
        with strategy.scope():
            model = mgpu_tf.prepare_model(build(cell), strategy)
            chosen = optimizer(cell)
            if install:
                # Before compile, whose own install (the strategy's options) then keeps these.
                prepare.install(chosen, strategy, **install)
            model.compile(optimizer=chosen, loss=_loss(), jit_compile=cell["jit_compile"],
                          steps_per_execution=cell["steps_per_execution"])
        fit = {}
        if cell["data"] == "validation":
            fit["validation_data"] = mgpu_tf.shard_dataset(
                _examples(data, cell, "v"), strategy, GLOBAL_BATCH)
        if cell["data"] == "class_weight":
            fit["class_weight"] = CLASS_WEIGHT
        with tempfile.TemporaryDirectory() as directory:
            history = model.fit(
                mgpu_tf.shard_dataset(_examples(data, cell), strategy, GLOBAL_BATCH),
                epochs=1, verbose=0, callbacks=_callbacks(cell, directory), **fit)
        return _result(model, history)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def reference(cell, data):
    """Plain Keras on one device: the cell's Keras options, none of the toolkit's.

    With `steps_per_sync=k`, Keras' own `gradient_accumulation_steps=k`: one update on k
    global batches together, as comm/accumulation.py documents, each batch normalised alone
    (BatchNormalization), as each step's is under `steps_per_sync`.
    """
    _precision(cell)
    try:
        model = build(cell)
        accumulating = dict(cell, gradient_accumulation_steps=cell["gradient_accumulation_steps"]
                            * cell["steps_per_sync"])
        model.compile(optimizer=optimizer(accumulating), loss=_loss())
        fit = {}
        if cell["data"] == "validation":
            fit["validation_data"] = (data["xv"], data["yv"])
            fit["validation_batch_size"] = GLOBAL_BATCH
        if cell["data"] == "class_weight":
            fit["class_weight"] = CLASS_WEIGHT
        if cell["data"] == "sample_weight":
            fit["sample_weight"] = data["w"]
        history = model.fit(data["x"], data["y"],
                            batch_size=GLOBAL_BATCH, epochs=1,
                            shuffle=False, verbose=0, **fit)
        return _result(model, history)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def pipeline_masks(strategy, rows=4, width=64):
    """The Dropout mask this worker's pipeline of `strategy` ("hybrid") draws for an input."""
    import mgpu_tf

    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((width,)),
                              keras.layers.Dense(width, kernel_initializer="identity",
                                                 use_bias=False),
                              keras.layers.Dropout(0.5, seed=3)])
    model = mgpu_tf.prepare_model(model, strategy)
    return [np.asarray(model(tf.ones((rows, width)), training=True)) != 0]


def masks(strategy, rows=4, width=64):
    """The Dropout masks each local replica of `strategy` draws for the same input."""
    with strategy.scope():
        layer = keras.layers.Dropout(0.5, seed=3)

    @tf.function
    def draw():
        return strategy.run(lambda: layer(tf.ones((rows, width)), training=True))

    return [np.asarray(m) != 0 for m in strategy.experimental_local_results(draw())]
