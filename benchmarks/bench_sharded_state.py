"""shard_optimizer_state: optimizer-state bytes per device, step time, and the model that fits.

Part 1, for N = 2 and 4 simulated devices: an MLP trained with Adam by Keras `fit` under
`mirrored`, unsharded and sharded in alternating fresh processes. Prints the optimizer state
each device holds, read from the variables' devices and shapes (the slots, and with sharding
the slice of weights each replica updates), the timed epoch's step time and the whole fit's
seconds, the ratios of sharded to unsharded, and the median of each round's own ratio.

Part 2: the widest MLP of a fixed depth that `mgpu_tf.plan` fits on 8 devices of a given
memory (default 256 MiB: planning means building the model, and one for 16 GiB devices has
billions of weights), with data parallelism replicated and sharded (Adam, global batch 256).

    python benchmarks/bench_sharded_state.py --rounds 2
"""

import argparse
import statistics
import time

import numpy as np

from mgpu_tf.planner.bench import runner

FEATURES, CLASSES = 784, 10


def _model(width, depth, features=FEATURES):
    import keras

    layers = [keras.Input((features,))]
    layers += [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
    return keras.Sequential(layers + [keras.layers.Dense(CLASSES)])


def compiled_model(width, depth):
    """The benchmark's MLP compiled with Adam (call under the strategy's scope)."""
    import keras

    model = _model(width, depth)
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def training_data(batch):
    """Eight random global batches, repeated, sharded by data across workers."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * 8, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=batch * 8).astype("int32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
            .repeat().with_options(options))


def _bytes_per_device(strategy, variables):
    import tensorflow as tf

    out = {}
    for variable in variables:
        for part in strategy.experimental_local_results(variable.value):
            device = tf.DeviceSpec.from_string(part.device).to_string()
            out[device] = out.get(device, 0) + part.shape.num_elements() * part.dtype.size
    return out


def run_one(payload):
    """In a fresh process: one fit, unsharded or sharded; returns its figures."""
    import keras

    import mgpu_tf
    from mgpu_tf.comm import sharded_state

    devices, sharded = payload["devices"], payload["sharded"]
    mgpu_tf.simulate_devices(devices)
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices, shard_optimizer_state=sharded)
    batch, steps = payload["batch"], payload["steps"]
    data = training_data(batch)
    with strategy.scope():
        model = compiled_model(payload["width"], payload["depth"])
    epochs = []
    timer = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: epochs.append(time.perf_counter()),
        on_epoch_end=lambda epoch, logs: epochs.append(time.perf_counter()))
    start = time.perf_counter()
    # Epoch 1 traces and warms up; epoch 2 is timed; and the whole fit.
    model.fit(data, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[timer])
    fit_seconds = time.perf_counter() - start
    optimizer = model.optimizer
    if sharded:
        slots = sharded_state.slot_variables(optimizer)
        working = [sharded_state.weights_slice(optimizer)]
    else:
        slots = [v for v in optimizer.variables
                 if v is not optimizer.iterations and v is not optimizer.learning_rate]
        working = []
    return {"slots": max(_bytes_per_device(strategy, slots).values()),
            "working": max(_bytes_per_device(strategy, working).values() or [0]),
            "step": (epochs[3] - epochs[2]) / steps, "fit": fit_seconds}


def _part_one(args):
    print(f"Part 1: MLP {args.depth}x{args.width} (Adam), global batch {args.batch}, "
          f"{args.steps} timed steps, {args.rounds} alternating rounds, mirrored on N "
          "simulated CPU devices")
    print("state/device: the optimizer's slots on the fullest device; sharded, + the slice "
          "of weights each replica updates")
    print(f"{'N':>2}{'round':>7}{'slots/device, MiB':>20}{'ratio':>8}{'+ slice, MiB':>14}"
          f"{'ratio':>8}{'goal':>8}{'step whole':>12}{'sharded':>11}{'ratio':>7}"
          f"{'fit whole':>11}{'sharded':>10}{'ratio':>7}")
    for devices in args.devices:
        rows = []
        for round_index in range(args.rounds):
            figures = {}
            for sharded in (False, True):
                payload = {"devices": devices, "sharded": sharded, "batch": args.batch,
                           "steps": args.steps, "width": args.width, "depth": args.depth}
                figures[sharded] = runner.run_in_fresh_process(
                    run_one, payload, label=f"{'sharded' if sharded else 'whole'} on {devices}")
            whole, cut = figures[False], figures[True]
            row = (whole["slots"], cut["slots"], cut["slots"] + cut["working"], whole["step"],
                   cut["step"], whole["fit"], cut["fit"])
            rows.append(row)
            print(_row(devices, round_index, row), flush=True)
        median = tuple(statistics.median(r[i] for r in rows) for i in range(len(rows[0])))
        print(_row(devices, "median", median), flush=True)
        # Each round's own ratio first: the two runs of a round saw the same machine load.
        step = statistics.median(r[4] / r[3] for r in rows)
        fit = statistics.median(r[6] / r[5] for r in rows)
        print(f"{devices:>2}{'paired':>7}  median of the rounds' ratios: step {step:.3f}, "
              f"whole fit {fit:.3f}", flush=True)


def _row(devices, label, row):
    whole, cut, with_slice, step, step_cut, fit, fit_cut = row
    mib = 2 ** 20
    return (f"{devices:>2}{label:>7}{f'{whole / mib:.2f} -> {cut / mib:.2f}':>20}"
            f"{cut / whole:>8.4f}{with_slice / mib:>14.2f}{with_slice / whole:>8.4f}"
            f"{1 / devices + 0.02:>8.4f}{step * 1e3:>9.1f} ms{step_cut * 1e3:>8.1f} ms"
            f"{step_cut / step:>7.3f}{fit:>9.2f} s{fit_cut:>8.2f} s{fit_cut / fit:>7.3f}")


def run_plan(payload):
    """In a fresh process: does an MLP of this width fit, replicated and sharded?"""
    import mgpu_tf

    model = _model(payload["width"], payload["depth"], features=payload["width"])
    params = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    try:
        result = mgpu_tf.plan(model, devices=8, device_memory=payload["memory"],
                              global_batch_size=256, optimizer="adam", measure_compute=False)
    except mgpu_tf.planner.PlanError:  # not even cut into stages
        return {"data": False, "sharded": False, "params": params}
    fits = {o.name: o.fits for o in result.options}
    return {"data": fits.get("data", False),
            "sharded": fits.get("sharded", False) or fits.get("data", False), "params": params}


def _widest(args, name):
    """The widest MLP (in steps of 64) that fits under option `name`, and its parameters."""
    low, high, best = 64, args.max_width, None
    while low <= high:
        middle = (low + high) // 128 * 64 or 64
        result = runner.run_in_fresh_process(
            run_plan, {"width": middle, "depth": args.plan_depth, "memory": args.plan_memory},
            label=f"plan width {middle}")
        if result[name]:
            best, low = (middle, result["params"]), middle + 64
        else:
            high = middle - 64
    return best


def _part_two(args):
    print(f"\nPart 2: the widest MLP of {args.plan_depth} square Dense layers that mgpu_tf.plan "
          f"fits on 8 devices of {args.plan_memory} (Adam, global batch 256)")
    found = {name: _widest(args, name) for name in ("data", "sharded")}
    for name, (width, params) in found.items():
        label = "replicated" if name == "data" else "sharded"
        print(f"  data parallel, {label:<10}: width {width:>6}, {params / 1e6:8.2f} M parameters")
    print(f"  sharded / replicated parameters: {found['sharded'][1] / found['data'][1]:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--devices", type=lambda s: [int(n) for n in s.split(",")],
                        default=[2, 4])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    # 16GiB would mean building billion-parameter models to plan them: more than this RAM.
    parser.add_argument("--plan_memory", default="256MiB")
    parser.add_argument("--plan_depth", type=int, default=4)
    parser.add_argument("--max_width", type=int, default=8192)
    parser.add_argument("--parts", default="1,2", help="which parts to run (default 1,2)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "1" in parts:
        _part_one(args)
    if "2" in parts:
        _part_two(args)


if __name__ == "__main__":
    main()
