"""`plan`: which parallelism to use, from memory per device and a predicted step time.

Design: docs/design.md#the-planner
"""

import dataclasses
import math
import numbers

from mgpu_tf.base import devices as devices_lib
from mgpu_tf.model_parallel import batchnorm
from mgpu_tf.model_parallel import recompute as recompute_lib
from mgpu_tf.planner import cost_model
from mgpu_tf.planner import epoch as epoch_lib
from mgpu_tf.planner import interconnect as interconnect_lib
from mgpu_tf.planner import layouts
from mgpu_tf.planner import memory as memory_lib
from mgpu_tf.planner import speed as speed_lib
from mgpu_tf.planner import step_model
from mgpu_tf.planner.result import Option, Plan

__all__ = ["Option", "Plan", "PlanError", "plan", "auto_strategy", "local_device_memory"]

# The global batch `make_strategy("auto", model=...)` plans activations for by default.
AUTO_GLOBAL_BATCH = 32


class PlanError(ValueError):
    """Raised when the model does not fit the devices however it is split."""


def local_device_memory(device_count):
    """Bytes of one device here: a GPU's memory, or this machine's RAM shared by its CPU devices."""
    import os
    import subprocess

    if devices_lib.physical_devices("GPU"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10, check=True).stdout
            return int(min(float(v) for v in out.split()) * 2**20)
        except (OSError, ValueError, subprocess.SubprocessError):
            raise ValueError(
                "The planner could not read the GPUs' memory (nvidia-smi failed). Received: "
                "device_memory=None. Pass device_memory='80GiB' (or --device_memory).") from None
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return ram // max(1, device_count)


def _check_count(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer. Received: {name}={value!r}")
    if value < 1:
        raise ValueError(f"`{name}` must be at least 1. Received: {name}={value!r}")
    return int(value)


def _device_count(devices):
    if devices is None:
        return len(devices_lib.local_devices())
    if isinstance(devices, (list, tuple)) and devices:
        return len(devices)
    if isinstance(devices, numbers.Integral) and not isinstance(devices, bool):
        return _check_count("devices", devices)
    raise TypeError("`devices` must be a number of devices (real, simulated or declared) or a "
                    f"list of device names. Received: devices={devices!r}")


def _reason(best, options, workers, compute=None):
    size = memory_lib.format_size
    whole = options[0].footprints[0].total
    if best.name == "one_device":
        return (f"one_device: the model trains in {size(whole)} of the device's "
                f"{size(best.device_memory)}")
    if best.name == "data":
        scaling = "" if best.efficiency is None else (
            f", predicted {best.step_seconds * 1e3:.1f} ms per step at "
            f"{best.efficiency:.0%} scaling efficiency"
            + (" with the compute timed on this machine" if compute.measured_here else ""))
        return (f"data parallel ({best.strategy} over {best.pipelines} devices): the whole "
                f"model fits one device ({size(whole)} of {size(best.device_memory)}), so "
                f"large data wants data parallelism{scaling}")
    if best.name == "sharded":
        scaling = "" if best.efficiency is None else (
            f", predicted {best.step_seconds * 1e3:.1f} ms per step at "
            f"{best.efficiency:.0%} scaling efficiency")
        return (f"data parallel with the optimizer state sharded ({best.strategy} over "
                f"{best.pipelines} devices, shard_optimizer_state=True): replicated, the "
                f"training state needs {size(options[0].peak)} per device, more than its "
                f"{size(best.device_memory)}; with each replica keeping the optimizer slots "
                f"of 1/{best.pipelines} of the weights it needs {size(best.peak)}, and data "
                f"parallelism is simpler and faster than cutting the model{scaling}")
    what = ("hybrid (a pipeline of {s} stages in each of {w} workers, data parallel across "
            "them): very large models want both" if best.name == "hybrid" else
            "model parallel ({s} stages): a model too big for one device wants model "
            "parallelism").format(s=best.stages, w=workers)
    recompute = best.options.get("recompute")
    extra = "" if not recompute else (
        f", recomputing activations (recompute={recompute!r} over "
        f"{best.options['microbatches']} micro-batches: each stage keeps its input and one "
        "micro-batch's activations)")
    if best.options.get("deferred_batch_norm"):
        extra += ("; its BatchNormalization normalises each micro-batch with its own "
                  "statistics and updates the moving ones once per step "
                  "(deferred_batch_norm=True)")
    return (f"{what}; {layouts.describe(options[0], workers)}, needs {size(whole)} per device, "
            f"which has {size(best.device_memory)}; split, the fullest stage needs "
            f"{size(best.peak)}{extra}")


def _does_not_fit(memory, options, count, workers, batch, slots, device_memory, pipeline):
    size, describe = memory_lib.format_size, layouts.describe
    best = min(options, key=lambda o: o.peak)
    machine = "worker" if workers > 1 else "machine"
    fitting = layouts.fewest_devices(memory, count, workers, batch, slots, device_memory, pipeline)
    if fitting is not None:
        devices = fitting.stages if fitting.name != "data" else fitting.pipelines // workers
        hint = (f"Use {devices} devices per {machine}: {describe(fitting, workers)}, needs "
                f"{size(fitting.peak)}; or devices with more memory")
    else:
        name = "model" if workers == 1 else "hybrid"
        share = math.ceil(batch / workers)
        deepest = layouts.pipeline_layout(name, name, {}, memory, workers, memory.max_stages,
                                          share, slots, device_memory, *pipeline)
        thinnest = layouts.data_layout(memory, share, workers, batch, slots, device_memory)
        hint = (f"No number of these devices holds it: even {describe(deepest, workers)}, needs "
                f"{size(deepest.peak)}, and {describe(thinnest, workers)}, "
                f"{size(thinnest.peak)}. Use devices with more memory")
    return PlanError(
        f"The model does not fit the devices even fully split: the layout needing the least, "
        f"{describe(best, workers)}, needs {size(best.peak)} on its fullest device, which has "
        f"{size(device_memory)}: {size(best.shortfall)} short. Received: devices={count}, "
        f"workers={workers}, device_memory={size(device_memory)}, global_batch_size={batch}. "
        f"{hint}, a smaller global_batch_size, or an optimizer with fewer slots (SGD keeps "
        "none).")


def _check_divisible(best, batch):
    """Raises `ValueError` when `shard_dataset` would refuse the recommended layout's batch.

    Each of its `pipelines` replicas takes an equal share of the global batch.
    """
    replicas = best.pipelines
    if batch % replicas == 0:
        return
    lower = batch // replicas * replicas
    use = f"{lower} or {lower + replicas}" if lower else f"{replicas} or a multiple"
    layout = (f"data parallel over {replicas} devices" if best.name in ("data", "sharded")
              else f"hybrid, one pipeline in each of {replicas} workers")
    raise ValueError(
        f"`global_batch_size` must be divisible by the number of replicas ({replicas}) of the "
        f"layout the plan recommends, {layout}, as `shard_dataset` requires. Received: "
        f"global_batch_size={batch}. Use {use}.")


def plan(model, *, devices=None, device_memory=None, global_batch_size, optimizer="adam",
         workers=1, interconnect="pcie", bandwidth=None, latency=None, measure_compute=True,
         compute_seconds=None, device_throughput=None, schedule="keras",
         jitter=step_model.DEFAULT_JITTER, recompute=None, microbatches=None,
         epoch_examples=None, epoch_overhead=0.0, sequence_length=None):
    """Plans how to train `model`: memory per device for each option, a ranked recommendation.

    Example:

    ```python
    import keras, mgpu_tf
    model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(4096),
                              keras.layers.Dense(10)])
    result = mgpu_tf.plan(model, devices=8, device_memory="16GiB", global_batch_size=256,
                          interconnect="nvlink")
    print(result)  # the recommendation, its reason, and the options ranked
    ```

    Args:
        model: a built Sequential or functional Keras model: several inputs and outputs,
            and nested models (a KerasHub task's backbone), are cut as `ModelParallel`
            cuts them.
        devices: devices per worker: a count or device names. Defaults to this machine's
            devices (GPUs, else the CPU's logical devices).
        device_memory: bytes of each device, or a size such as `"80GiB"`. Defaults to the
            GPUs' memory, or this machine's RAM divided among its CPU devices.
        global_batch_size: examples per step over all devices.
        optimizer: a Keras optimizer or its name, for its slots. Defaults to `"adam"`.
        workers: machines (workers), each with `devices` devices. Defaults to `1`.
        interconnect: a name from `mgpu_tf.planner.interconnect.INTERCONNECTS`, such as
            `"pcie4"`, `"nvlink3"`, `"infiniband-hdr"`, `"ethernet-25g"` or `"loopback"`.
            Defaults to `"pcie"` (PCIe 3.0 x16).
        bandwidth: bytes per second one way, overriding the interconnect's.
        latency: seconds per ring hop, overriding the interconnect's.
        measure_compute: time a step of one replica's batch on this machine (on a copy
            of the model) when neither `compute_seconds` nor `device_throughput` is
            given. Defaults to `True`.
        compute_seconds: seconds of one replica's step on the devices planned for.
        device_throughput: examples per second one device planned for trains the
            model at (its single-device figure); the step is the replica's batch over it.
        schedule: how the all-reduce runs, a name from
            `mgpu_tf.planner.step_model.SCHEDULES`. Defaults to `"keras"` (Keras `fit`
            under tf.distribute: one all-reduce after the backward pass).
        jitter: relative step-to-step variation of a device's compute, for the wait for
            the slowest device. Defaults to `0.02`.
        recompute: the pipeline's recompute mode (`"never"`, `"except_last"`,
            `"always"`) its activations are counted under. Defaults to `None`: `"never"`,
            or `"except_last"` when only recomputing makes them fit.
        microbatches: the pipeline's micro-batches. Defaults to `None`: 1, or when
            recomputing, the fewest of 2, 4, 8, ... that fit.
        epoch_examples: examples in an epoch: the plan then predicts an epoch's time over
            1, 2, 4, ... devices too (`mgpu_tf.planner.epoch`).
        epoch_overhead: seconds an epoch spends outside its training steps (evaluation,
            checkpoints, the input pipeline's start), as measured on one device; taken
            as the same on any number of devices. Defaults to `0`.
        sequence_length: the length of the dimensions the model's inputs leave open
            besides the batch (a KerasHub text model's sequence). Defaults to `None`: the
            model's preprocessor's `sequence_length` when it has one.

    Returns:
        A `Plan`; `print` it for the recommendation and the table.

    Raises:
        TypeError, ValueError: for arguments of the wrong type or value, such as a
            `device_memory` that is not a size.
        ValueError: for an unknown interconnect, and for a `global_batch_size` that the
            recommended layout's replicas cannot share equally (`shard_dataset`'s rule).
        PlanError: when the model does not fit even split over all the devices; the
            message says by how much.
    """
    count = _device_count(devices)
    workers = _check_count("workers", workers)
    batch = _check_count("global_batch_size", global_batch_size)
    slots = memory_lib.optimizer_slots(optimizer)
    jitter = step_model.check_jitter(jitter)
    if device_memory is not None:
        device_memory = memory_lib.parse_size(device_memory)
    speed_lib.check_compute(compute_seconds, device_throughput)
    epoch_lib.check_epoch(epoch_examples, epoch_overhead)
    schedule = step_model.resolve_schedule(schedule)
    link = interconnect_lib.resolve_interconnect(interconnect, bandwidth=bandwidth,
                                                 latency=latency)
    if device_memory is None:
        device_memory = local_device_memory(len(devices_lib.local_devices()))
    if recompute is not None:
        recompute = recompute_lib.check_recompute(recompute)
    if microbatches is not None:
        microbatches = _check_count("microbatches", microbatches)
    if sequence_length is not None:
        sequence_length = _check_count("sequence_length", sequence_length)
    memory = memory_lib.measure_model(model, sequence_length=sequence_length)
    options = layouts.candidates(memory, count, workers, batch, slots, device_memory, recompute,
                                 microbatches, bool(batchnorm.batch_norm_layers(model)),
                                 memory_lib.shardable(optimizer))
    if not any(o.fits for o in options):
        raise _does_not_fit(memory, options, count, workers, batch, slots, device_memory,
                            (recompute, microbatches, bool(batchnorm.batch_norm_layers(model))))
    gradients = cost_model.gradient_bytes(model)
    # The step is predicted for data parallelism, or, when only its sharded form fits, for that.
    fitting = [i for i, o in enumerate(options) if o.name in ("one_device", "data", "sharded")
               and o.fits][:1]
    compute, scaling, epochs = None, (), ()
    if fitting:
        data = options[fitting[0]]
        compute = speed_lib.resolve_compute(
            model, data.batch, optimizer, compute_seconds=compute_seconds,
            device_throughput=device_throughput, measure=measure_compute,
            sequence_length=sequence_length)
    if compute is not None:
        total = count * workers
        # Sharded across workers, an all-gather follows the all-reduce: half its bytes again
        # (on one machine a reduce-scatter and an all-gather move what an all-reduce does).
        moved = gradients * 3 // 2 if data.name == "sharded" and workers > 1 else gradients
        scaling = speed_lib.scaling(compute.seconds, moved, total, link, data.batch,
                                    schedule=schedule, jitter=jitter)
        options[fitting[0]] = dataclasses.replace(data, step_seconds=scaling[-1].step,
                                                  compute_seconds=compute.seconds,
                                                  efficiency=scaling[-1].efficiency)
        if epoch_examples is not None:
            epochs = epoch_lib.predict_epochs(scaling, epoch_examples, epoch_overhead)
    ranked = layouts.rank(options)
    _check_divisible(ranked[0], batch)
    return Plan(tuple(ranked), _reason(ranked[0], options, workers, compute), count, workers,
                device_memory, link, gradients, compute, scaling, schedule, epochs)


def auto_strategy(model, kind, reason, options, device_memory=None, *,
                  global_batch_size=None):
    """What `make_strategy("auto", model=...)` builds: `(kind, reason, options)`.

    Keeps `auto_choice`'s data-parallel choice when the model fits one device.

    Raises:
        PlanError: when the model does not fit even fully split.
    """
    from mgpu_tf.cluster import detect as cluster_lib
    from mgpu_tf.cluster import tf_config

    workers = 1
    if kind == "multi_worker":
        config = options.get("cluster") or cluster_lib.detect_cluster()
        if isinstance(config, (str, dict)):
            config = tf_config.parse_tf_config(config, source="cluster")
        workers = config.num_workers if config is not None else 1
    devices = options.get("devices")
    optimizer = getattr(model, "optimizer", None) or "adam"
    if global_batch_size is None:
        # The default batch, rounded up to one every replica can share equally.
        replicas = _device_count(devices) * workers
        global_batch_size = math.ceil(AUTO_GLOBAL_BATCH / replicas) * replicas
    result = plan(model, devices=devices, device_memory=device_memory, workers=workers,
                  global_batch_size=global_batch_size,
                  optimizer=optimizer,
                  measure_compute=False)
    best = result.recommended
    if best.name == "sharded":
        return best.strategy, result.reason, dict(options, **best.options)
    if best.name in ("data", "one_device"):
        return kind, (f"{reason}; the model fits one device ("
                      f"{memory_lib.format_size(best.peak)} of "
                      f"{memory_lib.format_size(best.device_memory)})"), options
    local = devices_lib.local_devices() if not isinstance(devices, (list, tuple)) else devices
    pipeline = {k: v for k, v in best.options.items()
                if k in ("microbatches", "recompute", "deferred_batch_norm")}
    if best.name == "model":
        return "model_parallel", result.reason, dict(pipeline,
                                                     devices=list(local)[:best.stages])
    kept = {k: v for k, v in options.items()
            if k in ("cluster", "worker_hosts", "task_index", "all_reduce", "bytes_per_pack")}
    return "hybrid", result.reason, dict(kept, devices_per_worker=best.stages, **pipeline)
