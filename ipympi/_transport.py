"""Sockets of one rank: where frames come in, go out, and control talks.

Each rank binds one zmq PULL socket (``ipc://<session dir>/r<rank>``) and
connects one PUSH socket per peer, lazily, on the first message to it. zmq keeps
per-pipe FIFO order, which gives MPI's non-overtaking rule between two ranks.
High-water marks are off, so a standard-mode send never blocks on a slow
receiver (MPICH behaves the same for small messages).

The session directory is private (mode 0700, created by the launcher), so no
other local user can connect to a rank's endpoint.

Besides the data socket a rank has:

* a *doorbell* (a pipe) that a thread entering MPI rings to take the socket
  back from the progress thread;
* an optional control DEALER connected to the launcher or controller (hello,
  abort, state queries; see ``_control``).
"""

from __future__ import annotations

import contextlib
import os
import threading

import zmq

__all__ = ["Transport"]

# A blocked receive wakes up this often (ms) to re-check liveness and flags.
RECV_TIMEOUT_MS = 1000


def endpoint(session_dir: str, rank: int) -> str:
    """The data endpoint of ``rank`` in a session."""
    return f"ipc://{session_dir}/r{rank}"


class Transport:
    """The zmq sockets and doorbell of one rank (not thread-safe: callers lock)."""

    def __init__(self, rank: int, session_dir: str, ctl_endpoint: str | None) -> None:
        self.rank = rank
        self.session_dir = session_dir
        self.context = zmq.Context()
        self.data = self.context.socket(zmq.PULL)
        self.data.setsockopt(zmq.RCVHWM, 0)
        self.data.setsockopt(zmq.LINGER, 0)
        self.data.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
        self.data.bind(endpoint(session_dir, rank))
        self._peers: dict[int, zmq.Socket] = {}
        self.bell_r, self.bell_w = os.pipe()
        os.set_blocking(self.bell_r, False)
        self.ctl: zmq.Socket | None = None
        self.ctl_lock = threading.Lock()
        if ctl_endpoint:
            self.ctl = self.context.socket(zmq.DEALER)
            self.ctl.setsockopt(zmq.IDENTITY, b"rank%d" % rank)
            self.ctl.setsockopt(zmq.LINGER, 2000)
            self.ctl.connect(ctl_endpoint)

    # -- data ----------------------------------------------------------------
    def peer(self, wrank: int) -> zmq.Socket:
        """The PUSH socket to world rank ``wrank`` (connected on first use)."""
        sock = self._peers.get(wrank)
        if sock is None:
            sock = self.context.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.LINGER, 5000)
            sock.setsockopt(zmq.RECONNECT_IVL, 10)
            sock.connect(endpoint(self.session_dir, wrank))
            self._peers[wrank] = sock
        return sock

    def send(self, wrank: int, frame: bytes) -> None:
        self.peer(wrank).send(frame, copy=True)

    def send_parts(self, wrank: int, parts: list) -> None:
        """Send a header and a large payload without copying the payload."""
        self.peer(wrank).send_multipart(parts, copy=False)

    # -- doorbell ------------------------------------------------------------
    def ring(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self.bell_w, b"\x01")

    def drain_bell(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.bell_r, 4096):
                pass

    # -- control -------------------------------------------------------------
    def send_control(self, data: bytes) -> None:
        if self.ctl is not None:
            with self.ctl_lock:
                self.ctl.send(data)

    def close(self, linger_ms: int = 5000) -> None:
        """Close every socket; queued outgoing frames get ``linger_ms`` to leave."""
        for sock in self._peers.values():
            sock.close(linger=linger_ms)
        self._peers.clear()
        if self.ctl is not None:
            self.ctl.close(linger=1000)
            self.ctl = None
        self.data.close(linger=0)
        self.context.term()
        for fd in (self.bell_r, self.bell_w):
            with contextlib.suppress(OSError):
                os.close(fd)
