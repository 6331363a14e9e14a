"""The tcp ring's handshake: both ends prove, by an HMAC over fresh nonces, that they hold
the job's secret (`mgpu_tf.cluster.job_secret`).

The connector sends its rank, the ring's size and a nonce; the listener answers with its own
nonce and a MAC over both; the connector checks it and answers with its MAC. A recorded
handshake fails against a new nonce.

Design: docs/deployment.md#closed-ports
"""

import hashlib
import hmac
import os
import socket
import struct
import time

__all__ = ["Refused", "WrongSecret", "HELLO_BYTES", "offer", "check"]

_MAGIC = b"MGP2"
_HELLO = struct.Struct("!4sII16s")  # magic, sender's rank, ring size, connector's nonce
_NONCE_BYTES = 16
_MAC_BYTES = hashlib.sha256().digest_size
HELLO_BYTES = _HELLO.size


class Refused(ConnectionError):
    """The other end did not prove that it belongs to the job; the connection is closed."""


class WrongSecret(Refused):
    """The other end answered, with a proof made from another secret."""


def _mac(key, role, hello, nonce):
    return hmac.new(key, role + hello + nonce, hashlib.sha256).digest()


def _read(sock, count, what, deadline=None):
    """`count` bytes from `sock`, all before `deadline` (`time.monotonic()`) when given:
    a client sending a byte at a time cannot hold the listener longer."""
    data = bytearray()
    while len(data) < count:
        try:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout
                sock.settimeout(left)
            chunk = sock.recv(count - len(data))
        except socket.timeout:
            raise Refused(f"{what}: not all sent in time, {len(data)} of {count} "
                          "bytes") from None
        except OSError as error:
            raise Refused(f"{what}: {error}") from None
        if not chunk:
            raise Refused(f"{what}: closed after {len(data)} of {count} bytes")
        data += chunk
    return bytes(data)


def offer(sock, key, rank, size):
    """The connector's side: proves this worker holds `key` to the listener at `sock`.

    Raises:
        WrongSecret: when the listener's proof is not made with `key`.
        Refused: when it closes or is silent (it may be busy: try again).
    """
    hello = _HELLO.pack(_MAGIC, rank, size, os.urandom(_NONCE_BYTES))
    try:
        sock.sendall(hello)
    except OSError as error:
        raise Refused(f"sending the hello: {error}") from None
    answer = _read(sock, _NONCE_BYTES + _MAC_BYTES, "the listener's challenge")
    nonce, mac = answer[:_NONCE_BYTES], answer[_NONCE_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, b"listener", hello, nonce)):
        raise WrongSecret("the listener does not hold the job's secret")
    try:
        sock.sendall(_mac(key, b"connector", hello, nonce))
    except OSError as error:
        raise Refused(f"sending the answer: {error}") from None


def check(sock, key, rank, size):
    """The listener's side: returns when the connector at `sock` is worker `rank` of
    a ring of `size` and holds `key`, all within `sock`'s timeout.

    Raises:
        Refused: naming what was wrong (bytes that are no hello, another rank or ring
            size, a wrong answer, silence or a close).
    """
    timeout = sock.gettimeout()
    deadline = None if timeout is None else time.monotonic() + timeout
    hello = _read(sock, _HELLO.size, "the hello", deadline)
    magic, sender, their_size, _ = _HELLO.unpack(hello)
    if magic != _MAGIC:
        raise Refused(f"not a ring hello (starts {hello[:4]!r})")
    if (sender, their_size) != (rank, size):
        raise Refused(f"hello from rank {sender} of {their_size}; expected rank {rank} "
                      f"of {size}")
    nonce = os.urandom(_NONCE_BYTES)
    try:
        sock.sendall(nonce + _mac(key, b"listener", hello, nonce))
    except OSError as error:
        raise Refused(f"sending the challenge: {error}") from None
    answer = _read(sock, _MAC_BYTES, "the answer", deadline)
    if not hmac.compare_digest(answer, _mac(key, b"connector", hello, nonce)):
        raise Refused("wrong answer to the challenge (no secret, another secret, or a replay)")
