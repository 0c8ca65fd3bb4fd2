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

from ._buffers import recv_buffer
from ._constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from ._errhandling import mpi_call
from ._errors import ERR_REQUEST
from ._errors import Exception as MPIException
from ._ops import RECV, Op
from ._request import Request
from ._status import Status

__all__ = ["MESSAGE_NO_PROC", "MESSAGE_NULL", "Message"]


class Message:
    """Handle of a matched message."""

    __slots__ = ("_comm", "_env", "_kind")

    def __init__(self, message: Message | None = None) -> None:
        self._comm: Any = None if message is None else message._comm
        self._env: Any = None if message is None else message._env
        self._kind = "null" if message is None else message._kind

    @classmethod
    def _of(cls, comm: Any, env: Any) -> Message:
        msg = cls.__new__(cls)
        msg._comm = comm
        if env == PROC_NULL:
            msg._env, msg._kind = None, "noproc"
        else:
            msg._env, msg._kind = env, "message"
        return msg

    def __bool__(self) -> bool:
        return self._kind != "null"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        if self._kind != "message" or other._kind != "message":
            return self._kind == other._kind
        return self._env is other._env

    def __hash__(self) -> int:
        return hash((self._kind, id(self._env)))

    def __repr__(self) -> str:
        names = {"null": "MESSAGE_NULL", "noproc": "MESSAGE_NO_PROC"}
        if self._kind in names:
            return f"<MPI.{names[self._kind]}>"
        env = self._env
        return f"<MPI.Message source={env.source} tag={env.tag} nbytes={env.nbytes}>"

    def _raise(self, exc: MPIException, call: str) -> Any:
        if self._comm is not None:
            self._comm._raise(exc, call)
        raise exc

    def _take(self, call: str, mem: memoryview | None) -> Op:
        """Start receiving the message into ``mem`` and null this handle."""
        if self._kind == "null":
            raise MPIException(ERR_REQUEST, f"{call}: the message is MESSAGE_NULL")
        comm = self._comm
        op = Op(RECV, comm, call, PROC_NULL, ANY_TAG)
        if self._kind == "noproc":
            op.complete_empty()
        else:
            env = self._env
            op.peer, op.tag, op.mem = env.source, env.tag, mem
            engine = comm._engine
            engine.enter()
            try:
                engine.receive_matched(env, op)
            finally:
                engine.leave()
        if self is not MESSAGE_NO_PROC:  # the predefined constant stays as it is
            self._comm, self._env, self._kind = None, None, "null"
        return op

    @mpi_call
    def Recv(self, buf: Any, status: Status | None = None) -> None:
        """Receive the matched message into ``buf``."""
        spec = recv_buffer(buf)
        op = self._take("Mrecv", spec.mem)
        op.unpack = spec.unpack
        Request._of(op).Wait(status)

    @mpi_call
    def Irecv(self, buf: Any) -> Request:
        spec = recv_buffer(buf)
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
