"""The launcher's end of the control protocol: one ROUTER socket that every rank connects to.

Both ends that start ranks serve it: the launcher of ``python -m ipympi.run`` and a
notebook session's cluster (:mod:`ipympi.notebook.controller.cluster`), one per world.
The messages are those of :mod:`ipympi.core.control`, each signed with the world's key.
A :class:`ControlServer` binds the socket, sends to one rank or to several, receives
only well-formed messages from ranks of the world (a frame that is not one is counted
and handed to ``on_bad``, never to the caller), and asks the ranks what they are doing:
each query has an id, and :meth:`ControlServer.is_answer` keeps only the answers to the
latest, so that a rank too busy to answer in time is not taken, later, for what it does
now.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Callable

import zmq

from ..core import control as ctl

__all__ = ["ControlServer"]


class ControlServer:
    """A ROUTER for the control messages of ``nranks`` ranks, signed with ``key``.

    ``handover``: a rank's new socket takes its identity over from an old one still
    being closed (a rank's last word, an abort, may come on a socket of its own).
    ``on_bad`` is told why each malformed or foreign frame was ignored.
    """

    def __init__(
        self,
        context: zmq.Context[Any],
        key: bytes,
        nranks: int,
        *,
        handover: bool = False,
        on_bad: Callable[[str], None] | None = None,
    ) -> None:
        self.key = key
        self.nranks = nranks
        self.on_bad = on_bad
        self.bad_frames = 0
        self.query_id = 0  # of the latest query; answers carry it back
        self.socket: zmq.Socket[bytes] = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.socket.setsockopt(zmq.MAXMSGSIZE, ctl.MAX_FRAME + 64)
        if handover:
            self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)

    def bind(self, address: str) -> str:
        """Bind to ``address`` (ipc, or tcp with port 0); the address bound."""
        self.socket.bind(address)
        return self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def close(self) -> None:
        self.socket.close(linger=0)

    # -- sending ------------------------------------------------------------------------
    def send(self, rank: int, msg: Mapping[str, Any]) -> bool:
        """Send ``msg`` to ``rank``; False if its socket is not connected (yet, or any more)."""
        return self._send_frame(rank, ctl.encode(msg, self.key))

    def send_all(self, ranks: Iterable[int], msg: Mapping[str, Any]) -> list[int]:
        """Send ``msg`` to each of ``ranks``; the ranks it reached."""
        frame = ctl.encode(msg, self.key)
        return [rank for rank in ranks if self._send_frame(rank, frame)]

    def _send_frame(self, rank: int, frame: bytes) -> bool:
        try:
            self.socket.send_multipart([ctl.identity(rank), frame], zmq.NOBLOCK)
        except zmq.ZMQError:
            return False
        return True

    # -- receiving ----------------------------------------------------------------------
    def receive(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every message waiting now, as ``(rank, message)``; malformed frames are dropped
        (see ``on_bad``)."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                yield self._check(frames)
            except ctl.ControlProtocolError as exc:
                self.bad_frames += 1
                if self.on_bad is not None:
                    self.on_bad(str(exc))

    def _check(self, frames: list[bytes]) -> tuple[int, dict[str, Any]]:
        if len(frames) != 2:
            raise ctl.ControlProtocolError(f"{len(frames)} frames instead of 2")
        rank = ctl.rank_of(frames[0])
        msg = ctl.decode(frames[1], self.key)
        if msg.get("rank", rank) != rank or not 0 <= rank < self.nranks:
            raise ctl.ControlProtocolError(f"rank {msg.get('rank')} from {frames[0]!r}")
        return rank, msg

    # -- state queries ------------------------------------------------------------------
    def ask(self, ranks: Iterable[int]) -> list[int]:
        """Ask ``ranks`` what they are doing (a new query); the ranks that could be asked."""
        self.query_id += 1
        return self.send_all(ranks, {"type": ctl.QUERY, "id": self.query_id})

    def is_answer(self, msg: Mapping[str, Any]) -> bool:
        """Whether ``msg`` is a rank's answer to the latest query (not a late one)."""
        return msg["type"] == ctl.STATE and ctl.answers(msg, self.query_id)
