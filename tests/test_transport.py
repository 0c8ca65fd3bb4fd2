"""The transport's sockets between two ranks of one process, without a launcher."""

from __future__ import annotations

import pytest

from ipympi.progress import transport as transport_module
from ipympi.progress.transport import SPIN_TRIES, SPIN_TRIES_ALONE, Transport

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path):
    """Two ranks' transports, sockets only (their rings: ``test_p2p_ring.py``)."""
    ranks = [Transport(rank, str(tmp_path), None) for rank in range(2)]
    for transport in ranks:
        transport.ring_after = 0
    yield ranks
    for transport in ranks:
        transport.close(linger_ms=0)


def test_frames_arrive_in_order(pair) -> None:
    sender, receiver = pair
    for i in range(3):
        sender.send(1, b"frame %d" % i)
    assert [receiver.recv() for _ in range(3)] == [b"frame 0", b"frame 1", b"frame 2"]


def test_sending_to_a_rank_that_has_ended_drops_the_frames(pair) -> None:
    sender, receiver = pair
    sender.send(1, b"first")  # connects to the peer's socket
    assert receiver.recv() == b"first"
    receiver.data.close()
    # refused at first, then "not connected" on the same socket: both mean gone
    for _ in range(3):
        sender.send(1, b"lost")
    assert not sender.pending


def test_a_peer_without_room_gets_its_frames_later_in_order(pair) -> None:
    sender, receiver = pair
    sent = 0
    while not sender.pending:  # fill the peer's socket until a frame must wait
        sender.send(1, b"%d" % sent)
        sent += 1
        assert sent < 100_000
    for i in range(sent, sent + 5):
        sender.send(1, b"%d" % i)
    waiting = 1 + 5  # the frame that found no room, and the ones after it
    got = [receiver.recv() for _ in range(sent - 1)]
    sender.flush()
    got += [receiver.recv() for _ in range(waiting)]
    assert got == [b"%d" % i for i in range(sent + 5)]
    assert not sender.pending


def test_the_socket_of_a_full_peer_says_when_it_has_room_again(pair) -> None:
    """What waits that read nothing from the transport (a board's, the progress
    thread's) watch so that queued frames go as soon as the peer reads: ``room_fds``
    becomes writable once the peer has taken a frame, not before."""
    import select

    sender, receiver = pair
    assert sender.room_fds() == []
    sent = 0
    while not sender.pending:
        sender.send(1, b"%d" % sent)
        sent += 1
        assert sent < 100_000
    (fd,) = sender.room_fds()
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    assert poller.poll(0) == []  # full
    sender.wait_room()  # returns (after a few ms at most) with no room
    assert sender.pending
    receiver.recv()
    assert poller.poll(1000) == [(fd, select.POLLOUT)]
    sender.flush()
    got = [receiver.recv() for _ in range(sent - 1)]  # frame 0 was read above
    assert got == [b"%d" % i for i in range(1, sent)] and not sender.pending
    assert sender.room_fds() == []


def test_waits_that_read_nothing_return_once_a_full_peer_has_room(pair, monkeypatch) -> None:
    """A board's wait (``wait_room``) and a thread's wait with the engine let go
    (``wait_input``) return when a peer whose frames wait takes one, not only at their
    next retry (made 5 s here)."""
    import threading
    import time

    monkeypatch.setattr(transport_module, "RETRY_MS", 5000)
    sender, receiver = pair
    sent = 0
    for wait in (sender.wait_room, sender.wait_input):
        while not sender.pending:  # fill the peer's socket until a frame must wait
            sender.send(1, b"%d" % sent)
            sent += 1
        reader = threading.Timer(0.1, receiver.recv)
        reader.start()
        start = time.monotonic()
        wait()
        took = time.monotonic() - start
        reader.join()
        assert took < 2.5, f"{wait.__name__} returned after {took:.2f} s"
        sender.flush()
    assert not sender.pending


def test_a_process_of_another_job_gets_frames_under_the_id_it_knows_the_sender_by(
    tmp_path,
) -> None:
    """Two jobs (two session directories): a foreign id maps to the other job's socket, and
    the frame's sender field becomes the id the other side gave this process."""
    from ipympi.core import wire
    from ipympi.core.wire import FOREIGN_BASE
    from ipympi.progress.transport import WSOURCE_AT, endpoint

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = Transport(0, str(tmp_path / "a"), None)
    theirs = Transport(0, str(tmp_path / "b"), None)
    try:
        other, known_as = FOREIGN_BASE + 7, FOREIGN_BASE + 4096
        mine.add_foreign(other, endpoint(str(tmp_path / "b"), 0), known_as)
        header = wire.pack(wire.EAGER, 0, 0, 4, 0, 9, 0, 123, 1, 3)
        assert wire.unpack(header).wsource == 0
        marked = wire.pack(wire.EAGER, 0, 0, 0, 0, 0, 0x01020304, 0, 0, 0)
        assert marked[WSOURCE_AT : WSOURCE_AT + 4] == bytes([4, 3, 2, 1])  # where wsource is
        mine.send(other, header + b"abc")
        got = theirs.recv()
        assert wire.unpack(got).wsource == known_as and got[wire.HEADER_SIZE :] == b"abc"
        assert wire.unpack(got)._replace(wsource=0) == wire.unpack(header)
        mine.drop_foreign(other)
        assert other not in mine.foreign and other not in mine.peers
        with pytest.raises(ValueError):
            mine.add_foreign(5, endpoint(str(tmp_path / "b"), 0), known_as)
    finally:
        mine.close(linger_ms=0)
        theirs.close(linger_ms=0)


def test_a_receive_looks_longer_before_sleeping_when_every_rank_has_a_core(
    tmp_path, monkeypatch
) -> None:
    # with a core each, nobody needs the core a waiting rank gives away: it looks for
    # about a millisecond (a large message's FIN then needs no wake-up from sleep);
    # ranks of the job on other hosts do not count
    monkeypatch.setattr(transport_module, "cores", lambda: 4)
    made = []
    for rank, (size, nodes) in enumerate([(4, None), (5, None), (6, [0, 1, 0, 1, 0, 1])]):
        made.append(Transport(rank, str(tmp_path), None, nodes=nodes, size=size))
    try:
        assert [t.spins for t in made] == [SPIN_TRIES_ALONE, SPIN_TRIES, SPIN_TRIES_ALONE]
    finally:
        for transport in made:
            transport.close(linger_ms=0)
