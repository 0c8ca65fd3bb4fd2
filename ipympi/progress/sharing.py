"""Several threads of one rank waiting in MPI at once (``THREAD_MULTIPLE``).

A thread alone in MPI holds the engine for its whole call and, when it must
wait, reads the data socket with the engine held (``Engine.wait``): the fast
path, which pays nothing for threads. Once another thread wants the engine
(``Engine.wanted``: it rang, and a thread blocked reading got a ``WAKE`` frame)
or already waits in it (``Engine.sharing``), waits switch to a leader/follower
scheme, with no I/O thread:

* the *reader* (leader) is the one waiting thread that watches the socket, with
  the engine released (``Transport.wait_input``), so that other threads can
  enter, post operations and leave meanwhile; when input may have come it takes
  the engine back, handles every frame waiting and wakes the others;
* *followers* sleep on the engine's condition until a frame handled by anyone,
  or a call that ended, may have completed what they wait for;
* a reader whose own wait is over stops reading and wakes the followers, one of
  which becomes the reader: the socket is handed on.

Frames are read only with the engine held, so they are handled one at a time in
arrival order, whichever thread reads them, and queued sends are retried by one
thread at a time. A thread that takes the engine while the reader watches the
socket may complete what the reader waits for (a message to itself, frames it
read in a probe): as it leaves it wakes the reader (``Transport.wake``) and the
followers (:func:`hand_on`).

Waits stay interruptible (Ctrl-C reaches the main thread in the socket's poll
or in the condition's wait, and the engine is taken back before the call
unwinds) and observable: each waiting thread's call is kept in
``Engine.blocked`` while it waits with the engine released (:func:`blocked_calls`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..core.matching import ExactQueue
    from .engine import Engine, WaitInfo

__all__ = ["await_queued", "blocked_calls", "hand_on", "wait_shared"]

_get_ident = threading.get_ident


def wait_shared(engine: Engine, ready: Callable[[], bool]) -> None:
    """Wait until ``ready()`` as reader or follower (see the module docstring).

    The caller holds the engine (maybe more than once, nested) and has said
    what it waits for in ``engine.waiting``; it holds the engine again, as
    deeply, when this returns or raises. Without a transport (a world of one
    process) another thread can still complete the wait, by a message to this
    rank itself: the wait is a deadlock when no such thread is alive.
    """
    me = _get_ident()
    blocked = engine.blocked
    blocked[me] = (engine.waiting, engine.waiting_since)
    engine.waiting = None  # the thread holding the engine no longer waits in it
    engine.sharing += 1
    transport = engine.transport
    cond = engine.cond
    lock: Any = engine.lock
    try:
        while not ready():
            if transport is None:
                if not _others_alive(blocked):
                    engine.deadlock()
                cond.wait()
            elif engine.reader is not None:
                cond.wait()  # a follower
            elif engine.poll_once(False):
                cond.notify_all()
            else:  # the reader: watch the socket with the engine released
                engine.reader = me
                # The RLock's own save and restore (what threading.Condition uses):
                # it is let go however deeply this thread holds it, and taken back so.
                saved = lock._release_save()
                try:
                    transport.wait_input()
                finally:
                    lock._acquire_restore(saved)
                    engine.reader = None
                if engine.poll_once(False):
                    cond.notify_all()
    finally:
        engine.sharing -= 1
        engine.waiting, engine.waiting_since = blocked.pop(me)
        cond.notify_all()  # a follower becomes the reader, or sees its wait over


def _others_alive(blocked: dict[int, Any]) -> bool:
    """Whether a thread that may still call MPI is alive besides those waiting in it:
    a non-daemon thread (daemon threads are a host's own, such as a kernel's or a
    test runner's, and do not keep a program alive)."""
    return any(t.ident not in blocked for t in threading.enumerate() if not t.daemon)


def hand_on(engine: Engine) -> None:
    """A thread leaves the engine while others wait in it: what it did may have
    completed their waits, so wake the followers and the reader (engine held)."""
    engine.cond.notify_all()
    if engine.reader is not None and engine.transport is not None:
        engine.transport.wake()


def await_queued(engine: Engine, queue: ExactQueue, context: int, source: int, tag: int) -> None:
    """Wait (shared) until a blocking collective's message from ``source`` with
    ``tag`` is in ``queue`` (its context's unexpected messages), a mismatch of
    this call or an earlier one on ``context`` is reported, or a rank dies.

    While threads share the socket, the frame that the straight path
    (``Engine.collective_frame``) would take off it may be read by another
    thread, which queues it: the caller then takes it from the queue.
    """
    dead = len(engine.dead_peers)

    def ready() -> bool:
        if (source, tag) in queue:
            return True
        return engine.ledger.known_error(context, tag) is not None or len(engine.dead_peers) != dead

    wait_shared(engine, ready)


def blocked_calls(engine: Engine) -> list[WaitInfo]:
    """What each thread of the rank blocked in MPI waits for, the thread that
    holds the engine first, then the others by how long they have waited, the
    main thread first among equals; for observers, from any thread."""
    calls = []
    waiting = engine.waiting
    if waiting is not None:
        calls.append(_built(waiting, engine.waiting_since))
    main = threading.main_thread().ident
    shared = sorted(engine.blocked.items(), key=lambda item: (item[1][1], item[0] != main))
    for _, (info, since) in shared:
        if info is not None:
            calls.append(_built(info, since))
    return calls


def _built(info: Callable[[], WaitInfo], since: float) -> WaitInfo:
    built = info()
    built.since = since
    return built
