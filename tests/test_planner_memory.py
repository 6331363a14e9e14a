"""The planner's memory estimate beyond MLPs, against measured peaks and published figures.

The measured peaks are recorded by benchmarks/bench_planner_memory.py (the growth of a
fresh process' peak resident set over one Adam training step on this CPU; figures in
docs/benchmarks.md): tracing is cheap, training ResNet50 here is not, so the tests
estimate and compare with the recorded measurement.
"""

import keras
import keras_hub
import pytest

from mgpu_tf.planner import memory
from support import planner_models

MiB, GiB = 2**20, 2**30

# Published figures (docs/planner.md#calibration-against-published-figures). ResNet-50 at
# 224 x 224, batch 32, float32, Adam: at least its forward feature maps, 103 MB an image
# (albanie/convnet-burden, reports/resnet-50.md), with weights, gradients and two Adam slots of
# 102.2 MB each; at most what tf.keras' ResNet50 held training 48 images of 240 x 320 with Adam
# on a 10 GB RTX 3080, 9.1 GB (tensorflow/tensorflow#53608), its images scaled to 32 of 224 x 224.
RESNET50_STATE = 4 * 102.2e6
RESNET50_PUBLISHED = (32 * 103e6 + RESNET50_STATE,
                      (9.1e9 - RESNET50_STATE) * (32 * 224 * 224) / (48 * 240 * 320)
                      + RESNET50_STATE)
# google-research/bert's README: the largest batches run_classifier.py trained with Adam on a
# 12 GB Titan X at sequence length 128: BERT-Base 32, BERT-Large 6.
BERT = {"base": (768, 12, 12, 32), "large": (1024, 16, 24, 6)}  # width, heads, blocks, batch
BERT_VOCABULARY = 30522 + 512 + 2  # word, position and segment embeddings

# Measured by benchmarks/bench_planner_memory.py, the lower of two runs each.
MEASURED = {"resnet50-224": 3474.5 * MiB, "transformer": 1383.9 * MiB}


@pytest.fixture(scope="module")
def resnet50():
    return memory.measure_model(planner_models.resnet50(224))


def test_resnet50_with_batch_norm_is_within_30_percent_of_its_measured_peak(resnet50):
    footprint = resnet50.footprints(32, slots=2)[0]
    assert 0.7 <= MEASURED["resnet50-224"] / footprint.total <= 1.3, footprint


def test_a_transformer_encoder_is_within_30_percent_of_its_measured_peak():
    footprint = memory.measure_model(planner_models.transformer_encoder()).footprints(32)[0]
    assert 0.7 <= MEASURED["transformer"] / footprint.total <= 1.3, footprint


def test_tf_cnn_benchmarks_resnet50_batch_fits_a_12_gb_k80(resnet50):
    # tf_cnn_benchmarks trained ResNet-50 at 64 images per K80 GPU (12 GB), with SGD.
    assert resnet50.footprints(64, slots=0)[0].total <= 12 * GiB


def test_nvidias_mixed_precision_resnet50_batch_fits_a_16_gb_v100():
    # NVIDIA's recipe: ResNet-50 (fused batch norm), AMP, 256 images per V100 16 GB,
    # SGD with momentum.
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model_memory = memory.measure_model(planner_models.resnet50_fused(224))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model_memory.footprints(256, slots=1)[0].total <= 16 * GiB


def test_resnet50_at_batch_32_in_float32_is_within_the_published_range(resnet50):
    low, high = RESNET50_PUBLISHED
    assert low <= resnet50.footprints(32, slots=2)[0].total <= high, (
        resnet50.footprints(32, slots=2)[0], low / GiB, high / GiB)


def _bert_encoder(width, heads, blocks, sequence=128):
    """BERT's encoder blocks (dropout 0.1 as BERT's) over embedded tokens, and a classifier."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((sequence, width))
    x = inputs
    for _ in range(blocks):
        x = keras_hub.layers.TransformerEncoder(4 * width, heads, dropout=0.1,
                                                activation="gelu")(x)
    return keras.Model(inputs, keras.layers.Dense(2)(x[:, 0]))


@pytest.mark.parametrize("name", sorted(BERT))
def test_bert_at_its_published_batch_fits_a_12_gb_titan_x(name):
    width, heads, blocks, batch = BERT[name]
    # One block and two traced (cheap); each further block adds what the second added.
    one, two = (memory.measure_model(_bert_encoder(width, heads, b)).footprints(batch)[0].total
                for b in (1, 2))
    embeddings = 4 * BERT_VOCABULARY * width * 4  # float32 weights, gradients, two Adam slots
    estimate = one + (blocks - 1) * (two - one) + embeddings
    assert embeddings < estimate <= 12e9, estimate / GiB
