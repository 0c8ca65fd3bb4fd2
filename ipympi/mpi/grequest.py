"""``MPI.Grequest``: generalized requests (MPI-3.1 §12.2).

A generalized request stands for work the program does itself (in another
thread, say) and completes with ``Complete``; meanwhile it is waited for and
tested like any request, alone or among others (``Waitall([isend, greq])``).
The program's callbacks, each also given ``*args, **kwargs`` of ``Start``:

* ``query_fn(status)`` fills in the status (it starts empty) when a completion
  or ``Get_status`` call reports the request;
* ``free_fn()`` runs once, when the request is freed: after ``query_fn`` in the
  call that completes it, or by ``Free`` (at ``Complete`` if still pending);
* ``cancel_fn(completed)`` runs on ``Cancel``, ``completed`` telling whether
  ``Complete`` was already called.

A callback that raises makes the call that ran it fail: with the error class of
an ``MPI.Exception`` it raised, else ``ERR_OTHER``, its traceback printed to
stderr (as mpi4py does). Errors go through ``COMM_SELF``'s error handler.

Waiting needs no engine: the waiter sleeps until a ``Complete`` wakes it, and
the progress thread moves the other operations meanwhile; with engine
operations in the same wait it also polls the engine now and then.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

from ..core.constants import ANY_SOURCE, ANY_TAG
from ..core.errors import ERR_OTHER, ERR_REQUEST, SUCCESS
from ..core.errors import Exception as MPIException
from .completion import GREQ, generalized_completed, handler_comm
from .request import Request
from .status import Status

__all__ = ["Grequest"]


def _invoke(fn: Callable[..., Any] | None, name: str, *args: Any, **kwargs: Any) -> tuple[int, str]:
    """Run callback ``fn``; ``(error code, detail)`` of what it raised (``SUCCESS``, "")."""
    if fn is None:
        return SUCCESS, ""
    try:
        fn(*args, **kwargs)
    except MPIException as exc:
        traceback.print_exc()
        return exc.Get_error_code(), f"{name} raised {exc!r}"
    except Exception as exc:  # any failure of the program's code is an MPI error
        traceback.print_exc()
        return ERR_OTHER, f"{name} raised {type(exc).__name__}: {exc}"
    return SUCCESS, ""


class _Generalized:
    """A generalized request, in the place of an engine operation.

    It offers what the completion code reads from an operation (``done``,
    ``kind``, ``comm``, ``call``, the status fields, ``error``, ``settle``) and
    ``value``, the object ``complete(obj)`` gave, for the lower-case calls.
    """

    __slots__ = (
        "__weakref__", "args", "cancel_fn", "cancelled", "count", "done", "error",
        "error_detail", "free_fn", "freed", "kwargs", "query_fn", "released", "settled",
        "source", "tag", "value",
    )  # fmt: skip
    kind = GREQ
    comm = None
    call = "Grequest"

    def __init__(
        self,
        query_fn: Callable[..., Any] | None,
        free_fn: Callable[..., Any] | None,
        cancel_fn: Callable[..., Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.query_fn, self.free_fn, self.cancel_fn = query_fn, free_fn, cancel_fn
        self.args, self.kwargs = args, kwargs
        self.done = self.freed = self.released = self.settled = False
        self.value: Any = None
        self.source, self.tag, self.count, self.cancelled = ANY_SOURCE, ANY_TAG, 0, False
        self.error, self.error_detail = SUCCESS, ""

    def _fail(self, call: str, code: int, detail: str) -> None:
        handler_comm(self)._raise(MPIException(code, f"{call}: {detail}"), call)  # type: ignore[arg-type]

    # -- the program's side ---------------------------------------------------------------
    def complete(self, value: Any) -> None:
        with generalized_completed:
            if self.done:
                raise MPIException(ERR_REQUEST, "Complete: the request is already complete")
            self.value = value
            self.done = True
            generalized_completed.notify_all()
        if self.freed:
            self._release("Complete")

    def cancel(self) -> None:
        code, detail = _invoke(self.cancel_fn, "cancel_fn", self.done, *self.args, **self.kwargs)
        if code:
            self._fail("Cancel", code, detail)

    def release_handle(self) -> None:
        """``Free``: ``free_fn`` runs now if complete, else at ``Complete``."""
        self.freed = True
        if self.done:
            self._release("Free")

    # -- the library's side ---------------------------------------------------------------
    def _query(self) -> tuple[Status, int, str]:
        status = Status()
        code, detail = _invoke(self.query_fn, "query_fn", status, *self.args, **self.kwargs)
        return status, code, detail

    def query(self, status: Status | None) -> None:
        """``Get_status``: report the request through ``query_fn``."""
        found, code, detail = self._query()
        if code:
            self._fail("Get_status", code, detail)
        if status is not None:
            status._set(found.source, found.tag, found.count, found.cancelled)

    def settle(self) -> None:
        """Completion: take the status from ``query_fn``, then free (``free_fn``)."""
        if self.settled:
            return
        self.settled = True
        found, code, detail = self._query()
        self.source, self.tag = found.source, found.tag
        self.count, self.cancelled = found.count, found.cancelled
        self.error, self.error_detail = code, detail
        code, detail = self._free()
        if code and not self.error:
            self.error, self.error_detail = code, detail

    def _free(self) -> tuple[int, str]:
        if self.released:
            return SUCCESS, ""
        self.released = True
        return _invoke(self.free_fn, "free_fn", *self.args, **self.kwargs)

    def _release(self, call: str) -> None:
        code, detail = self._free()
        if code:
            self._fail(call, code, detail)

    def __repr__(self) -> str:
        return f"<generalized request {'complete' if self.done else 'pending'}>"


class Grequest(Request, op_kind=GREQ):
    """A generalized request: one the program completes itself (``Complete``)."""

    __slots__ = ()

    @classmethod
    def Start(
        cls,
        query_fn: Callable[..., Any] | None = None,
        free_fn: Callable[..., Any] | None = None,
        cancel_fn: Callable[..., Any] | None = None,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> Grequest:
        """Start a generalized request with the given callbacks (any may be ``None``)."""
        for name, fn in (("query_fn", query_fn), ("free_fn", free_fn), ("cancel_fn", cancel_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable or None, not {type(fn).__name__}")
        impl = _Generalized(query_fn, free_fn, cancel_fn, tuple(args or ()), dict(kwargs or {}))
        return cls._of(impl)  # type: ignore[arg-type,return-value]

    def Complete(self) -> None:
        """Tell that the work is done: waits and tests on the request now succeed."""
        self.complete(None)

    def complete(self, obj: Any = None) -> None:
        """``Complete``, with ``obj`` as what ``wait()``/``test()`` return."""
        impl = self._op
        if impl is None:
            raise MPIException(ERR_REQUEST, "Complete: the request is REQUEST_NULL")
        impl.complete(obj)

    def __repr__(self) -> str:
        if not self:
            return "<MPI.REQUEST_NULL>"
        return f"<MPI.Grequest {self._op!r}>"
