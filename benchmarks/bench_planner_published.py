"""The planner's data-parallel prediction against published multi-GPU scaling tables.

For each published system the planner gets the model (built here, untrained), the
published single-GPU throughput (`device_throughput=`), the per-GPU batch, the GPU's
memory and the system's interconnect, and predicts the N-GPU throughput; the rows
set its scaling efficiency (N-GPU throughput / N x one GPU's) beside the published
one. The same step model and figures serve every row: no constant is fitted per row.
Also printed: whether the published per-GPU batch fits the GPU by the planner's
memory estimate, and the efficiency without the wait for the slowest device.

    PYTHONPATH=.:tests nice -n 10 python benchmarks/bench_planner_published.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import mgpu_tf  # noqa: E402
from support import planner_models  # noqa: E402

TF_CNN = "https://github.com/tensorflow/docs/blob/master/site/en/r1/guide/performance/benchmarks.md"
NVIDIA = ("https://github.com/NVIDIA/DeepLearningExamples/tree/master/TensorFlow/"
          "Classification/ConvNets/resnet50v1.5")


def alexnet():
    """tf_cnn_benchmarks' AlexNet (models/alexnet_model.py): 227 x 227 inputs, so that its
    first convolution (11 x 11, stride 4, no padding) leaves 55 x 55 and the last pooling
    6 x 6 x 256 = 9216 features; 62 M parameters."""
    layers = keras.layers
    return keras.Sequential([
        keras.Input((227, 227, 3)),
        layers.Conv2D(64, 11, 4, activation="relu"), layers.MaxPooling2D(3, 2),
        layers.Conv2D(192, 5, padding="same", activation="relu"), layers.MaxPooling2D(3, 2),
        layers.Conv2D(384, 3, padding="same", activation="relu"),
        layers.Conv2D(384, 3, padding="same", activation="relu"),
        layers.Conv2D(256, 3, padding="same", activation="relu"), layers.MaxPooling2D(3, 2),
        layers.Flatten(), layers.Dense(4096, activation="relu"), layers.Dropout(0.5),
        layers.Dense(4096, activation="relu"), layers.Dropout(0.5), layers.Dense(1000)])


def _keras_app(name):
    return lambda: getattr(keras.applications, name)(weights=None)


# (system, model name, build, mixed precision, per-GPU batch, GPU memory, interconnect,
#  schedule, {GPUs: published images/s}, source)
SYSTEMS = [
    ("DGX-1, 8 P100 (NCCL)", "AlexNet", alexnet, False, 512, "16GiB", "nvlink1", "keras",
     {1: 2987, 2: 5658, 4: 10509, 8: 17822}, TF_CNN),
    ("DGX-1, 8 P100 (NCCL)", "VGG16", _keras_app("VGG16"), False, 64, "16GiB", "nvlink1",
     "keras", {1: 154, 2: 295, 4: 584, 8: 1081}, TF_CNN),
    ("AWS p2.8xlarge, 8 K80", "ResNet-50", _keras_app("ResNet50"), False, 64, "12GiB",
     "pcie3", "keras", {1: 51.5, 2: 98.0, 4: 195, 8: 384}, TF_CNN),
    ("AWS p2.8xlarge, 8 K80", "ResNet-152", _keras_app("ResNet152"), False, 32, "12GiB",
     "pcie3", "keras", {1: 19.7, 2: 37.6, 4: 74.9, 8: 149}, TF_CNN),
    ("DGX-1, 8 V100 16G", "ResNet-50 FP32", planner_models.resnet50_fused, False, 128,
     "16GiB", "nvlink2", "horovod", {1: 412, 8: 3170}, NVIDIA),
    ("DGX-1, 8 V100 16G", "ResNet-50 AMP", planner_models.resnet50_fused, True, 256,
     "16GiB", "nvlink2", "horovod", {1: 1270, 8: 9510}, NVIDIA),
    ("DGX-2, 16 V100 32G", "ResNet-50 FP32", planner_models.resnet50_fused, False, 128,
     "32GiB", "nvlink2", "horovod", {1: 432, 16: 6500}, NVIDIA),
    ("DGX-2, 16 V100 32G", "ResNet-50 AMP", planner_models.resnet50_fused, True, 256,
     "32GiB", "nvlink2", "horovod", {1: 1300, 16: 17250}, NVIDIA),
    ("DGX A100, 8 A100 40G", "ResNet-50 TF32", planner_models.resnet50_fused, False, 256,
     "40GiB", "nvlink3", "horovod", {1: 909, 8: 7000}, NVIDIA),
    ("DGX A100, 8 A100 40G", "ResNet-50 AMP", planner_models.resnet50_fused, True, 256,
     "40GiB", "nvlink3", "horovod", {1: 2375, 8: 17400}, NVIDIA),
]


def predict(build, mixed, batch, memory, link, schedule, published):
    """The plan for the most GPUs of a row; its scaling rows hold every power of two."""
    keras.mixed_precision.set_global_policy("mixed_float16" if mixed else "float32")
    try:
        model = build()
        most = max(published)
        return mgpu_tf.plan(model, devices=most, device_memory=memory,
                            global_batch_size=batch * most, optimizer="sgd",
                            interconnect=link, schedule=schedule,
                            device_throughput=published[1])
    finally:
        keras.mixed_precision.set_global_policy("float32")


def main():
    print("| system | model | batch/GPU | fits (estimate) | GPUs | interconnect | schedule "
          "| published efficiency | predicted | difference | without straggler |")
    print("|---|---|---:|---|---:|---|---|---:|---:|---:|---:|")
    for system, name, build, mixed, batch, memory, link, schedule, published, _ in SYSTEMS:
        plan = predict(build, mixed, batch, memory, link, schedule, published)
        data = next(o for o in plan.options if o.name == "data")
        fits = f"{'yes' if data.fits else 'no'} ({mgpu_tf.planner.format_size(data.peak)})"
        rows = {p.devices: p for p in plan.scaling}
        for count in sorted(published)[1:]:
            p = rows[count]
            measured = published[count] / (count * published[1])
            bare = p.compute / (p.step - p.straggler)
            print(f"| {system} | {name} | {batch} | {fits} | {count} | {link} | {schedule} "
                  f"| {measured:.1%} | {p.efficiency:.1%} "
                  f"| {100 * (p.efficiency - measured):+.1f} | {bare:.1%} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
