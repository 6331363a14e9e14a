"""The default path in full: every Keras optimizer with every layer kind, under each strategy's
default options.

One model per optimizer holds the four layer kinds of `mgpu_tf.comm.combinations.DEFAULT_LAYERS`
side by side: each branch reads its own columns of the input, has its own weights and its own
loss term, so each trains as it would alone, and one `fit` checks the four cells of an
optimizer. The branches are two top-level layers deep, so a pipeline cuts the model between
them. The BatchNormalization branch reads rows in which every quarter of a global batch is the
same two examples: each replica's (and each micro-batch's) rows then have the global batch's
statistics, so its declared outcome (per-replica statistics) gives one device's numbers, and
what else the branch does is checked against them.
"""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from support import combinations_run

__all__ = ["GLOBAL_BATCH", "STEPS", "LAYERS", "build", "optimizer", "problem", "train",
           "reference", "branch_weights"]

GLOBAL_BATCH = 8
STEPS = 4
CLASSES = 3
FEATURES = 4  # input columns per branch
WIDTH = 8
LAYERS = ("dense", "embedding", "batch_norm", "dropout")  # the branches, in column order
# The sums behind one gradient, batch rows aside: widths 4, 8, 3 forward and back.
TERMS = 2 * (FEATURES + WIDTH + CLASSES)


def _first(layer):
    """The first top-level layer's part of a branch."""
    if layer == "dense":
        return [keras.layers.Dense(WIDTH, activation="tanh", name="dense_hidden")]
    if layer == "embedding":
        return [keras.layers.Embedding(5, FEATURES, name="embedding"),
                keras.layers.Flatten(name="embedding_flat"),
                keras.layers.Dense(WIDTH, activation="tanh", name="embedding_hidden")]
    if layer == "batch_norm":
        # No bias: BatchNormalization cancels it, leaving a gradient of rounding noise
        # that Adam-like optimizers would scale up to full steps.
        return [keras.layers.Dense(WIDTH, use_bias=False, name="batch_norm_hidden"),
                keras.layers.BatchNormalization(name="batch_norm"),  # Keras' default
                keras.layers.Activation("tanh", name="batch_norm_tanh")]
    return [keras.layers.Dense(WIDTH, activation="tanh", name="dropout_hidden"),
            combinations_run.InferenceDropout(0.5, seed=3, name="dropout")]


class Branches(keras.layers.Layer):
    """Applies each branch's layers to its share of the columns; concatenates them."""

    def __init__(self, stage, layers=LAYERS, **kwargs):
        super().__init__(**kwargs)
        self.stage = stage
        self.kinds = tuple(layers)
        self.branches = [_first(layer) if stage == 0 else
                         [keras.layers.Dense(CLASSES, name=f"{layer}_logits")]
                         for layer in self.kinds]

    def call(self, inputs, training=None):
        if self.stage == 0:  # the columns of each branch
            parts = ops.split(inputs, len(LAYERS), axis=-1)
            parts = [parts[LAYERS.index(layer)] for layer in self.kinds]
        else:
            parts = ops.split(inputs, len(self.kinds), axis=-1)
        out = []
        for layer, part, branch in zip(self.kinds, parts, self.branches):
            if layer == "embedding" and self.stage == 0:
                part = ops.cast(part, "int32")
            for sub in branch:
                part = sub(part, training=training) if isinstance(
                    sub, (keras.layers.BatchNormalization, keras.layers.Dropout)) else sub(part)
            out.append(part)
        return ops.concatenate(out, axis=-1)

    def compute_output_shape(self, input_shape):
        width = WIDTH if self.stage == 0 else CLASSES
        return (input_shape[0], width * len(self.kinds))


def _build(layers):
    return keras.Sequential([keras.Input((FEATURES * len(LAYERS),)),
                             Branches(0, layers, name="branches_first"),
                             Branches(1, layers, name="branches_logits")])


def build(layers=LAYERS):
    """The branches model of `layers` (uncompiled); each branch starts from the weights it
    has in the model of every branch."""
    keras.utils.set_random_seed(5)
    full = _build(LAYERS)
    if tuple(layers) == LAYERS:
        return full
    model = _build(layers)
    for mine, its in zip(model.layers, full.layers):
        for layer, branch in zip(mine.kinds, mine.branches):
            for sub, source in zip(branch, its.branches[LAYERS.index(layer)]):
                sub.set_weights(source.get_weights())
    return model


def branch_weights(model, layer):
    """The weights of one branch, in a fixed order."""
    inner = getattr(model, "model", model)  # a ModelParallel holds the Keras model
    out = []
    for top in inner.layers:
        if isinstance(top, Branches):
            for sub in top.branches[top.kinds.index(layer)]:
                out += [np.asarray(w) for w in sub.get_weights()]
    return out


def loss(y_true, logits):
    """Each branch's cross-entropy (labels one column per branch), summed over branches."""
    logits = ops.reshape(logits, (-1, ops.shape(y_true)[-1], CLASSES))
    return ops.sum(keras.losses.sparse_categorical_crossentropy(
        ops.cast(y_true, "int32"), logits, from_logits=True), axis=-1)


def optimizer(name):
    """Keras optimizer class `name` with its defaults, a learning rate that moves the weights."""
    cls = getattr(keras.optimizers, name)
    return cls(learning_rate=0.1 if name in ("SGD", "Adadelta", "Adagrad", "Ftrl") else 0.01)


def problem():
    """Rows of four column groups, one per branch, and a label per branch."""
    rng = np.random.RandomState(11)
    n = STEPS * GLOBAL_BATCH
    x = rng.normal(size=(n, FEATURES * len(LAYERS))).astype("float32")
    tokens = slice(FEATURES, 2 * FEATURES)
    x[:, tokens] = rng.randint(0, 5, size=(n, FEATURES))
    # Every quarter of a global batch the same two rows: equal statistics in every share.
    norm = slice(2 * FEATURES, 3 * FEATURES)
    # Two examples a, c per global batch as a c c a a c c a: halves, quarters, and even or
    # odd rows all hold a and c equally often.
    pattern = np.array([0, 1, 1, 0, 0, 1, 1, 0])
    starts = np.arange(STEPS) * GLOBAL_BATCH
    rows = (starts[:, None] + pattern[None, :]).reshape(-1)
    x[:, norm] = x[rows, norm]
    groups = x.reshape(n, len(LAYERS), FEATURES)
    y = (np.floor(np.abs(groups).sum(axis=-1) * 3) % CLASSES).astype("int32")
    return x, y


def _fit(model, data, layers, strategy=None):
    import mgpu_tf

    x, y = data
    y = y[:, [LAYERS.index(layer) for layer in layers]]
    if strategy is None:
        return model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return model.fit(mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)),
                                           strategy, GLOBAL_BATCH), epochs=1, verbose=0)


def _result(model, history, layers):
    return {"weights": {layer: branch_weights(model, layer) for layer in layers},
            "error": None}


def train(name, strategy, data, layers=LAYERS):
    """Trains the branches of `layers` with optimizer `name` under `strategy`'s defaults."""
    import mgpu_tf

    with strategy.scope():
        model = mgpu_tf.prepare_model(build(layers), strategy)
        model.compile(optimizer=optimizer(name), loss=loss)
    return _result(model, _fit(model, data, layers, strategy), layers)


def refusal(strategy, layers):
    """What `prepare_model` says of the branches of `layers` under `strategy`, or None."""
    import mgpu_tf

    try:
        with strategy.scope():
            mgpu_tf.prepare_model(build(layers), strategy)
    except ValueError as error:
        return str(error)
    return None


def reference(name, data):
    """Plain Keras on one device, every branch."""
    model = build()
    model.compile(optimizer=optimizer(name), loss=loss)
    return _result(model, _fit(model, data, LAYERS), LAYERS)
