"""The ring's pipelined all-reduce and all-gather: each chunk in pieces, sent on as it
arrives; methods of `mgpu_tf.comm.ring.Ring`, over its message primitives.

Design: docs/design.md#tcp-ring-all-reduce
"""

import bisect
import sys

import numpy as np

__all__ = ["Pipelined"]

# The pipelined all-reduce's and all-gather's messages: pieces of this size, marked by the
# high bit of the step.
_PIECE_BYTES = 2 << 20
_PIPELINED_STEP = 1 << 31
# TensorFlow takes a numpy result aligned to this (EIGEN_MAX_ALIGN_BYTES) without copying it.
_ALIGN = 64
# Result buffers kept for reuse once nothing else refers to them.
_KEPT_RESULTS = 4


def _address(array):
    return array.__array_interface__["data"][0]


class _Parts:
    """1-D arrays of one dtype read as their concatenation, without copying them."""

    def __init__(self, arrays):
        self.arrays = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
        if not self.arrays:
            raise ValueError("`buffer` must hold at least one array. Received: buffer=[]")
        dtypes = {a.dtype for a in self.arrays}
        if len(dtypes) != 1:
            raise ValueError("The parts of `buffer` must share one dtype. Received: dtypes "
                             f"{sorted(str(d) for d in dtypes)}. Cast them to one first.")
        self.dtype = dtypes.pop()
        self.itemsize = self.dtype.itemsize
        self.starts = np.cumsum([0] + [a.size for a in self.arrays]).tolist()
        self.size = self.starts[-1]
        self.nbytes = self.size * self.itemsize

    def spans(self, a, b):
        """`(offset from a, array)` pieces of the parts that hold values `a:b`, in order."""
        out = []
        i = bisect.bisect_right(self.starts, a) - 1
        while a < b and i < len(self.arrays):
            start = self.starts[i]
            stop = min(b, self.starts[i + 1])
            if stop > a:
                out.append((a, self.arrays[i][a - start:stop - start]))
                a = stop
            i += 1
        return out


def _spans(source, a, b):
    if isinstance(source, _Parts):
        return source.spans(a, b)
    return [(a, source[a:b])]


class Pipelined:
    """The pipelined collectives of `mgpu_tf.comm.ring.Ring`."""

    def _pieces(self, length, itemsize):
        """Each chunk's pieces as `(start, stop)` value indices: the unit that is pipelined."""
        step = max(1, _PIECE_BYTES // itemsize)
        bounds = np.linspace(0, length, self.size + 1).astype(np.int64)
        return [[(a, min(a + step, int(stop))) for a in range(int(start), int(stop), step)]
                for start, stop in zip(bounds[:-1], bounds[1:])]

    def _result(self, size, dtype):
        """An empty 1-D array for a result, aligned for TensorFlow, reused where it can be.

        A kept buffer is reused only when nothing but this ring refers to it (a TensorFlow
        tensor made from a result holds the array), so no result is ever overwritten.
        """
        nbytes = size * dtype.itemsize + _ALIGN
        with self._results_lock:
            kept = self._results
            for i in range(len(kept)):
                # The list's reference and the argument's, no other.
                if kept[i].nbytes == nbytes and sys.getrefcount(kept[i]) <= 2:
                    raw = kept[i]
                    break
            else:
                raw = np.empty(nbytes, np.uint8)
                kept.append(raw)
                del kept[:-_KEPT_RESULTS]
        start = -_address(raw) % _ALIGN
        return raw[start:start + nbytes - _ALIGN].view(dtype)

    def all_reduce(self, buffer, op=0):
        """Sums a 1-D numpy `buffer` over every worker; returns the sum as a new array.

        `buffer` is only read; it may also be a list of 1-D arrays of one dtype, summed
        as their concatenation without being copied into one. Every worker gets the same
        bits. `op` tags the messages (e.g. a hash of a name), so that all-reduces of
        different callers cannot mix.

        Each chunk of the ring's schedule travels in pieces of about 2 MB: a piece is
        added (or stored) as soon as it arrives and sent on at once, while the receiving
        thread reads the next piece straight into its place. The result is 64-byte
        aligned, so TensorFlow takes it from `tf.numpy_function` without a copy.
        """
        if isinstance(buffer, (list, tuple)):
            buffer = _Parts(buffer)
        else:
            buffer = np.ascontiguousarray(buffer)
            if buffer.ndim != 1:
                raise ValueError(f"`buffer` must be 1-D. Received: shape={buffer.shape}")
        out = self._result(buffer.size, buffer.dtype)
        if self.size == 1:
            for a, span in _spans(buffer, 0, buffer.size):
                out[a:a + span.size] = span
            return out
        self._pipeline(self.schedule(), buffer, out, self._pieces(buffer.size, buffer.itemsize),
                       op, 0)
        return out

    def all_gather(self, chunk, op=0):
        """Every worker's 1-D numpy `chunk` (all of one size), concatenated in rank order.

        The all-reduce's second half, pipelined the same way, from chunks in rank order.
        """
        chunk = np.ascontiguousarray(chunk)
        if chunk.ndim != 1:
            raise ValueError(f"`chunk` must be 1-D. Received: shape={chunk.shape}")
        size = chunk.size
        out = self._result(size * self.size, chunk.dtype)
        out[self.rank * size:(self.rank + 1) * size] = chunk
        if self.size == 1:
            return out
        step = max(1, _PIECE_BYTES // chunk.itemsize)
        pieces = [[(a, min(a + step, (c + 1) * size)) for a in range(c * size, (c + 1) * size,
                                                                     step)]
                  for c in range(self.size)]
        # Worker r starts with chunk r: the reduce half's order, each chunk stored.
        steps = [("gather", send, into) for _, send, into in self.schedule()[:self.size - 1]]
        self._pipeline(steps, out, out, pieces, op, 1)
        return out

    def _pipeline(self, steps, source, out, pieces, op, kind):
        """Runs `steps` (`(phase, send, receive)` chunks) piece by piece into `out`.

        The first step sends from `source`; each later one sends the chunk the step before
        received. A `"reduce"` piece is `source`'s plus the one received, added in its
        place in `out`. `kind` keeps the messages of all-reduces and all-gathers apart.
        """
        call = self._next_index(op, _PIPELINED_STEP | kind)

        def key(step, piece):
            return (op, _PIPELINED_STEP | (kind << 16) | step, (call << 32) | piece)

        # Every piece's place in `out` is known now: the receiving thread reads each into it.
        for step, (_, _, into) in enumerate(steps):
            for piece, (a, b) in enumerate(pieces[into]):
                self._post(key(step, piece), out[a:b].view(np.uint8))
        try:
            for piece, (a, b) in enumerate(pieces[steps[0][1]]):
                self._send(key(0, piece), *[span for _, span in _spans(source, a, b)])
            for step, (phase, _, into) in enumerate(steps):
                for piece, (a, b) in enumerate(pieces[into]):
                    payload = self._take(key(step, piece), (b - a) * source.itemsize)
                    payload = payload.view(source.dtype)
                    if phase == "reduce":
                        for start, span in _spans(source, a, b):
                            stop = start + span.size
                            np.add(span, payload[start - a:stop - a], out=out[start:stop])
                    elif _address(payload) != _address(out[a:b]):
                        out[a:b] = payload  # it arrived before its place was posted
                    if step + 1 < len(steps):
                        self._send(key(step + 1, piece), out[a:b])
        finally:
            with self._arrived:
                for step in range(len(steps)):
                    for piece in range(max(len(p) for p in pieces)):
                        self._posted.pop(key(step, piece), None)
