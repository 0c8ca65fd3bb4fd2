"""The tcp link between ranks on different hosts: delivery in order, and only signed frames.

Two links in one process (ranks 0 and 1, bound on two loopback addresses),
read by the test: no MPI, no launcher.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from ipympi.progress.tcp import CHUNK, TcpLink

KEY = b"k" * 16
MAX_FRAME = 64 * 1024 + 256


@pytest.fixture
def links() -> Iterator[tuple[TcpLink, TcpLink, zmq.Context[Any]]]:
    ctx: zmq.Context[Any] = zmq.Context()
    zero = TcpLink(0, KEY, "127.0.0.2", ctx, MAX_FRAME)
    one = TcpLink(1, KEY, "127.0.0.3", ctx, MAX_FRAME)
    for link in (zero, one):
        link.set_peers([zero.endpoint, one.endpoint])
    try:
        yield zero, one, ctx
    finally:
        zero.close(0)
        one.close(0)
        ctx.term()


def _receive(link: TcpLink, timeout: float = 5.0) -> Any:
    """The next message ``link`` accepts, waiting up to ``timeout`` s; None if none comes."""
    deadline = time.monotonic() + timeout
    while True:
        received = link.recv_nowait()
        if received is not None:
            return received
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        link.inbox.poll(int(left * 1000) + 1)


def test_endpoints_are_on_the_address_asked_for(links: Any) -> None:
    zero, one, _ = links
    assert zero.endpoint.startswith("tcp://127.0.0.2:")
    assert one.endpoint.startswith("tcp://127.0.0.3:")


def test_frames_arrive_whole_and_in_order(links: Any) -> None:
    zero, one, _ = links
    frames = [bytes([i % 256]) * size for i, size in enumerate([1, 100, 5000, MAX_FRAME, 0, 7])]
    for frame in frames:
        zero.send(1, frame)
    assert [_receive(one) for _ in frames] == frames


def test_a_chunk_travels_as_header_and_data(links: Any) -> None:
    zero, one, _ = links
    data = bytes(range(256)) * (CHUNK // 256)
    zero.send(1, b"header", memoryview(data))
    header, chunk = _receive(one)
    assert header == b"header" and bytes(chunk) == data


def test_unsigned_forged_and_replayed_frames_are_dropped(links: Any, capfd: Any) -> None:
    zero, one, ctx = links
    zero.send(1, b"genuine")
    assert _receive(one) == b"genuine"
    attacker = ctx.socket(zmq.PUSH)
    with contextlib.closing(attacker):
        attacker.setsockopt(zmq.LINGER, 0)
        attacker.connect(one.endpoint)
        prefix = (0).to_bytes(4, "little") + (1).to_bytes(4, "little") + (1).to_bytes(8, "little")
        attacker.send_multipart([prefix + b"\0" * 32, b"forged"])  # wrong signature
        attacker.send(b"one frame only")  # malformed
        assert _receive(one, 0.3) is None
        # A captured genuine message sent again: its sequence number is used up.
        other = TcpLink(0, KEY, "127.0.0.2", ctx, MAX_FRAME)
        other.set_peers([zero.endpoint, one.endpoint])
        other.send(1, b"replayed")  # sequence number 0 again
        assert _receive(one, 0.3) is None
        other.close(0)
    zero.send(1, b"still fine")
    assert _receive(one) == b"still fine"
    assert one.dropped == 3
    err = capfd.readouterr().err
    assert "dropped a tcp frame with a bad signature" in err
    assert "dropped a malformed tcp message" in err
    assert "out of order" in err


def test_a_frame_signed_with_another_session_key_is_dropped(links: Any) -> None:
    zero, one, ctx = links
    stranger = TcpLink(0, b"another key", "127.0.0.2", ctx, MAX_FRAME)
    stranger.set_peers([zero.endpoint, one.endpoint])
    stranger.send(1, b"from another job")
    assert _receive(one, 0.3) is None
    stranger.close(0)
    assert one.dropped == 1
