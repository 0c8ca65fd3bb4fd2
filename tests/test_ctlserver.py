"""The control server of launchers and clusters, over real zmq sockets in one process.

Ranks are DEALER sockets with their rank identities, as the runtime connects them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq

from ipympi.core import control as ctl
from ipympi.launch.ctlserver import ControlServer

pytestmark = pytest.mark.timeout(30)

KEY = b"k" * 16


@pytest.fixture
def world(tmp_path) -> Iterator[tuple[ControlServer, list[zmq.Socket], list[str]]]:
    context = zmq.Context()
    bad: list[str] = []
    server = ControlServer(context, KEY, 2, on_bad=bad.append)
    address = server.bind(f"ipc://{tmp_path}/ctl")
    ranks = []
    for rank in range(3):  # rank 2 is not of this world of 2
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, ctl.identity(rank))
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        ranks.append(sock)
    try:
        yield server, ranks, bad
    finally:
        for sock in ranks:
            sock.close()
        server.close()
        context.term()


def received(server: ControlServer, count: int) -> list[tuple[int, dict]]:
    """What the server receives until ``count`` messages or bad frames came (or 5 s)."""
    got: list[tuple[int, dict]] = []
    deadline = time.monotonic() + 5
    while len(got) + server.bad_frames < count and time.monotonic() < deadline:
        server.socket.poll(100)
        got.extend(server.receive())
    return got


def hello(rank: int) -> dict:
    return {"type": ctl.HELLO, "rank": rank, "pid": 100 + rank, "host": "here"}


def test_messages_of_the_ranks_arrive_with_their_rank(world) -> None:
    server, ranks, bad = world
    ranks[1].send(ctl.encode(hello(1), KEY))
    ranks[0].send(ctl.encode(hello(0), KEY))
    got = sorted(received(server, 2), key=lambda item: item[0])
    assert [(rank, msg["pid"]) for rank, msg in got] == [(0, 100), (1, 101)]
    assert bad == [] and server.bad_frames == 0


def test_frames_that_are_not_messages_of_this_world_are_reported_and_dropped(world) -> None:
    server, ranks, bad = world
    ranks[0].send(ctl.encode(hello(0), b"another key....."))  # not signed with the key
    ranks[0].send(ctl.encode(hello(1), KEY))  # says it is rank 1
    ranks[2].send(ctl.encode(hello(2), KEY))  # not a rank of a world of 2
    ranks[1].send_multipart([ctl.encode(hello(1), KEY), b"extra"])  # one frame too many
    ranks[1].send(ctl.encode(hello(1), KEY))  # the only good one
    got = received(server, 5)
    assert [rank for rank, _ in got] == [1]
    assert server.bad_frames == 4
    assert any("bad signature" in why for why in bad)
    assert any("3 frames instead of 2" in why for why in bad)
    assert sum("rank " in why and "from b'rank" in why for why in bad) == 2


def test_only_answers_to_the_latest_query_count(world) -> None:
    server, ranks, _ = world
    for rank in (0, 1):  # their connections are up once their hellos came
        ranks[rank].send(ctl.encode(hello(rank), KEY))
    assert len(received(server, 2)) == 2
    assert server.ask([0, 1]) == [0, 1]
    first = server.query_id
    for sock in ranks[:2]:
        query = ctl.decode(sock.recv(), KEY)
        assert query == {"type": ctl.QUERY, "id": first}
    late = {"type": ctl.STATE, "rank": 0, "state": "idle", "query": first}
    server.ask([0])
    assert server.query_id == first + 1
    assert not server.is_answer(late)
    assert server.is_answer({**late, "query": first + 1})
    assert server.is_answer({"type": ctl.STATE, "rank": 0, "state": "idle"})  # unnumbered
    assert not server.is_answer(hello(0))


def test_sending_to_a_rank_that_is_not_connected_says_so(world) -> None:
    server, ranks, _ = world
    ranks[0].send(ctl.encode(hello(0), KEY))  # make sure rank 0's connection is up
    received(server, 1)
    assert server.send(0, {"type": ctl.SIGNAL, "signal": 2})
    assert not server.send(7, {"type": ctl.SIGNAL, "signal": 2})
    assert server.send_all([0, 7], {"type": ctl.SIGNAL, "signal": 15}) == [0]
    assert ctl.decode(ranks[0].recv(), KEY)["signal"] == 2
