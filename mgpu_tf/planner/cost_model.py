"""The ring all-reduce cost model: what a data-parallel step should cost.

Design: docs/design.md#the-all-reduce-cost-model
"""

import numbers
import socket
import threading
import time

__all__ = [
    "ring_all_reduce_bytes",
    "ring_all_reduce_seconds",
    "predict_step_seconds",
    "gradient_bytes",
    "measure_loopback_bandwidth",
]


def _positive(name, value, *, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a number. Received: {name}={value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ValueError(f"`{name}` must be {bound}. Received: {name}={value!r}")
    return float(value)


def _workers(workers):
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise ValueError(
            f"`workers` must be an integer of at least 1. Received: workers={workers!r}")
    return int(workers)


def ring_all_reduce_bytes(gradient_bytes, workers):
    """Bytes each worker sends (and receives) in one ring all-reduce: 2(N-1)/N of them."""
    workers = _workers(workers)
    size = _positive("gradient_bytes", gradient_bytes, allow_zero=True)
    return 2.0 * (workers - 1) / workers * size


def ring_all_reduce_seconds(gradient_bytes, workers, bandwidth, latency=0.0):
    """Seconds one ring all-reduce of `gradient_bytes` over `workers` takes; 0 for one worker.

    `bandwidth` is bytes per second each link carries one way; `latency` is fixed seconds
    per all-reduce.
    """
    if _workers(workers) == 1:
        return 0.0
    return (_positive("latency", latency, allow_zero=True)
            + ring_all_reduce_bytes(gradient_bytes, workers) / _positive("bandwidth", bandwidth))


def predict_step_seconds(compute_seconds, gradient_bytes, workers, bandwidth, latency=0.0,
                         *, steps_per_sync=1):
    """Predicted seconds of one data-parallel step without overlap.

    `compute_seconds` is one worker's forward and backward pass on its share; the all-reduce
    of `gradient_bytes` (as for `ring_all_reduce_seconds`) runs every `steps_per_sync` steps.
    """
    if isinstance(steps_per_sync, bool) or not isinstance(steps_per_sync, int) \
            or steps_per_sync < 1:
        raise ValueError("`steps_per_sync` must be an integer of at least 1. "
                         f"Received: steps_per_sync={steps_per_sync!r}")
    communication = ring_all_reduce_seconds(gradient_bytes, workers, bandwidth, latency)
    return _positive("compute_seconds", compute_seconds, allow_zero=True) \
        + communication / steps_per_sync


def gradient_bytes(model, wire_dtype="float32"):
    """Bytes of one all-reduce of `model`'s trainable weights in `wire_dtype`."""
    import numpy as np

    itemsize = 2 if str(wire_dtype) in ("float16", "bfloat16") else np.dtype(wire_dtype).itemsize
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights) * itemsize


def measure_loopback_bandwidth(nbytes=64 * 2**20, *, chunk=2**20, repeats=3, streams=1):
    """Bytes per second one TCP stream carries over 127.0.0.1 (the best of `repeats`).

    With `streams=2` two run at once, as each worker of a two-worker ring sends and receives.
    """
    best = 0.0
    for _ in range(repeats):
        rates = [0.0] * streams
        threads = [threading.Thread(target=_stream, args=(nbytes, chunk, rates, i))
                   for i in range(streams)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        best = max(best, min(rates))
    return best


def _stream(nbytes, chunk, rates, index):
    """Sends `nbytes` through one loopback connection; stores bytes/s in `rates[index]`."""
    payload = bytes(chunk)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def send():
        with socket.create_connection(("127.0.0.1", port)) as client:
            sent = 0
            while sent < nbytes:
                client.sendall(payload)
                sent += len(payload)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    connection, _ = server.accept()
    buffer = bytearray(chunk)
    received, start = 0, time.perf_counter()
    with connection:
        while received < nbytes:
            n = connection.recv_into(buffer)
            if not n:
                break
            received += n
    rates[index] = received / (time.perf_counter() - start)
    sender.join()
    server.close()
