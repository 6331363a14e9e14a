"""A KerasHub GPT-2 causal LM under mirrored and 2 workers, default options, against one process.

The model is `keras_hub.models.GPT2CausalLM` built from its constructor (8 blocks, hidden
256, sequence 128 by default; nothing downloaded), with its preprocessor: a character-level
GPT-2 tokenizer, so `fit` takes raw strings, preprocessed in each replica's pipeline. Each
setting trains the same examples from `shard_dataset` in a fresh process, the settings in
turn round by round, so that all see the same machine load:

- one: one process, one device (TensorFlow's default strategy);
- mirrored: one process, 2 simulated CPU devices;
- workers: 2 local workers of `multi_worker` (transport `auto`).

Prints per round each setting's whole run (the fit of every epoch, tracing included) and
its step time (the mean step of the last epoch), their medians, and the ratios of each
setting to one process by both figures.

    python benchmarks/bench_kerashub.py --rounds 2
"""

import argparse
import json
import statistics
import time

from mgpu_tf.planner.bench import runner

SETTINGS = ("one", "mirrored", "workers")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _sentences(count, length, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list(_LETTERS), size=rng.integers(2, 9))) for _ in range(200)]
    return [" ".join(rng.choice(words, size=length // 4)) for _ in range(count)]


def _model(blocks, hidden, sequence):
    import keras
    import keras_hub

    vocabulary = {"<|endoftext|>": 0, "Ġ": 1}
    for letter in _LETTERS:
        vocabulary[letter] = len(vocabulary)
        vocabulary["Ġ" + letter] = len(vocabulary)
    tokenizer = keras_hub.models.GPT2Tokenizer(
        vocabulary=vocabulary, merges=[f"Ġ {letter}" for letter in _LETTERS])
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=sequence)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(vocabulary), num_layers=blocks, num_heads=hidden // 64,
        hidden_dim=hidden, intermediate_dim=4 * hidden, max_sequence_length=sequence)
    model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[])
    return model


class _StepTimer:
    """Keras callback timing each epoch's steps (made lazily: keras is imported in the run)."""

    def __new__(cls):
        import keras

        class Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.epochs = []

            def on_epoch_begin(self, epoch, logs=None):
                self.steps, self.last = [], time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                now = time.perf_counter()
                self.steps.append(now - self.last)
                self.last = now

            def on_epoch_end(self, epoch, logs=None):
                self.epochs.append(self.steps)

        return Timer()


def run_one(payload):
    """One setting's fit in this fresh process: `{"whole": s, "step": s}`."""
    import keras_hub  # noqa: F401  (before the strategy, as a user's program imports it)

    import mgpu_tf

    setting = payload["setting"]
    if setting == "mirrored":
        mgpu_tf.simulate_devices(2)
    import tensorflow as tf

    strategy = mgpu_tf.make_strategy({"one": "default", "mirrored": "mirrored",
                                      "workers": "multi_worker"}[setting])
    with strategy.scope():
        model = _model(payload["blocks"], payload["hidden"], payload["sequence"])
    examples = tf.data.Dataset.from_tensor_slices(
        _sentences(payload["batch"] * payload["steps"], payload["sequence"]))
    data = mgpu_tf.shard_dataset(examples, strategy, payload["batch"])
    timer = _StepTimer()
    start = time.perf_counter()
    model.fit(data, epochs=payload["epochs"], verbose=0, callbacks=[timer])
    whole = time.perf_counter() - start
    return {"whole": whole, "step": statistics.mean(timer.epochs[-1]),
            "params": model.count_params()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="global batch (default 8)")
    parser.add_argument("--steps", type=int, default=4, help="steps per epoch (default 4)")
    parser.add_argument("--epochs", type=int, default=2,
                        help="epochs; the last one's steps are timed (default 2)")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    args = parser.parse_args()
    settings = args.settings.split(",")
    payload = {k: getattr(args, k) for k in ("blocks", "hidden", "sequence", "batch", "steps",
                                              "epochs")}
    figures = {s: [] for s in settings}
    for round_ in range(args.rounds):
        order = settings if round_ % 2 == 0 else settings[::-1]
        for setting in order:
            result = runner.run_in_fresh_process(
                run_one, dict(payload, setting=setting),
                workers=2 if setting == "workers" else 1, timeout=1800, label=setting)
            figures[setting].append(result)
            print(f"round {round_ + 1} {setting:9s} whole {result['whole']:7.1f} s   "
                  f"step {result['step']:6.3f} s", flush=True)
    print(f"\nmodel: GPT2CausalLM {args.blocks} blocks, hidden {args.hidden}, sequence "
          f"{args.sequence}, {figures[settings[0]][0]['params']:,} parameters; global batch "
          f"{args.batch}, {args.steps} steps x {args.epochs} epochs")
    print(f"{'setting':9s} {'whole s':>8s} {'step s':>8s} {'whole/one':>10s} {'step/one':>9s}")
    medians = {s: (statistics.median(r["whole"] for r in figures[s]),
                   statistics.median(r["step"] for r in figures[s])) for s in settings}
    base = medians.get("one")
    for setting in settings:
        whole, step = medians[setting]
        ratios = (f"{whole / base[0]:10.2f} {step / base[1]:9.2f}" if base else "")
        print(f"{setting:9s} {whole:8.1f} {step:8.3f} {ratios}")
    print("figures: " + json.dumps(figures))


if __name__ == "__main__":
    main()
