"""Frames between ranks on different hosts: zmq over tcp, every frame signed.

Ranks on one host exchange Unix datagrams (:mod:`ipympi._transport`). A rank
whose world spans several hosts also has a :class:`TcpLink`: one zmq PULL
socket bound to ``tcp://ADDRESS:PORT`` on the interface the launcher chose for
its host (never on every interface), and one PUSH socket per peer on another
host, connected to the endpoint that peer announced at start-up (the
launcher's ``peers`` table, see :mod:`ipympi._control`). zmq's I/O thread
does the connecting, queueing and partial writes, so a send never blocks.

Wire format of one tcp message (two zmq frames)::

    frame 0: source world rank (u32) | destination world rank (u32) |
             sequence number (u64) | HMAC-SHA256 of (those 16 bytes + frame 1)
    frame 1: the rank-to-rank frame itself (see ``_wire``)

The key is the session's secret, which only the job's own processes have, so
a process elsewhere on the network can neither inject a frame nor replay one:
the receiver accepts from each source only the next sequence number in order
(one tcp connection per pair keeps them in order), and drops the rest with a
warning on stderr.

A bridge thread receives, verifies, and puts each frame into the rank's own
datagram socket, where it is read like any local frame: the rank's waits,
probes and progress thread stay the same whatever host a peer is on, and
frames of one source keep their order (MPI's non-overtaking rule).
"""

from __future__ import annotations

import contextlib
import hmac
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from hashlib import sha256
from typing import Any

import zmq

__all__ = ["TcpLink"]

_HEAD = struct.Struct("<IIQ")  # source, destination, sequence number
_MAC = 32
_SMALL = 4096  # frames up to this size are signed in one call on a joined copy


def _mac(key: bytes, head: bytes, frame: bytes) -> bytes:
    if len(frame) <= _SMALL:
        return hmac.digest(key, head + frame, "sha256")
    signer = hmac.new(key, head, sha256)
    signer.update(frame)
    return signer.digest()


class TcpLink:
    """One rank's tcp endpoint and its connections to ranks on other hosts.

    ``deliver_to`` is the path of the rank's own datagram socket, where
    received frames go. ``max_frame`` bounds what is accepted.
    """

    def __init__(
        self,
        rank: int,
        key: bytes,
        bind_address: str,
        deliver_to: str,
        context: zmq.Context[Any],
        max_frame: int,
    ) -> None:
        self.rank = rank
        self.key = key
        self.max_frame = max_frame
        self._context = context
        self._inbox = context.socket(zmq.PULL)
        self._inbox.setsockopt(zmq.LINGER, 0)
        self._inbox.setsockopt(zmq.RCVHWM, 0)
        self._inbox.setsockopt(zmq.MAXMSGSIZE, max_frame + _HEAD.size + _MAC + 64)
        host = f"[{bind_address}]" if ":" in bind_address else bind_address
        if ":" in bind_address:
            self._inbox.setsockopt(zmq.IPV6, 1)
        port = self._inbox.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self._endpoints: list[str] = []
        self._out: dict[int, zmq.Socket[Any]] = {}
        self._sent: dict[int, int] = {}  # destination -> sequence numbers used
        self._expected: dict[int, int] = {}  # source -> next sequence number
        self.dropped = 0  # frames refused (bad signature, replay, oversize)
        self._deliver_to = deliver_to
        self._bridge = threading.Thread(target=self._run_bridge, name="ipympi-tcp", daemon=True)
        self._bridge.start()

    def set_peers(self, endpoints: Sequence[str]) -> None:
        """Every rank's endpoint, in world rank order (from the launcher's ``peers``)."""
        self._endpoints = list(endpoints)

    # -- sending (the caller holds the engine) -----------------------------------------
    def send(self, wrank: int, frame: bytes) -> None:
        """Queue ``frame`` for world rank ``wrank`` on another host; never blocks."""
        sock = self._out.get(wrank)
        if sock is None:
            sock = self._connect(wrank)
        seq = self._sent.get(wrank, 0)
        self._sent[wrank] = seq + 1
        head = _HEAD.pack(self.rank, wrank, seq)
        sock.send_multipart((head + _mac(self.key, head, frame), frame), copy=len(frame) < 65536)

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

    # -- receiving (the bridge thread) ------------------------------------------------
    def _run_bridge(self) -> None:
        out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            while True:
                try:
                    parts = self._inbox.recv_multipart()
                except zmq.ContextTerminated:
                    return
                frame = self._verify(parts)
                if frame is not None:
                    try:
                        out.sendto(frame, self._deliver_to)
                    except OSError:
                        return  # the rank's socket is gone: it is finalizing
        finally:
            out.close()
            self._inbox.close(0)

    def _verify(self, parts: list[bytes]) -> bytes | None:
        """The frame of a well-signed, in-order tcp message, else None (and a warning)."""
        if len(parts) != 2 or len(parts[0]) != _HEAD.size + _MAC:
            return self._refuse("a malformed tcp message")
        prefix, frame = parts
        head = prefix[: _HEAD.size]
        source, dest, seq = _HEAD.unpack(head)
        if not hmac.compare_digest(prefix[_HEAD.size :], _mac(self.key, head, frame)):
            return self._refuse("a tcp frame with a bad signature (not from this session)")
        if dest != self.rank:
            return self._refuse(f"a tcp frame for rank {dest}")
        expected = self._expected.get(source, 0)
        if seq != expected:
            return self._refuse(
                f"tcp frame {seq} from rank {source} out of order (expected {expected})"
            )
        self._expected[source] = seq + 1
        if len(frame) > self.max_frame:
            return self._refuse(f"a tcp frame of {len(frame)} bytes from rank {source}")
        return frame

    def _refuse(self, what: str) -> None:
        self.dropped += 1
        with contextlib.suppress(Exception):
            print(f"ipympi: rank {self.rank}: dropped {what}", file=sys.stderr, flush=True)
        return None

    # -- closing ----------------------------------------------------------------------
    def close(self, linger_ms: int = 1000) -> None:
        """Close the outgoing sockets; queued frames get ``linger_ms`` to leave.

        The bridge thread ends when the shared context is terminated.
        """
        for sock in self._out.values():
            sock.close(linger=linger_ms)
        self._out.clear()

    @property
    def bridge(self) -> threading.Thread:
        return self._bridge
