"""Worker script: a KerasHub GPT-2 causal LM under `make_strategy("hybrid")` against one device.

Run by tests/test_hybrid.py as two workers of two simulated devices each. Each worker
builds the model from its own seed (only the broadcast can make them equal), cuts it into
two stages (its two blocks apart, the tied token embedding on the first), trains it on its
share of each global batch in two micro-batches, and trains a plain copy of the broadcast
initial model on one device with the whole global batches. Prints `name: value` lines.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from support import compare

GLOBAL_BATCH, EXAMPLES, EPOCHS, LENGTH, VOCAB = 8, 16, 2, 8, 32
# The sums behind a gradient (support.tolerance), as tests/test_kerashub_pipeline.py counts
# them for hidden width 16 and two blocks, the tokens of a global batch aside.
BLOCK = 4 * 16 + 8 + LENGTH + 16 + 32 + 2 * 16
TERMS = 2 * (2 * BLOCK + 16 + 16)


def build_model():
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_sequence_length=LENGTH, dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def _compile(model):
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)


def main():
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2, microbatches=2)
    task = strategy.task_index
    keras.utils.set_random_seed(100 + task)
    with strategy.scope():
        model = build_model()
    model = mgpu_tf.prepare_model(model, strategy)
    print("stages:", " | ".join(",".join(s.layers) for s in model.plan))
    initial = [w.copy() for w in model.model.get_weights()]
    _compile(model)

    rng = np.random.RandomState(0)
    tokens = rng.randint(1, VOCAB, size=(EXAMPLES, LENGTH + 1)).astype("int32")
    mask = np.ones((EXAMPLES, LENGTH), "int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": mask}
    y = tokens[:, 1:]
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    model.fit(mgpu_tf.shard_dataset(examples, strategy, GLOBAL_BATCH), epochs=EPOCHS,
              verbose=0)
    embedding = model.model.backbone.get_layer("token_embedding").embeddings
    print("embedding device:", embedding.value.device)

    reference = build_model()
    reference.set_weights(initial)
    _compile(reference)
    reference.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    error = compare.relative_difference(model.model.get_weights(), reference.get_weights())
    moved = compare.relative_difference(initial, reference.get_weights())
    print(f"steps: {EPOCHS * EXAMPLES // GLOBAL_BATCH}")
    print(f"moved: {moved:.3e}")
    print(f"relative error: {error:.3e}")
    print("done")


if __name__ == "__main__":
    sys.exit(main())
