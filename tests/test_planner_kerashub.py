"""`mgpu-tf plan` on KerasHub task models built by a user's function: a GPT-2 causal LM (its
token embedding tied to its output) and a BERT classifier (three inputs), tiny, from their
constructors. The memory per stage is checked against the bytes of each stage's weights
worked out from the model's layers, and the stages against `prepare_model`'s cut."""

import json
import textwrap

import numpy as np
import pytest

import mgpu_tf
from mgpu_tf.cli import main as cli_main

keras_hub = pytest.importorskip("keras_hub")

BATCH, LENGTH, VOCAB, HIDDEN = 8, 16, 54, 16

MODELS = textwrap.dedent(f"""
    import keras
    import keras_hub

    LETTERS = "abcdefghijklmnopqrstuvwxyz"


    def build_causal_lm():
        vocabulary = {{"<|endoftext|>": 0, "\\u0120": 1}}
        for letter in LETTERS:
            vocabulary[letter] = len(vocabulary)
            vocabulary["\\u0120" + letter] = len(vocabulary)
        tokenizer = keras_hub.models.GPT2Tokenizer(
            vocabulary=vocabulary, merges=["\\u0120 " + letter for letter in LETTERS])
        preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer,
                                                                 sequence_length={LENGTH})
        keras.utils.set_random_seed(0)
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size={VOCAB}, num_layers=4, num_heads=2, hidden_dim={HIDDEN},
            intermediate_dim={2 * HIDDEN}, max_sequence_length={LENGTH}, dropout=0.0)
        return keras_hub.models.GPT2CausalLM(backbone, preprocessor=preprocessor)


    def build_classifier():
        keras.utils.set_random_seed(0)
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size={VOCAB}, num_layers=2, num_heads=2, hidden_dim={HIDDEN},
            intermediate_dim={2 * HIDDEN}, max_sequence_length={LENGTH})
        return keras_hub.models.BertTextClassifier(backbone, num_classes=3, preprocessor=None)
""")


@pytest.fixture(scope="module")
def models_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "my_models.py"
    path.write_text(MODELS)
    return path


def _load(path, name):
    from mgpu_tf.cli import plan as plan_cli

    return plan_cli.load_model(f"{path}:{name}")


def _bytes(layers, trainable=False):
    """Bytes of the layers' weights, each weight once, summed from their shapes."""
    weights = {id(w): w for layer in layers
               for w in (layer.trainable_weights if trainable else layer.weights)}
    return sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in weights.values())


def _stage_layers(model, devices):
    """The names of the layers `prepare_model` puts on each stage."""
    strategy = mgpu_tf.make_strategy("model_parallel", devices=devices)
    return [set(stage.layers) for stage in mgpu_tf.prepare_model(model, strategy).plan]


def test_plan_of_a_causal_lm_gives_each_stage_its_weights(models_file, capsys):
    code = cli_main(["plan", "--model", f"{models_file}:build_causal_lm", "--global_batch_size",
                     str(BATCH), "--devices", "2", "--device_memory", "1GiB", "--no_measure",
                     "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    options = {o["name"]: o for o in json.loads(out)["options"]}
    stages = options["model"]["footprints"]
    assert len(stages) == 2 and options["model"]["batch"] == BATCH
    model = _load(models_file, "build_causal_lm")
    backbone = model.backbone
    # By hand: four equal blocks outweigh both embeddings and the last norm, so the even
    # split is two blocks each; the token embedding (also the output layer) stays first.
    first = [backbone.get_layer(n) for n in ("token_embedding", "position_embedding",
                                             "transformer_layer_0", "transformer_layer_1")]
    second = [backbone.get_layer(n) for n in ("transformer_layer_2", "transformer_layer_3",
                                              "layer_norm")]
    for footprint, layers in zip(stages, (first, second)):
        assert footprint["params"] == _bytes(layers)
        assert footprint["gradients"] == _bytes(layers, trainable=True)
        assert footprint["optimizer"] == 2 * footprint["gradients"]  # Adam
    assert sum(f["params"] for f in stages) == _bytes([model])  # the tied weight once
    assert options["data"]["footprints"][0]["params"] == _bytes([model])
    # The cut is the one prepare_model makes.
    cut = _stage_layers(model, ["CPU:0", "CPU:1"])
    assert {layer.name for layer in first} <= cut[0]
    assert {layer.name for layer in second} <= cut[1]
    assert "transformer_layer_2" not in cut[0] and "transformer_layer_1" not in cut[1]
    # What each stage must hold, at least: the last the logits the loss reads and the
    # hidden state and padding mask entering it; the first its two inputs (int32).
    logits = BATCH * LENGTH * VOCAB * 4
    entering = BATCH * LENGTH * (HIDDEN + 1) * 4
    assert stages[1]["activations"] >= logits + entering
    assert stages[0]["activations"] >= 2 * BATCH * LENGTH * 4
    assert stages[1]["activations"] < options["data"]["footprints"][0]["activations"] * 2


def test_plan_of_a_classifier_with_three_inputs(models_file):
    model = _load(models_file, "build_classifier")
    with pytest.raises(ValueError, match=r"The planner traces a batch through the model, and "
                                         r"its input '\w+' has dimensions of unknown length"):
        mgpu_tf.plan(model, devices=2, device_memory="1GiB", global_batch_size=BATCH,
                     measure_compute=False)
    result = mgpu_tf.plan(model, devices=2, device_memory="1GiB", global_batch_size=BATCH,
                          sequence_length=LENGTH)
    assert result.compute is not None and result.compute.seconds > 0  # a step timed here
    stages = next(o for o in result.options if o.name == "model").footprints
    cut = _stage_layers(model, ["CPU:0", "CPU:1"])
    layers = {layer.name: layer for layer in model.layers + model.backbone.layers}
    for footprint, names in zip(stages, cut):
        # A name of the flattened graph is a layer of the task or of its backbone.
        assert footprint.params == _bytes([layers[n] for n in names if n in layers])
    assert sum(f.params for f in stages) == _bytes([model])
