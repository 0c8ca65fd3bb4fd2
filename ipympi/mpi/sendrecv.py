"""Send-receive: ``Sendrecv``, ``Sendrecv_replace``, ``sendrecv`` and their nonblocking
forms ``Isendrecv`` and ``Isendrecv_replace`` (MPI 4).

A send-receive posts its receive, then starts its send, as if by two threads,
so a ring of them cannot deadlock. The blocking forms wait for both halves; the
nonblocking ones return one request over both (:class:`SendrecvOp`), complete
when both are, whose status is the receive's. The ``_replace`` forms send a copy
of the buffer, taken at the call, and receive into the buffer itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..core.constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from ..core.errors import Exception as MPIException
from ..core.modes import STANDARD
from ..progress.engine import WaitInfo
from ..progress.operation import RECV, Operation
from .buffers import recv_buffer, send_memory
from .errhandling import mpi_call
from .handles import PointToPointMixin
from .pickling import dumps_message, loads_message
from .request import Request
from .status import Status

if TYPE_CHECKING:
    from .commimpl import CommImpl

__all__ = ["SendRecv", "SendrecvOp"]


class SendrecvOp(Operation):
    """The operation behind an ``Isendrecv`` request: its receive and its send.

    It is done when both halves are, and reads as the receive otherwise (status
    fields, received data, errors), so requests treat it as a receive. Those fields
    are read-only properties here, where ``Operation`` has plain attributes (hence the
    ``override`` ignores).
    """

    def __init__(self, recv: Operation, send: Operation, call: str) -> None:
        # No Operation.__init__: the fields it sets are the receive's, read through below.
        self.kind = RECV
        self.comm = recv.comm
        self.call = call
        self.peer = recv.peer
        self.recv = recv
        self.send = send

    @property
    def done(self) -> bool:  # type: ignore[override]
        return self.recv.done and self.send.done

    @property
    def cancelled(self) -> bool:  # type: ignore[override]
        return self.recv.cancelled

    @property
    def error(self) -> int:  # type: ignore[override]
        return self.recv.error or self.send.error

    @property
    def error_detail(self) -> str:  # type: ignore[override]
        return self.recv.error_detail if self.recv.error else self.send.error_detail

    @property
    def source(self) -> int:  # type: ignore[override]
        return self.recv.source

    @property
    def tag(self) -> int:  # type: ignore[override]
        return self.recv.tag

    @property
    def count(self) -> int:  # type: ignore[override]
        return self.recv.count

    @property
    def data(self) -> Any:
        return self.recv.data

    def settle(self) -> None:
        self.recv.settle()


class SendRecv(PointToPointMixin):
    """Mixin with the send-receive methods; ``self`` is an ``MPI.Comm``."""

    __slots__ = ()

    def _start_sendrecv(
        self,
        call: str,
        send_mem: Any,
        dest: Any,
        sendtag: Any,
        recv_mem: memoryview | None,
        source: Any,
        recvtag: Any,
        unpack: Any,
    ) -> tuple[CommImpl, Operation, Operation, Callable[[], WaitInfo]]:
        """Check the arguments, post the receive and start the send."""
        impl, dest, sendtag = self._send_checked(call, dest, sendtag)
        _, source, recvtag = self._recv_checked(call, source, recvtag)
        engine = impl.engine
        engine.enter()
        try:
            rop = self._start_recv(impl, call, recv_mem, source, recvtag, unpack)
            sop = self._start_send(impl, call, send_mem, dest, sendtag, STANDARD)
        finally:
            engine.leave()
        return impl, rop, sop, lambda: WaitInfo(call, impl.label, source, recvtag)

    def _sendrecv(
        self,
        call: str,
        send_mem: Any,
        dest: Any,
        sendtag: Any,
        recv_mem: memoryview | None,
        source: Any,
        recvtag: Any,
        status: Status | None,
        unpack: Any = None,
    ) -> Operation:
        impl, rop, sop, info = self._start_sendrecv(
            call, send_mem, dest, sendtag, recv_mem, source, recvtag, unpack
        )
        if not (rop.done and sop.done):
            engine = impl.engine
            engine.enter()
            try:
                engine.wait_until(lambda: rop.done and sop.done, info)
            except BaseException:
                engine.withdraw(rop)
                raise
            finally:
                engine.leave()
        rop.settle()
        if status is not None:
            status._set(rop.source, rop.tag, rop.count)
        if rop.error:
            raise MPIException(rop.error, f"{call}: {rop.error_detail}")
        return rop

    @mpi_call
    def Sendrecv(
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        """Send and receive at once, as if by two threads; no cyclic deadlock."""
        send_mem = send_memory(sendbuf, dest)
        recv = recv_buffer(recvbuf, source)
        self._sendrecv(
            "Sendrecv", send_mem, dest, sendtag, recv.mem, source, recvtag, status, recv.unpack
        )

    @mpi_call
    def Sendrecv_replace(
        self,
        buf: Any,
        dest: int,
        sendtag: int = 0,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        """Send ``buf`` and replace its contents with the received message."""
        peer = _peer_of(dest, source)
        outgoing = bytes(send_memory(buf, peer))  # a copy: the receive overwrites buf
        spec = recv_buffer(buf, peer)
        self._sendrecv(
            "Sendrecv_replace",
            outgoing,
            dest,
            sendtag,
            spec.mem,
            source,
            recvtag,
            status,
            spec.unpack,
        )

    @mpi_call
    def Isendrecv(
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
    ) -> Request:
        """Nonblocking ``Sendrecv``: one request, complete when both halves are."""
        send_mem = send_memory(sendbuf, dest)
        recv = recv_buffer(recvbuf, source)
        _, rop, sop, _ = self._start_sendrecv(
            "Isendrecv", send_mem, dest, sendtag, recv.mem, source, recvtag, recv.unpack
        )
        return Request._of(SendrecvOp(rop, sop, "Isendrecv"))

    @mpi_call
    def Isendrecv_replace(
        self,
        buf: Any,
        dest: int,
        sendtag: int = 0,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
    ) -> Request:
        """Nonblocking ``Sendrecv_replace``: ``buf`` is sent as it is now."""
        peer = _peer_of(dest, source)
        outgoing = bytes(send_memory(buf, peer))
        spec = recv_buffer(buf, peer)
        _, rop, sop, _ = self._start_sendrecv(
            "Isendrecv_replace", outgoing, dest, sendtag, spec.mem, source, recvtag, spec.unpack
        )
        return Request._of(SendrecvOp(rop, sop, "Isendrecv_replace"))

    @mpi_call
    def sendrecv(
        self,
        sendobj: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        """Send ``sendobj`` and receive an object at once (``recvbuf`` is ignored)."""
        data = dumps_message(sendobj, dest)
        rop = self._sendrecv("sendrecv", data, dest, sendtag, None, source, recvtag, status)
        return loads_message(rop)


def _peer_of(dest: int, source: int) -> int:
    """The rank whose presence makes ``Sendrecv_replace`` read its buffer: the source,
    else the destination (PROC_NULL when both are, as in mpi4py)."""
    return source if source != PROC_NULL else dest
