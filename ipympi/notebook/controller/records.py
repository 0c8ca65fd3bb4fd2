"""What a cluster keeps about its engines and its requests, and the words it uses.

:class:`EngineRecord` is one rank's engine process as the controller knows
it; :class:`Submission` is one request sent to some ranks with everything they
said about it (:mod:`ipympi.notebook.controller.cluster` fills both in). Output is
pulled: the one that follows a request takes what came since its last look
(:meth:`Submission.take_output`), so the cluster calls back into nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..engine.protocol import EngineMessage

__all__ = [
    "UNINTERRUPTIBLE",
    "WORLD_WAS_ENDED",
    "EngineRecord",
    "Submission",
]

# What a cell's error says when ipympi ends a world of a real MPI.
UNINTERRUPTIBLE = "a rank inside a call of a real MPI cannot be interrupted"
WORLD_WAS_ENDED = "so the MPI world was ended (the next cell starts a fresh one)"


@dataclass
class EngineRecord:
    """What the controller knows about one rank's engine process."""

    rank: int
    pid: int | None = None  # known once spawned locally, or from the engine's hello
    host: str = ""
    ready: bool = False
    launched: bool = False  # its process has been started
    returncode: int | None = None  # Popen style, once the engine has exited
    state: dict[str, Any] = field(default_factory=dict)  # the last MPI state answer
    mpi: str = ""  # the MPI library it runs on, when it is not ipympi's own
    ended_by: str = ""  # why the launcher ended it with its world, if it did
    names: tuple[str, ...] = ()  # the variables its user defined, as its last reply said
    # Point-to-point messages it sent to / received from each world rank, as it last said.
    sent: tuple[int, ...] = ()
    arrived: tuple[int, ...] = ()

    @property
    def alive(self) -> bool:
        return self.launched and self.returncode is None


@dataclass
class Submission:
    """One request sent to some ranks, and everything they said about it."""

    id: str
    kind: str
    targets: list[int]
    replies: dict[int, EngineMessage] = field(default_factory=dict)
    messages: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    said: dict[int, int] = field(default_factory=dict)  # rank -> output messages so far
    interrupted: bool = False
    ended: str | None = None  # why the world was ended while this request ran
    started: float = field(default_factory=time.monotonic)
    shown: bool = False  # a cell whose output is being shown as it comes
    taken: int = 0  # how many of ``messages`` the one following the request has taken
    fresh_since: float = 0.0  # when the oldest message not taken yet came

    def add_output(self, *items: tuple[int, str, dict[str, Any]]) -> None:
        """Keep output that came for the request; whoever follows it takes it."""
        if items and self.taken >= len(self.messages):
            self.fresh_since = time.monotonic()
        self.messages.extend(items)

    def take_output(self) -> list[tuple[int, str, dict[str, Any]]]:
        """The output that came since the last take (all of it at the first)."""
        if self.taken >= len(self.messages):
            return []
        batch = self.messages[self.taken :]
        self.taken = len(self.messages)
        return batch

    @property
    def done(self) -> bool:
        return all(rank in self.replies for rank in self.targets)

    @property
    def pending(self) -> list[int]:
        return [rank for rank in self.targets if rank not in self.replies]

    def errors(self) -> dict[int, dict[str, Any]]:
        """The error content per failed rank (from the ``error`` message, else the reply)."""
        found: dict[int, dict[str, Any]] = {}
        for rank, kind, content in self.messages:
            if kind == "error" and rank not in found:
                found[rank] = content
        for rank, reply in self.replies.items():
            if reply.content.get("status") != "ok" and rank not in found:
                found[rank] = {
                    "ename": reply.content.get("ename", "Error"),
                    "evalue": reply.content.get("evalue", ""),
                    "traceback": reply.content.get("traceback", []),
                }
            if rank in found and reply.content.get("where"):
                found[rank].setdefault("where", reply.content["where"])
        return found
