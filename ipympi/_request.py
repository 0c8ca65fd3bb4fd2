"""``MPI.Request`` and ``MPI.Prequest``: handles of nonblocking operations.

A request points at an :class:`~ipympi._ops.Op` while it is active. Completing
it (``Wait``, or ``Test`` returning true) frees a non-persistent request (the
handle becomes equal to ``REQUEST_NULL``) and makes a persistent one inactive.
Null and inactive requests complete at once with an empty status, and the
multiple-completion calls follow the standard's rules for them (``Waitany``
returns ``UNDEFINED`` when nothing is active, ``Testall`` is all-or-nothing,
``Waitall`` reports ``ERR_IN_STATUS`` with per-status errors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from ._constants import UNDEFINED
from ._engine import WaitInfo
from ._errors import ERR_IN_STATUS, ERR_REQUEST, SUCCESS
from ._errors import Exception as MPIException
from ._ops import RECV, SEND, Op
from ._status import Status

__all__ = ["REQUEST_NULL", "Prequest", "Request"]


def _loads(op: Op) -> Any:
    if op.kind != RECV or op.cancelled or not op.data:
        return None  # nothing received, or an empty message
    from ._pickle import pickle

    return pickle.loads(op.data)


def _fill_status(op: Op, status: Status | None) -> None:
    op.settle()
    if status is None:
        return
    if op.kind == RECV:
        status._set(op.source, op.tag, op.count, op.cancelled)
    else:
        status._set_empty()
        status._cancelled = op.cancelled


def _wait_info(ops: Sequence[Op], call: str) -> Callable[[], WaitInfo]:
    def info() -> WaitInfo:
        first = ops[0]
        what = "recv" if first.kind == RECV else "send"
        name = first.comm.Get_name() if first.comm is not None else ""
        label = f"{call}({first.call})" if len(ops) == 1 else f"{call}({len(ops)} requests)"
        return WaitInfo(f"{label} [{what}]", name, first.peer, first.tag)

    return info


def _engine_of(ops: Sequence[Op]) -> Any:
    for op in ops:
        if op.comm is not None:
            return op.comm._engine
    return None


class Request:
    """Handle of a nonblocking communication."""

    __slots__ = ("__weakref__", "_op")

    def __init__(self, request: Request | None = None) -> None:
        self._op: Op | None = None if request is None else request._op

    @classmethod
    def _of(cls, op: Op) -> Request:
        req = cls.__new__(cls)
        req._op = op
        if isinstance(req, Prequest):
            req._start = None
        return req

    # -- identity ------------------------------------------------------------
    def __bool__(self) -> bool:
        return self._op is not None or self._is_persistent()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        if self is other:
            return True
        return self._handle() == other._handle()

    def __hash__(self) -> int:
        return hash(self._handle())

    def _handle(self) -> Any:
        return self._op

    def _is_persistent(self) -> bool:
        return False

    def __repr__(self) -> str:
        if not self:
            return "<MPI.REQUEST_NULL>"
        return f"<MPI.{type(self).__name__} {self._op!r}>"

    # -- completion internals ------------------------------------------------
    def _completed(self) -> None:
        """After completion: free a plain request, deactivate a persistent one."""
        self._op = None

    def _raise_if_failed(self, op: Op) -> None:
        if op.error and not op.cancelled:
            exc = MPIException(
                op.error, f"{op.call}: {op.error_detail}" if op.error_detail else op.call
            )
            op.comm._raise(exc, op.call)

    def _finish(self, op: Op, status: Status | None) -> None:
        _fill_status(op, status)
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
            engine = op.comm._engine
            engine.enter()
            try:
                engine.wait(op, _wait_info((op,), "Wait"))
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
        _poll((op,))
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
        _poll((op,))
        if op.done:
            _fill_status(op, status)
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
        if op.done:
            return
        engine = op.comm._engine
        engine.enter()
        try:
            if op.kind == RECV:
                if engine.withdraw(op):
                    op.cancelled = True
                    op.done = True
            elif op.kind == SEND:
                engine.cancel_send(op, op.comm._live().remote_world_ranks[op.peer])
        finally:
            engine.leave()

    def Free(self) -> None:
        """Release the handle; the communication itself still completes."""
        if self._op is None and not self._is_persistent():
            raise MPIException(ERR_REQUEST, "Free: the request is REQUEST_NULL")
        # A started send or posted receive stays referenced by the engine until
        # it completes, so dropping the handle is all that is needed here.
        self._op = None

    # -- lower case: objects -------------------------------------------------
    def wait(self, status: Status | None = None) -> Any:
        op = self._op
        self.Wait(status)
        return None if op is None else _loads(op)

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        op = self._op
        flag = self.Test(status)
        return flag, (_loads(op) if flag and op is not None else None)

    def get_status(self, status: Status | None = None) -> bool:
        return self.Get_status(status)

    def cancel(self) -> None:
        self.Cancel()

    def free(self) -> None:
        self.Free()

    # -- multiple completion -------------------------------------------------
    @classmethod
    def Waitany(cls, requests: Sequence[Request], status: Status | None = None) -> int:
        """Complete one active request and return its index (``UNDEFINED`` if none)."""
        active = [(i, r._op) for i, r in enumerate(requests) if r._op is not None]
        if not active:
            if status is not None:
                status._set_empty()
            return UNDEFINED
        ops = [op for _, op in active]
        _wait_for(ops, lambda: any(op.done for op in ops), "Waitany")
        for i, op in active:
            if op.done:
                requests[i]._finish(op, status)
                return i
        raise AssertionError("unreachable")

    @classmethod
    def Testany(cls, requests: Sequence[Request], status: Status | None = None) -> tuple[int, bool]:
        active = [(i, r._op) for i, r in enumerate(requests) if r._op is not None]
        if not active:
            if status is not None:
                status._set_empty()
            return UNDEFINED, True
        _poll(op for _, op in active)
        for i, op in active:
            if op.done:
                requests[i]._finish(op, status)
                return i, True
        return UNDEFINED, False

    @classmethod
    def Waitall(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        ops = [r._op for r in requests]
        live = [op for op in ops if op is not None]
        _wait_for(live, lambda: all(op.done for op in live), "Waitall")
        cls._complete_all(requests, ops, statuses)
        return True

    @classmethod
    def Testall(cls, requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        ops = [r._op for r in requests]
        live = [op for op in ops if op is not None]
        _poll(live)
        if not all(op.done for op in live):
            return False
        cls._complete_all(requests, ops, statuses)
        return True

    @classmethod
    def _complete_all(
        cls,
        requests: Sequence[Request],
        ops: list[Op | None],
        statuses: list[Status] | None,
    ) -> None:
        if statuses is not None:
            while len(statuses) < len(requests):
                statuses.append(Status())
        failed: Op | None = None
        for i, (req, op) in enumerate(zip(requests, ops)):
            status = statuses[i] if statuses is not None else None
            if op is None:
                if status is not None:
                    status._set_empty()
                continue
            _fill_status(op, status)
            req._completed()
            if status is not None:
                status.error = op.error if not op.cancelled else SUCCESS
            if op.error and not op.cancelled and failed is None:
                failed = op
        if failed is not None:
            _raise_in_status(failed, "Waitall")

    @classmethod
    def Waitsome(
        cls, requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> list[int] | None:
        active = [(i, r._op) for i, r in enumerate(requests) if r._op is not None]
        if not active:
            return None
        ops = [op for _, op in active]
        _wait_for(ops, lambda: any(op.done for op in ops), "Waitsome")
        return cls._complete_some(requests, active, statuses)

    @classmethod
    def Testsome(
        cls, requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> list[int] | None:
        active = [(i, r._op) for i, r in enumerate(requests) if r._op is not None]
        if not active:
            return None
        _poll(op for _, op in active)
        return cls._complete_some(requests, active, statuses)

    @classmethod
    def _complete_some(
        cls,
        requests: Sequence[Request],
        active: list[tuple[int, Op]],
        statuses: list[Status] | None,
    ) -> list[int]:
        indices = [i for i, op in active if op.done]
        if statuses is not None:
            while len(statuses) < len(indices):
                statuses.append(Status())
        failed: Op | None = None
        for k, i in enumerate(indices):
            op = requests[i]._op
            assert op is not None
            status = statuses[k] if statuses is not None else None
            _fill_status(op, status)
            requests[i]._completed()
            if status is not None:
                status.error = op.error if not op.cancelled else SUCCESS
            if op.error and not op.cancelled and failed is None:
                failed = op
        if failed is not None:
            _raise_in_status(failed, "Waitsome")
        return indices

    # lower-case multiple completion: return the received objects
    @classmethod
    def waitany(cls, requests: Sequence[Request], status: Status | None = None) -> tuple[int, Any]:
        ops = [r._op for r in requests]
        index = cls.Waitany(requests, status)
        return index, (None if index == UNDEFINED else _loads(ops[index]))  # type: ignore[arg-type]

    @classmethod
    def testany(
        cls, requests: Sequence[Request], status: Status | None = None
    ) -> tuple[int, bool, Any]:
        ops = [r._op for r in requests]
        index, flag = cls.Testany(requests, status)
        obj = None if index == UNDEFINED else _loads(ops[index])  # type: ignore[arg-type]
        return index, flag, obj

    @classmethod
    def waitall(
        cls, requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> list[Any]:
        ops = [r._op for r in requests]
        cls.Waitall(requests, statuses)
        return [None if op is None else _loads(op) for op in ops]

    @classmethod
    def testall(
        cls, requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> tuple[bool, list[Any] | None]:
        ops = [r._op for r in requests]
        if not cls.Testall(requests, statuses):
            return False, None
        return True, [None if op is None else _loads(op) for op in ops]

    @classmethod
    def waitsome(
        cls, requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> tuple[list[int] | None, list[Any] | None]:
        ops = [r._op for r in requests]
        indices = cls.Waitsome(requests, statuses)
        if indices is None:
            return None, None
        return indices, [_loads(ops[i]) for i in indices]  # type: ignore[arg-type]

    @classmethod
    def testsome(
        cls, requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> tuple[list[int] | None, list[Any] | None]:
        ops = [r._op for r in requests]
        indices = cls.Testsome(requests, statuses)
        if indices is None:
            return None, None
        return indices, [_loads(ops[i]) for i in indices]  # type: ignore[arg-type]


def _wait_for(ops: Sequence[Op], ready: Callable[[], bool], call: str) -> None:
    """Drive the engine of ``ops`` until ``ready()`` (at once if it already is)."""
    if ready():
        return
    engine = _engine_of(ops)
    engine.enter()
    try:
        engine.wait_until(ready, _wait_info(ops, call))
    finally:
        engine.leave()


def _poll(ops: Any) -> None:
    """One non-blocking progress pass for the engine of ``ops``."""
    ops = list(ops)
    if all(op.done for op in ops):
        return
    engine = _engine_of(ops)
    if engine is None:
        return
    engine.enter()
    try:
        engine.poll_once(False)
    finally:
        engine.leave()


def _raise_in_status(failed: Op, call: str) -> None:
    detail = f"{call}: request {failed.call} failed"
    if failed.error_detail:
        detail += f": {failed.error_detail}"
    exc = MPIException(ERR_IN_STATUS, detail)
    failed.comm._raise(exc, call, failed.error)


class Prequest(Request):
    """A persistent request: inactive until ``Start``; reusable after completion."""

    __slots__ = ("_start",)

    def __init__(self, request: Request | None = None) -> None:
        super().__init__(request)
        self._start: Callable[[], Op] | None = getattr(request, "_start", None)

    @classmethod
    def _persistent(cls, start: Callable[[], Op]) -> Prequest:
        req = cls.__new__(cls)
        req._op = None
        req._start = start
        return req

    def _is_persistent(self) -> bool:
        return self._start is not None

    def _handle(self) -> Any:
        return self._start if self._start is not None else self._op

    def _completed(self) -> None:
        self._op = None  # inactive; _start stays for the next Start

    def Start(self) -> None:
        """Activate the request (like the matching nonblocking call)."""
        if self._start is None:
            raise MPIException(ERR_REQUEST, "Start: the request is null")
        if self._op is not None:
            raise MPIException(ERR_REQUEST, "Start: the request is already active")
        self._op = self._start()

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
        self._op = None
        self._start = None

    def __repr__(self) -> str:
        if not self:
            return "<MPI.REQUEST_NULL>"
        state = "active" if self._op is not None else "inactive"
        return f"<MPI.Prequest {state}>"


REQUEST_NULL = Request()
