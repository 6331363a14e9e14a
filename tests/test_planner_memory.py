"""The planner's memory estimate beyond MLPs, against measured peaks and published recipes.

The measured peaks are recorded by benchmarks/bench_planner_memory.py (the growth of a
fresh process' peak resident set over one Adam training step on this CPU; figures in
docs/benchmarks.md): tracing is cheap, training ResNet50 here is not, so the tests
estimate and compare with the recorded measurement.
"""

import keras
import pytest

from mgpu_tf.planner import memory
from support import planner_models

MiB, GiB = 2**20, 2**30

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
