"""What one message of an engine, or one event of the launcher, changes in a cluster's records.

Sans-I/O: the :class:`~ipympi.notebook.controller.cluster.Cluster` reads its
sockets and pipes and hands each decoded message here (:func:`record`): a
``hello`` makes its engine ready, a ``reply`` completes the rank's part of its
request (and says what the rank's user defined, and how many messages it sent
and received), output is kept in the request for whoever follows it. Output no
request asked for, and control frames that are not its ranks', go to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..engine.protocol import EngineMessage
from .records import EngineRecord, Submission

__all__ = ["OUTPUT_TYPES", "engine_of", "log_bad_control", "rank_of", "record"]

OUTPUT_TYPES = frozenset(
    {"stream", "display_data", "update_display_data", "clear_output", "execute_result", "error"}
)


def rank_of(ident: bytes, gen: int) -> int | None:
    """The rank of an engine's ``out``/``in`` identity of world ``gen``, else None."""
    for prefix in (b"out", b"in"):
        if ident.startswith(prefix):
            world, _, rank = ident[len(prefix) :].partition(b".")
            try:
                return int(rank) if int(world) == gen else None
            except ValueError:
                return None
    return None


def record(
    engines: list[EngineRecord], requests: Mapping[str, Submission], rank: int, msg: EngineMessage
) -> None:
    """Keep what ``msg``, from rank ``rank``'s engine, says."""
    if rank >= len(engines):
        return  # a message from an engine of an earlier, larger world
    if msg.type == "hello":
        engine = engines[rank]
        engine.ready = engine.launched = True
        engine.pid = int(msg.content.get("pid", engine.pid or 0)) or engine.pid
        engine.host = str(msg.content.get("host", ""))
        engine.mpi = str(msg.content.get("mpi", ""))
        return
    req = requests.get(msg.parent or "")
    if req is None:
        if msg.parent is None and msg.type == "stream":
            _log_unrequested(rank, msg.content)
        return
    if msg.type == "reply":
        req.replies[rank] = msg
        _note_reply(engines[rank], msg.content)
    elif msg.type in OUTPUT_TYPES:
        req.add_output((rank, msg.type, msg.content))
        req.said[rank] = req.said.get(rank, 0) + 1


def _note_reply(engine: EngineRecord, content: Mapping[str, Any]) -> None:
    """What a reply says about its engine: the user's variables, message counts."""
    names, p2p = content.get("names"), content.get("p2p")
    if isinstance(names, list):
        engine.names = tuple(map(str, names))
    if isinstance(p2p, dict):
        engine.sent = tuple(map(int, p2p.get("sent") or ()))
        engine.arrived = tuple(map(int, p2p.get("arrived") or ()))


def engine_of(engines: list[EngineRecord], event: Mapping[str, Any]) -> EngineRecord | None:
    """The engine a launcher's event is about: by rank, else by pid and host."""
    rank = event.get("rank")
    if isinstance(rank, int):
        return engines[rank] if 0 <= rank < len(engines) else None
    for engine in engines:
        if engine.pid == event.get("pid") and engine.host == event.get("host"):
            return engine
    return None


def _log_unrequested(rank: int, content: Mapping[str, Any]) -> None:
    """Output an engine wrote outside any request (at start-up, or from a thread of
    its own between cells) goes to the log, where a kernel's own start-up words go:
    no cell asked for it, and none should show it."""
    name, text = content.get("name", "stream"), str(content.get("text", ""))
    logging.getLogger(__name__).warning("[%s:%d] %s", name, rank, text.rstrip("\n"))


def log_bad_control(why: str) -> None:
    """A frame on a world's control socket that is not a message of its ranks."""
    logging.getLogger(__name__).warning("ignoring a bad control message: %s", why)
