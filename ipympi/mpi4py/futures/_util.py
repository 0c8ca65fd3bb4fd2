"""``collect`` and ``compose``: futures made from other futures."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Iterable
from typing import Any, Callable

__all__ = ["collect", "compose"]


def collect(fs: Iterable[cf.Future]) -> cf.Future:
    """Gather a collection of futures in a new future.

    The new future's result is the list of the results of ``fs``, once all are done;
    it fails with the first exception among them (in their order) and is cancelled if
    one of them is. Cancelling the new future cancels those of ``fs`` not yet running.
    """
    futures = list(fs)
    output: cf.Future = cf.Future()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: cf.Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        if output.done():
            return
        if any(f.cancelled() for f in futures):
            _cancel(output)
            return
        output.set_running_or_notify_cancel()
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            output.set_exception(errors[0])
        else:
            output.set_result([f.result() for f in futures])

    def output_done(done: cf.Future) -> None:
        if done.cancelled():
            for future in futures:
                future.cancel()

    output.add_done_callback(output_done)
    if not futures:
        output.set_running_or_notify_cancel()
        output.set_result([])
    for future in futures:
        future.add_done_callback(one_done)
    return output


def _cancel(future: cf.Future) -> None:
    """Cancel ``future`` and wake up its waiters (no executor will do it for us)."""
    if future.cancel():
        future.set_running_or_notify_cancel()


def compose(
    future: cf.Future,
    resulthook: Callable[[Any], Any] | None = None,
    excepthook: Callable[[BaseException], Any] | None = None,
) -> cf.Future:
    """Compose the completion of a future with result and exception handlers.

    The output future completes once ``future`` has: with ``resulthook(result)`` (or the
    result itself) on success; on failure, with ``excepthook(exception)`` as its
    exception if that is an exception instance, else as its result (no hook: the same
    exception). A hook that raises makes its exception the output's. Cancelling one of
    the two futures cancels the other.
    """
    output: cf.Future = cf.Future()

    def input_done(done: cf.Future) -> None:
        if done.cancelled():
            _cancel(output)
            return
        if not output.set_running_or_notify_cancel():
            return
        try:
            exc = done.exception()
            if exc is None:
                value = done.result()
                output.set_result(resulthook(value) if resulthook else value)
            elif excepthook is None:
                output.set_exception(exc)
            else:
                value = excepthook(exc)
                if isinstance(value, BaseException):
                    output.set_exception(value)
                else:
                    output.set_result(value)
        except BaseException as hook_error:
            output.set_exception(hook_error)

    def output_done(done: cf.Future) -> None:
        if done.cancelled():
            future.cancel()

    output.add_done_callback(output_done)
    future.add_done_callback(input_done)
    return output
