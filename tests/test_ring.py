"""The TCP ring all-reduce on its own: workers as threads of this process, real sockets.

The reference is numpy's sum of every worker's buffer.
"""

import socket
import threading
import time

import numpy as np
import pytest

from mgpu_tf.comm import ring, ring_pipeline


def _listen(size, host="127.0.0.1"):
    """`size` listeners on `host`, and the `(host, port)` peers list they make."""
    listeners = [ring.listen(host) for _ in range(size)]
    return listeners, [(host, listener.getsockname()[1]) for listener in listeners]


def _run_ring(size, work, *, timeout_seconds=10.0, listening=None):
    """Runs `work(ring, rank)` on `size` connected workers; returns results and errors by rank.

    `listening` is `_listen`'s result when the test needs the ports first.
    """
    listeners, peers = listening or _listen(size)
    results, errors = [None] * size, [None] * size

    def worker(rank):
        try:
            with ring.Ring(rank, peers, listeners[rank], timeout_seconds=timeout_seconds) as r:
                results[rank] = work(r, rank)
        except Exception as error:  # reported below, by rank
            errors[rank] = error

    threads = [threading.Thread(target=worker, args=(rank,)) for rank in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results, errors


@pytest.mark.parametrize("size, length", [(2, 10), (3, 997), (4, 3), (3, 0), (2, 1), (5, 1001)])
def test_every_worker_gets_the_sum_of_all_buffers(size, length):
    rng = np.random.default_rng(size * 1000 + length)
    buffers = [rng.normal(size=length).astype(np.float32) for _ in range(size)]
    originals = [b.copy() for b in buffers]
    results, errors = _run_ring(size, lambda r, rank: r.all_reduce(buffers[rank]))
    assert errors == [None] * size
    expected = np.sum(buffers, axis=0)
    for rank in range(size):
        np.testing.assert_allclose(results[rank], expected, rtol=1e-6, atol=1e-6)
        # The same bits everywhere, and the inputs untouched.
        np.testing.assert_array_equal(results[rank], results[0])
        np.testing.assert_array_equal(buffers[rank], originals[rank])


@pytest.mark.parametrize("size, length", [(2, 1000), (3, 997), (5, 301)])
def test_buffers_cut_in_many_pieces_still_give_the_sum(monkeypatch, size, length):
    # 64-byte pieces: each chunk crosses in several, added and sent on one at a time.
    monkeypatch.setattr(ring_pipeline, "_PIECE_BYTES", 64)
    rng = np.random.default_rng(size + length)
    buffers = [rng.normal(size=length).astype(np.float32) for _ in range(size)]
    results, errors = _run_ring(size, lambda r, rank: [r.all_reduce(buffers[rank], op=7)
                                                       for _ in range(3)])
    assert errors == [None] * size
    expected = np.sum(buffers, axis=0)
    for rank in range(size):
        for result in results[rank]:
            np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(result, results[0][0])


@pytest.mark.parametrize("size, lengths", [(2, [5, 0, 1000, 3]), (3, [997]), (4, [1, 2])])
def test_a_list_of_parts_is_summed_as_their_concatenation(monkeypatch, size, lengths):
    # 64-byte pieces, so that pieces start and end inside parts and span several.
    monkeypatch.setattr(ring_pipeline, "_PIECE_BYTES", 64)
    rng = np.random.default_rng(size * 7 + sum(lengths))
    parts = [[rng.normal(size=n).astype(np.float32) for n in lengths] for _ in range(size)]
    originals = [[p.copy() for p in worker] for worker in parts]
    results, errors = _run_ring(size, lambda r, rank: r.all_reduce(parts[rank], op=5))
    assert errors == [None] * size
    flat = [np.concatenate(worker) for worker in originals]
    for rank in range(size):
        np.testing.assert_allclose(results[rank], np.sum(flat, axis=0), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(results[rank], results[0])
        for part, original in zip(parts[rank], originals[rank]):
            np.testing.assert_array_equal(part, original)


def test_parts_of_different_dtypes_are_refused():
    listener = ring.listen("127.0.0.1")
    with ring.Ring(0, [listener.getsockname()], listener) as r:
        with pytest.raises(ValueError, match="The parts of `buffer` must share one dtype"):
            r.all_reduce([np.ones(2, np.float32), np.ones(2, np.float16)])


def test_results_are_aligned_and_a_held_result_is_never_overwritten():
    def work(r, rank):
        held = [r.all_reduce(np.full(1000, float(i + rank), np.float32)) for i in range(3)]
        addresses = set()
        for i in range(3):  # dropped at once: its buffer may serve the next one
            addresses.add(r.all_reduce(np.ones(1000, np.float32)).ctypes.data)
        return held, addresses

    results, errors = _run_ring(2, work)
    assert errors == [None, None]
    for held, addresses in results:
        for i, result in enumerate(held):
            assert result.ctypes.data % 64 == 0
            np.testing.assert_array_equal(result, np.full(1000, 2.0 * i + 1))
        assert len({r.ctypes.data for r in held}) == 3
        assert len(addresses) == 1, "a result nobody holds was not reused"


@pytest.mark.parametrize("size, length, piece", [(2, 10, 1 << 20), (3, 100, 64), (4, 0, 64),
                                                 (1, 5, 64)])
def test_all_gather_concatenates_every_workers_chunk_in_rank_order(monkeypatch, size, length,
                                                                    piece):
    monkeypatch.setattr(ring_pipeline, "_PIECE_BYTES", piece)
    chunks = [np.arange(length, dtype=np.float64) + 1000 * rank for rank in range(size)]
    results, errors = _run_ring(size, lambda r, rank: r.all_gather(chunks[rank]))
    assert errors == [None] * size
    for result in results:
        np.testing.assert_array_equal(result, np.concatenate(chunks))


def test_all_reduces_and_exchanges_of_one_op_do_not_mix():
    def work(r, rank):
        summed = r.all_reduce(np.full(6, rank + 1.0), op=3)
        received = r.exchange(np.full(2, 10.0 * rank), 2, op=3, step=0)
        return summed, received

    results, errors = _run_ring(2, work)
    assert errors == [None, None]
    for rank, (summed, received) in enumerate(results):
        np.testing.assert_array_equal(summed, np.full(6, 3.0))
        np.testing.assert_array_equal(received, np.full(2, 10.0 * (1 - rank)))


def test_sixteen_bit_buffers_are_summed_in_their_own_dtype():
    buffers = [np.full(7, value, np.float16) for value in (1.0, 2.0 ** -11, 2.0 ** -11)]
    results, errors = _run_ring(3, lambda r, rank: r.all_reduce(buffers[rank]))
    assert errors == [None] * 3
    # Chunk c (sizes 2, 2, 3) starts at worker c and is added to at c+1, then c+2,
    # rounding to float16 each time: (1 + e) + e = 1 for chunks 0 and 2, since
    # 1 + 2**-11 rounds to 1 (ties to even); (e + e) + 1 = 1 + 2**-10 for chunk 1.
    expected = np.array([1, 1, 1 + 2.0 ** -10, 1 + 2.0 ** -10, 1, 1, 1], np.float16)
    for result in results:
        assert result.dtype == np.float16
        np.testing.assert_array_equal(result, expected)


def test_a_worker_that_leaves_is_named_by_its_neighbour():
    def work(r, rank):
        if rank == 1:
            r.close()
            return None
        return r.all_reduce(np.ones(1000, np.float32))

    start = time.monotonic()
    results, errors = _run_ring(3, work)
    assert time.monotonic() - start < 120  # gave up, did not hang
    lost = [str(e) for e in errors if e is not None]
    assert lost and all(isinstance(e, ring.PeerLostError) for e in errors if e is not None)
    assert any("ring: lost worker 1 (127.0.0.1:" in message for message in lost), lost


def test_a_neighbour_that_never_connects_times_out_with_its_name():
    listener = ring.listen("127.0.0.1")
    silent = ring.listen("127.0.0.1")  # listens, never accepts nor connects
    peers = [("127.0.0.1", listener.getsockname()[1]), ("127.0.0.1", silent.getsockname()[1])]
    start = time.monotonic()
    # It accepts no connection, so it never sends the handshake's challenge.
    lost = (r"ring: lost worker 1 \(127\.0\.0\.1:\d+\): its handshake failed: the "
            r"listener's challenge: not all sent in time")
    with pytest.raises(ring.PeerLostError, match=lost):
        ring.Ring(0, peers, listener, timeout_seconds=1.0)
    assert time.monotonic() - start < 120  # gave up, did not hang
    silent.close()


def test_a_stranger_on_the_port_is_turned_away():
    listening = _listen(2)
    stranger = socket.create_connection(listening[1][0])
    stranger.sendall(b"GET / HTTP/1.0\r\n\r\n")
    results, errors = _run_ring(
        2, lambda r, rank: r.all_reduce(np.full(4, rank + 1.0, np.float32)), listening=listening)
    stranger.close()
    assert errors == [None, None]
    for result in results:
        np.testing.assert_array_equal(result, [3.0] * 4)


@pytest.mark.parametrize("rank", [-1, 2])
def test_a_rank_outside_the_ring_is_refused(rank):
    listener = ring.listen("127.0.0.1")
    with pytest.raises(ValueError, match=r"`rank` must be in \[0, 2\). Received: rank="):
        ring.Ring(rank, [("127.0.0.1", 1), ("127.0.0.1", 2)], listener)
    assert listener.fileno() == -1, "the listener was left open"


def test_one_worker_is_its_own_ring():
    listener = ring.listen("127.0.0.1")
    with ring.Ring(0, [listener.getsockname()], listener) as r:
        np.testing.assert_array_equal(r.all_reduce(np.arange(5.0)), np.arange(5.0))


def test_workers_of_one_host_keep_small_socket_buffers():
    def sizes(r, rank):
        return (r._right.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                r._left.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))

    results, errors = _run_ring(2, sizes)
    assert errors == [None, None]
    # Linux keeps twice what was asked, for its own bookkeeping.
    assert results == [(2 * ring._LOCAL_BUFFER_BYTES,) * 2] * 2


def test_workers_on_ipv6_loopback_form_a_ring():
    try:
        probe = ring.listen("::1")
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    probe.close()
    results, errors = _run_ring(
        2, lambda r, rank: r.all_reduce(np.full(3, rank + 1.0, np.float32)),
        listening=_listen(2, "::1"))
    assert errors == [None, None]
    for result in results:
        np.testing.assert_array_equal(result, [3.0] * 3)


def test_connections_that_do_not_prove_the_secret_are_refused_and_the_ring_forms(caplog):
    from support import ring_fuzz

    secret = b"s3cret-of-this-job-only"
    listeners, peers = _listen(2)
    rings, results, errors = {}, {}, {}

    def worker(rank):
        try:
            with ring.Ring(rank, peers, listeners[rank], timeout_seconds=30, secret=secret,
                           handshake_seconds=1.0) as r:
                rings[rank] = r
                results[rank] = r.all_reduce(np.full(3, rank + 1.0, np.float32))
        except Exception as error:  # reported below
            errors[rank] = error

    first = threading.Thread(target=worker, args=(0,))
    first.start()
    # Worker 0 waits for its left neighbour while every kind of stranger knocks first.
    recorded = ring_fuzz.recorded_handshake(secret, 1, 2)
    outcomes = {}
    attackers = [threading.Thread(target=lambda k=kind: outcomes.__setitem__(
        k, ring_fuzz.attack(peers[0], k, rank=1, size=2, recorded=recorded)))
        for kind in ring_fuzz.KINDS]
    for t in attackers:
        t.start()
    for t in attackers:
        t.join(timeout=30)
    second = threading.Thread(target=worker, args=(1,))
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    assert errors == {}
    assert outcomes == {kind: "refused" for kind in ring_fuzz.KINDS}
    assert rings[0].refused == len(ring_fuzz.KINDS)
    for rank in (0, 1):
        np.testing.assert_array_equal(results[rank], [3.0] * 3)
    refusals = [r.message for r in caplog.records if "refused a connection" in r.message]
    assert len(refusals) == len(ring_fuzz.KINDS), refusals


def test_a_neighbour_with_another_secret_is_named():
    listeners, peers = _listen(2)
    errors = {}

    def worker(rank):
        try:
            ring.Ring(rank, peers, listeners[rank], timeout_seconds=3,
                      secret=b"secret-number-%d-of-two" % rank, handshake_seconds=1.0)
        except ring.PeerLostError as error:
            errors[rank] = str(error)

    threads = [threading.Thread(target=worker, args=(rank,)) for rank in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(errors) == [0, 1]
    assert "its handshake failed: the listener does not hold the job's secret" in errors[0]


def test_the_neighbour_gets_in_after_strangers_fill_every_handshake_slot():
    secret = b"s3cret-of-this-job-only"
    listeners, peers = _listen(2)
    results, errors = {}, {}

    def worker(rank):
        try:
            with ring.Ring(rank, peers, listeners[rank], timeout_seconds=30, secret=secret,
                           handshake_seconds=1.0) as r:
                results[rank] = (r.all_reduce(np.ones(2, np.float32)), r.refused)
        except Exception as error:  # reported below
            errors[rank] = error

    first = threading.Thread(target=worker, args=(0,))
    first.start()
    silent = [socket.create_connection(peers[0]) for _ in range(70)]
    time.sleep(0.3)  # every slot taken: the neighbour is refused, then tries again
    second = threading.Thread(target=worker, args=(1,))
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    for sock in silent:
        sock.close()
    assert errors == {}
    np.testing.assert_array_equal(results[0][0], [2.0, 2.0])
    assert results[0][1] > 0
