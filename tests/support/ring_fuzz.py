"""Clients that knock on a tcp ring's port without belonging to the job.

Each kind of attack opens one connection and reports what became of it: `"refused"` when
the ring closed it (or reset it), `"closed port"` when nothing listened any more, and
`"let in"` if the ring kept talking past its challenge, which must never happen.
"""

import collections
import os
import random
import socket
import threading
import time

from mgpu_tf.comm import handshake

__all__ = ["KINDS", "Fuzzer", "attack", "recorded_handshake"]

KINDS = ("garbage", "wrong_secret", "replay", "half_open", "slow")


class _Recorder:
    """A socket that keeps what is sent through it."""

    def __init__(self, sock):
        self.sock, self.sent = sock, b""

    def sendall(self, data):
        self.sent += data
        self.sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def recorded_handshake(secret, rank, size):
    """The bytes a real worker `rank` sent in a handshake of another session."""
    ours, theirs = socket.socketpair()
    checker = threading.Thread(target=handshake.check, args=(theirs, secret, rank, size))
    checker.start()
    recorder = _Recorder(ours)
    handshake.offer(recorder, secret, rank, size)
    checker.join()
    ours.close()
    theirs.close()
    return recorder.sent


def _outcome(sock, seconds):
    """What the ring did once the attacker stopped talking: closed it, or kept it open."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass  # the challenge, before the ring closes the connection
        return "refused"
    except ConnectionResetError:
        return "refused"
    except socket.timeout:
        return "let in"


def attack(address, kind, *, rank, size, recorded, hold_seconds=8.0):
    """Opens one connection to `address` and runs one attack of `kind`; returns its outcome."""
    try:
        sock = socket.create_connection(address, timeout=2)
    except OSError:
        return "closed port"
    try:
        if kind == "garbage":
            sock.sendall(os.urandom(random.randint(1, 200)))
        elif kind == "wrong_secret":
            try:
                handshake.offer(sock, os.urandom(32), rank, size)
            except handshake.Refused:
                return "refused"  # the listener's MAC did not check out under our key
        elif kind == "replay":
            sock.sendall(recorded)
        elif kind == "half_open":
            sock.sendall(recorded[:5])
        elif kind == "slow":
            for byte in recorded[:handshake.HELLO_BYTES]:  # each byte in time, not all
                sock.sendall(bytes([byte]))
                time.sleep(0.3)
        return _outcome(sock, hold_seconds)
    except OSError:
        return "refused"
    finally:
        sock.close()


class Fuzzer:
    """Attacks `address` from `threads` threads, kinds in turn, until `stop()`.

    Args:
        address: `(host, port)` of the ring's listener.
        rank, size: the rank and ring size the attackers claim (the listener's left
            neighbour, so that only the secret can tell them apart).
        secret: the job's secret, used only to record a real handshake to replay.
    """

    def __init__(self, address, *, rank, size, secret, threads=8):
        self.address, self.rank, self.size = address, rank, size
        self.recorded = recorded_handshake(secret, rank, size)
        self.outcomes = collections.Counter()
        self.by_kind = collections.Counter()
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self, index):
        turn = index
        while not self._stop.is_set():
            kind = KINDS[turn % len(KINDS)]
            turn += 1
            outcome = attack(self.address, kind, rank=self.rank, size=self.size,
                             recorded=self.recorded)
            with self._lock:
                self.outcomes[outcome] += 1
                self.by_kind[kind] += 1
            if outcome == "closed port":
                time.sleep(0.05)

    def stop(self):
        """Stops the attackers; returns `{outcome: count}`."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=20)
        return dict(self.outcomes)
