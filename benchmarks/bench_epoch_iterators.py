"""What an iterator per epoch costs a short `fit` under mirrored.

    python benchmarks/bench_epoch_iterators.py [ROUNDS]

Keras' `fit` on a data set of known length makes an iterator at each epoch's start and a
spare one at its end, which the next epoch uses only when `steps_per_epoch` is given; a
`fit` on `shard_dataset` data trains from one stream of epochs (`mgpu_tf.data.stream`).
One process, 2 simulated devices, a small MLP on a `shard_dataset` of 16 steps an epoch;
each round times a 5-epoch `fit` with and without `steps_per_epoch`, alternating, after a
warm-up fit has traced the step. Prints each fit's wall and CPU seconds, then the medians.
Run it from a checkout of another commit to compare the two.
"""

import statistics
import sys
import time

EPOCHS, STEPS = 5, 16


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    import keras
    import numpy as np
    import tensorflow as tf

    strategy = mgpu_tf.make_strategy("mirrored")
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    examples = tf.data.Dataset.from_tensor_slices(
        (np.ones((32 * STEPS, 16), "float32"), np.ones((32 * STEPS, 1), "float32")))
    data = mgpu_tf.shard_dataset(examples, strategy, 32)
    model.fit(data, epochs=2, verbose=0)
    settings = {"as Keras runs it": {}, f"steps_per_epoch={STEPS}": {"steps_per_epoch": STEPS}}
    cpu = {name: [] for name in settings}
    wall = {name: [] for name in settings}
    for round_ in range(rounds):
        for name, options in settings.items():
            start, started = time.process_time(), time.perf_counter()
            model.fit(data, epochs=EPOCHS, verbose=0, **options)
            cpu[name].append(time.process_time() - start)
            wall[name].append(time.perf_counter() - started)
            print(f"round {round_ + 1}: {name:<20} {wall[name][-1]:5.2f} s wall "
                  f"{cpu[name][-1]:5.2f} s CPU", flush=True)
    print(f"\nmedians of {rounds} rounds, a {EPOCHS}-epoch fit of {STEPS} steps an epoch")
    for name in settings:
        print(f"{name:<20} {statistics.median(wall[name]):5.2f} s wall "
              f"{statistics.median(cpu[name]):5.2f} s CPU")


if __name__ == "__main__":
    main()
