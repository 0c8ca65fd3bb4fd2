"""Threads sharing one engine, without processes: a world of one rank (no socket),
where another thread's message to the rank itself completes a wait, and mpi4py's
per-communicator lock table (``mpi.commlock``)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from ipympi.core.errors import Exception as MPIException
from ipympi.mpi.commlock import comm_locked, lock_of, table_of
from ipympi.progress.engine import Engine, WaitInfo
from ipympi.progress.operation import RECV, SEND, Operation
from ipympi.progress.sharing import Sharing


def _engine() -> Engine:
    return Engine(0, 1, None)


def _recv(engine: Engine, tag: int) -> Operation:
    op = Operation(RECV, None, "Recv", 0, tag)
    with engine.lock:
        engine.start_recv(op, 0, 0, tag)
    return op


def _send(engine: Engine, tag: int, data: bytes) -> None:
    engine.enter()
    try:
        engine.start_send(Operation(SEND, None, "Send", 0, tag), data, 0, 0, 0, tag, False)
    finally:
        engine.leave()


def _wait_in_thread(engine: Engine, op: Operation) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def wait() -> None:
        engine.enter()
        try:
            engine.wait(op, lambda: WaitInfo("Recv", "world", 0, op.tag))
        except BaseException as exc:
            errors.append(exc)
        finally:
            engine.leave()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, errors


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.timeout(30)
def test_a_wait_no_other_thread_can_end_is_a_deadlock() -> None:
    engine = _engine()
    op = _recv(engine, 1)
    engine.enter()
    try:
        with pytest.raises(MPIException, match="deadlock"):
            engine.wait(op)
    finally:
        engine.leave()
    assert not engine.shared.blocked


@pytest.mark.timeout(30)
def test_threads_waiting_are_woken_by_the_message_that_completes_each() -> None:
    engine = _engine()
    ops = {tag: _recv(engine, tag) for tag in (1, 2, 3)}
    waits = {tag: _wait_in_thread(engine, op) for tag, op in ops.items()}
    _until(lambda: len(engine.shared.blocked) == 3)
    # observers see each waiting thread's call, the longest first
    assert sorted(info.tag for info in engine.blocked_calls()) == [1, 2, 3]
    assert engine.waiting_info() is not None
    _send(engine, 2, b"two")
    thread, errors = waits[2]
    thread.join(5)
    assert not thread.is_alive() and not errors
    assert bytes(ops[2].data) == b"two"
    assert sorted(info.tag for info in engine.blocked_calls()) == [1, 3]
    for tag in (3, 1):
        _send(engine, tag, b"x")
        thread, errors = waits[tag]
        thread.join(5)
        assert not thread.is_alive() and not errors
    assert not engine.shared.blocked and engine.waiting_info() is None


class _Impl:
    """What ``mpi.commlock`` needs of a communicator's state."""

    locks = None

    def __init__(self) -> None:
        self.locks = None


class _Comm:
    """A communicator handle as ``comm_locked`` sees it: its state, or None once freed."""

    def __init__(self) -> None:
        self.impl = self._impl = _Impl()
        self.inside: list[str] = []

    def _live(self) -> _Impl:
        return self.impl

    @comm_locked
    def bcast(self, value: str) -> str:
        self.inside.append(value)
        return value


def _interrupted_at(event: int, call: object, *args: object) -> bool:
    """Run ``call(*args)`` with KeyboardInterrupt raised at its ``event``-th line or its
    return (where a signal's exception can come, as a call's result arrives); whether
    it came before the call ended."""
    seen = [0]

    def local(frame, what, arg):  # type: ignore[no-untyped-def]
        if what in ("line", "return"):
            seen[0] += 1
            if seen[0] == event:
                raise KeyboardInterrupt
        return local

    def tracer(frame, what, arg):  # type: ignore[no-untyped-def]
        return local if frame.f_code is getattr(call, "__code__", None) else None

    sys.settrace(tracer)
    try:
        call(*args)  # type: ignore[operator]
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


def test_an_interrupt_anywhere_in_stepping_aside_is_undone_by_the_undo_it_left() -> None:
    """A thread that lets the engine go for a sleep on a shared board, held three deep,
    is interrupted at each point of doing so in turn: ``list(*undo)`` takes the lock
    back as deep and ends its count every time."""
    lock = threading.RLock()
    sharing = Sharing(lock)
    waiting = (None, 1.0)
    event = 1
    while True:
        for _ in range(3):
            lock.acquire()
        undo: list[object] = []
        interrupted = _interrupted_at(event, Sharing.step_aside.__get__(sharing), waiting, undo)
        undone = list(*undo)
        assert lock._is_owned()  # type: ignore[attr-defined]
        assert not sharing.blocked
        assert sharing.stepped_back(undone) in (waiting, None)
        for _ in range(3):
            lock.release()
        assert not lock._is_owned()  # type: ignore[attr-defined]
        if not interrupted:
            assert undone == [None, waiting]  # the whole call: the lock was let go, and back
            break
        event += 1
    assert event > 4  # the interrupt came at each line in turn


def test_lock_table_is_made_once_and_keeps_one_lock_per_key() -> None:
    impl = _Impl()
    table = table_of(impl)
    assert table == {} and table_of(impl) is table
    lock = lock_of(impl, "bcast")
    assert isinstance(lock, type(threading.Lock()))
    assert lock_of(impl, "bcast") is lock and lock_of(impl, None) is not lock
    assert set(table) == {"bcast", None}


@pytest.mark.timeout(30)
def test_a_lower_case_collective_holds_the_lock_of_its_name() -> None:
    comm = _Comm()
    assert comm.bcast("a") == "a" and set(table_of(comm.impl)) == {"bcast"}
    lock = lock_of(comm.impl, "bcast")
    with lock:
        thread = threading.Thread(target=comm.bcast, args=("b",))
        thread.start()
        time.sleep(0.1)
        assert comm.inside == ["a"]  # kept out while the lock is held
    thread.join(5)
    assert comm.inside == ["a", "b"] and not lock.locked()


class _Bell:
    """Stands in for a transport's sleep on its socket: :meth:`wait_input` sleeps until
    :meth:`wake`, at most 5 s (a wake-up that never came is noted)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.missed: list[int] = []

    def wait_input(self) -> None:
        if not self.event.wait(5):
            self.missed.append(threading.get_ident())
        self.event.clear()

    def wake(self) -> None:
        self.event.set()


@pytest.mark.timeout(30)
def test_a_reader_that_handles_the_next_readers_message_wakes_it() -> None:
    # Reader A comes back from the socket and waits for the engine; meanwhile this
    # thread takes the engine, becomes the reader and sleeps on the socket; A then
    # handles this thread's message, and must wake it (not only the followers).
    lock = threading.RLock()
    sharing = Sharing(lock)
    bell = _Bell()
    done = {"a": False, "b": False}

    def poll(block: bool) -> bool:
        reader = sharing.reader
        if reader is not None and reader != threading.get_ident() and not done["b"]:
            done["b"] = True  # the message of the thread that reads the socket now
            return True
        return False

    def deadlock() -> None:
        raise AssertionError("not a deadlock")

    errors: list[BaseException] = []

    def a() -> None:
        with lock:
            try:
                sharing.wait(lambda: done["a"], (None, 0.0), bell, poll, deadlock)
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=a)
    thread.start()
    _until(lambda: sharing.reader == thread.ident)  # A sleeps on the socket
    with lock:
        bell.wake()  # A lets the socket go, and waits for the engine this thread holds
        _until(lambda: sharing.reader is None)
        sharing.wait(lambda: done["b"], (None, 0.0), bell, poll, deadlock)
        done["a"] = True
        sharing.hand_on(bell)  # type: ignore[arg-type]
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert bell.missed == []  # nobody slept through a message handled for it
