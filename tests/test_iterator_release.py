"""The iterators a sharded data set hands to `fit` are freed off the training thread:
TensorFlow's destructor can wait seconds for the iterator's autotuning thread, which
stalled a worker at epoch starts and as `fit` returned, while its peers waited for it."""

import textwrap

from support import workers

_SCRIPT = """
import threading, time, weakref
import numpy as np, tensorflow as tf, keras
import mgpu_tf

strategy = mgpu_tf.make_strategy("default")
x = np.random.RandomState(0).randn(64, 4).astype("float32")
data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, x[:, :1])), strategy, 16)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
stream = type(data).epoch_stream
made, freed_in, hold = [], [], stream.release.hold

def tracked(iterator):  # notes the thread each iterator handed out is freed in
    made.append(1)
    weakref.finalize(iterator, lambda: freed_in.append(threading.current_thread().name))
    return hold(iterator)

stream.release.hold = tracked
model.fit(data, epochs=4, verbose=0)  # one stream of epochs
model.fit(data, epochs=2, verbose=0)  # another
assert sum(1 for _ in data) == 4  # and a loop's own iterator
deadline = time.monotonic() + 60
while len(freed_in) < len(made) and time.monotonic() < deadline:
    time.sleep(0.1)
print("made", len(made), "freed in", sorted(set(freed_in)), len(freed_in))
model.fit(data, epochs=2, verbose=0)  # and the process exits with frees maybe under way
"""


def test_iterators_handed_to_fit_are_freed_off_the_training_thread(tmp_path):
    script = tmp_path / "release.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    result = workers.run_python(script)
    # An exit while a free is under way must wait for it: a thread stopped inside
    # TensorFlow's destructor aborted the process ("terminate called ...").
    assert result.returncode == 0, result.stderr[-3000:]
    assert "terminate called" not in result.stderr, result.stderr[-3000:]
    made = int(result.stdout.split("made ")[1].split()[0])
    assert made >= 3, result.stdout
    assert f"freed in ['mgpu_tf-iterator-free'] {made}" in result.stdout, result.stdout
