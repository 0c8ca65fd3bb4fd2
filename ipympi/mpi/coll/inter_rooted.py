"""Rooted intercommunicator collectives: Bcast, Gather(v), Scatter(v) and their object forms.

They are one-way (MPI 5.2.3): the root passes ``ROOT``, the other processes of
its group ``PROC_NULL`` and take no part, and the processes of the other group
pass the root's rank in their remote group. Every form exists blocking,
nonblocking (``Ibcast``...) and persistent (``Bcast_init``...).

Data travel through the other group's leader (its local rank 0) with the
one-group tree algorithms, so the root sends or receives one message whatever
the other group's size:

* Bcast: root -> leader, then a binomial broadcast in the group;
* Gather: binomial gather to the leader, then one message to the root;
* Scatter: one message to the leader, then a binomial scatter in the group.

The v-variants have per-process sizes known only at the root, so the root
exchanges one message with each process of the other group, as the one-group
Gatherv/Scatterv do with every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core import algorithms as algo
from ...core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ...core.schedule import Algorithm, Round
from ..buffers import recv_buffer, send_buffer, send_memory
from ..commlock import comm_locked
from ..errhandling import mpi_call
from ..pickling import object_items, pickle
from ..request import Prequest, Request
from .bufforms import blocks, unpack_after, vector
from .inter_core import InterCollBase, no_in_place, nothing, once, shifted

if TYPE_CHECKING:
    from ..info import Info

__all__ = ["InterRooted"]


class InterRooted(InterCollBase):
    """Bcast, Gather(v), Scatter(v) of ``MPI.Intercomm``."""

    __slots__ = ()

    # -- bcast -------------------------------------------------------------------------
    def _bcast(self, call: str, buf: Any, root: int, mode: Form = BLOCKING) -> Any:
        no_in_place(call, buf)
        role, uroot = self._role(root, call)
        spec = None
        if role == "root":
            spec = send_buffer(buf)
        elif role == "leaf":
            spec = recv_buffer(buf)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return nothing(), None
            assert spec is not None
            mem = spec.mem
            if role == "root":
                return once(Round("send to the remote leader", sends=[(ro, mem)])), None

            def run() -> Algorithm:
                if rank == 0:
                    yield Round("receive from the root", recvs=[(uroot, mem)])
                yield from shifted(algo.bcast_binomial(rank, n, 0, mem), lo)

            return run(), unpack_after(spec)

        return self._inter(call, "Bcast", uroot, build, mode)

    @mpi_call
    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast from the ``ROOT`` process to every process of the other group."""
        self._bcast("Bcast", buf, root)

    @mpi_call
    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        return self._bcast("Ibcast", buf, root, NONBLOCKING)

    @mpi_call
    def Bcast_init(self, buf: Any, root: int = 0, info: Info | None = None) -> Prequest:
        return self._bcast("Bcast_init", buf, root, PERSISTENT)

    @mpi_call
    @comm_locked
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Lower-case Bcast: the receiving group returns the object, the root's group None."""
        role, uroot = self._role(root, "bcast")
        data = pickle.dumps(obj) if role == "root" else None

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return nothing(), None
            if role == "root":
                return once(Round("send to the remote leader", sends=[(ro, data)])), None

            def run() -> Algorithm:
                wire = None
                if rank == 0:
                    (op,) = yield Round("receive from the root", recvs=[(uroot, None)])
                    wire = bytes(op.data)
                return (yield from shifted(algo.bcast_objects(rank, n, 0, wire), lo))

            return run(), None

        wire = self._inter("bcast", "bcast", uroot, build)
        return None if role != "leaf" else pickle.loads(wire)

    # -- gather ------------------------------------------------------------------------
    def _gather(self, call: str, sendbuf: Any, recvbuf: Any, root: int, v: bool, mode: Form) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        role, uroot = self._role(root, call)
        m = self.Get_remote_size()
        views: list[memoryview] = []
        region = None
        finish = None
        block = None
        if role == "root":
            if v:
                views, finish = vector(recvbuf, m, writable=True)
            else:
                whole, views, finish = blocks(recvbuf, m, writable=True)
                region = whole.mem[: views[0].nbytes * m]
        elif role == "leaf":
            block = send_memory(sendbuf)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":
                if v:
                    recvs = [(ro + j, views[j]) for j in range(m)]
                    return once(Round("receive every block", recvs=recvs)), finish
                rnd = Round("receive the blocks from the remote leader", recvs=[(ro, region)])
                return once(rnd), finish
            if role == "idle":
                return nothing(), None
            assert block is not None
            if v:
                return once(Round("send to the root", sends=[(uroot, block)])), None

            def run() -> Algorithm:
                out = memoryview(bytearray(block.nbytes * n)) if rank == 0 else None
                yield from shifted(algo.gather_binomial(rank, n, 0, block, out), lo)
                if rank == 0:
                    yield Round("send the group's blocks to the root", sends=[(uroot, out)])

            return run(), None

        return self._inter(call, "Gatherv" if v else "Gather", uroot, build, mode)

    @mpi_call
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """The ``ROOT`` process receives one block from each process of the other group."""
        self._gather("Gather", sendbuf, recvbuf, root, False, BLOCKING)

    @mpi_call
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        self._gather("Gatherv", sendbuf, recvbuf, root, True, BLOCKING)

    @mpi_call
    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igather", sendbuf, recvbuf, root, False, NONBLOCKING)

    @mpi_call
    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igatherv", sendbuf, recvbuf, root, True, NONBLOCKING)

    @mpi_call
    def Gather_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._gather("Gather_init", sendbuf, recvbuf, root, False, PERSISTENT)

    @mpi_call
    def Gatherv_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._gather("Gatherv_init", sendbuf, recvbuf, root, True, PERSISTENT)

    @mpi_call
    @comm_locked
    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """The ``ROOT`` process returns the other group's objects in rank order."""
        role, uroot = self._role(root, "gather")
        data = pickle.dumps(sendobj) if role == "leaf" else b""

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":

                def receive() -> Algorithm:
                    (op,) = yield Round("receive from the remote leader", recvs=[(ro, None)])
                    return [pickle.loads(item) for item in pickle.loads(op.data)]

                return receive(), None
            if role == "idle":
                return nothing(), None

            def run() -> Algorithm:
                items = yield from shifted(algo.gather_objects(rank, n, 0, data), lo)
                if rank == 0:
                    wire = pickle.dumps(items)
                    yield Round("send the group's objects to the root", sends=[(uroot, wire)])

            return run(), None

        result = self._inter("gather", "gather", uroot, build)
        return result if role == "root" else None

    # -- scatter -----------------------------------------------------------------------
    def _scatter(
        self, call: str, sendbuf: Any, recvbuf: Any, root: int, v: bool, mode: Form
    ) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        role, uroot = self._role(root, call)
        m = self.Get_remote_size()
        views: list[memoryview] = []
        region = None
        spec = None
        if role == "root":
            if v:
                views, _ = vector(sendbuf, m, writable=False)
            else:
                whole, views, _ = blocks(sendbuf, m, writable=False)
                region = whole.mem[: views[0].nbytes * m]
        elif role == "leaf":
            spec = recv_buffer(recvbuf)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":
                if v:
                    sends = [(ro + j, views[j]) for j in range(m)]
                    return once(Round("send every block", sends=sends)), None
                rnd = Round("send the blocks to the remote leader", sends=[(ro, region)])
                return once(rnd), None
            if role == "idle":
                return nothing(), None
            assert spec is not None
            mem = spec.mem
            if v:
                rnd = Round("receive from the root", recvs=[(uroot, mem)])
                return once(rnd), unpack_after(spec)

            def run() -> Algorithm:
                src = None
                if rank == 0:
                    src = memoryview(bytearray(mem.nbytes * n))
                    yield Round("receive the group's blocks from the root", recvs=[(uroot, src)])
                yield from shifted(algo.scatter_binomial(rank, n, 0, src, mem), lo)

            return run(), unpack_after(spec)

        return self._inter(call, "Scatterv" if v else "Scatter", uroot, build, mode)

    @mpi_call
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """The ``ROOT`` process sends block j to process j of the other group."""
        self._scatter("Scatter", sendbuf, recvbuf, root, False, BLOCKING)

    @mpi_call
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        self._scatter("Scatterv", sendbuf, recvbuf, root, True, BLOCKING)

    @mpi_call
    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatter", sendbuf, recvbuf, root, False, NONBLOCKING)

    @mpi_call
    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatterv", sendbuf, recvbuf, root, True, NONBLOCKING)

    @mpi_call
    def Scatter_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._scatter("Scatter_init", sendbuf, recvbuf, root, False, PERSISTENT)

    @mpi_call
    def Scatterv_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._scatter("Scatterv_init", sendbuf, recvbuf, root, True, PERSISTENT)

    @mpi_call
    @comm_locked
    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        """Object j of the ``ROOT`` process's sequence goes to process j of the other group."""
        role, uroot = self._role(root, "scatter")
        m = self.Get_remote_size()
        wire = b""
        if role == "root":
            items = object_items(sendobj, m)
            wire = pickle.dumps([pickle.dumps(item) for item in items])

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":
                rnd = Round("send every object to the remote leader", sends=[(ro, wire)])
                return once(rnd), None
            if role == "idle":
                return nothing(), None

            def run() -> Algorithm:
                pickles = None
                if rank == 0:
                    (op,) = yield Round("receive from the root", recvs=[(uroot, None)])
                    pickles = pickle.loads(op.data)
                mine = yield from shifted(algo.scatter_objects(rank, n, 0, pickles), lo)
                return pickle.loads(mine)

            return run(), None

        result = self._inter("scatter", "scatter", uroot, build)
        return result if role == "leaf" else None
