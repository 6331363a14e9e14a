"""A peer that stays alive and stops joining: worker 1 sleeps inside a call of steps.

`fit_until_aborted(model, data, index, call, **fit)` fits with a callback under which
worker 1 sleeps 10 minutes when its `call`-th call of training steps begins. The worker
whose step is given up prints `aborted after S s: ERROR` (S from that call's start, the
error on one line) and exits 3; a fit that ends prints `trained on`.
"""

import os
import time

import keras


class _SilentPeer(keras.callbacks.Callback):
    def __init__(self, index, call):
        super().__init__()
        self.index, self.call = index, call
        self.calls = 0
        self.started = None

    def on_train_batch_begin(self, batch, logs=None):
        self.calls += 1
        if self.calls == self.call:
            self.started = time.monotonic()
            if self.index == 1:
                time.sleep(600)


def fit_until_aborted(model, data, index, call, **fit):
    """`model.fit(data, **fit)` on worker `index`, whose peer 1 goes silent at `call`."""
    peer = _SilentPeer(index, call)
    try:
        model.fit(data, verbose=0, callbacks=[peer], **fit)
    except Exception as error:  # noqa: BLE001 - the abort is the expected end
        print(f"aborted after {time.monotonic() - peer.started:.1f} s: "
              f"{type(error).__name__}: {' '.join(str(error).split())}", flush=True)
        os._exit(3)  # the shutdown barrier would wait for the sleeping peer
    print("trained on", flush=True)
