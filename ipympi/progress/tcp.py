"""Frames between ranks on different hosts: zmq over tcp, every frame signed.

Ranks on one host exchange Unix datagrams (:mod:`ipympi.progress.transport`). A rank
whose world spans several hosts also has a :class:`TcpLink`: one zmq PULL
socket bound to ``tcp://ADDRESS:PORT`` on the interface the launcher chose for
its host (never on every interface), and one PUSH socket per peer on another
host, connected to the endpoint that peer announced at start-up (the
launcher's ``peers`` table, see :mod:`ipympi.core.control`). zmq's I/O thread
does the connecting, queueing and partial writes, so a send never blocks.
The thread that waits for input reads the PULL socket itself, next to the
datagram socket (as it reads that one): no extra thread between a frame and
the rank.

Wire format of one tcp message (two or three zmq frames)::

    frame 0: source world rank (u32) | destination world rank (u32) |
             sequence number (u64) | HMAC-SHA256 of (those 16 bytes + the rest)
    frame 1: the rank-to-rank frame itself (see ``core.wire``)
    frame 2: (a chunk of a large message only) its data, sent without a copy

The key is the session's secret, which only the job's own processes have, so
a process elsewhere on the network can neither inject a frame nor replay one:
the receiver accepts from each source only the next sequence number in order
(one tcp connection per pair keeps them in order), and drops anything else
with a warning on stderr. Large messages cross in chunks of :data:`CHUNK`
bytes, each signed on its own, so the sender signs the next chunk while the
receiver checks the last.
"""

from __future__ import annotations

import hmac
import struct
import sys
from collections.abc import Sequence
from hashlib import sha256
from typing import Any, Union

import zmq

__all__ = ["CHUNK", "TcpLink"]

CHUNK = 1 << 20  # bytes of a large message per tcp message
_HEAD = struct.Struct("<IIQ")  # source, destination, sequence number
_MAC = 32
_SMALL = 4096  # frames up to this size are signed in one call on a joined copy

# What a received message brings: a frame, or a chunk's header frame and its data.
Received = Union[bytes, "tuple[bytes, memoryview]"]


def _mac(key: bytes, head: bytes, frame: bytes, data: Any = None) -> bytes:
    if data is None and len(frame) <= _SMALL:
        return hmac.digest(key, head + frame, "sha256")
    signer = hmac.new(key, head, sha256)
    signer.update(frame)
    if data is not None:
        signer.update(data)
    return signer.digest()


class TcpLink:
    """One rank's tcp endpoint and its connections to ranks on other hosts.

    The caller serialises every use (the rank's engine lock); ``inbox`` is the
    socket to watch for input. Frames above ``max_frame`` bytes (besides a
    chunk's data) are refused.
    """

    def __init__(
        self, rank: int, key: bytes, bind_address: str, context: zmq.Context[Any], max_frame: int
    ) -> None:
        self.rank = rank
        self.key = key
        self.max_frame = max_frame
        self._context = context
        self.inbox = context.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.inbox.setsockopt(zmq.RCVHWM, 0)
        self.inbox.setsockopt(zmq.MAXMSGSIZE, max_frame + CHUNK + _HEAD.size + _MAC + 64)
        host = f"[{bind_address}]" if ":" in bind_address else bind_address
        if ":" in bind_address:
            self.inbox.setsockopt(zmq.IPV6, 1)
        port = self.inbox.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self._endpoints: list[str] = []
        self._out: dict[int, zmq.Socket[Any]] = {}
        self._sent: dict[int, int] = {}  # destination -> sequence numbers used
        self._expected: dict[int, int] = {}  # source -> next sequence number
        self.dropped = 0  # messages refused (bad signature, replay, oversize)

    def set_peers(self, endpoints: Sequence[str]) -> None:
        """Every rank's endpoint, in world rank order (from the launcher's ``peers``)."""
        self._endpoints = list(endpoints)

    # -- sending --------------------------------------------------------------------
    def send(self, wrank: int, frame: bytes, data: memoryview | None = None) -> None:
        """Queue ``frame`` (and a chunk's ``data``) for ``wrank`` on another host; never blocks.

        ``data`` is sent without a copy: it must not change until the message
        has left (a large send's buffer is the user's until the receiver has
        it all).
        """
        sock = self._out.get(wrank)
        if sock is None:
            sock = self._connect(wrank)
        seq = self._sent.get(wrank, 0)
        self._sent[wrank] = seq + 1
        head = _HEAD.pack(self.rank, wrank, seq)
        signed = head + _mac(self.key, head, frame, data)
        if data is None:
            sock.send_multipart((signed, frame), copy=len(frame) < 65536)
        else:
            sock.send_multipart((signed, frame, data), copy=False)

    def _connect(self, wrank: int) -> zmq.Socket[Any]:
        if wrank >= len(self._endpoints):
            raise RuntimeError(f"no tcp endpoint known for rank {wrank}")
        sock = self._context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)  # a standard send never blocks
        sock.setsockopt(zmq.LINGER, 1000)
        if "[" in self._endpoints[wrank]:
            sock.setsockopt(zmq.IPV6, 1)
        sock.connect(self._endpoints[wrank])
        self._out[wrank] = sock
        return sock

    # -- receiving ------------------------------------------------------------------
    def recv_nowait(self) -> Received | None:
        """The next well-signed, in-order message waiting, else None.

        Malformed, forged, foreign and replayed messages are dropped on the
        way (counted in ``dropped``, with a warning on stderr).
        """
        while True:
            try:
                parts = self.inbox.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            received = self._verify(parts)
            if received is not None:
                return received

    def _verify(self, parts: list[zmq.Frame]) -> Received | None:
        if len(parts) not in (2, 3) or len(parts[0]) != _HEAD.size + _MAC:
            self._refuse("a malformed tcp message")
            return None
        prefix = parts[0].bytes
        frame = parts[1].bytes
        data = parts[2].buffer if len(parts) == 3 else None
        head = prefix[: _HEAD.size]
        source, dest, seq = _HEAD.unpack(head)
        if not hmac.compare_digest(prefix[_HEAD.size :], _mac(self.key, head, frame, data)):
            self._refuse("a tcp frame with a bad signature (not from this session)")
            return None
        if dest != self.rank:
            self._refuse(f"a tcp frame for rank {dest}")
            return None
        expected = self._expected.get(source, 0)
        if seq != expected:
            self._refuse(f"tcp frame {seq} from rank {source} out of order (expected {expected})")
            return None
        self._expected[source] = seq + 1
        if len(frame) > self.max_frame:
            self._refuse(f"a tcp frame of {len(frame)} bytes from rank {source}")
            return None
        return frame if data is None else (frame, data)

    def _refuse(self, what: str) -> None:
        self.dropped += 1
        try:
            print(f"ipympi: rank {self.rank}: dropped {what}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        return None

    # -- closing ----------------------------------------------------------------------
    def close(self, linger_ms: int = 1000) -> None:
        """Close every socket; queued frames get ``linger_ms`` to leave."""
        for sock in self._out.values():
            sock.close(linger=linger_ms)
        self._out.clear()
        self.inbox.close(0)
