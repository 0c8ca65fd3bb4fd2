"""The output of MPICH's ``mpiexec`` (Hydra), each chunk marked with its process group and rank.

On the mpi4py backend the engines' own output reaches the notebook through the engine
protocol; what else their world prints comes out of ``mpiexec``: the keepers' exit
reports and the launcher's own words, and everything the processes that the ranks start
with ``Comm.Spawn`` write, which Hydra forwards from their pipes to its own. Given
``-prepend-pattern`` (:meth:`HydraOutput.option`), Hydra starts each chunk it forwards
with a marker naming the chunk's process group (0: the engines' world; 1, 2, ...: the
groups spawned since, in order) and its rank in that group; :meth:`HydraOutput.split`
cuts what is read back into ``(group, rank, bytes)`` pieces. The marker holds a random
token, so that no process can fake one.

A spawned process is labelled as on the built-in MPI, with its index among the world's
processes: after the ``n`` ranks, the groups in the order they were spawned
(:meth:`HydraOutput.index`). Hydra does not say how large a group is: its size is
taken as its highest rank seen so far, so a group whose last ranks never print shifts the
labels of the groups after it.
"""

from __future__ import annotations

import re
import secrets

__all__ = ["HydraOutput"]


class HydraOutput:
    """Marks and splits the output of one ``mpiexec`` (one world of ``n`` ranks)."""

    def __init__(self, n: int) -> None:
        self.n = n
        token = secrets.token_hex(6)
        self._pattern = f"\x02{token}:%g:%r\x03"
        self._marker = re.compile(b"\x02" + token.encode() + rb":(\d+):(\d+)\x03")
        self._current: dict[int, tuple[int, int]] = {}  # pipe -> the group and rank writing
        self._held: dict[int, bytes] = {}  # pipe -> the start of a marker cut by a read
        self._sizes: dict[int, int] = {}  # spawned group -> its size, as far as seen

    def option(self) -> list[str]:
        """The ``mpiexec`` arguments that mark each chunk."""
        return ["-prepend-pattern", self._pattern]

    def split(self, fd: int, data: bytes, ended: bool) -> list[tuple[int, int, bytes]]:
        """``(group, rank, bytes)`` pieces of what pipe ``fd`` brought, in order."""
        data = self._held.pop(fd, b"") + data
        start = data.rfind(b"\x02")
        if not ended and start != -1 and b"\x03" not in data[start:]:
            self._held[fd] = data[start:]  # a marker cut in two: wait for its end
            data = data[:start]
        pieces: list[tuple[int, int, bytes]] = []
        current, at = self._current.get(fd, (0, 0)), 0
        for found in self._marker.finditer(data):
            if found.start() > at:
                pieces.append((*current, data[at : found.start()]))
            current, at = (int(found[1]), int(found[2])), found.end()
            if current[0]:
                self._sizes[current[0]] = max(self._sizes.get(current[0], 0), current[1] + 1)
        if at < len(data):
            pieces.append((*current, data[at:]))
        self._current[fd] = current
        return pieces

    def index(self, group: int, rank: int) -> int:
        """The index among the world's processes of ``rank`` of spawned ``group``."""
        return self.n + sum(self._sizes.get(g, 0) for g in range(1, group)) + rank
