"""The ring's pipelined all-reduce and all-gather: each chunk in pieces, sent on as it
arrives; methods of `mgpu_tf.comm.ring.Ring`, over its message primitives.

Design: docs/design.md#tcp-ring-all-reduce
"""

import numpy as np

__all__ = ["Pipelined"]

# The pipelined all-reduce's and all-gather's messages: pieces of this size, marked by the
# high bit of the step.
_PIECE_BYTES = 2 << 20
_PIPELINED_STEP = 1 << 31


def _address(array):
    return array.__array_interface__["data"][0]


class Pipelined:
    """The pipelined collectives of `mgpu_tf.comm.ring.Ring`."""

    def _pieces(self, length, itemsize):
        """Each chunk's pieces as `(start, stop)` value indices: the unit that is pipelined."""
        step = max(1, _PIECE_BYTES // itemsize)
        bounds = np.linspace(0, length, self.size + 1).astype(np.int64)
        return [[(a, min(a + step, int(stop))) for a in range(int(start), int(stop), step)]
                for start, stop in zip(bounds[:-1], bounds[1:])]

    def _scratch_for(self, nbytes):
        with self._count_lock:
            scratch, self._scratch = self._scratch, None
        return scratch if scratch is not None and scratch.nbytes >= nbytes else np.empty(
            nbytes, np.uint8)

    def all_reduce(self, buffer, op=0):
        """Sums a 1-D numpy `buffer` over every worker; returns the sum as a new array.

        `buffer` is only read. Every worker gets the same bits. `op` tags the messages
        (e.g. a hash of a name), so that all-reduces of different callers cannot mix.

        Each chunk of the ring's schedule travels in pieces of about 2 MB: a piece is
        added (or stored) as soon as it arrives and sent on at once, while the receiving
        thread reads the next piece straight into its place.
        """
        buffer = np.ascontiguousarray(buffer)
        if buffer.ndim != 1:
            raise ValueError(f"`buffer` must be 1-D. Received: shape={buffer.shape}")
        if self.size == 1:
            return buffer.copy()
        out = np.empty_like(buffer)
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
        out = np.empty(size * self.size, chunk.dtype)
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
        received. A `"reduce"` piece is `source`'s plus the one received. `kind` keeps the
        messages of all-reduces and all-gathers apart.
        """
        call = self._next_index(op, _PIPELINED_STEP | kind)
        reducing = any(phase == "reduce" for phase, _, _ in steps)
        scratch = self._scratch_for(source.nbytes) if reducing else None
        received = None if scratch is None else scratch[:source.nbytes].view(source.dtype)

        def key(step, piece):
            return (op, _PIPELINED_STEP | (kind << 16) | step, (call << 32) | piece)

        # Every piece's place is known now: the receiving thread reads each into it.
        for step, (phase, _, into) in enumerate(steps):
            target = received if phase == "reduce" else out
            for piece, (a, b) in enumerate(pieces[into]):
                self._post(key(step, piece), target[a:b].view(np.uint8))
        try:
            for piece, (a, b) in enumerate(pieces[steps[0][1]]):
                self._send(key(0, piece), source[a:b])
            for step, (phase, _, into) in enumerate(steps):
                for piece, (a, b) in enumerate(pieces[into]):
                    payload = self._take(key(step, piece), (b - a) * source.itemsize)
                    payload = payload.view(source.dtype)
                    if phase == "reduce":
                        np.add(source[a:b], payload, out=out[a:b])
                    elif _address(payload) != _address(out[a:b]):
                        out[a:b] = payload  # it arrived before its place was posted
                    if step + 1 < len(steps):
                        self._send(key(step + 1, piece), out[a:b])
        finally:
            with self._arrived:
                for step in range(len(steps)):
                    for piece in range(max(len(p) for p in pieces)):
                        self._posted.pop(key(step, piece), None)
            if scratch is not None:
                self._scratch = scratch
