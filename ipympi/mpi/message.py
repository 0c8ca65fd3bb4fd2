"""``MPI.Message``: a message set aside by a matched probe (``Mprobe``/``Improbe``).

The message can no longer be matched by any other receive or probe; it is
received with ``Message.Recv``/``Irecv``/``recv``/``irecv``, which turn the
handle into ``MESSAGE_NULL``. A matched probe on ``PROC_NULL`` gives
``MESSAGE_NO_PROC``, whose receive completes at once with a PROC_NULL status.
Errors and message traces name these receives after the standard's calls:
``Mrecv``/``Imrecv`` (``mrecv``/``imrecv`` for Python objects).
"""

from __future__ import annotations

from typing import Any

from ..core.constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from ..core.errors import ERR_REQUEST
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from ..progress.operation import RECV, Operation
from .buffers import recv_buffer
from .errhandling import mpi_call
from .request import Request
from .status import Status

__all__ = ["MESSAGE_NO_PROC", "MESSAGE_NULL", "Message"]


class _Matched:
    """A message set aside by a matched probe: its communicator and envelope
    (both ``None`` for the message of a probe on ``PROC_NULL``)."""

    __slots__ = ("__weakref__", "comm", "env")

    def __init__(self, comm: Any, env: Any) -> None:
        self.comm = comm
        self.env = env


_NO_PROC = _Matched(None, None)  # MESSAGE_NO_PROC's message


class Message(Handle):
    """Handle of a matched message (``MESSAGE_NULL`` when null)."""

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Message", 12, ERR_REQUEST, None)
    _impl: _Matched | None

    @classmethod
    def _of(cls, comm: Any, env: Any) -> Message:
        msg = object.__new__(cls)
        msg._impl = _NO_PROC if env == PROC_NULL else _Matched(comm, env)
        return msg

    def __repr__(self) -> str:
        impl = self._impl
        if impl is None:
            return "<MPI.MESSAGE_NULL>"
        if impl is _NO_PROC:
            return "<MPI.MESSAGE_NO_PROC>"
        env = impl.env
        return f"<MPI.Message source={env.source} tag={env.tag} nbytes={env.nbytes}>"

    def _raise(self, exc: MPIException, call: str) -> Any:
        impl = self._impl
        if impl is not None and impl.comm is not None:
            impl.comm._raise(exc, call)
        raise exc

    def _take(self, call: str, mem: memoryview | None) -> Operation:
        """Start receiving the message into ``mem`` and null this handle."""
        impl = self._impl
        if impl is None:
            raise MPIException(ERR_REQUEST, f"{call}: the message is MESSAGE_NULL")
        comm = impl.comm
        op = Operation(RECV, comm, call, PROC_NULL, ANY_TAG)
        if impl is _NO_PROC:
            op.complete_empty()
        else:
            env = impl.env
            op.peer, op.tag, op.mem = env.source, env.tag, mem
            engine = comm._engine
            engine.enter()
            try:
                engine.receive_matched(env, op)
            finally:
                engine.leave()
        self._drop()  # the predefined MESSAGE_NO_PROC stays as it is
        return op

    def _source(self) -> int:
        """PROC_NULL for ``MESSAGE_NO_PROC`` (whose buffer is not read, as in mpi4py)."""
        return PROC_NULL if self._impl is _NO_PROC else ANY_SOURCE

    @mpi_call
    def Recv(self, buf: Any, status: Status | None = None) -> None:
        """Receive the matched message into ``buf``."""
        spec = recv_buffer(buf, self._source())
        op = self._take("Mrecv", spec.mem)
        op.unpack = spec.unpack
        Request._of(op).Wait(status)

    @mpi_call
    def Irecv(self, buf: Any) -> Request:
        spec = recv_buffer(buf, self._source())
        op = self._take("Imrecv", spec.mem)
        op.unpack = spec.unpack
        return Request._of(op)

    @mpi_call
    def recv(self, status: Status | None = None) -> Any:
        """Receive the matched message as a Python object."""
        return Request._of(self._take("mrecv", None)).wait(status)

    @mpi_call
    def irecv(self) -> Request:
        return Request._of(self._take("imrecv", None))

    @classmethod
    def Probe(
        cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None
    ) -> Message:
        """``comm.Mprobe``: block until a matching message is set aside for receiving."""
        return comm.Mprobe(source, tag, status)

    @classmethod
    def Iprobe(
        cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None
    ) -> Message | None:
        """``comm.Improbe``: the matching message set aside, or ``None`` when there is none."""
        return comm.Improbe(source, tag, status)

    @classmethod
    def probe(
        cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None
    ) -> Message:
        """``comm.mprobe``: ``Probe`` for a message to receive as a Python object."""
        return comm.mprobe(source, tag, status)

    @classmethod
    def iprobe(
        cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None
    ) -> Message | None:
        """``comm.improbe``: ``Iprobe`` for a message to receive as a Python object."""
        return comm.improbe(source, tag, status)


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._of(None, PROC_NULL)
register(globals(), __all__)  # the module's constants (see core.handle)
