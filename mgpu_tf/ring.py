"""A ring all-reduce over plain TCP sockets between worker processes.

TensorFlow's CPU collectives move each buffer through a gRPC call and protocol
buffers; between two processes of one machine that carries about a tenth of
what a socket does. This module is the transport alone, with no TensorFlow in
it: `mgpu_tf.transport` wires it into the training step.

Each worker holds one connection to its right neighbour and one from its left.
An all-reduce of N workers is the usual ring: N-1 steps of reduce-scatter, in
which every worker sends one chunk to the right while it receives and adds one
from the left, then N-1 steps of all-gather, which pass the summed chunks on.
Each worker sends and receives 2(N-1)/N of the buffer, and every worker ends
with the same bits (each chunk is summed once, in one order, then copied).

Example (every worker runs this with its own `rank`):

```python
listener = ring.listen("127.0.0.1")
ports = ...  # every worker's listener.getsockname()[1], exchanged somehow
peers = [("127.0.0.1", p) for p in ports]
with ring.Ring(rank, peers, listener) as r:
    total = r.all_reduce(gradients)  # a 1-D numpy array; the sum over workers
```
"""

import socket
import struct
import threading
import time

import numpy as np

__all__ = ["PeerLostError", "Ring", "listen"]

_HELLO = struct.Struct("!4sII")  # magic, sender's rank, ring size
_MAGIC = b"MGPU"
_BUFFER_BYTES = 4 << 20


class PeerLostError(RuntimeError):
    """A neighbour in the ring closed its connection, timed out, or never answered."""


def listen(host, port=0):
    """Opens the socket the left neighbour will connect to; returns it.

    Args:
        host: the address to bind, the worker's own host as the cluster names it.
        port: the port; `0` (the default) lets the system pick a free one.
    """
    listener = socket.create_server((host, port), backlog=8)
    return listener


def _tune(sock, timeout):
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, _BUFFER_BYTES)
    return sock


class Ring:
    """One worker's place in the ring: a connection to the right, one from the left.

    Args:
        rank: this worker's position, `0 <= rank < len(peers)`.
        peers: `(host, port)` of every worker's listener, in rank order.
        listener: this worker's listening socket (from `listen`); it is closed
            once the left neighbour has connected.
        timeout_seconds: how long a connection or one transfer may wait for a
            neighbour before `PeerLostError`. `None` waits forever.
    """

    def __init__(self, rank, peers, listener, *, timeout_seconds=60.0):
        self.rank = int(rank)
        self.size = len(peers)
        if self.size < 1 or not 0 <= self.rank < self.size:
            listener.close()
            raise ValueError(f"`rank` must be in [0, {self.size}). Received: rank={rank!r}")
        self.peers = [tuple(p) for p in peers]
        self.timeout = timeout_seconds
        self._right = self._left = None
        if self.size > 1:
            try:
                self._connect(listener)
            except BaseException:
                self.close()
                raise
        listener.close()

    # ------------------------------------------------------------ set-up

    def _name(self, rank):
        host, port = self.peers[rank]
        return f"worker {rank} ({host}:{port})"

    def _connect(self, listener):
        right = (self.rank + 1) % self.size
        left = (self.rank - 1) % self.size
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            try:
                self._right = _tune(socket.create_connection(self.peers[right], self.timeout),
                                    self.timeout)
                break
            except OSError as error:
                if deadline is not None and time.monotonic() > deadline:
                    raise PeerLostError(
                        f"Could not connect to {self._name(right)}: {error}") from error
                time.sleep(0.05)
        self._right.sendall(_HELLO.pack(_MAGIC, self.rank, self.size))
        listener.settimeout(self.timeout)
        while self._left is None:
            try:
                connection, _ = listener.accept()
            except OSError as error:
                raise PeerLostError(
                    f"{self._name(left)} did not connect within {self.timeout} s") from error
            _tune(connection, self.timeout)
            hello = bytearray(_HELLO.size)
            try:
                self._receive(connection, memoryview(hello), left)
            except PeerLostError:
                connection.close()
                continue
            magic, sender, size = _HELLO.unpack(bytes(hello))
            if (magic, sender, size) == (_MAGIC, left, self.size):
                self._left = connection
            else:  # not our neighbour: someone else knocked on the port
                connection.close()

    # ------------------------------------------------------------ transfers

    def _receive(self, sock, view, rank):
        got = 0
        while got < len(view):
            try:
                n = sock.recv_into(view[got:])
            except OSError as error:
                raise PeerLostError(f"Lost {self._name(rank)}: {error}") from error
            if n == 0:
                raise PeerLostError(f"{self._name(rank)} closed its connection.")
            got += n

    def _exchange(self, send, receive):
        """Sends `send` to the right while receiving `receive` from the left."""
        failure = []

        def sender():
            try:
                self._right.sendall(send)
            except OSError as error:
                failure.append(error)

        thread = threading.Thread(target=sender, daemon=True)
        thread.start()
        try:
            self._receive(self._left, receive, (self.rank - 1) % self.size)
        finally:
            thread.join()
        if failure:
            raise PeerLostError(
                f"Lost {self._name((self.rank + 1) % self.size)}: {failure[0]}") from failure[0]

    def exchange(self, send, count):
        """Sends array `send` to the right neighbour; returns `count` values from the left.

        The values received have `send`'s dtype. Both transfers run at once, so
        a ring of workers calling it together never waits on itself.
        """
        send = np.ascontiguousarray(send)
        received = np.empty(int(count), send.dtype)
        self._exchange(memoryview(send.view(np.uint8)), memoryview(received.view(np.uint8)))
        return received

    def schedule(self):
        """The ring all-reduce as `(phase, send, receive)` chunk indices, in order.

        In phase `"reduce"` the chunk received is added to this worker's chunk
        of that index; in phase `"gather"` it replaces it. After every step the
        buffer is the sum over workers.
        """
        n, r = self.size, self.rank
        return ([("reduce", (r - s) % n, (r - s - 1) % n) for s in range(n - 1)]
                + [("gather", (r - s + 1) % n, (r - s) % n) for s in range(n - 1)])

    def chunk_sizes(self, length):
        """How a buffer of `length` values is cut into one chunk per worker."""
        bounds = np.linspace(0, length, self.size + 1).astype(np.int64)
        return [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]

    def all_reduce(self, buffer):
        """Sums a 1-D numpy `buffer` over every worker; returns the sum as a new array.

        `buffer` is only read. Every worker gets the same bits.
        """
        buffer = np.asarray(buffer)
        if buffer.ndim != 1:
            raise ValueError(f"`buffer` must be 1-D. Received: shape={buffer.shape}")
        sizes = self.chunk_sizes(buffer.size)
        parts = np.split(buffer.copy(), np.cumsum(sizes)[:-1])
        for phase, out, into in self.schedule():
            incoming = self.exchange(parts[out], sizes[into])
            parts[into] = parts[into] + incoming if phase == "reduce" else incoming
        return np.concatenate(parts)

    def close(self):
        for sock in (self._right, self._left):
            if sock is not None:
                sock.close()
        self._right = self._left = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
