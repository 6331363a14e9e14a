"""Tiny KerasHub task models, built from their constructors with nothing downloaded.

Each model comes with its preprocessor (a tokenizer made from a small vocabulary, or an
image converter) and raw examples: strings with labels, strings alone for a causal LM,
images with labels. `build(name)` makes one, compiled; `examples(name)` its data set of
single raw examples; `initial_weights(name)` fixed starting weights, the same in every
process; `terms(name, batch)` the length of the sums behind one gradient.
"""

import io

import keras
import numpy as np
import tensorflow as tf

__all__ = ["MODELS", "EXAMPLES", "LEARNING_RATE", "build", "examples", "raw_arrays",
           "initial_weights", "terms"]

MODELS = ("bert", "gpt2", "llama", "vit", "resnet")
EXAMPLES = 32  # four steps of eight
SEQUENCE = 16
LEARNING_RATE = 1e-2
# The sums behind one gradient (`support.tolerance`), per model: the widths its activations
# pass through forward and back (one block: the input's patch or kernel, hidden, attention
# over the positions, intermediate, classes or vocabulary), and the rows a weight's gradient
# sums over, a batch's examples times their positions (`terms(name, batch)`).
_WIDTHS = {"bert": 16 + 16 + SEQUENCE + 16 + 32 + 2, "gpt2": 16 + 16 + SEQUENCE + 16 + 32 + 54,
           "llama": 16 + 16 + SEQUENCE + 16 + 32 + 24, "vit": 48 + 16 + 17 + 16 + 32 + 2,
           "resnet": 27 + 3 * 9 * 64 + 64 + 2}
_POSITIONS = {"bert": SEQUENCE, "gpt2": SEQUENCE, "llama": SEQUENCE, "vit": 17, "resnet": 64}


def terms(name, batch):
    """The length of the sums behind one gradient of `name` on batches of `batch`."""
    return 2 * _WIDTHS[name] + batch * _POSITIONS[name]

_WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "cat",
          "sat", "on", "mat", "and", "ran", "far", "away", "from", "home", "today"]


def _sentences(count, seed):
    rng = np.random.RandomState(seed)
    return [" ".join(rng.choice(_WORDS, size=rng.randint(3, 12))) for _ in range(count)]


def _bert_preprocessor():
    import keras_hub

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_WORDS]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary)
    return keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=SEQUENCE)


def _gpt2_preprocessor():
    import keras_hub

    # Letters, each also after a space ("Ġ"): every sentence splits into known pieces.
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = {"<|endoftext|>": 0, "Ġ": 1}
    for letter in letters:
        vocabulary[letter] = len(vocabulary)
        vocabulary["Ġ" + letter] = len(vocabulary)
    merges = [f"Ġ {letter}" for letter in letters]
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    return keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=SEQUENCE)


def _llama_preprocessor():
    import keras_hub
    import sentencepiece

    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_sentences(200, 11)), model_writer=proto,
        vocab_size=len(_WORDS) + 4, model_type="WORD", pad_id=0, unk_id=1, bos_id=2,
        eos_id=3, pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        minloglevel=2)
    tokenizer = keras_hub.models.LlamaTokenizer(proto=proto.getvalue())
    return keras_hub.models.LlamaCausalLMPreprocessor(tokenizer, sequence_length=SEQUENCE)


def build(name, *, optimizer="adam", jit_compile=False, steps_per_execution=1,
          preprocessor=True):
    """Returns the compiled tiny task model `name` (of `MODELS`), with its preprocessor.

    Dropout is off, so that every run of the same steps computes the same function.
    """
    import keras_hub

    models = keras_hub.models
    if name == "bert":
        backbone = models.BertBackbone(vocabulary_size=len(_WORDS) + 5, num_layers=1,
                                       num_heads=2, hidden_dim=16, intermediate_dim=32,
                                       dropout=0.0, max_sequence_length=SEQUENCE)
        task = models.BertTextClassifier(
            backbone, num_classes=2, dropout=0.0,
            preprocessor=_bert_preprocessor() if preprocessor else None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif name == "gpt2":
        backbone = models.GPT2Backbone(vocabulary_size=2 + 2 * 26, num_layers=1,
                                       num_heads=2, hidden_dim=16, intermediate_dim=32,
                                       dropout=0.0, max_sequence_length=SEQUENCE)
        task = models.GPT2CausalLM(backbone,
                                   preprocessor=_gpt2_preprocessor() if preprocessor else None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif name == "llama":
        backbone = models.LlamaBackbone(vocabulary_size=len(_WORDS) + 4, num_layers=1,
                                        num_query_heads=2, num_key_value_heads=1,
                                        hidden_dim=16, intermediate_dim=32)
        task = models.LlamaCausalLM(backbone,
                                    preprocessor=_llama_preprocessor() if preprocessor else None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif name == "vit":
        backbone = models.ViTBackbone(image_shape=(16, 16, 3), patch_size=4, num_layers=1,
                                      num_heads=2, hidden_dim=16, mlp_dim=32)
        converter = keras_hub.layers.ViTImageConverter(image_size=(16, 16), scale=1 / 255)
        task = models.ViTImageClassifier(
            backbone, num_classes=2,
            preprocessor=models.ViTImageClassifierPreprocessor(converter)
            if preprocessor else None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif name == "resnet":
        backbone = models.ResNetBackbone(
            input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64],
            stackwise_num_blocks=[1], stackwise_num_strides=[1],
            block_type="basic_block", image_shape=(16, 16, 3))
        converter = keras_hub.layers.ResNetImageConverter(image_size=(16, 16), scale=1 / 255)
        task = models.ResNetImageClassifier(
            backbone, num_classes=2,
            preprocessor=models.ResNetImageClassifierPreprocessor(converter)
            if preprocessor else None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    else:
        raise ValueError(f"`name` must be one of {MODELS}. Received: name={name!r}")
    optimizer = (keras.optimizers.Adam(LEARNING_RATE) if optimizer == "adam"
                 else keras.optimizers.SGD(LEARNING_RATE * 10))
    task.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile,
                 steps_per_execution=steps_per_execution, weighted_metrics=[])
    return task


def raw_arrays(name, count=EXAMPLES, seed=3):
    """The raw examples of `name` as arrays: `(strings, labels)`, `strings`, or
    `(images, labels)`."""
    rng = np.random.RandomState(seed)
    if name in ("bert",):
        return np.array(_sentences(count, seed)), rng.randint(0, 2, size=count).astype("int32")
    if name in ("gpt2", "llama"):
        return np.array(_sentences(count, seed))
    images = rng.uniform(0, 255, size=(count, 16, 16, 3)).astype("float32")
    return images, rng.randint(0, 2, size=count).astype("int32")


def examples(name, count=EXAMPLES, seed=3):
    """A `tf.data.Dataset` of single raw examples of `name`."""
    return tf.data.Dataset.from_tensor_slices(raw_arrays(name, count, seed))


def initial_weights(name, seed=5):
    """Fixed starting weights for `name`: its weights' shapes, drawn from `seed`."""
    keras.utils.set_random_seed(seed)
    model = build(name, preprocessor=False)
    return [np.asarray(w) for w in model.get_weights()]
