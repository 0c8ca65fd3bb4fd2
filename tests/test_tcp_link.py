"""The tcp link between ranks on different hosts: delivery in order, and only signed frames.

Two links in one process (ranks 0 and 1, bound on two loopback addresses),
each delivering into a datagram socket the test reads: no MPI, no launcher.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from ipympi._tcp import TcpLink

KEY = b"k" * 16
MAX_FRAME = 64 * 1024 + 256


@pytest.fixture
def links(tmp_path: Path) -> Iterator[tuple[TcpLink, TcpLink, socket.socket, zmq.Context[Any]]]:
    ctx: zmq.Context[Any] = zmq.Context()
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    inbox.bind(str(tmp_path / "r1"))
    inbox.settimeout(5)
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(tmp_path / "r0"))
    zero = TcpLink(0, KEY, "127.0.0.2", str(tmp_path / "r0"), ctx, MAX_FRAME)
    one = TcpLink(1, KEY, "127.0.0.3", str(tmp_path / "r1"), ctx, MAX_FRAME)
    for link in (zero, one):
        link.set_peers([zero.endpoint, one.endpoint])
    try:
        yield zero, one, inbox, ctx
    finally:
        zero.close(0)
        one.close(0)
        ctx.term()
        for link in (zero, one):
            link.bridge.join(5)
        inbox.close()
        sink.close()


def _nothing_arrives(inbox: socket.socket, seconds: float = 0.3) -> bool:
    inbox.settimeout(seconds)
    try:
        inbox.recv(MAX_FRAME)
    except socket.timeout:
        return True
    finally:
        inbox.settimeout(5)
    return False


def test_endpoints_are_on_the_address_asked_for(links: Any) -> None:
    zero, one, _, _ = links
    assert zero.endpoint.startswith("tcp://127.0.0.2:")
    assert one.endpoint.startswith("tcp://127.0.0.3:")


def test_frames_arrive_whole_and_in_order(links: Any) -> None:
    zero, _, inbox, _ = links
    frames = [bytes([i % 256]) * size for i, size in enumerate([1, 100, 5000, MAX_FRAME, 0, 7])]
    for frame in frames:
        zero.send(1, frame)
    assert [inbox.recv(MAX_FRAME) for _ in frames] == frames


def test_unsigned_forged_and_replayed_frames_are_dropped(links: Any, capfd: Any) -> None:
    zero, one, inbox, ctx = links
    zero.send(1, b"genuine")
    assert inbox.recv(MAX_FRAME) == b"genuine"
    attacker = ctx.socket(zmq.PUSH)
    with contextlib.closing(attacker):
        attacker.setsockopt(zmq.LINGER, 0)
        attacker.connect(one.endpoint)
        prefix = (0).to_bytes(4, "little") + (1).to_bytes(4, "little") + (1).to_bytes(8, "little")
        attacker.send_multipart([prefix + b"\0" * 32, b"forged"])  # wrong signature
        attacker.send(b"one frame only")  # malformed
        assert _nothing_arrives(inbox)
        # A captured genuine message sent again: its sequence number is used up.
        other = TcpLink(0, KEY, "127.0.0.2", "/nonexistent", ctx, MAX_FRAME)
        other.set_peers([zero.endpoint, one.endpoint])
        other.send(1, b"replayed")  # sequence number 0 again
        assert _nothing_arrives(inbox)
        other.close(0)
    zero.send(1, b"still fine")
    assert inbox.recv(MAX_FRAME) == b"still fine"
    assert one.dropped == 3
    err = capfd.readouterr().err
    assert "dropped a tcp frame with a bad signature" in err
    assert "dropped a malformed tcp message" in err
    assert "out of order" in err


def test_a_frame_signed_with_another_session_key_is_dropped(links: Any) -> None:
    zero, one, inbox, ctx = links
    stranger = TcpLink(0, b"another key", "127.0.0.2", "/nonexistent", ctx, MAX_FRAME)
    stranger.set_peers([zero.endpoint, one.endpoint])
    stranger.send(1, b"from another job")
    assert _nothing_arrives(inbox)
    stranger.close(0)
    assert one.dropped == 1
