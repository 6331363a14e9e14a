"""The layouts the planner weighs: one device, data parallel, a pipeline, hybrid, each an `Option`.

Design: docs/design.md#the-planner
"""

import math

from mgpu_tf.planner import memory as memory_lib
from mgpu_tf.planner.result import Option

__all__ = ["candidates", "data_layout", "describe", "fewest_devices", "pipeline_layout",
           "rank"]


def pipeline_layout(name, strategy, options, memory, pipelines, stages, batch, slots,
                    device_memory, recompute, microbatches, batch_norm):
    """A pipeline option; recomputing when only that fits, or when none fits, needs least."""
    def option(mode, m):
        extra = {} if m == 1 else {"microbatches": m}
        if str(mode) != "never":
            extra["recompute"] = str(mode)
        if batch_norm and m > 1:
            extra["deferred_batch_norm"] = True
        return Option(name, strategy, dict(options, **extra), pipelines, stages, batch,
                      tuple(memory.footprints(batch, stages, slots, mode, m)), device_memory)

    if recompute is not None:
        return option(recompute, microbatches or 1)
    kept = option("never", microbatches or 1)
    if kept.fits:
        return kept
    candidates = [microbatches] if microbatches else [
        2 ** i for i in range(1, batch.bit_length()) if 2 ** i <= batch]
    tried = [kept]
    for m in candidates:
        if m > 1:
            tried.append(option("except_last", m))
            if tried[-1].fits:
                return tried[-1]
    return min(tried, key=lambda o: o.peak)  # what fails, by the least it needs


def candidates(memory, count, workers, batch, slots, device_memory, recompute=None,
             microbatches=None, batch_norm=False, shardable=False):
    """The options to weigh; with `shardable`, sharded data parallelism where the plain one
    does not fit."""
    total = count * workers
    stages = min(count, memory.max_stages)
    out = []
    if total == 1:
        out.append(Option("one_device", "one_device", {}, 1, 1, batch,
                          tuple(memory.footprints(batch, 1, slots)), device_memory))
    else:
        share = math.ceil(batch / total)
        strategy = "mirrored" if workers == 1 else "multi_worker"
        out.append(Option("data", strategy, {"devices": count} if workers == 1 else {},
                          total, 1, share, tuple(memory.footprints(share, 1, slots)),
                          device_memory))
        if shardable and slots > 0 and not out[-1].fits:
            out.append(Option(
                "sharded", strategy, dict(out[-1].options, shard_optimizer_state=True), total,
                1, share, tuple(memory_lib.sharded_footprint(f, total, slots)
                                for f in out[-1].footprints), device_memory))
    pipeline = (recompute, microbatches, batch_norm)
    if stages > 1 and workers > 1:
        share = math.ceil(batch / workers)
        out.append(pipeline_layout("hybrid", "hybrid", {"devices_per_worker": stages}, memory,
                                   workers, stages, share, slots, device_memory, *pipeline))
    elif stages > 1:
        out.append(pipeline_layout("model", "model_parallel", {"devices": stages}, memory, 1,
                                   stages, batch, slots, device_memory, *pipeline))
    return out


def rank(options):
    preference = {"one_device": 0, "data": 0, "sharded": 1, "hybrid": 2, "model": 3}
    return sorted(options, key=lambda o: (not o.fits, o.shortfall, preference[o.name]))


def describe(option, workers):
    """The layout of `option` in words, e.g. "data parallel over 4 devices, 16 examples each"."""
    if option.name == "one_device":
        return f"one device with all {_examples(option.batch)}"
    if option.name in ("data", "sharded"):
        where = "" if workers == 1 else f" of {workers} workers"
        sharded = ", the optimizer slots sharded" if option.name == "sharded" else ""
        return (f"data parallel over {option.pipelines} devices{where}, "
                f"{_examples(option.batch)} each{sharded}")
    where = "" if option.name == "model" else f" in each of {workers} workers"
    text = (f"a pipeline of {option.stages} stages, one per device{where}, each stage "
            f"processing all {_examples(option.batch)}")
    if option.options.get("microbatches", 1) > 1 and option.options.get("recompute"):
        text += f", recomputing over {option.options['microbatches']} micro-batches"
    elif option.options.get("recompute"):
        text += ", recomputing"
    return text


def _examples(count):
    return f"{count} example{'s' * (count != 1)}"


def data_layout(memory, devices, workers, batch, slots, device_memory):
    """Data parallelism over `devices` per worker."""
    share = math.ceil(batch / (devices * workers))
    return Option("data", "mirrored" if workers == 1 else "multi_worker", {},
                  devices * workers, 1, share, tuple(memory.footprints(share, 1, slots)),
                  device_memory)


def fewest_devices(memory, count, workers, batch, slots, device_memory, pipeline):
    """The layout that fits on the fewest devices per worker beyond `count`, or `None`."""
    name = "model" if workers == 1 else "hybrid"
    share = math.ceil(batch / workers)
    found, high = None, share  # beyond one example per device, data parallelism idles
    for stages in range(count + 1, memory.max_stages + 1):
        option = pipeline_layout(name, name, {}, memory, workers, stages, share, slots,
                                 device_memory, *pipeline)
        if option.fits:
            found, high = option, min(high, stages - 1)
            break
    low = count + 1
    if low <= high and data_layout(memory, high, workers, batch, slots, device_memory).fits:
        while low < high:  # the memory a device needs falls as devices are added
            middle = (low + high) // 2
            fits = data_layout(memory, middle, workers, batch, slots, device_memory).fits
            low, high = (low, middle) if fits else (middle + 1, high)
        found = data_layout(memory, low, workers, batch, slots, device_memory)
    return found
