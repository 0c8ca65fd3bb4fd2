"""``MPI.Request`` and ``MPI.Prequest``: handles of nonblocking operations.

A request points at an :class:`~ipympi.progress.operation.Op` while it is active. Completing
it (``Wait``, or ``Test`` returning true) frees a non-persistent request (the
handle becomes equal to ``REQUEST_NULL``) and makes a persistent one inactive.
Null and inactive requests complete at once with an empty status;
``Get_status`` reports without completing anything (MPI-4.1 §3.7.6). The
calls over several requests (``Waitall``, ...) are in :mod:`ipympi.mpi.completion`.

A persistent request is a :class:`_Persistent` that its handles share, so a
copy (``Prequest(req)``) sees it started and completed. A generalized request
(:mod:`ipympi.mpi.grequest`) stands in for an operation of kind ``GREQ``: its
status comes from the program's callbacks, and waiting for it does not need
the engine.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Callable, ClassVar

from ..core.errors import ERR_REQUEST
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from ..progress.operation import RECV, SEND, Operation
from .completion import (
    GREQ,
    MultipleCompletion,
    fill_status,
    handler_comm,
    loads,
    peek_status,
    poll,
    wait_for,
    wait_info,
)
from .partitioned import PartitionedMethods
from .status import Status

__all__ = ["REQUEST_NULL", "Prequest", "Request"]


class _Persistent:
    """A persistent request, shared by its handles: how to start it (``start()``
    returns the new operation) and its current operation (``None``: inactive).

    Its plain ``MPI.Request`` handles (``Request(preq)``, as mpi4py allows: the same
    request, seen through the base class) keep its current operation in their own
    ``_op``, as every request does; :meth:`set_op` keeps them up to date."""

    __slots__ = ("__weakref__", "op", "start", "views")

    def __init__(self, start: Callable[[], Operation]) -> None:
        self.start = start
        self.op: Operation | None = None
        self.views: list[weakref.ref[Request]] = []  # its plain handles (handles have no hash)

    def set_op(self, op: Operation | None) -> None:
        """Make ``op`` the current operation (``None``: inactive), in every handle."""
        self.op = op
        if self.views:
            for ref in self.views:
                view = ref()
                if view is not None:
                    view._op = op

    def add_view(self, request: Request) -> None:
        """``request``, a plain handle, refers to this persistent request from now on."""
        self.views = [ref for ref in self.views if ref() is not None]
        self.views.append(weakref.ref(request))
        request._op = self.op

    def drop_view(self, request: Request) -> None:
        """``request`` no longer refers to this persistent request (it was freed)."""
        self.views = [ref for ref in self.views if ref() is not None and ref() is not request]


class Request(MultipleCompletion, Handle):
    """Handle of a nonblocking communication.

    ``Request(req)`` is a new handle to ``req``'s request: for a persistent ``req``, a
    plain handle of the same persistent request (equal to ``req``), which sees it
    started and completed, and which completes and so deactivates it.
    """

    # the current operation (None: a null or inactive request), and the persistent
    # request it belongs to (None: a request of one operation)
    __slots__ = ("_op", "_persist")
    _persist: _Persistent | None
    _mpi_kind = Kind("Request", 11, ERR_REQUEST, None)
    # Operation kind -> the handle class of its requests (``Grequest`` for ``GREQ``),
    # for the subclasses that give ``op_kind``.
    _by_kind: ClassVar[dict[int, type[Request]]] = {}

    def __init_subclass__(cls, op_kind: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if op_kind is not None:
            Request._by_kind[op_kind] = cls

    @classmethod
    def _of(cls, op: Operation) -> Request:
        req = object.__new__(cls)
        req._op = op
        req._persist = None
        return req

    # -- identity ------------------------------------------------------------
    def _target(self) -> Any:
        persist = self._persist
        return self._op if persist is None else persist

    def _become(self, target: Any) -> None:
        if isinstance(target, _Persistent):
            self._persist = target
            target.add_view(self)
        else:
            self._op = target
            self._persist = None

    @classmethod
    def _class_for(cls, target: Any) -> type:
        """``Prequest`` for a persistent request, ``Grequest`` for a generalized one."""
        if isinstance(target, _Persistent):
            return Prequest
        return Request._by_kind.get(target.kind, Request)

    def __bool__(self) -> bool:
        return self._op is not None or self._persist is not None

    def __repr__(self) -> str:
        if not self:
            return "<MPI.REQUEST_NULL>"
        if self._persist is not None:
            state = "active" if self._op is not None else "inactive"
            return f"<MPI.{type(self).__name__} of a persistent request, {state}>"
        return f"<MPI.{type(self).__name__} {self._op!r}>"

    # -- completion internals ------------------------------------------------
    def _completed(self) -> None:
        """After completion: free a plain request, deactivate a persistent one."""
        persist = self._persist
        if persist is None:
            self._op = None
        else:
            persist.set_op(None)

    def _raise_if_failed(self, op: Operation) -> None:
        if op.error and not op.cancelled:
            exc = MPIException(
                op.error, f"{op.call}: {op.error_detail}" if op.error_detail else op.call
            )
            handler_comm(op)._raise(exc, op.call)

    def _finish(self, op: Operation, status: Status | None) -> None:
        fill_status(op, status)
        self._completed()
        self._raise_if_failed(op)

    # -- single completion ---------------------------------------------------
    def Wait(self, status: Status | None = None) -> bool:
        """Block until the operation completes; fills ``status``."""
        op = self._op
        if op is None:
            if status is not None:
                status._set_empty()
            return True
        if not op.done:
            comm = op.comm
            if comm is None:  # a generalized request
                wait_for((op,), lambda: op.done, "Wait")
            else:
                engine = comm._engine
                engine.enter()
                try:
                    engine.wait(op, wait_info((op,), "Wait"))
                finally:
                    engine.leave()
        self._finish(op, status)
        return True

    def Test(self, status: Status | None = None) -> bool:
        """Complete the operation if it is done; never blocks."""
        op = self._op
        if op is None:
            if status is not None:
                status._set_empty()
            return True
        poll((op,))
        if not op.done:
            return False
        self._finish(op, status)
        return True

    def Get_status(self, status: Status | None = None) -> bool:
        """Like ``Test`` but the request stays as it is (not freed or deactivated)."""
        op = self._op
        if op is None:
            if status is not None:
                status._set_empty()
            return True
        poll((op,))
        if op.done:
            peek_status(op, status)
        return op.done

    def Cancel(self) -> None:
        """Mark the operation for cancellation; a later Wait/Test completes it.

        A receive that has not been matched is cancelled at once. A send that
        still waits for its receiver (synchronous, or large) is withdrawn if
        the receiver has not matched it yet; a send whose data has already
        left completes normally (cancelling sends is deprecated and may fail).
        Either way, a Wait after Cancel returns without the user's peer acting.
        """
        op = self._op
        if op is None:
            raise MPIException(ERR_REQUEST, "Cancel: the request is REQUEST_NULL")
        if op.kind == GREQ:
            op.cancel()
            return
        if op.done:
            return
        engine = op.comm._engine
        engine.enter()
        try:
            if op.kind == RECV:
                if engine.withdraw(op):
                    op.complete_cancelled()
            elif op.kind == SEND:
                engine.cancel_send(op, op.comm._live().remote_world_ranks[op.peer])
        finally:
            engine.leave()

    def Free(self) -> None:
        """Release the handle; the communication itself still completes."""
        op = self._op
        persist = self._persist
        if persist is not None:  # a handle of a persistent request: it goes
            persist.drop_view(self)
            self._persist = None
            self._op = None
            return
        if op is None:
            raise MPIException(ERR_REQUEST, "Free: the request is REQUEST_NULL")
        # A started send or posted receive stays referenced by the engine until
        # it completes, so dropping the handle is all that is needed here.
        self._op = None
        if op.kind == GREQ:
            op.release_handle()  # runs free_fn, now or later

    # -- lower case: objects -------------------------------------------------
    def wait(self, status: Status | None = None) -> Any:
        op = self._op
        self.Wait(status)
        return None if op is None else loads(op)

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        op = self._op
        flag = self.Test(status)
        return flag, (loads(op) if flag and op is not None else None)

    def get_status(self, status: Status | None = None) -> bool:
        return self.Get_status(status)

    def cancel(self) -> None:
        self.Cancel()


class Prequest(PartitionedMethods, Request):
    """A persistent request: inactive until ``Start``; reusable after completion.

    Its handles share the :class:`_Persistent` request, so ``Prequest(req)`` sees
    ``req`` started and completed; ``Free`` releases one handle (an active
    operation still completes).
    """

    __slots__ = ()

    @classmethod
    def _persistent(cls, start: Callable[[], Operation]) -> Prequest:
        req = object.__new__(cls)
        req._persist = _Persistent(start)
        return req

    def _target(self) -> Any:
        return self._persist

    def _become(self, target: Any) -> None:
        self._persist = target

    @property
    def _op(self) -> Operation | None:
        """The current operation of the persistent request (``None``: inactive)."""
        persist = self._persist
        return None if persist is None else persist.op

    @_op.setter
    def _op(self, op: Operation | None) -> None:
        persist = self._persist
        assert persist is not None, "a freed persistent request has no operation"
        persist.set_op(op)

    def __bool__(self) -> bool:
        return self._persist is not None

    def Start(self) -> None:
        """Activate the request (like the matching nonblocking call)."""
        persist = self._persist
        if persist is None:
            raise MPIException(ERR_REQUEST, "Start: the request is null")
        if persist.op is not None:
            raise MPIException(ERR_REQUEST, "Start: the request is already active")
        persist.set_op(persist.start())

    def start(self) -> None:
        self.Start()

    @classmethod
    def Startall(cls, requests: Sequence[Prequest]) -> None:
        for req in requests:
            req.Start()

    @classmethod
    def startall(cls, requests: Sequence[Prequest]) -> None:
        cls.Startall(requests)

    def Free(self) -> None:
        """Release the handle, also while active: the communication still completes."""
        if self._persist is None:
            raise MPIException(ERR_REQUEST, "Free: the request is REQUEST_NULL")
        self._persist = None

    def __repr__(self) -> str:
        if not self:
            return "<MPI.REQUEST_NULL>"
        state = "active" if self._op is not None else "inactive"
        return f"<MPI.Prequest {state}>"


REQUEST_NULL = Request()
register(globals(), __all__)  # the module's constants (see core.handle)
