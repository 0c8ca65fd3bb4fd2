"""Where a rank is, in words: the user's line, past ipympi and the libraries it calls; and
whether one of its threads runs or sleeps."""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from typing import Any

import pytest

import ipympi
from ipympi.progress.introspect import describe_location, running, source_line

PACKAGE = os.path.dirname(os.path.abspath(ipympi.__file__))
LIBRARY = os.path.join(sysconfig.get_paths()["purelib"], "somelib", "poll.py")


def _function(name: str, filename: str, body: str, scope: dict[str, Any]) -> Any:
    """A function whose frames say they run in ``filename`` (ipympi, a library, ...)."""
    exec(compile(f"def {name}(*args):\n    {body}\n", filename, "exec"), scope)
    return scope[name]


SEEN = "(describe_location(sys._getframe()), source_line(sys._getframe()))"


def _scope() -> dict[str, Any]:
    return {"sys": sys, "describe_location": describe_location, "source_line": source_line}


def test_a_wait_deep_in_a_library_called_by_ipympi_is_placed_at_the_users_call() -> None:
    scope = _scope()
    _function("poll", LIBRARY, f"return {SEEN}", scope)
    _function("recv", os.path.join(PACKAGE, "_fake_transport.py"), "return poll()", scope)
    where, line = scope["recv"]()  # the user's call
    assert where == f"test_introspect.py:{sys._getframe().f_lineno - 1}"
    assert line == 'where, line = scope["recv"]()  # the user\'s call'


def test_a_users_function_called_by_ipympi_is_where_the_rank_is() -> None:
    scope = _scope()
    _function("user_op", __file__, f"return {SEEN}", scope)
    _function("reduce", os.path.join(PACKAGE, "_fake_reductions.py"), "return user_op()", scope)
    where, _ = scope["reduce"]()
    assert where == "test_introspect.py:2"  # line 2 of the compiled user_op


def test_frames_of_ipympi_and_generated_code_are_skipped() -> None:
    scope = _scope()
    _function("inner", "<generated>", f"return {SEEN}", scope)
    _function("call", os.path.join(PACKAGE, "_fake_call.py"), "return inner()", scope)
    where, _ = scope["call"]()
    assert where == f"test_introspect.py:{sys._getframe().f_lineno - 1}"
    assert describe_location(None) == ""


@pytest.mark.timeout(30)
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc only")
def test_a_thread_asleep_in_a_wait_is_not_running() -> None:
    assert running(threading.get_native_id()) is True  # this one, asking
    ready, release = threading.Event(), threading.Event()
    ids: list[int] = []

    def sleeper() -> None:
        ids.append(threading.get_native_id())
        ready.set()
        release.wait(20)

    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        assert ready.wait(10)
        # asleep once it waits: the kernel's view, which can only be looked at again and again
        deadline = time.monotonic() + 10
        while running(ids[0]) and time.monotonic() < deadline:
            os.sched_yield()
        assert running(ids[0]) is False
    finally:
        release.set()
        thread.join(10)
    assert running(None) is None
