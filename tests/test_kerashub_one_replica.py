"""A KerasHub task model under the `default` and `one_device` strategies trains on the epochs
`shard_dataset` deals, in their order (its shuffle_seed's), as one device trained on those
batches does. Tiny GPT-2 from its constructor, with its preprocessor; nothing downloaded."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare
from support import tolerance

keras_hub = pytest.importorskip("keras_hub")

LETTERS = "abcdefghijklmnopqrstuvwxyz"
EXAMPLES, BATCH, LENGTH, SEED, EPOCHS = 20, 8, 16, 7, 2
# Per step: the sums of one block's gradient (attention 4 x 16 + 8 + 16, feed-forward
# 16 + 32, two norms), the last norm and logits, and the tokens of a batch.
FIT = tolerance.training(EPOCHS * 3, 2 * (4 * 16 + 8 + 16 + 16 + 32 + 2 * 16 + 32)
                         + BATCH * LENGTH, optimizer="adam")


def _causal_lm():
    vocabulary = {"<|endoftext|>": 0, "\u0120": 1}
    for letter in LETTERS:
        vocabulary[letter] = len(vocabulary)
        vocabulary["\u0120" + letter] = len(vocabulary)
    tokenizer = keras_hub.models.GPT2Tokenizer(
        vocabulary=vocabulary, merges=["\u0120 " + letter for letter in LETTERS])
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=LENGTH)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(vocabulary), num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=LENGTH, dropout=0.0)
    model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[])
    return model


def _texts():
    rng = np.random.default_rng(0)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]
    return tf.data.Dataset.from_tensor_slices(
        [" ".join(rng.choice(words, size=4)) for _ in range(EXAMPLES)])


@pytest.fixture(scope="module")
def reference():
    """One device, no strategy, trained on the batches of epochs 0 and 1 as dealt."""
    dealt = mgpu_tf.shard_dataset(_texts(), tf.distribute.get_strategy(), BATCH,
                                  shuffle_seed=SEED)
    batches = [batch for _ in range(EPOCHS) for batch in iter(dealt)]
    assert [len(b) for b in batches] == [8, 8, 4] * EPOCHS
    data = tf.data.Dataset.from_tensor_slices(batches[0]).batch(BATCH)
    for batch in batches[1:]:
        data = data.concatenate(tf.data.Dataset.from_tensor_slices(batch).batch(BATCH))
    model = _causal_lm()
    model.fit(data, epochs=1, verbose=0)
    return model.get_weights()


@pytest.mark.parametrize("name", ["default", "one_device"])
def test_trains_the_epochs_shard_dataset_deals(name, reference):
    strategy = mgpu_tf.make_strategy(name)
    assert "keras_hub" in mgpu_tf.kind_of(strategy).patches
    with strategy.scope():
        model = _causal_lm()
    initial = model.get_weights()
    model.fit(mgpu_tf.shard_dataset(_texts(), strategy, BATCH, shuffle_seed=SEED),
              epochs=EPOCHS, verbose=0)
    assert compare.relative_difference(model.get_weights(), reference) < FIT
    assert compare.relative_difference(initial, reference) > 100 * FIT
