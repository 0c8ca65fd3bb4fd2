"""Completing requests: reporting statuses, waiting, and the multiple-completion calls.

The functions here work on what a request points at: an engine operation
(:class:`~ipympi.progress.operation.Op`) or a generalized request's stand-in (kind
``GREQ``, see :mod:`ipympi.mpi.grequest`). :class:`MultipleCompletion` holds
``Request``'s class methods over lists of requests (``Waitall``, ...,
``Get_status_some``) and their lower-case forms, which also return the
received objects.

Each multiple-completion call is one of three searches (any, all, some) that
either waits or only looks, and either completes what it finds (freeing or
deactivating the requests) or only reports it (``Get_status*``, MPI-4.1
§3.7.6). Null and inactive requests count as described there: ``Waitany``
returns ``UNDEFINED`` when none is active, ``Testall`` is all-or-nothing, and a
failed request makes the call raise ``ERR_IN_STATUS`` after every status got
its own error. A ``statuses`` list grows to the number of statuses reported;
another sequence (a tuple) receives as many as it holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

from ..core.constants import UNDEFINED
from ..core.errors import ERR_IN_STATUS, SUCCESS
from ..core.errors import Exception as MPIException
from ..progress.engine import WaitInfo
from ..progress.operation import RECV, Operation
from .pickling import pickle
from .process import PROCESS
from .status import Status

__all__: list[str] = []  # nothing for the MPI module to export

# The ``kind`` of a generalized request's operation (beside SEND, RECV and COLL of
# progress.operation).
GREQ = 4


# --- One operation ---------------------------------------------------------------------
def loads(op: Operation) -> Any:
    """The object a completed operation delivers to the lower-case calls."""
    kind = op.kind
    if kind != RECV:
        return op.value if kind == GREQ else None  # type: ignore[attr-defined]
    if op.cancelled or not op.data:
        return None  # nothing received, or an empty message
    return pickle.loads(op.data)


def fill_status(op: Operation, status: Status | None) -> None:
    """Finish completed ``op`` (``settle``) and report it in ``status``."""
    op.settle()
    if status is None:
        return
    if op.kind in (RECV, GREQ):
        status._set(op.source, op.tag, op.count, op.cancelled)
    else:
        status._set_empty(op.cancelled)


def peek_status(op: Operation, status: Status | None) -> None:
    """Report completed ``op`` in ``status`` without completing it (``Get_status``)."""
    if op.kind == GREQ:
        op.query(status)  # type: ignore[attr-defined]
    else:
        fill_status(op, status)


def handler_comm(op: Operation) -> Any:
    """The communicator whose error handler reports ``op``'s errors: its own, or
    ``COMM_SELF`` for a generalized request, which has none."""
    if op.comm is not None:
        return op.comm
    return PROCESS.self_comm


def _raise_in_status(failed: Operation, call: str) -> None:
    detail = f"{call}: request {failed.call} failed"
    if failed.error_detail:
        detail += f": {failed.error_detail}"
    exc = MPIException(ERR_IN_STATUS, detail)
    handler_comm(failed)._raise(exc, call, failed.error)


# --- Waiting and polling ------------------------------------------------------------------
def wait_info(ops: Sequence[Operation], call: str) -> Callable[[], WaitInfo]:
    def info() -> WaitInfo:
        first = ops[0]
        what = "recv" if first.kind == RECV else "send"
        name = first.comm.Get_name() if first.comm is not None else ""
        label = f"{call}({first.call})" if len(ops) == 1 else f"{call}({len(ops)} requests)"
        return WaitInfo(f"{label} [{what}]", name, first.peer, first.tag)

    return info


def _engine_of(ops: Iterable[Operation]) -> Any:
    for op in ops:
        if op.comm is not None:
            return op.comm._engine
    return None


def wait_for(ops: Sequence[Operation], ready: Callable[[], bool], call: str) -> None:
    """Drive the engine of ``ops`` until ``ready()`` (at once if it already is).

    With generalized requests among ``ops`` (their completion comes from the
    program, not the engine), see :func:`wait_generalized`.
    """
    if ready():
        return
    engine = _engine_of(ops)
    if engine is None or any(op.kind == GREQ for op in ops):
        wait_generalized(engine, ready)
        return
    engine.enter()
    try:
        engine.wait_until(ready, wait_info(ops, call))
    finally:
        engine.leave()


def poll(ops: Iterable[Operation]) -> None:
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


# --- Many requests ------------------------------------------------------------------------
def _active(requests: Sequence[Any]) -> list[tuple[int, Operation]]:
    return [(i, r._op) for i, r in enumerate(requests) if r._op is not None]


def _grow(statuses: Sequence[Status] | None, count: int) -> None:
    """Make a ``statuses`` list hold at least ``count`` statuses."""
    if isinstance(statuses, list):
        while len(statuses) < count:
            statuses.append(Status())


def _status_at(statuses: Sequence[Status] | None, index: int) -> Status | None:
    if statuses is None or index >= len(statuses):
        return None
    return statuses[index]


def _report(request: Any, op: Operation, status: Status | None, complete: bool) -> bool:
    """Report done ``op`` (with its error) in ``status``, completing ``request`` if
    ``complete``; return whether the operation failed."""
    if complete:
        fill_status(op, status)
        request._completed()
    else:
        peek_status(op, status)
    failed = bool(op.error) and not op.cancelled
    if status is not None:
        status.error = op.error if failed else SUCCESS
    return failed


def _any(
    requests: Sequence[Any], status: Status | None, call: str, wait: bool, complete: bool
) -> tuple[int, bool]:
    """``(index, flag)`` of the first done active request (``UNDEFINED`` when none is
    done; flag true also when none is active)."""
    active = _active(requests)
    if not active:
        if status is not None:
            status._set_empty()
        return UNDEFINED, True
    ops = [op for _, op in active]
    if wait:
        wait_for(ops, lambda: any(op.done for op in ops), call)
    else:
        poll(ops)
    for i, op in active:
        if op.done:
            if complete:
                requests[i]._finish(op, status)
            else:
                peek_status(op, status)
            return i, True
    return UNDEFINED, False


def _all(
    requests: Sequence[Any], statuses: Sequence[Status] | None, call: str, wait: bool,
    complete: bool,
) -> bool:  # fmt: skip
    """Whether every request is done; if so, report (and complete) them all."""
    ops = [r._op for r in requests]
    live = [op for op in ops if op is not None]
    if wait:
        wait_for(live, lambda: all(op.done for op in live), call)
    else:
        poll(live)
        if not all(op.done for op in live):
            return False
    _grow(statuses, len(requests))
    failed: Operation | None = None
    for i, (request, op) in enumerate(zip(requests, ops)):
        status = _status_at(statuses, i)
        if op is None:
            if status is not None:
                status._set_empty()
        elif _report(request, op, status, complete) and failed is None:
            failed = op
    if failed is not None:
        _raise_in_status(failed, call)
    return True


def _some(
    requests: Sequence[Any], statuses: Sequence[Status] | None, call: str, wait: bool,
    complete: bool,
) -> list[int] | None:  # fmt: skip
    """Indices of the done active requests, reported (and completed); ``None`` when
    no request is active."""
    active = _active(requests)
    if not active:
        return None
    ops = [op for _, op in active]
    if wait:
        wait_for(ops, lambda: any(op.done for op in ops), call)
    else:
        poll(ops)
    done = [(i, op) for i, op in active if op.done]
    _grow(statuses, len(done))
    failed: Operation | None = None
    for k, (i, op) in enumerate(done):
        if _report(requests[i], op, _status_at(statuses, k), complete) and failed is None:
            failed = op
    if failed is not None:
        _raise_in_status(failed, call)
    return [i for i, _ in done]


Requests = Sequence[Any]
Statuses = Optional[Sequence[Status]]


class MultipleCompletion:
    """``Request``'s class methods over several requests."""

    __slots__ = ()

    @classmethod
    def Waitany(cls, requests: Requests, status: Status | None = None) -> int:
        """Complete one active request and return its index (``UNDEFINED`` if none)."""
        return _any(requests, status, "Waitany", wait=True, complete=True)[0]

    @classmethod
    def Testany(cls, requests: Requests, status: Status | None = None) -> tuple[int, bool]:
        """Complete one done request if there is one: ``(index, flag)``."""
        return _any(requests, status, "Testany", wait=False, complete=True)

    @classmethod
    def Get_status_any(cls, requests: Requests, status: Status | None = None) -> tuple[int, bool]:
        """Like ``Testany``, without completing the request."""
        return _any(requests, status, "Get_status_any", wait=False, complete=False)

    @classmethod
    def Waitall(cls, requests: Requests, statuses: Statuses = None) -> bool:
        """Complete every request (``ERR_IN_STATUS`` if some failed)."""
        return _all(requests, statuses, "Waitall", wait=True, complete=True)

    @classmethod
    def Testall(cls, requests: Requests, statuses: Statuses = None) -> bool:
        """Complete every request if all are done; return whether they were."""
        return _all(requests, statuses, "Testall", wait=False, complete=True)

    @classmethod
    def Get_status_all(cls, requests: Requests, statuses: Statuses = None) -> bool:
        """Like ``Testall``, without completing the requests."""
        return _all(requests, statuses, "Get_status_all", wait=False, complete=False)

    @classmethod
    def Waitsome(cls, requests: Requests, statuses: Statuses = None) -> list[int] | None:
        """Complete the requests done once one is; their indices (``None``: none active)."""
        return _some(requests, statuses, "Waitsome", wait=True, complete=True)

    @classmethod
    def Testsome(cls, requests: Requests, statuses: Statuses = None) -> list[int] | None:
        """Complete the done requests; their indices (``None``: none active)."""
        return _some(requests, statuses, "Testsome", wait=False, complete=True)

    @classmethod
    def Get_status_some(cls, requests: Requests, statuses: Statuses = None) -> list[int] | None:
        """Like ``Testsome``, without completing the requests."""
        return _some(requests, statuses, "Get_status_some", wait=False, complete=False)

    get_status_any = Get_status_any
    get_status_all = Get_status_all
    get_status_some = Get_status_some

    # lower-case multiple completion: also return the received objects
    @classmethod
    def waitany(cls, requests: Requests, status: Status | None = None) -> tuple[int, Any]:
        ops = [r._op for r in requests]
        index = cls.Waitany(requests, status)
        return index, (None if index == UNDEFINED else loads(ops[index]))

    @classmethod
    def testany(cls, requests: Requests, status: Status | None = None) -> tuple[int, bool, Any]:
        ops = [r._op for r in requests]
        index, flag = cls.Testany(requests, status)
        return index, flag, (None if index == UNDEFINED else loads(ops[index]))

    @classmethod
    def waitall(cls, requests: Requests, statuses: Statuses = None) -> list[Any]:
        ops = [r._op for r in requests]
        cls.Waitall(requests, statuses)
        return [None if op is None else loads(op) for op in ops]

    @classmethod
    def testall(
        cls, requests: Requests, statuses: Statuses = None
    ) -> tuple[bool, list[Any] | None]:
        ops = [r._op for r in requests]
        if not cls.Testall(requests, statuses):
            return False, None
        return True, [None if op is None else loads(op) for op in ops]

    @classmethod
    def waitsome(
        cls, requests: Requests, statuses: Statuses = None
    ) -> tuple[list[int] | None, list[Any] | None]:
        ops = [r._op for r in requests]
        indices = cls.Waitsome(requests, statuses)
        if indices is None:
            return None, None
        return indices, [loads(ops[i]) for i in indices]

    @classmethod
    def testsome(
        cls, requests: Requests, statuses: Statuses = None
    ) -> tuple[list[int] | None, list[Any] | None]:
        ops = [r._op for r in requests]
        indices = cls.Testsome(requests, statuses)
        if indices is None:
            return None, None
        return indices, [loads(ops[i]) for i in indices]


# Notified by every ``Grequest.Complete``; waits for generalized requests sleep on it.
generalized_completed = threading.Condition()
_POLL_FIRST = 0.0005  # s between engine polls while generalized requests are waited too,
_POLL_MAX = 0.02  # doubling up to this
_IDLE = 0.5  # s between checks when only generalized requests are waited for


def wait_generalized(engine: Any, ready: Callable[[], bool]) -> None:
    """Block until ``ready()`` for a wait that includes generalized requests.

    ``engine`` is that of the wait's other operations (``None`` if there are
    none): it is polled between naps, which a ``Complete`` cuts short.
    """
    delay = _POLL_FIRST
    while not ready():
        if engine is not None:
            engine.enter()
            try:
                engine.poll_once(False)
            finally:
                engine.leave()
        with generalized_completed:
            if not ready():
                generalized_completed.wait(_IDLE if engine is None else delay)
        delay = min(2 * delay, _POLL_MAX)
