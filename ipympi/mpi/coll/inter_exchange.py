"""Two-way intercommunicator collectives: Allgather(v), Alltoall(v, w) and their object forms.

Each has two phases, one per direction (MPI 5.2.3): every process of one group
receives the other group's data. Every form exists blocking, nonblocking
(``Iallgather``...) and persistent (``Allgather_init``...).

Allgather, whose blocks have one size per group, goes through the leaders
(local rank 0): a binomial gather in each group, one exchange between the
leaders, a binomial broadcast of the other group's blocks in each group, so a
process sends O(log n) messages. Allgatherv (sizes known only to the
receivers) and the all-to-all calls (a distinct block for every pair of
processes) exchange one message with each process of the other group, as the
one-group Alltoall does with every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core import algorithms as algo
from ...core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ...core.schedule import Algorithm, Round
from ..buffers import send_memory
from ..commlock import comm_locked
from ..errhandling import mpi_call
from ..pickling import object_items, pickle
from ..request import Prequest, Request
from .bufforms import blocks, exchange, vector
from .inter_core import InterCollBase, no_in_place, once, shifted

if TYPE_CHECKING:
    from ..info import Info

__all__ = ["InterExchanges"]


def _datas(ops: Any) -> list[Any]:
    """The finishing step of an object exchange: the received pickles."""
    return [op.data for op in ops]


class InterExchanges(InterCollBase):
    """Allgather(v) and Alltoall(v, w) of ``MPI.Intercomm``."""

    __slots__ = ()

    def _exchange(
        self, call: str, kind: str, sends: list[Any], recvs: list[Any], finish: Any, mode: Form
    ) -> Any:
        """Every process sends ``sends[j]`` to and receives ``recvs[j]`` from remote j."""

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            rnd = Round(
                "exchange with the remote group",
                sends=[(ro + j, data) for j, data in enumerate(sends)],
                recvs=[(ro + j, target) for j, target in enumerate(recvs)],
            )
            return once(rnd), finish

        return self._inter(call, kind, 0, build, mode)

    # -- allgather -----------------------------------------------------------------------
    def _allgather(self, call: str, sendbuf: Any, recvbuf: Any, v: bool, mode: Form) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        m = self.Get_remote_size()
        block = send_memory(sendbuf)
        if v:
            views, finish = vector(recvbuf, m, writable=True)
            return self._exchange(call, "Allgatherv", [block] * m, views, finish, mode)
        whole, views, finish = blocks(recvbuf, m, writable=True)
        region = whole.mem[: views[0].nbytes * m]

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            def run() -> Algorithm:
                mine = memoryview(bytearray(block.nbytes * n)) if rank == 0 else None
                yield from shifted(algo.gather_binomial(rank, n, 0, block, mine), lo)
                if rank == 0:
                    yield Round(
                        "exchange the groups' blocks between the leaders",
                        sends=[(ro, mine)],
                        recvs=[(ro, region)],
                    )
                yield from shifted(algo.bcast_binomial(rank, n, 0, region), lo)

            return run(), finish

        return self._inter(call, "Allgather", 0, build, mode)

    @mpi_call
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Every process receives one block from each process of the other group."""
        self._allgather("Allgather", sendbuf, recvbuf, False, BLOCKING)

    @mpi_call
    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._allgather("Allgatherv", sendbuf, recvbuf, True, BLOCKING)

    @mpi_call
    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgather", sendbuf, recvbuf, False, NONBLOCKING)

    @mpi_call
    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgatherv", sendbuf, recvbuf, True, NONBLOCKING)

    @mpi_call
    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._allgather("Allgather_init", sendbuf, recvbuf, False, PERSISTENT)

    @mpi_call
    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._allgather("Allgatherv_init", sendbuf, recvbuf, True, PERSISTENT)

    @mpi_call
    @comm_locked
    def allgather(self, sendobj: Any) -> list[Any]:
        """Every process returns the other group's objects in rank order."""
        data = pickle.dumps(sendobj)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            def run() -> Algorithm:
                items = yield from shifted(algo.gather_objects(rank, n, 0, data), lo)
                wire = None
                if rank == 0:
                    (got,) = yield Round(
                        "exchange the groups' objects between the leaders",
                        sends=[(ro, pickle.dumps(items))],
                        recvs=[(ro, None)],
                    )
                    wire = bytes(got.data)
                return (yield from shifted(algo.bcast_objects(rank, n, 0, wire), lo))

            return run(), None

        wire = self._inter("allgather", "allgather", 0, build)
        return [pickle.loads(item) for item in pickle.loads(wire)]

    # -- alltoall --------------------------------------------------------------------------
    def _alltoall(self, call: str, kind: str, sendbuf: Any, recvbuf: Any, mode: Form) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        m = self.Get_remote_size()
        sends, recvs, finish = exchange(call, kind, sendbuf, recvbuf, m, m, False, inter=True)
        return self._exchange(call, kind, sends, recvs, finish, mode)

    @mpi_call
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Block j goes to process j of the other group; block j comes from it."""
        self._alltoall("Alltoall", "Alltoall", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._alltoall("Alltoallv", "Alltoallv", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """Alltoall with per-peer counts, byte displacements and datatypes:
        ``[buf, counts, displs, datatypes]``, one entry per process of the other group."""
        self._alltoall("Alltoallw", "Alltoallw", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoall", "Alltoall", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallv", "Alltoallv", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Ialltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallw", "Alltoallw", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._alltoall("Alltoall_init", "Alltoall", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._alltoall("Alltoallv_init", "Alltoallv", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    def Alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._alltoall("Alltoallw_init", "Alltoallw", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    @comm_locked
    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Object j goes to process j of the other group; returns the objects received."""
        m = self.Get_remote_size()
        sends = [pickle.dumps(item) for item in object_items(sendobj, m)]
        wires = self._exchange("alltoall", "alltoall", sends, [None] * m, _datas, BLOCKING)
        return [pickle.loads(w) for w in wires]
