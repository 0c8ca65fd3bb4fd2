"""The transport's sockets between two ranks of one process, without a launcher."""

from __future__ import annotations

import pytest

from ipympi.progress.transport import Transport

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path):
    ranks = [Transport(rank, str(tmp_path), None) for rank in range(2)]
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
