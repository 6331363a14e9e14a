"""KerasHub task models as KerasHub builds them, cut into pipeline stages: GPT-2 (its token
embedding tied to its output), a BERT classifier (three inputs), a ViT (one layer holding
every block). Built tiny from their constructors; nothing is downloaded."""

import keras
import numpy as np
import pytest

import mgpu_tf
from support import compare
from support import tolerance

keras_hub = pytest.importorskip("keras_hub")

DEVICES = ["CPU:0", "CPU:1"]
ROWS, BATCH, LENGTH, VOCAB, HIDDEN = 8, 4, 16, 64, 16
STEPS = 2 * ROWS // BATCH  # two epochs
# The sums behind a gradient of the tiny transformers, per block: query, key, value and
# output projections (16 each), scores (8 per head) and the weighted sum (16 positions),
# the feed-forward (16 and 32), two LayerNorms (16 each); then the last norm and the
# logits (16), as many back, and the tokens of a batch.
BLOCK = 4 * 16 + 8 + 16 + 16 + 32 + 2 * 16
TERMS = 2 * (2 * BLOCK + 16 + 16) + BATCH * LENGTH
FIT = tolerance.training(STEPS, TERMS, optimizer="adam")


def _gpt2(seed=0):
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=HIDDEN,
        intermediate_dim=2 * HIDDEN, max_sequence_length=LENGTH, dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def _bert(seed=0):
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=HIDDEN,
        intermediate_dim=2 * HIDDEN, max_sequence_length=LENGTH, dropout=0.0)
    return keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=3,
                                               preprocessor=None, dropout=0.0)


def _tokens():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(ROWS, LENGTH + 1)).astype("int32")
    mask = np.ones((ROWS, LENGTH), "int32")
    mask[::2, LENGTH - 4:] = 0  # padding at the end of every other row
    return tokens, mask


def _compile(model):
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)


def _blocks(stage_layers):
    return [name for name in stage_layers if name.startswith("transformer_layer")]


def test_gpt2_causal_lm_is_cut_with_blocks_on_both_stages_and_trains_as_on_one_device(
        tmp_path):
    tokens, mask = _tokens()
    x = {"token_ids": tokens[:, :-1], "padding_mask": mask}
    y, weights = tokens[:, 1:], mask.astype("float32")
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2, microbatches=2,
                                     recompute="except_last")
    with strategy.scope():
        lm = _gpt2()
    model = mgpu_tf.prepare_model(lm, strategy)
    plan = model.plan
    assert _blocks(plan[0].layers) == ["transformer_layer_0"]
    assert _blocks(plan[1].layers) == ["transformer_layer_1"]
    small, large = sorted(s.param_bytes for s in plan)
    assert small >= 0.3 * large, plan
    # The tied embedding: called first and last, one variable, on the first stage's device.
    assert plan[0].layers[0] == plan[1].layers[-1] == "token_embedding"
    embedding = lm.backbone.get_layer("token_embedding").embeddings
    assert embedding.value.device.endswith("CPU:0")

    reference = _gpt2()
    initial = reference.get_weights()
    for m in (model, reference):
        _compile(m)
    fit = dict(batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    got = model.fit(x, y, sample_weight=weights, **fit).history["loss"]
    want = reference.fit(x, y, sample_weight=weights, **fit).history["loss"]
    np.testing.assert_allclose(got, want, rtol=FIT)
    assert compare.relative_difference(model.get_weights(), reference.get_weights()) < FIT
    assert compare.relative_difference(initial, reference.get_weights()) > 100 * FIT

    path = str(tmp_path / "gpt2.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert type(reloaded) is type(lm)
    np.testing.assert_allclose(model.predict(x, verbose=0), reloaded.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-5)


def test_bert_classifier_with_three_inputs_trains_as_on_one_device():
    tokens, mask = _tokens()
    x = {"token_ids": tokens[:, :-1], "segment_ids": np.zeros_like(mask), "padding_mask": mask}
    y = tokens[:, 0] % 3
    model = mgpu_tf.ModelParallel(_bert(), DEVICES, microbatches=2)
    assert all(_blocks(stage.layers) for stage in model.plan), model.plan
    assert len(model.stages.stages[1].entering) == 2  # the hidden states and the padding mask
    reference = _bert()
    for m in (model, reference):
        _compile(m)
    fit = dict(batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    got = model.fit(x, y, **fit).history["loss"]
    want = reference.fit(x, y, **fit).history["loss"]
    np.testing.assert_allclose(got, want, rtol=FIT)
    assert compare.relative_difference(model.get_weights(), reference.get_weights()) < FIT


def test_vit_encoder_holding_every_block_is_named_in_one_warning():
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2, hidden_dim=HIDDEN,
        mlp_dim=2 * HIDDEN)
    classifier = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=2,
                                                     preprocessor=None)
    with pytest.warns(UserWarning) as caught:
        mgpu_tf.ModelParallel(classifier, DEVICES)
    messages = [str(w.message) for w in caught if "ModelParallel" in str(w.message)]
    assert len(messages) == 1, messages
    assert "layer 'vit_encoder' (ViTEncoder) holds" in messages[0]
    assert "with the functional API" in messages[0]
