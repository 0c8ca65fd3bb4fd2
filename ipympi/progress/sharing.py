"""Several threads of one rank waiting in MPI at once (``THREAD_MULTIPLE``).

A thread alone in MPI holds the engine for its whole call and, when it must
wait, reads the data socket with the engine held (``Engine.wait``): the fast
path, which pays nothing for threads. Once another thread wants the engine
(``Engine.wanted``: it rang, and a thread blocked reading got a ``WAKE`` frame)
or already waits in it (:attr:`Sharing.blocked`), waits switch to a leader/follower
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
followers (:meth:`Sharing.hand_on`).

Waits stay interruptible (Ctrl-C reaches the main thread in the socket's poll
or in the condition's wait, and the engine is taken back before the call
unwinds, however late the signal comes: letting the engine go and taking it
back each happen within one C call, between which CPython raises no signal's
exception) and observable: each waiting thread's call is kept in
:attr:`Sharing.blocked` while it waits with the engine released (:meth:`Sharing.calls`).

The engine owns one :class:`Sharing`, which holds this state (the waiting threads,
the reader, the condition they sleep on) and is handed what it needs of the engine
with each call: the socket, a way to handle what came, a way to report a deadlock.
It knows nothing of the engine itself.
"""

from __future__ import annotations

import operator
import threading
import time
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, NoReturn

if TYPE_CHECKING:
    from .transport import Transport

__all__ = ["Sharing", "WaitInfo"]

_get_ident = threading.get_ident


class WaitInfo:
    """What a rank is blocked on: for hang reports and the controller."""

    __slots__ = ("call", "comm", "peer", "since", "tag")

    def __init__(self, call: str, comm: str, peer: int, tag: int) -> None:
        self.call = call
        self.comm = comm
        self.peer = peer
        self.tag = tag
        self.since = time.monotonic()

    def as_dict(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "comm": self.comm,
            "peer": self.peer,
            "tag": self.tag,
            "since": round(time.monotonic() - self.since, 3),
        }


# What a waiting thread's call is: a callable building a WaitInfo (built only when
# someone asks, to keep blocking calls cheap), and since when it waits.
Waiting = tuple["Callable[[], WaitInfo] | None", float]


class Sharing:
    """The threads of one rank that wait in MPI with the engine released.

    ``lock`` is the engine's; ``cond`` (on it) is what followers sleep on;
    ``blocked`` holds each such thread's call by thread ident (empty when no
    thread waits with the engine released), ``reader`` the thread watching the
    socket, if any.
    """

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.cond = threading.Condition(lock)
        self.blocked: dict[int, Waiting] = {}
        self.reader: int | None = None

    def wait(
        self,
        ready: Callable[[], bool],
        waiting: Waiting,
        transport: Transport | None,
        poll: Callable[[bool], bool],
        deadlock: Callable[[], NoReturn],
    ) -> None:
        """Wait until ``ready()`` as reader or follower (see the module docstring).

        The caller holds the engine (maybe more than once, nested) and no longer
        counts as waiting in it; ``waiting`` is what it waits for, for observers. It
        holds the engine again, as deeply, when this returns or raises. ``poll``
        handles the frames waiting on ``transport`` (``Engine.poll_once``). Without a
        transport (a world of one process) another thread can still complete the
        wait, by a message to this rank itself: the wait is a ``deadlock()`` when
        no such thread is alive.
        """
        me = _get_ident()
        blocked = self.blocked
        blocked[me] = waiting
        cond = self.cond
        lock = self.lock
        try:
            while not ready():
                if transport is None:
                    if not _others_alive(blocked):
                        deadlock()
                    cond.wait()
                elif self.reader is not None:
                    cond.wait()  # a follower
                elif poll(False):
                    cond.notify_all()
                else:  # the reader: watch the socket with the engine released
                    # The RLock's own save and restore (what threading.Condition uses):
                    # it is let go however deeply this thread holds it, and taken back so.
                    saved: list[Any] = []
                    try:
                        self.reader = me
                        _let_go(lock, saved)
                        transport.wait_input()
                    finally:
                        self.reader = None  # first: a signal may come once the lock is back
                        if saved:
                            lock._acquire_restore(saved[0])
                    if poll(False):
                        # Another thread may have become the reader while this one took
                        # the engine back, and sleep on the socket: what was just handled
                        # may be its message, so wake it too, not only the followers.
                        self.hand_on(transport)
        finally:
            del blocked[me]
            cond.notify_all()  # a follower becomes the reader, or sees its wait over

    def step_aside(self, waiting: Waiting, undo: list[Any]) -> None:
        """Let the engine go, however deeply held, for a wait that does not read the
        socket (a sleep on a shared board, ``progress.shmcoll``), counted among the
        waiting threads with ``waiting`` meanwhile.

        Before anything else, puts into ``undo`` an iterator that takes all of it
        back: ``list(*undo)``, one C call, takes the engine back as deeply as it was
        let go and ends the count, its last item ``waiting``; give what it returns to
        :meth:`stepped_back`. Whenever a signal's exception comes, from this call's
        first instruction on, ``list(*undo)`` undoes exactly what was done.
        """
        me = _get_ident()
        lock, blocked = self.lock, self.blocked
        saved: list[Any] = []  # the lock's state, once let go
        self.cond.notify_all()  # a follower becomes the socket's reader (once let go)
        undo.append(chain(map(lock._acquire_restore, saved), map(blocked.pop, (me,), (None,))))
        blocked[me] = waiting
        _let_go(lock, saved)

    def stepped_back(self, undone: list[Any]) -> Waiting | None:
        """After ``list(*undo)`` (``undone``) took the engine back: wake the threads
        waiting in it; the ``waiting`` given to :meth:`step_aside`, or None when it
        had not counted it yet."""
        self.cond.notify_all()
        return undone[-1] if undone else None

    def hand_on(self, transport: Transport | None) -> None:
        """A thread leaves the engine while others wait in it: what it did may have
        completed their waits, so wake the followers and the reader (engine held)."""
        self.cond.notify_all()
        if self.reader is not None and transport is not None:
            transport.wake()

    def calls(self, waiting: Waiting) -> list[WaitInfo]:
        """What each thread of the rank blocked in MPI waits for: ``waiting``, the call
        of the thread that holds the engine (if it waits), first, then the others by
        how long they have waited, the main thread first among equals; for
        observers, from any thread."""
        calls = []
        info, since = waiting
        if info is not None:
            calls.append(_built(info, since))
        main = threading.main_thread().ident
        shared = sorted(self.blocked.items(), key=lambda item: (item[1][1], item[0] != main))
        for _, (info, since) in shared:
            if info is not None:
                calls.append(_built(info, since))
        return calls


# ``RLock._release_save`` of its one argument, called from C (see :func:`_let_go`).
_RELEASE_SAVE = operator.methodcaller("_release_save")


def _let_go(lock: Any, saved: list[Any]) -> None:
    """Release ``lock`` (an RLock this thread holds, however deeply) and append its
    state for ``_acquire_restore`` to ``saved``, both within one C call (``list.extend``
    of a ``map``): Ctrl-C's exception, raised only between Python instructions, then
    cannot come after the release and before the state is kept, which would leave the
    thread unable to take the lock back as deeply as it held it."""
    saved.extend(map(_RELEASE_SAVE, (lock,)))


def _others_alive(blocked: dict[int, Any]) -> bool:
    """Whether a thread that may still call MPI is alive besides those waiting in it:
    a non-daemon thread (daemon threads are a host's own, such as a kernel's or a
    test runner's, and do not keep a program alive)."""
    return any(t.ident not in blocked for t in threading.enumerate() if not t.daemon)


def _built(info: Callable[[], WaitInfo], since: float) -> WaitInfo:
    built = info()
    built.since = since
    return built
