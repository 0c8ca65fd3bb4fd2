"""Point-to-point communication methods of ``MPI.Comm`` (the standard's chapter 4).

Upper-case methods move buffers (``Send``, ``Recv``, ...), lower-case methods
move pickled Python objects (``send``, ``recv``, ...), with mpi4py's argument
names and defaults. Arguments are checked first and bad ones raise
``MPI.Exception`` with the standard's class (``ERR_RANK``, ``ERR_TAG``,
``ERR_COUNT``, ``ERR_BUFFER``, ``ERR_TYPE``, ``ERR_COMM``) through the
communicator's error handler, before anything is sent or posted.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable

from ..core.constants import ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB_VALUE
from ..core.errors import Exception as MPIException
from ..core.modes import BUFFERED, READY, STANDARD, SYNCHRONOUS, SendMode
from ..progress.engine import WaitInfo
from ..progress.operation import RECV, SEND, Operation
from . import bsend as _bsend
from .args import c_int, dest_rank, recv_tag, send_tag, source_rank
from .buffers import BufferSpec, recv_buffer, send_buffer, send_memory
from .errhandling import mpi_call as _mpi_call
from .message import Message
from .pickling import dumps_message, loads_message
from .request import Prequest, Request
from .sendrecv import SendRecv
from .status import Status

if TYPE_CHECKING:
    from .commimpl import CommImpl

__all__ = ["PointToPoint"]


def _info(call: str, impl: CommImpl, peer: int, tag: int) -> Callable[[], WaitInfo]:
    return lambda: WaitInfo(call, impl.label, peer, tag)


def _set_proc_null_status(status: Status | None) -> None:
    if status is not None:
        status._set(PROC_NULL, ANY_TAG, 0)


class PointToPoint(SendRecv):
    """Mixin with every point-to-point method; ``self`` is an ``MPI.Comm``."""

    __slots__ = ()

    # -- starting operations (engine held by caller) --------------------------
    def _start_send(
        self,
        impl: CommImpl,
        call: str,
        mem: memoryview | bytes,
        dest: int,
        tag: int,
        mode: SendMode,
        waits: bool = False,
    ) -> Operation:
        op = Operation(SEND, self, call, dest, tag)
        if dest == PROC_NULL:
            op.complete_empty()
            return op
        if mode is BUFFERED:
            # Buffered mode is local: the data is copied and the call completes
            # now; a separate transfer holds the attached-buffer space until
            # the message has left (for a large one, until the receiver read it).
            transfer = Operation(SEND, self, call, dest, tag)
            _bsend.reserve(transfer, len(mem) if isinstance(mem, bytes) else mem.nbytes, impl)
            impl.engine.start_send(
                transfer,
                bytes(mem),
                impl.remote_world_ranks[dest],
                impl.context,
                impl.rank,
                tag,
                False,
            )
            if transfer.done and transfer.bsend_pool is not None:
                transfer.bsend_pool.release(transfer)
            op.complete()
            return op
        impl.engine.start_send(
            op,
            mem,
            impl.remote_world_ranks[dest],
            impl.context,
            impl.rank,
            tag,
            mode is SYNCHRONOUS,
            waits=waits,
        )
        return op

    def _start_recv(
        self,
        impl: CommImpl,
        call: str,
        mem: memoryview | None,
        source: int,
        tag: int,
        unpack: Any = None,
    ) -> Operation:
        op = Operation(RECV, self, call, source, tag)
        if source == PROC_NULL:
            op.complete_empty()
            return op
        op.mem = mem
        op.unpack = unpack
        impl.engine.start_recv(op, impl.context, source, tag)
        return op

    def _send_checked(self, call: str, dest: Any, tag: Any) -> tuple[CommImpl, int, int]:
        """The communicator's state, and ``dest`` and ``tag`` checked for a send.

        Plain ints in range pass at the cost of the inline test; anything else
        goes through the argument checks of :mod:`ipympi.mpi.args`, which convert
        as mpi4py does or raise.
        """
        impl = self._impl or self._live()
        if (
            type(dest) is int
            and type(tag) is int
            and (0 <= dest < len(impl.remote_world_ranks) or dest == PROC_NULL)
            and 0 <= tag <= TAG_UB_VALUE
        ):
            return impl, dest, tag
        return impl, dest_rank(impl, dest, call), send_tag(tag, call)

    def _recv_checked(self, call: str, source: Any, tag: Any) -> tuple[CommImpl, int, int]:
        """The communicator's state, and ``source`` and ``tag`` checked for a receive."""
        impl = self._impl or self._live()
        if (
            type(source) is int
            and type(tag) is int
            and (0 <= source < len(impl.remote_world_ranks) or source in (ANY_SOURCE, PROC_NULL))
            and (0 <= tag <= TAG_UB_VALUE or tag == ANY_TAG)
        ):
            return impl, source, tag
        return impl, source_rank(impl, source, call), recv_tag(tag, call)

    # -- blocking helpers ------------------------------------------------------
    def _blocking_send(self, call: str, mem: Any, dest: int, tag: int, mode: SendMode) -> None:
        impl, dest, tag = self._send_checked(call, dest, tag)
        engine = impl.engine
        engine.enter()
        try:
            # The fast path has no operation to record: while tracing,
            # send_eager declines and the message takes the general path,
            # which sends the same eager frame.
            if (
                (mode is STANDARD or mode is READY)
                and dest != PROC_NULL
                and engine.send_eager(
                    impl.remote_world_ranks[dest], impl.context, impl.rank, tag, mem
                )
            ):
                return
            op = self._start_send(impl, call, mem, dest, tag, mode, waits=True)
            if not op.done:
                engine.wait(op, _info(call, impl, dest, tag))
        finally:
            engine.leave()

    def _blocking_recv(
        self,
        call: str,
        mem: memoryview | None,
        source: int,
        tag: int,
        status: Status | None,
        unpack: Any = None,
    ) -> Operation:
        impl, source, tag = self._recv_checked(call, source, tag)
        engine = impl.engine
        engine.enter()
        try:
            op = self._start_recv(impl, call, mem, source, tag, unpack)
            if not op.done:
                try:
                    engine.wait(op, _info(call, impl, source, tag))
                except BaseException:
                    engine.withdraw(op)
                    raise
        finally:
            engine.leave()
        op.settle()
        if status is not None:
            status._set(op.source, op.tag, op.count)
        if op.error:
            raise MPIException(op.error, f"{call}: {op.error_detail}")
        return op

    def _nonblocking_send(
        self, call: str, mem: Any, dest: int, tag: int, mode: SendMode
    ) -> Request:
        impl, dest, tag = self._send_checked(call, dest, tag)
        engine = impl.engine
        engine.enter()
        try:
            op = self._start_send(impl, call, mem, dest, tag, mode)
        finally:
            engine.leave()
        return Request._of(op)

    def _nonblocking_recv(
        self, call: str, mem: memoryview | None, source: int, tag: int, unpack: Any = None
    ) -> Request:
        impl, source, tag = self._recv_checked(call, source, tag)
        engine = impl.engine
        engine.enter()
        try:
            op = self._start_recv(impl, call, mem, source, tag, unpack)
        finally:
            engine.leave()
        return Request._of(op)

    # -- blocking buffer sends -------------------------------------------------
    @_mpi_call
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Standard-mode blocking send of a buffer."""
        self._blocking_send("Send", send_memory(buf, dest), dest, tag, STANDARD)

    @_mpi_call
    def Ssend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Synchronous send: returns once the matching receive has started."""
        self._blocking_send("Ssend", send_memory(buf, dest), dest, tag, SYNCHRONOUS)

    @_mpi_call
    def Rsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Ready send: the matching receive must already be posted."""
        self._blocking_send("Rsend", send_memory(buf, dest), dest, tag, READY)

    @_mpi_call
    def Bsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Buffered send through the attached buffer; local, never waits for the receiver."""
        self._blocking_send("Bsend", send_memory(buf, dest), dest, tag, BUFFERED)

    # -- blocking receive --------------------------------------------------------
    @_mpi_call
    def Recv(
        self,
        buf: Any,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        """Blocking receive into a buffer."""
        spec = recv_buffer(buf, source)
        self._blocking_recv("Recv", spec.mem, source, tag, status, spec.unpack)

    # -- nonblocking buffer operations -----------------------------------------
    @_mpi_call
    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("Isend", send_memory(buf, dest), dest, tag, STANDARD)

    @_mpi_call
    def Issend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("Issend", send_memory(buf, dest), dest, tag, SYNCHRONOUS)

    @_mpi_call
    def Irsend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("Irsend", send_memory(buf, dest), dest, tag, READY)

    @_mpi_call
    def Ibsend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("Ibsend", send_memory(buf, dest), dest, tag, BUFFERED)

    @_mpi_call
    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        spec = recv_buffer(buf, source)
        return self._nonblocking_recv("Irecv", spec.mem, source, tag, spec.unpack)

    # -- persistent requests ------------------------------------------------------
    def _persistent_send(
        self, call: str, buf: Any, dest: int, tag: int, mode: SendMode
    ) -> Prequest:
        spec = send_buffer(buf, dest)
        _, dest, tag = self._send_checked(call, dest, tag)

        def start() -> Operation:
            impl = self._live()
            if spec.repack is not None:
                spec.repack()  # a derived datatype: gather the buffer's current contents
            impl.engine.enter()
            try:
                return self._start_send(impl, call, spec.mem, dest, tag, mode)
            finally:
                impl.engine.leave()

        return Prequest._persistent(start)

    @_mpi_call
    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return self._persistent_send("Send_init", buf, dest, tag, STANDARD)

    @_mpi_call
    def Ssend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return self._persistent_send("Ssend_init", buf, dest, tag, SYNCHRONOUS)

    @_mpi_call
    def Rsend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return self._persistent_send("Rsend_init", buf, dest, tag, READY)

    @_mpi_call
    def Bsend_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return self._persistent_send("Bsend_init", buf, dest, tag, BUFFERED)

    @_mpi_call
    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Prequest:
        spec: BufferSpec = recv_buffer(buf, source)
        _, source, tag = self._recv_checked("Recv_init", source, tag)

        def start() -> Operation:
            impl = self._live()
            impl.engine.enter()
            try:
                return self._start_recv(impl, "Recv_init", spec.mem, source, tag, spec.unpack)
            finally:
                impl.engine.leave()

        return Prequest._persistent(start)

    # -- probes ----------------------------------------------------------------
    def _probe(
        self, call: str, source: int, tag: int, status: Status | None, block: bool, take: bool
    ) -> Any:
        impl, source, tag = self._recv_checked(call, source, tag)
        if source == PROC_NULL:
            _set_proc_null_status(status)
            return PROC_NULL
        engine = impl.engine
        engine.enter()
        try:
            if block:
                env = engine.probe(impl.context, source, tag, take, _info(call, impl, source, tag))
            else:
                env = engine.iprobe(impl.context, source, tag, take)
        finally:
            engine.leave()
        if env is not None and status is not None:
            status._set(env.source, env.tag, env.nbytes)
        return env

    @_mpi_call
    def Probe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        """Block until a matching message can be received; fills ``status``."""
        self._probe("Probe", source, tag, status, block=True, take=False)
        return True

    @_mpi_call
    def Iprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        """Whether a matching message can be received now."""
        return self._probe("Iprobe", source, tag, status, block=False, take=False) is not None

    @_mpi_call
    def Mprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message:
        """Matched probe: the message is set aside for ``Message.Recv``."""
        env = self._probe("Mprobe", source, tag, status, block=True, take=True)
        return Message._of(self, env)

    @_mpi_call
    def Improbe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message | None:
        """Nonblocking matched probe: a ``Message`` or ``None``."""
        env = self._probe("Improbe", source, tag, status, block=False, take=True)
        return None if env is None else Message._of(self, env)

    # -- lower case: Python objects ------------------------------------------------
    @_mpi_call
    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send a picklable Python object (standard mode)."""
        self._blocking_send("send", dumps_message(obj, dest), dest, tag, STANDARD)

    @_mpi_call
    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._blocking_send("ssend", dumps_message(obj, dest), dest, tag, SYNCHRONOUS)

    @_mpi_call
    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._blocking_send("bsend", dumps_message(obj, dest), dest, tag, BUFFERED)

    @_mpi_call
    def recv(
        self,
        buf: Any = None,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        """Receive a Python object.

        ``buf`` (deprecated, with a ``UserWarning``, as in mpi4py) is a buffer, or a
        size in bytes, to receive the pickled object into; a larger message is
        ``ERR_TRUNCATE``. Without it any size is received.
        """
        if buf is None:
            return loads_message(self._blocking_recv("recv", None, source, tag, status))
        warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=3)
        mem = _pickle_buffer(buf)
        op = self._blocking_recv("recv", mem, source, tag, status)
        op.data = bytes(mem[: op.count])
        return loads_message(op)

    @_mpi_call
    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("isend", dumps_message(obj, dest), dest, tag, STANDARD)

    @_mpi_call
    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("issend", dumps_message(obj, dest), dest, tag, SYNCHRONOUS)

    @_mpi_call
    def ibsend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return self._nonblocking_send("ibsend", dumps_message(obj, dest), dest, tag, BUFFERED)

    @_mpi_call
    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking ``recv``; ``buf`` (a buffer or a size in bytes) limits the size."""
        if buf is None:
            return self._nonblocking_recv("irecv", None, source, tag)
        mem = _pickle_buffer(buf)
        request = self._nonblocking_recv("irecv", mem, source, tag)
        op = request._op
        if op is not None and op.kind == RECV:
            # Once received (Wait/Test settle it), the pickle is read from the buffer.
            def unpack(count: int) -> None:
                op.data = bytes(mem[:count])

            op.unpack = unpack
        return request

    @_mpi_call
    def probe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        self._probe("probe", source, tag, status, block=True, take=False)
        return True

    @_mpi_call
    def iprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        return self._probe("iprobe", source, tag, status, block=False, take=False) is not None

    @_mpi_call
    def mprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message:
        env = self._probe("mprobe", source, tag, status, block=True, take=True)
        return Message._of(self, env)

    @_mpi_call
    def improbe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message | None:
        env = self._probe("improbe", source, tag, status, block=False, take=True)
        return None if env is None else Message._of(self, env)


def _pickle_buffer(buf: Any) -> memoryview:
    """The memory an object receive given ``buf`` lands in: the buffer, or new memory
    of ``buf`` bytes (mpi4py's deprecated ``buf`` argument)."""
    if isinstance(buf, int):
        return memoryview(bytearray(c_int(buf)))
    mem = memoryview(buf)
    if mem.readonly:
        raise BufferError("Object is not writable.")
    return mem.cast("B")
