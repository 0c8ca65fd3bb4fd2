"""``Comm.Psend_init`` and ``Comm.Precv_init``: the constructors of partitioned requests.

They check their arguments, number the new operation among the partitioned ones on
the same (communicator, peer, tag) (the order of initialization is the order of
matching), and return a persistent request whose every ``Start`` makes a new
activation (see :mod:`ipympi.mpi.partitioned` for how the parts travel).
"""

from __future__ import annotations

from typing import Any

from ..core.constants import ANY_SOURCE, ANY_TAG
from ..core.errors import ERR_RANK, ERR_TAG
from ..core.errors import Exception as MPIException
from ..progress.operation import RECV, SEND
from .args import c_int
from .buffers import recv_buffer, send_buffer
from .errhandling import mpi_call
from .handles import PointToPointMixin
from .info import INFO_NULL
from .partitioned import PartRecv, PartSend, PartStart, activate, next_number, partition_size
from .request import Prequest

__all__ = ["PartitionedComm"]


class PartitionedComm(PointToPointMixin):
    """The partitioned-communication constructors of ``MPI.Comm``."""

    __slots__ = ()

    @mpi_call
    def Psend_init(
        self, buf: Any, partitions: int, dest: int, tag: int = 0, info: Any = INFO_NULL
    ) -> Prequest:
        """A partitioned send of ``buf`` cut into ``partitions`` equal parts."""
        call = "Psend_init"
        spec = send_buffer(buf)
        partitions = c_int(partitions)
        partition_size(spec.count, partitions, call)
        impl, dest, tag = self._send_checked(call, dest, tag)
        number = next_number(impl, SEND, dest, tag)

        def make() -> PartSend:
            live = self._live()
            if spec.repack is not None:
                spec.repack()  # a derived datatype: gather the buffer's current contents
            op = PartSend(self, live, spec.mem, partitions, dest, tag, number)
            live.engine.enter()
            try:
                return activate(op)  # type: ignore[return-value]
            finally:
                live.engine.leave()

        return Prequest._persistent(PartStart(self, SEND, partitions, make))

    @mpi_call
    def Precv_init(
        self,
        buf: Any,
        partitions: int,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        info: Any = INFO_NULL,
    ) -> Prequest:
        """A partitioned receive into ``buf`` cut into ``partitions`` equal parts.

        The source and tag must be given: partitioned receives take no wildcards.
        """
        call = "Precv_init"
        spec = recv_buffer(buf)
        partitions = c_int(partitions)
        partition_size(spec.count, partitions, call)
        impl, source, tag = self._recv_checked(call, source, tag)
        if source == ANY_SOURCE:
            raise MPIException(
                ERR_RANK, f"{call}: a partitioned receive needs a source, not ANY_SOURCE"
            )
        if tag == ANY_TAG:
            raise MPIException(ERR_TAG, f"{call}: a partitioned receive needs a tag, not ANY_TAG")
        number = next_number(impl, RECV, source, tag)

        def make() -> PartRecv:
            live = self._live()
            op = PartRecv(self, live, spec, partitions, source, tag, number)
            live.engine.enter()
            try:
                return activate(op)  # type: ignore[return-value]
            finally:
                live.engine.leave()

        return Prequest._persistent(PartStart(self, RECV, partitions, make))
