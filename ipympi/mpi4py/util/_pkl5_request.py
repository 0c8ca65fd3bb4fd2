"""Requests and matched messages of :mod:`ipympi.mpi4py.util.pkl5`.

One pkl5 transfer is several MPI messages: a head (the pickle stream and the sizes of the
out-of-band buffers) and one message per buffer. A :class:`Request` therefore stands for
a group of ``MPI.Request`` objects plus, on the receiving side, the step that turns the
received head and buffers back into the object once they have all arrived. A
:class:`Message` is a head already received together with the matched (``Mprobe``d)
messages of its buffers, so that no other receive can take them.

Neither class is a subclass of its ``MPI`` namesake (as in mpi4py); both compare equal to
the ``MPI`` null handles when they are null, and copies made with ``Request(request)`` or
``Message(message)`` share the state of the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

from ... import MPI

__all__ = ["Matched", "Message", "Request", "Transfer", "copy_status"]


def copy_status(source: MPI.Status, target: MPI.Status | None) -> None:
    """Make ``target`` (if given) report what ``source`` reports."""
    if target is None:
        return
    target.Set_source(source.Get_source())
    target.Set_tag(source.Get_tag())
    target.Set_error(source.Get_error())
    target.Set_elements(MPI.BYTE, source.Get_elements(MPI.BYTE))
    target.Set_cancelled(source.Is_cancelled())


class Transfer:
    """The MPI requests of one pkl5 send or receive, and how it completes.

    ``finish`` (receives only) builds the received object once every request is done;
    ``status`` (receives only) is the status of the head message, which is what the
    caller's status reports; ``payload`` keeps the memory of a send alive until it is
    done. ``done`` is set once the outcome has been handed out.
    """

    __slots__ = ("done", "finish", "payload", "requests", "status")

    def __init__(
        self,
        requests: list[MPI.Request],
        finish: Callable[[], Any] | None = None,
        status: MPI.Status | None = None,
        payload: Any = None,
    ) -> None:
        self.requests = requests
        self.finish = finish
        self.status = status
        self.payload = payload
        self.done = False

    def complete(self, statuses: list[MPI.Status], status: MPI.Status | None) -> Any:
        """Mark the transfer done and return its object (None for a send)."""
        self.done = True
        self.payload = None
        copy_status(self.status if self.status is not None else _first(statuses), status)
        return self.finish() if self.finish is not None else None


def _first(statuses: list[MPI.Status]) -> MPI.Status:
    return statuses[0] if statuses else MPI.Status()


class Request:
    """A nonblocking pkl5 send or receive (not a subclass of ``MPI.Request``).

    ``Request()`` and ``Request(MPI.REQUEST_NULL)`` are null; ``Request(request)`` is
    another handle to the same transfer. A request is true while its transfer has not
    been completed by ``wait``/``test`` (or ``Free``), and is null afterwards.
    """

    __slots__ = ("_transfer",)

    def __init__(self, request: Request | MPI.Request | Transfer | None = None) -> None:
        if isinstance(request, Request):
            self._transfer: Optional[Transfer] = request._transfer
        elif isinstance(request, Transfer):
            self._transfer = request
        elif request is None or (isinstance(request, MPI.Request) and not request):
            self._transfer = None
        else:
            raise TypeError(f"expecting a pkl5 request or MPI.REQUEST_NULL, not {request!r}")

    def _live(self) -> Transfer | None:
        transfer = self._transfer
        if transfer is not None and transfer.done:
            self._transfer = transfer = None
        return transfer

    def __bool__(self) -> bool:
        """Return ``bool(self)``: whether the transfer is still to be completed."""
        return self._live() is not None

    def __eq__(self, other: object) -> Any:
        """Return ``self==other``: the same transfer, or both null."""
        if isinstance(other, Request):
            return self._live() is other._live()
        if isinstance(other, MPI.Request):
            return self._live() is None and other == MPI.REQUEST_NULL
        return NotImplemented

    def __ne__(self, other: object) -> Any:
        """Return ``self!=other``."""
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<pkl5.Request {'active' if self else 'null'}>"

    # -- one request ----------------------------------------------------------------------
    def Free(self) -> None:
        """Free a communication request; a send still takes place."""
        transfer = self._live()
        if transfer is not None:
            for request in transfer.requests:
                if request:
                    request.Free()
            transfer.done = True
        self._transfer = None

    free = Free

    def cancel(self) -> None:
        """Cancel a communication request (each of its MPI messages)."""
        transfer = self._live()
        if transfer is not None:
            for request in transfer.requests:
                if request:
                    request.Cancel()

    def get_status(self, status: MPI.Status | None = None) -> bool:
        """Non-destructive test for the completion of a request."""
        return Request.get_status_all([self], None if status is None else [status])

    def test(self, status: MPI.Status | None = None) -> tuple[bool, Any]:
        """Test for the completion of a request: ``(flag, object)``."""
        flag, objs = Request.testall([self], None if status is None else [status])
        return flag, (objs[0] if flag and objs else None)

    def wait(self, status: MPI.Status | None = None) -> Any:
        """Wait for a request to complete and return its object (None for a send)."""
        return Request.waitall([self], None if status is None else [status])[0]

    # -- groups of requests ---------------------------------------------------------------
    @classmethod
    def get_status_all(
        cls, requests: Sequence[Request], statuses: list[MPI.Status] | None = None
    ) -> bool:
        """Non-destructive test for the completion of all requests."""
        transfers = [request._live() for request in requests]
        flag = all(
            request.Get_status()
            for transfer in transfers
            if transfer is not None
            for request in transfer.requests
        )
        if flag and statuses is not None:
            for transfer, status in zip(transfers, _statuses(statuses, len(requests))):
                if transfer is None:
                    _null_status(status)
                else:
                    parts = [MPI.Status() for _ in transfer.requests]
                    for request, part in zip(transfer.requests, parts):
                        request.Get_status(part)
                    copy_status(transfer.status or _first(parts), status)
        return flag

    @classmethod
    def testall(
        cls, requests: Sequence[Request], statuses: list[MPI.Status] | None = None
    ) -> tuple[bool, list[Any] | None]:
        """Test for the completion of all requests: ``(flag, objects or None)``."""
        transfers = [request._live() for request in requests]
        mpi_requests = [r for t in transfers if t is not None for r in t.requests]
        parts = [MPI.Status() for _ in mpi_requests]
        if not MPI.Request.Testall(mpi_requests, parts):
            return False, None
        return True, cls._complete(requests, transfers, parts, statuses)

    @classmethod
    def waitall(
        cls, requests: Sequence[Request], statuses: list[MPI.Status] | None = None
    ) -> list[Any]:
        """Wait for all requests to complete; return their objects (None for sends)."""
        transfers = [request._live() for request in requests]
        mpi_requests = [r for t in transfers if t is not None for r in t.requests]
        parts = [MPI.Status() for _ in mpi_requests]
        MPI.Request.Waitall(mpi_requests, parts)
        return cls._complete(requests, transfers, parts, statuses)

    @staticmethod
    def _complete(
        requests: Sequence[Request],
        transfers: list[Transfer | None],
        parts: list[MPI.Status],
        statuses: list[MPI.Status] | None,
    ) -> list[Any]:
        """Hand out the objects of completed transfers; fill ``statuses`` as MPI does."""
        targets = _statuses(statuses, len(requests)) if statuses is not None else None
        results: list[Any] = []
        start = 0
        for index, (request, transfer) in enumerate(zip(requests, transfers)):
            status = targets[index] if targets is not None and index < len(targets) else None
            if transfer is None:
                _null_status(status)
                results.append(None)
                continue
            count = len(transfer.requests)
            results.append(transfer.complete(parts[start : start + count], status))
            start += count
            request._transfer = None
        return results


def _statuses(statuses: list[MPI.Status], count: int) -> Sequence[MPI.Status]:
    """The statuses to fill: a list grows to ``count`` entries, as with ``MPI.Request``;
    a tuple is filled as far as it goes."""
    if isinstance(statuses, list):
        while len(statuses) < count:
            statuses.append(MPI.Status())
    return statuses


def _null_status(status: MPI.Status | None) -> None:
    """The status of a null request: any source, any tag, no error, empty."""
    if status is not None:
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_error(MPI.SUCCESS)
        status.Set_elements(MPI.BYTE, 0)


class Matched:
    """A pkl5 message matched by a probe: its head, received, and its buffer messages.

    ``receive`` and ``ireceive`` (given by :mod:`~ipympi.mpi4py.util.pkl5`) receive the buffers
    and rebuild the object; ``consumed`` is set once one of them has been called.
    """

    __slots__ = ("consumed", "ireceive", "receive")

    def __init__(
        self,
        receive: Callable[[MPI.Status | None], Any],
        ireceive: Callable[[], Transfer],
    ) -> None:
        self.receive = receive
        self.ireceive = ireceive
        self.consumed = False


class Message:
    """A message matched by ``mprobe``/``improbe`` (not a subclass of ``MPI.Message``).

    ``Message()`` and ``Message(MPI.MESSAGE_NULL)`` are null; ``Message(MPI.MESSAGE_NO_PROC)``
    is the message of a probe of ``MPI.PROC_NULL``, whose receive gives None. Receiving
    makes the message null.
    """

    __slots__ = ("_state",)

    def __init__(self, message: Message | MPI.Message | Matched | None = None) -> None:
        if isinstance(message, Message):
            self._state: Matched | MPI.Message = message._state
        elif isinstance(message, Matched):
            self._state = message
        elif message is None:
            self._state = MPI.Message(MPI.MESSAGE_NULL)
        elif isinstance(message, MPI.Message) and (
            message == MPI.MESSAGE_NULL or message == MPI.MESSAGE_NO_PROC
        ):
            self._state = MPI.Message(message)
        else:
            raise TypeError(
                "expecting a pkl5 message, MPI.MESSAGE_NULL or MPI.MESSAGE_NO_PROC, "
                f"not {message!r}"
            )

    def _current(self) -> Matched | MPI.Message:
        state = self._state
        if isinstance(state, Matched) and state.consumed:
            self._state = state = MPI.Message(MPI.MESSAGE_NULL)
        return state

    def __bool__(self) -> bool:
        """Return ``bool(self)``: whether there is a message to receive."""
        state = self._current()
        return isinstance(state, Matched) or bool(state)

    def __eq__(self, other: object) -> Any:
        """Return ``self==other``: the same matched message, or the same null handle."""
        if isinstance(other, Message):
            other = other._current()
        elif not isinstance(other, MPI.Message):
            return NotImplemented
        state = self._current()
        if isinstance(state, Matched) or isinstance(other, Matched):
            return state is other
        return state == other

    def __ne__(self, other: object) -> Any:
        """Return ``self!=other``."""
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<pkl5.Message {'matched' if self else 'null'}>"

    def free(self) -> None:
        """Do nothing: a matched message is freed by receiving it."""

    def recv(self, status: MPI.Status | None = None) -> Any:
        """Blocking receive of the matched message; returns the object."""
        state = self._take("recv")
        if isinstance(state, Matched):
            return state.receive(status)
        _proc_null_status(status)
        return None

    def irecv(self) -> Request:
        """Nonblocking receive of the matched message; the request's ``wait`` gives it."""
        state = self._take("irecv")
        if isinstance(state, Matched):
            return Request(state.ireceive())
        status = MPI.Status()
        _proc_null_status(status)
        return Request(Transfer([], None, status))

    def _take(self, call: str) -> Matched | MPI.Message:
        """The state to receive from; the message becomes null."""
        state = self._current()
        if isinstance(state, Matched):
            state.consumed = True
        elif state == MPI.MESSAGE_NULL:
            raise MPI.Exception(MPI.ERR_REQUEST, f"Message.{call}: the message is null")
        self._state = MPI.Message(MPI.MESSAGE_NULL)
        return state


def _proc_null_status(status: MPI.Status | None) -> None:
    """The status of a receive from ``MPI.PROC_NULL``."""
    if status is not None:
        status.Set_source(MPI.PROC_NULL)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_error(MPI.SUCCESS)
        status.Set_elements(MPI.BYTE, 0)
