"""Intercommunicator collectives: the :class:`InterCollectives` mixin of ``MPI.Intercomm``.

The collectives of an intercommunicator join its two groups (MPI 5.2.2-5.2.3):
data of one group go to the other. The mixin gathers them from one module per
concern, all built on the union rank space and the runner of
:mod:`ipympi.mpi.coll.inter_core`:

* :mod:`ipympi.mpi.coll.inter_rooted`: Bcast, Gather(v), Scatter(v), one-way from
  or to the ``ROOT`` process;
* :mod:`ipympi.mpi.coll.inter_exchange`: Allgather(v), Alltoall(v, w), two-way;
* :mod:`ipympi.mpi.coll.inter_reduce`: Reduce, Allreduce, Reduce_scatter(_block);
* here: Barrier, and the calls the standard does not define on
  intercommunicators, ``Scan``/``Exscan`` (``ERR_COMM``).

Every buffer collective exists blocking, nonblocking (``Ibcast``...) and
persistent (``Bcast_init``...); ``IN_PLACE`` is refused (``ERR_BUFFER``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core import algorithms as algo
from ...core.errors import ERR_COMM
from ...core.errors import Exception as MPIException
from ...core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ...core.schedule import Algorithm
from ..errhandling import mpi_call
from ..op import SUM
from ..request import Prequest, Request
from .inter_core import layout
from .inter_exchange import InterExchanges
from .inter_reduce import InterReductions
from .inter_rooted import InterRooted

if TYPE_CHECKING:
    from ..info import Info
    from ..op import Op

__all__ = ["InterCollectives"]


class InterCollectives(InterRooted, InterExchanges, InterReductions):
    """Collectives of ``MPI.Intercomm``, over both groups in the union rank space."""

    __slots__ = ()

    # -- barrier -----------------------------------------------------------------------
    def _barrier(self, call: str, mode: Form = BLOCKING) -> Any:
        total = len(layout(self._live())[0])

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, None]:
            return algo.barrier_dissemination(lo + rank, total), None

        return self._inter(call, "Barrier", 0, build, mode)

    @mpi_call
    def Barrier(self) -> None:
        """Every process waits until every process of both groups has called it."""
        self._barrier("Barrier")

    @mpi_call
    def barrier(self) -> None:
        self._barrier("barrier")

    @mpi_call
    def Ibarrier(self) -> Request:
        return self._barrier("Ibarrier", NONBLOCKING)

    @mpi_call
    def Barrier_init(self, info: Info | None = None) -> Prequest:
        return self._barrier("Barrier_init", PERSISTENT)

    # -- not defined on intercommunicators --------------------------------------------------
    def _undefined(self, call: str) -> Any:
        self._live()
        raise MPIException(ERR_COMM, f"{call}: not defined on an intercommunicator")

    @mpi_call
    def Scan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        self._undefined("Scan")

    @mpi_call
    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        self._undefined("Exscan")

    @mpi_call
    def Iscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        return self._undefined("Iscan")

    @mpi_call
    def Iexscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        return self._undefined("Iexscan")

    @mpi_call
    def Scan_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Info | None = None
    ) -> Prequest:
        return self._undefined("Scan_init")

    @mpi_call
    def Exscan_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Info | None = None
    ) -> Prequest:
        return self._undefined("Exscan_init")

    @mpi_call
    def scan(self, sendobj: Any, op: Op = SUM) -> Any:
        return self._undefined("scan")

    @mpi_call
    def exscan(self, sendobj: Any, op: Op = SUM) -> Any:
        return self._undefined("exscan")
