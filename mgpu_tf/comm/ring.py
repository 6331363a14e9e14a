"""A ring all-reduce over plain TCP sockets between worker processes.

Each connection is let in only after the handshake of `mgpu_tf.comm.handshake`.

Design: docs/design.md#tcp-ring-all-reduce
"""

import ipaddress
import logging
import math
import queue
import socket
import struct
import threading
import time

import numpy as np

from mgpu_tf.cluster import job_secret
from mgpu_tf.comm import handshake
from mgpu_tf.comm.ring_pipeline import Pipelined

__all__ = ["PeerLostError", "Ring", "listen"]

logger = logging.getLogger("mgpu_tf")

_HEADER = struct.Struct("!IIQQ")  # op, step, index of the exchange under (op, step), bytes
# Socket buffers between workers of one host: small enough that the bytes in flight stay in
# the CPU's cache between the sender's copy and the receiver's (docs/benchmarks.md, "The tcp
# ring against its link"). Across hosts the kernel sizes them to the link.
_LOCAL_BUFFER_BYTES = 512 << 10
# A connection must finish its handshake within this; at most this many are checked at once.
_HANDSHAKE_SECONDS = 5.0
_MAX_PENDING = 64


class PeerLostError(RuntimeError):
    """A neighbour in the ring closed its connection, timed out, or never answered."""


def listen(host, port=0):
    """Opens the socket the left neighbour will connect to; returns it.

    Args:
        host: the address to bind, the worker's own host as the cluster names it
            (a name, an IPv4 address, or an IPv6 address without brackets).
        port: the port; `0` (the default) lets the system pick a free one.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=128)


def _tune(sock, timeout):
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if _same_host(sock):
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, _LOCAL_BUFFER_BYTES)
    return sock


def _same_host(sock):
    """Whether both ends of connected `sock` are on this machine."""
    near, far = sock.getsockname()[0], sock.getpeername()[0]
    return near == far or ipaddress.ip_address(far.split("%")[0]).is_loopback


class Ring(Pipelined):
    """One worker's place in the ring: a connection to the right, one from the left.

    Args:
        rank: this worker's position, `0 <= rank < len(peers)`.
        peers: `(host, port)` of every worker's listener, in rank order.
        listener: this worker's listening socket (from `listen`); the ring
            closes it once the left neighbour has connected (or has failed to).
        timeout_seconds: how long a connection or one transfer may wait for a
            neighbour before `PeerLostError`. `None` waits forever.
        names: how errors name each worker. Defaults to `"worker R (host:port)"`.
        secret: the job's secret (bytes) each connection must prove it holds. Defaults to
            `MGPU_TF_JOB_SECRET` (without one, only the protocol is checked, and logged).
        handshake_seconds: how long a connection may take to prove it belongs to the job.
            Defaults to `5`.

    Attributes:
        refused: how many connections the listener refused (each is logged).
        sent_bytes: the payload bytes this worker has sent to its right neighbour.
    """

    def __init__(self, rank, peers, listener, *, timeout_seconds=60.0, names=None,
                 secret=None, handshake_seconds=_HANDSHAKE_SECONDS):
        self.rank = int(rank)
        self.size = len(peers)
        if self.size < 1 or not 0 <= self.rank < self.size:
            listener.close()
            raise ValueError(f"`rank` must be in [0, {self.size}). Received: rank={rank!r}")
        self.peers = [tuple(p) for p in peers]
        self.names = list(names) if names is not None else [
            f"worker {r} ({host}:{port})" for r, (host, port) in enumerate(self.peers)]
        self.timeout = timeout_seconds
        self.refused = 0  # connections the listener turned away
        self.sent_bytes = 0
        self._handshake_seconds = handshake_seconds
        # Result buffers of the pipelined collectives (comm.ring_pipeline), kept for reuse.
        self._results, self._results_lock = [], threading.Lock()
        self._refused_lock = threading.Lock()
        try:
            self._key = secret if secret is not None else job_secret.job_secret()
        except ValueError:
            listener.close()
            raise
        if self._key is None:
            logger.warning("mgpu_tf: ring: %s is not set, so the ring's handshake proves "
                           "only that a peer speaks its protocol. Launch with mgpu-tf launch "
                           "or set it to a secret the job's workers share.",
                           job_secret.SECRET_VARIABLE)
            self._key = b""
        # Neighbours' ranks, and the connections to and from them.
        self.right, self.left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        self._right = self._left = None
        try:
            if self.size > 1:
                try:
                    self._connect(listener)
                except BaseException:
                    self.close()
                    raise
                self._start_receiving()
        finally:
            listener.close()

    # ------------------------------------------------------------ set-up

    def _lost(self, rank, why):
        return PeerLostError(f"ring: lost {self.names[rank]}: {why}")

    def _connect(self, listener):
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        # The left neighbour is let in while this worker connects to the right one: each
        # handshake needs both ends to answer.
        arrived, stop = queue.Queue(), threading.Event()
        gate = threading.Thread(target=self._admit, args=(listener, arrived, stop),
                                name="mgpu_tf-ring-gate", daemon=True)
        gate.start()
        try:
            self._connect_right(deadline)
            try:
                self._left = arrived.get(
                    timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise self._lost(self.left,
                                 f"it did not connect within {self.timeout} s") from None
        finally:
            stop.set()
            gate.join()
            while not arrived.empty():
                arrived.get().close()
        _tune(self._left, self.timeout)

    def _connect_right(self, deadline):
        while True:
            try:
                self._right = _tune(socket.create_connection(self.peers[self.right],
                                                             self.timeout), self.timeout)
            except OSError as error:
                if deadline is not None and time.monotonic() > deadline:
                    raise self._lost(self.right, f"could not connect: {error}") from error
                time.sleep(0.05)
                continue
            try:
                handshake.offer(self._right, self._key, self.rank, self.size)
                return
            except handshake.Refused as error:
                self._right.close()
                # A listener busy with strangers' handshakes may close on us: try again.
                if isinstance(error, handshake.WrongSecret) or (
                        deadline is not None and time.monotonic() > deadline):
                    raise self._lost(self.right, f"its handshake failed: {error}") from None
                time.sleep(0.05)

    def _admit(self, listener, arrived, stop):
        """Checks each connection to `listener` in its own thread; queues the left one."""
        listener.settimeout(0.1)
        checking = []
        while not stop.is_set():
            try:
                connection, address = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            checking = [t for t in checking if t.is_alive()]
            if len(checking) >= _MAX_PENDING:
                self._refuse(connection, address, f"{_MAX_PENDING} handshakes under way")
                continue
            check = threading.Thread(target=self._check, daemon=True,
                                     args=(connection, address, arrived, stop))
            check.start()
            checking.append(check)

    def _check(self, connection, address, arrived, stop):
        connection.settimeout(min(self._handshake_seconds, self.timeout or math.inf))
        try:
            handshake.check(connection, self._key, self.left, self.size)
        except handshake.Refused as why:
            self._refuse(connection, address, why)
            return
        if stop.is_set():
            connection.close()
        else:
            arrived.put(connection)

    def _refuse(self, connection, address, why):
        with self._refused_lock:
            self.refused += 1
        logger.warning("mgpu_tf: ring: refused a connection from %s:%s: %s.", *address[:2], why)
        connection.close()

    # ------------------------------------------------------------ transfers

    def _receive(self, sock, view, rank):
        # On a blocking socket one call takes the whole message: one wake-up, not one a packet.
        flags = socket.MSG_WAITALL if sock.gettimeout() is None else 0
        got = 0
        while got < len(view):
            try:
                n = sock.recv_into(view[got:], 0, flags)
            except OSError as error:
                raise self._lost(rank, error) from error
            if n == 0:
                raise self._lost(rank, "it closed its connection.")
            got += n

    def _start_receiving(self):
        """Reads every message from the left into the mailbox, until the connection ends."""
        # Messages by key as they arrive; buffers that messages not yet arrived go into.
        self._mailbox, self._posted, self._failure = {}, {}, None
        self._arrived = threading.Condition()
        self._counters, self._count_lock = {}, threading.Lock()
        self._send_lock = threading.Lock()
        self._left.settimeout(None)  # idle between steps is fine; waiters time out

        # The thread keeps its own reference: `close` clears `_left` and shuts the socket,
        # which ends the thread's read.
        left = self._left

        def receive():
            header = bytearray(_HEADER.size)
            try:
                while True:
                    self._receive(left, memoryview(header), self.left)
                    op, step, index, nbytes = _HEADER.unpack(bytes(header))
                    key = (op, step, index)
                    with self._arrived:
                        payload = self._posted.pop(key, None)
                    if payload is None or payload.nbytes != nbytes:
                        payload = np.empty(nbytes, np.uint8)
                    self._receive(left, memoryview(payload), self.left)
                    with self._arrived:
                        self._mailbox[key] = payload
                        self._arrived.notify_all()
                    # Held here, a piece of a result would keep `_result` from reusing it.
                    payload = None
            except PeerLostError as error:
                with self._arrived:
                    self._failure = error
                    self._arrived.notify_all()

        self._receiver = threading.Thread(target=receive, name="mgpu_tf-ring", daemon=True)
        self._receiver.start()

    def _next_index(self, op, step):
        with self._count_lock:
            index = self._counters.get((op, step), 0)
            self._counters[(op, step)] = index + 1
        return index

    def _send(self, key, *data):
        """Sends the bytes of contiguous arrays `data`, one after the other, to the right, as
        message `key`."""
        # Header and payload in one call: one packet less, one wake-up less for the reader.
        nbytes = sum(d.nbytes for d in data)
        views = [memoryview(_HEADER.pack(*key, nbytes))] + [
            memoryview(d.view(np.uint8)) for d in data if d.nbytes]
        try:
            with self._send_lock:
                while views:
                    sent = self._right.sendmsg(views)
                    while views and sent >= len(views[0]):
                        sent -= len(views.pop(0))
                    if sent:
                        views[0] = views[0][sent:]
                self.sent_bytes += nbytes
        except OSError as error:
            raise self._lost(self.right, error) from error

    def _post(self, key, into):
        """Lets message `key` from the left be read straight into uint8 array `into`."""
        with self._arrived:
            if key not in self._mailbox:
                self._posted[key] = into

    def _take(self, key, nbytes):
        """Waits for message `key` from the left; returns its bytes (uint8)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: key in self._mailbox or self._failure,
                                          timeout=self.timeout):
                raise self._lost(self.left, f"it sent nothing for {self.timeout} s.")
            self._posted.pop(key, None)
            if key not in self._mailbox:
                raise self._failure
            payload = self._mailbox.pop(key)
        if payload.size != nbytes:
            raise PeerLostError(
                f"ring: {self.names[self.left]} sent {payload.size} bytes for "
                f"exchange {key}, where {nbytes} were expected: the workers do not run "
                "the same all-reduces.")
        return payload

    def exchange(self, send, count, op=0, step=0):
        """Sends array `send` to the right neighbour; returns `count` values from the left.

        The values received have `send`'s dtype.

        Raises:
            PeerLostError: when the neighbours are gone or silent for longer
                than the timeout, or a message has another size than expected.
        """
        send = np.ascontiguousarray(send)
        key = (op, step, self._next_index(op, step))
        self._send(key, send)
        return self._take(key, int(count) * send.itemsize).view(send.dtype)

    def schedule(self):
        """The ring all-reduce as `(phase, send, receive)` chunk indices, in order.

        In phase `"reduce"` the chunk received is added to this worker's chunk of that index.
        """
        n, r = self.size, self.rank
        return ([("reduce", (r - s) % n, (r - s - 1) % n) for s in range(n - 1)]
                + [("gather", (r - s + 1) % n, (r - s) % n) for s in range(n - 1)])

    def chunk_sizes(self, length):
        """How a buffer of `length` values is cut into one chunk per worker."""
        bounds = np.linspace(0, length, self.size + 1).astype(np.int64)
        return [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]

    def close(self):
        for sock in (self._right, self._left):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        self._right = self._left = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
