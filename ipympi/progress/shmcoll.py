"""The shared board of a communicator whose ranks all share one host: slots, bells, waits.

Small blocking collectives on such a communicator (``mpi.coll.shmpath``) move no
message through the kernel: every rank writes its contribution into its own slot of
one shared segment (:class:`~ipympi.progress.shm.Segment`) and reads the slots of the
others. This module holds the board and its waiting; it does no communication of its
own and knows nothing of the calls.

Layout (``n`` ranks; all words native, 8-byte aligned, written with one store each):

- ``n`` int32 *wait flags*: 0 while rank ``r`` runs, ``x + 1`` while it sleeps until
  rank ``x`` writes something, :data:`ANY` until any rank does, :data:`COMPLETE` until
  every rank has written its slot of the collective (:meth:`Board.wait_all`), then one
  line with the *shared bell* those last ones sleep on (rung once, for all, by the
  rank whose write completes the collective);
- per rank, one 64-byte line: its *bell* (a uint32 futex word that it alone sleeps on),
  its *started* word (the sequence number of the collective it is in), its *step*
  word (how far it is in a collective of several steps: :meth:`Board.reach`) and its
  *how* word (1 while it sleeps on its socket instead of its bell: see below);
- per rank, ``depth`` slots (:func:`depth`: slot ``s % depth`` for collective ``s``, so
  that a rank may run up to ``depth - 1`` collectives ahead of the others: a rooted
  call's root, for one, need not wait for its readers): sequence number, signature, byte
  count in the slot (:data:`OVERFLOW` when the data went another way), the data's own
  byte count, then up to :data:`SLOT_DATA` bytes of data (in an overflowing slot, a note
  that says where the data is). Sequence numbers are stored plus
  one, so that 0 means "never written".

A collective ``s`` (the engine's ledger number, the same on every rank) writes its slot
after every other rank has *started* ``s - depth + 1`` (so none still reads the slot's
previous content, ``s - depth``), data first and the sequence number last: a reader that
sees ``s`` in the slot sees the data. Readers wait until a slot shows ``s``.

Waiting. A rank looks again and again for up to :data:`SPIN` (a millisecond; when
ranks outnumber cores, it gives its core away with ``sched_yield`` between looks, so
that the rank it waits for runs: :meth:`Board._spin`). Sleeping costs much more than
it saves on such a wait: a futex wake-up takes some 16 us in the waker and tens of
microseconds until the sleeper runs again. Only then does it sleep on its bell with a timeout
(:data:`SLEEP`), running the caller's ``idle`` check after every wake-up that did not
end the wait (it reads the rank's socket: mismatch reports, dead ranks, other threads
that want the engine; whoever knows of such news rings the bell). Sleeping:

1. the waiter stores its wait flag, then a full fence, then reads its bell, then
   re-checks the condition, then calls ``FUTEX_WAIT(bell, value read)``;
2. a writer stores its data and sequence number, then a full fence, then reads the
   wait flags and, for every rank that waits on it (or on any), adds one to that rank's
   bell and wakes it in one atomic system call (``FUTEX_WAKE_OP``).

No wake-up is lost: with a fence on both sides (x86 keeps stores in order and loads in
order, but may let a load pass an earlier store: Dekker's case, hence the fences),
either the writer sees the flag, or the waiter's re-check sees the write. When the
writer sees the flag, it changes the bell atomically after its write: if the waiter
read the bell before that change, the kernel's own comparison in ``FUTEX_WAIT`` fails
or the sleeper is already queued and woken; if after, its re-check sees the write.
The timeout is a backstop for what this board cannot see (a rank that died, a report
on the socket), not the mechanism. The fence is a ``threading.Lock`` acquired and
released: CPython does both with atomic read-modify-write instructions, which x86
orders as full fences. Hence: Linux on x86-64 only (:func:`available`); elsewhere the
collectives keep their datagram path.

A rank that awaits frames (other ranks may wait for its answer to a message, or its
own frames wait for room at a full peer) must not sleep where only board writes wake
it: frames ring no bell. The board's user then says how to sleep on the rank's socket
instead (:attr:`Board.socket_sleep`), and looks at the socket between the looks of
the spin too; the rank stores 1 in its *how* word before its flag, and a writer that
sees the flag wakes it with a frame (:attr:`Board.nudge`) instead of the futex. A frame
stays in the socket until read, so no wake-up is lost that way either.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any, Callable

from ..core.lazynumpy import np
from .shm import Segment, fence, fence_lock, total_store_order
from .transport import cores

__all__ = [
    "ANY",
    "COMPLETE",
    "DEPTH",
    "DEPTH_SMALL",
    "OVERFLOW",
    "SLEEP",
    "SLOT_DATA",
    "SMALL",
    "STEPS",
    "Board",
    "available",
    "board_bytes",
    "depth",
]

LINE = 64
SLOT = 16384  # bytes per slot, its header included
# Slots per rank (powers of two): a rank may run one fewer collectives ahead. A small
# board has more: a root that runs further ahead of its readers, which share cores,
# lets each of them do several calls in a turn (a loop of Bcasts, Gathers, Scatters,
# Reduces on 4 ranks and 2 cores: 11-18% less time per call with 16 than with 4).
DEPTH = 4
DEPTH_SMALL = 16
SMALL = 8  # the most ranks of a small board (its 16 KiB slots take 2 MiB at most)
HEADER = 32  # seq, sig, bytes in the slot, bytes of the data (int64 each)
SLOT_DATA = SLOT - HEADER
ANY = -1  # wait flag: sleeping until any rank writes
COMPLETE = -2  # wait flag: sleeping until every rank has written its slot
OVERFLOW = -1  # byte count of a slot whose data did not fit
SLEEP = 0.05  # longest futex sleep between checks, seconds
SPIN = 1e-3  # longest spin before sleeping, seconds
SPIN_LOOKS = 16  # looks between two readings of the clock
STEPS = 4  # step words count STEPS per collective: steps 1 .. STEPS - 1 of each
MANY = 1024  # above this many ranks, slots are scanned with numpy (below, a Python
# loop costs less: a numpy call right after a wake-up runs on cold caches)

_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT = 0
_FUTEX_WAKE_OP = 5
# FUTEX_OP(ADD, 1, CMP_EQ, 0): add one to the word (its second wake never happens).
_ADD_ONE = (1 << 28) | (1 << 12)
_ALL = 0x7FFFFFFF  # wake every sleeper


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc: ctypes.CDLL | None = None


def available() -> bool:
    """Whether boards work here: Linux on x86-64 (futexes, a total store order), and
    not turned off with ``IPYMPI_SHM_COLL=0`` (every rank sees the same environment)."""
    global _libc
    if os.environ.get("IPYMPI_SHM_COLL", "1") == "0":
        return False
    if not total_store_order():
        return False
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return False
    return True


def depth(size: int) -> int:
    """The slots per rank of a board of ``size`` ranks."""
    return DEPTH_SMALL if size <= SMALL else DEPTH


def board_bytes(size: int) -> int:
    """The bytes of a board of ``size`` ranks."""
    return _flags_bytes(size) + size * (LINE + depth(size) * SLOT)


def _flags_bytes(size: int) -> int:
    """The wait flags, then one line with the shared bell."""
    return -(-4 * size // LINE) * LINE + LINE


class Board:
    """One communicator's board, mapped by this rank (``rank`` of ``size``).

    Create it on one rank with :meth:`create`, pass :attr:`name` to the others, which
    :meth:`open` it; once all have it open, the creator calls :meth:`unlink`. Then
    :meth:`begin`, :attr:`publish`, :attr:`look` (a slot's data when it is there as
    expected), :meth:`slot_ready`, :meth:`wait_slot` and :meth:`read` run the calls;
    :meth:`close` when the communicator goes.
    """

    def __init__(self, segment: Segment, rank: int, size: int) -> None:
        self.segment = segment
        self.name = segment.name
        self.rank = rank
        self.size = size
        mem = segment.view()
        self.mem = mem
        flags = _flags_bytes(size)
        self.flags = mem[: 4 * size].cast("i")
        self.flag_bytes = mem[: 4 * size]
        self._no_flags = bytes(4 * size)
        self.words = mem.cast("q")
        self.bells = mem.cast("I")
        base = segment.address
        slots = depth(size)
        self._last = slots - 1  # slot number of collective s: s & _last
        per_rank = LINE + slots * SLOT
        self._line = [flags + r * per_rank for r in range(size)]  # byte offsets
        # the bells' addresses as pointers (a plain int would go to C as a 32-bit int)
        self._bell_addr = [ctypes.c_void_p(base + off) for off in self._line]
        self._started = [off // 8 + 1 for off in self._line]  # word indexes
        self._step = [off // 8 + 2 for off in self._line]
        self._how = [off // 8 + 3 for off in self._line]  # 1: sleeping on its socket
        # word index of slot p's header, per rank: [rank][p]
        self._slot = [
            tuple((off + LINE + i * SLOT) // 8 for i in range(slots)) for off in self._line
        ]
        # word index of every rank's slot, per slot number
        self._all_slots = [[self._slot[r][i] for r in range(size)] for i in range(slots)]
        # every rank's slot header as one array (rank, word), per slot number, for the
        # scans of a board of more than MANY ranks only: a smaller one does not import
        # numpy (each rank of a program that never uses it would pay for its import)
        self._headers: list[Any] = []
        if size > MANY:
            numbers = np.frombuffer(mem, dtype=np.int64)
            strided = np.lib.stride_tricks.as_strided
            self._headers = [
                strided(numbers[first:], shape=(size, 4), strides=(per_rank, 8))
                for first in (self._all_slots[i][0] for i in range(slots))
            ]
        # the bell that ranks waiting for a whole collective share (rung once, for all)
        self._shared_index = (flags - LINE) // 4
        self._shared_addr = ctypes.c_void_p(base + flags - LINE)
        self.spin = SPIN  # seconds of looks before a wait sleeps (:meth:`_spin`)
        self.cores = cores()  # that this rank may run on
        # between looks, when ranks outnumber cores: give the core away
        self.give_way = None if size <= self.cores else os.sched_yield
        self._syscall = _libc.syscall if _libc is not None else None
        self._timeout = _Timespec(int(SLEEP), int((SLEEP % 1) * 1e9))
        self._timeout_ref = ctypes.byref(self._timeout)
        self.named = True  # until this rank removed the name, or saw it removable
        self.capacity = SLOT_DATA
        # Around each sleep, what the caller lets go of and takes back (its engine, when
        # other threads need it): ``release(undo)`` first puts into ``undo`` an iterator
        # that takes back whatever it let go, run as ``list(*undo)`` (one C call, so that
        # a signal's exception cannot come between), whose result goes to ``retake``.
        self.release: Callable[[list[Any]], None] | None = None
        self.retake: Callable[[list[Any]], None] | None = None
        # Before each sleep: how to sleep on the rank's socket instead of its bell (a
        # function that returns once a frame came in, or a while later), or None: while
        # the rank awaits frames, which ring no bell (see the module's docstring).
        # ``nudge(rank)`` then wakes a rank sleeping that way, with a frame.
        self.socket_sleep: Callable[[], Callable[[], None] | None] | None = None
        self.nudge: Callable[[int], None] | None = None
        self.clear_upto = -(1 << 62)  # every rank has started this collective or later
        self.publish, self.look, self.notify = self._bind()

    def _bind(
        self,
    ) -> tuple[Callable[..., None], Callable[..., memoryview | None], Callable[..., None]]:
        """The board's busiest steps, :attr:`publish`, :attr:`look` and :attr:`notify`
        (which every write ends with), as functions bound to its memory: every small
        collective runs them, and a closure's variables cost less to read than the
        board's attributes (a call's time is a few dozen such reads)."""
        board, words, mem, last = self, self.words, self.mem, self._last
        mine, slots = self._slot[self.rank], self._slot
        flag_bytes, no_flags = self.flag_bytes, self._no_flags
        acquire, release = fence_lock.acquire, fence_lock.release

        def publish(
            seq: int, sig: int, data: Any, idle: Callable[[], None], note: bytes = b""
        ) -> None:
            """Write this rank's slot of collective ``seq`` (``sig``, and ``data`` if it
            fits in :data:`SLOT_DATA` bytes, else the mark :data:`OVERFLOW`, and ``note``:
            the data goes another way) once no rank reads its previous content
            (``idle`` as in :meth:`wait_slot`), then wake the ranks that wait for it."""
            if board.clear_upto < seq - last:
                board._wait_started(seq - last, idle)
            head = mine[seq & last]
            nbytes = len(data) if type(data) is bytes else data.nbytes
            words[head + 1] = sig
            words[head + 3] = nbytes
            if nbytes > SLOT_DATA:
                words[head + 2] = OVERFLOW
                data, nbytes = note, len(note)  # the slot holds the note alone
            else:
                words[head + 2] = nbytes
            if nbytes:
                start = 8 * head + HEADER
                mem[start : start + nbytes] = data
            words[head] = seq + 1  # 0: never written
            notify(seq)

        def notify(seq: int = -1) -> None:
            """Wake the ranks that sleep until this rank writes (or until any rank
            does), and, when this rank's write of collective ``seq`` completed it
            (every slot written), those that sleep until it is complete."""
            acquire()  # fence(), bound: every write runs it
            release()
            if flag_bytes != no_flags:
                board._wake_waiters(seq)

        def look(rank: int, seq: int, sig: int, nbytes: int) -> memoryview | None:
            """``rank``'s data of collective ``seq`` (a view of the board, valid as
            :meth:`read`'s), if its slot is written, of signature ``sig``, with exactly
            ``nbytes`` bytes in it; else None, and the caller takes the long way (a
            wait, data that went another way, or the error of a call or size that
            does not match)."""
            head = slots[rank][seq & last]
            if words[head] != seq + 1 or words[head + 1] != sig or words[head + 2] != nbytes:
                return None
            start = 8 * head + HEADER
            return mem[start : start + nbytes]

        return publish, look, notify

    @classmethod
    def create(cls, rank: int, size: int, job_dir: str | None = None) -> Board:
        """A new board, noted in ``job_dir`` (when given: see :meth:`Segment.create`)."""
        return cls(Segment.create(board_bytes(size), "ipympi-coll", job_dir), rank, size)

    @classmethod
    def open(cls, name: str, rank: int, size: int) -> Board:
        return cls(Segment.open(name, board_bytes(size)), rank, size)

    def unlink(self) -> None:
        self.segment.unlink()
        self.named = False

    def unlink_once_mapped(self) -> None:
        """Remove the board's name if every rank has started a collective on it (so
        has mapped it). Every rank calls this after :meth:`begin` until it sees them
        all: with a fence between its own mark and its look, of the last two ranks to
        begin at least one sees the other's mark, so some rank removes the name."""
        fence()
        words = self.words
        if all(words[i] for i in self._started):
            self.unlink()

    def close(self) -> None:
        """Unmap the board (this rank's use of it ends)."""
        self._headers = []  # numpy's views of the memory, released with it
        for view in (self.flags, self.flag_bytes, self.words, self.bells):
            view.release()
        self.mem.release()
        self.segment.close()

    # -- writing ----------------------------------------------------------------------
    def begin(self, seq: int) -> None:
        """Say that this rank has started collective ``seq`` (a writer waiting to reuse
        its slot learns it at the next :attr:`notify`). Every rank begins one before
        any rank writes a slot: the last collective of the board's set-up. Until the
        board's name is gone, it also removes the name once every rank has begun one
        (:meth:`unlink_once_mapped`)."""
        self.words[self._started[self.rank]] = seq + 1
        if self.named:
            self.unlink_once_mapped()

    def reach(self, seq: int, step: int) -> None:
        """Say that this rank has reached step ``step`` (1 .. :data:`STEPS` - 1) of
        collective ``seq`` (a call of several steps), and wake the ranks waiting for it."""
        self.words[self._step[self.rank]] = (seq + 1) * STEPS + step
        self.notify()

    def step_of(self, rank: int, seq: int) -> int:
        """The step of collective ``seq`` that ``rank`` has reached (0: none yet)."""
        return max(0, self.words[self._step[rank]] - (seq + 1) * STEPS)

    def wait_step(
        self, seq: int, step: int, idle: Callable[[], None], only: int | None = None
    ) -> None:
        """Return once every other rank (rank ``only``, when given) has reached step
        ``step`` of collective ``seq`` (or a later one); ``idle`` as in :meth:`wait_slot`."""
        words, me, mark = self.words, self.rank, (seq + 1) * STEPS + step
        for r, index in enumerate(self._step):
            if r != me and words[index] < mark and (only is None or r == only):
                self._wait(lambda i=index: words[i] >= mark, r + 1, idle)  # type: ignore[misc]

    def wait_for_news(self, idle: Callable[[], None]) -> None:
        """Sleep until ``idle`` raises: for news that a rank's socket brings (another
        rank's report of a mismatch it found, a dead rank), rung as any news is."""
        self._sleep(lambda: False, ANY, idle)

    def note(self, rank: int, seq: int, nbytes: int) -> memoryview:
        """The first ``nbytes`` of the note in ``rank``'s (overflowing) slot of ``seq``."""
        start = 8 * self._slot[rank][seq & self._last] + HEADER
        return self.mem[start : start + nbytes]

    def _wake_waiters(self, seq: int) -> None:
        """:attr:`notify`'s wake-ups, once its fence is done and some flag is set."""
        me = self.rank + 1
        flags = self.flags
        waiting_all = False
        for r in range(self.size):
            flag = flags[r]
            if flag in (me, ANY):
                self.wake(r)
            elif flag == COMPLETE:
                waiting_all = True
        if waiting_all and seq >= 0 and self.missing(seq, everyone=True) < 0:
            self.ring_shared()

    def wake(self, rank: int) -> None:
        """Wake ``rank`` where it sleeps: on its bell, or on its socket (:attr:`nudge`)."""
        if self.words[self._how[rank]] and self.nudge is not None:
            self.nudge(rank)
        else:
            self.ring(rank)

    def ring(self, rank: int) -> None:
        """Change ``rank``'s bell and wake it (from any thread)."""
        addr = self._bell_addr[rank]
        self._syscall(_SYS_FUTEX, addr, _FUTEX_WAKE_OP, 1, 0, addr, _ADD_ONE)  # type: ignore[misc]

    def ring_shared(self) -> None:
        """Wake every rank that sleeps until the collective is complete: change the
        shared bell (one system call for all), and nudge those on their sockets."""
        self._ring_shared_bell()
        if self.nudge is not None:
            flags, words, how = self.flags, self.words, self._how
            for r in range(self.size):
                if flags[r] == COMPLETE and words[how[r]]:
                    self.nudge(r)

    def _ring_shared_bell(self) -> None:
        addr = self._shared_addr
        self._syscall(_SYS_FUTEX, addr, _FUTEX_WAKE_OP, _ALL, 0, addr, _ADD_ONE)  # type: ignore[misc]

    def ring_self(self) -> None:
        """Wake this rank if it sleeps on the board (from another thread: only this
        rank is nudged, through :attr:`nudge`, which must allow that)."""
        me = self.rank
        self.wake(me)
        if self.flags[me] == COMPLETE:
            self._ring_shared_bell()

    def ring_all(self) -> None:
        """Wake every sleeping rank (news they must read from their sockets)."""
        fence()
        flags = self.flags
        for r in range(self.size):
            if flags[r] and r != self.rank:
                self.wake(r)
        self.ring_shared()

    # -- reading ----------------------------------------------------------------------
    def slot_ready(self, rank: int, seq: int) -> bool:
        """Whether ``rank`` has written its slot of collective ``seq``."""
        return self.words[self._slot[rank][seq & self._last]] == seq + 1

    def data_bytes(self, rank: int, seq: int) -> int:
        """The byte count of the data of ``rank``'s (written) slot of collective ``seq``,
        also when it did not fit in the slot."""
        return self.words[self._slot[rank][seq & self._last] + 3]

    def read(self, rank: int, seq: int) -> tuple[int, int, memoryview]:
        """(signature, byte count, data) of ``rank``'s slot of collective ``seq``
        (written: see :meth:`wait_slot`); the count is :data:`OVERFLOW` when the data
        went another way. The data is a view of the board, valid until this rank
        starts collective ``seq + 1``."""
        words = self.words
        head = self._slot[rank][seq & self._last]
        nbytes = words[head + 2]
        start = 8 * head + HEADER
        return words[head + 1], nbytes, self.mem[start : start + max(0, nbytes)]

    def wait_slot(self, rank: int, seq: int, idle: Callable[[], None]) -> None:
        """Return once ``rank`` has written its slot of collective ``seq``; ``idle``
        runs after each wake-up that does not end the wait (it may raise)."""
        words, index, mark = self.words, self._slot[rank][seq & self._last], seq + 1
        if words[index] == mark:
            return
        self._wait(lambda: words[index] == mark, rank + 1, idle)

    def missing(self, seq: int, everyone: bool = False) -> int:
        """The first other rank (any rank when ``everyone``) that has not written its slot
        of collective ``seq``, or -1."""
        mark, me = seq + 1, self.rank
        if self.size > MANY:
            late = np.flatnonzero(self._headers[seq & self._last][:, 0] != mark)
            if not everyone:
                late = late[late != me]
            return int(late[0]) if late.size else -1
        words = self.words
        for r, index in enumerate(self._all_slots[seq & self._last]):
            if words[index] != mark and (everyone or r != me):
                return r
        return -1

    def first_other_call(self, seq: int, sig: int) -> int:
        """The first rank that has written its slot of collective ``seq`` with another
        signature than ``sig`` (it called something else), or -1."""
        mark = seq + 1
        if self.size > MANY:
            headers = self._headers[seq & self._last]
            other = np.flatnonzero((headers[:, 0] == mark) & (headers[:, 1] != sig))
            return int(other[0]) if other.size else -1
        words = self.words
        for r, index in enumerate(self._all_slots[seq & self._last]):
            if words[index] == mark and words[index + 1] != sig:
                return r
        return -1

    def first_unlike(self, seq: int, sig: int, nbytes: int) -> int:
        """The first rank whose (written) slot of collective ``seq`` is not of signature
        ``sig`` and ``nbytes`` bytes, or -1."""
        if self.size > MANY:
            headers = self._headers[seq & self._last]
            unlike = np.flatnonzero((headers[:, 1] != sig) | (headers[:, 2] != nbytes))
            return int(unlike[0]) if unlike.size else -1
        words = self.words
        for r, index in enumerate(self._all_slots[seq & self._last]):
            if words[index + 1] != sig or words[index + 2] != nbytes:
                return r
        return -1

    def wait_all(self, seq: int, idle: Callable[[], None]) -> None:
        """Return once every rank has written its slot of collective ``seq`` (see
        :meth:`wait_slot`). A sleeper is woken once, by the rank whose write completes
        the collective: with a fence between each writer's write and its look at the
        slots, of two last writers at least one sees the other's write."""
        if self.missing(seq) < 0:
            return
        self._wait(lambda: self.missing(seq) < 0, COMPLETE, idle)

    def _wait(self, done: Callable[[], bool], flag: int, idle: Callable[[], None]) -> None:
        """Return once ``done()``: look for a while (:meth:`_spin`), then sleep on the
        bell or the socket (:meth:`_sleep`, flagged ``flag``)."""
        if not self._spin(done, idle):
            self._sleep(done, flag, idle)

    def _spin(self, done: Callable[[], bool], idle: Callable[[], None]) -> bool:
        """Look at ``done()`` for up to :attr:`spin` seconds before a sleep; whether it
        came true. When ranks outnumber cores, each look gives the core away
        (``sched_yield``): the rank being waited for may need it. While the rank awaits
        frames (it would sleep on its socket: :attr:`socket_sleep`), ``idle`` runs
        between every :data:`SPIN_LOOKS` looks, to handle the frames that came."""
        spin = self.spin
        if not spin:
            return False
        clock = time.perf_counter
        give_way = self.give_way
        awaits = None  # whether frames are awaited: asked once the first looks failed
        end = clock() + spin
        while True:
            for _ in range(SPIN_LOOKS):
                if done():
                    return True
                if give_way is not None:
                    give_way()
            if clock() > end:
                return False
            if awaits is None:
                awaits = self.socket_sleep is not None and self.socket_sleep() is not None
            if awaits:
                idle()

    def _wait_started(self, seq: int, idle: Callable[[], None]) -> None:
        """Wait until every other rank has started collective ``seq`` or a later one
        (every rank has started one before it uses the board: see :meth:`begin`)."""
        words, me, mark = self.words, self.rank, seq + 1
        for r, index in enumerate(self._started):
            if r != me and words[index] < mark:
                self._wait(lambda i=index: words[i] >= mark, r + 1, idle)  # type: ignore[misc]
        self.clear_upto = min(words[i] for r, i in enumerate(self._started) if r != me) - 1

    def _sleep(self, done: Callable[[], bool], flag: int, idle: Callable[[], None]) -> None:
        """Sleep on this rank's bell, or on its socket while it awaits frames, until
        ``done()`` (see the module's docstring)."""
        me = self.rank
        flags, bells = self.flags, self.bells
        if flag == COMPLETE:
            bell_index, addr = self._shared_index, self._shared_addr
        else:
            bell_index, addr = self._line[me] // 4, self._bell_addr[me]
        syscall, timeout = self._syscall, self._timeout_ref
        words, how = self.words, self._how[me]
        try:
            while True:
                on_socket = self.socket_sleep() if self.socket_sleep is not None else None
                words[how] = 0 if on_socket is None else 1  # before the flag: a writer
                flags[me] = flag  # that sees the flag sees how to wake this rank
                fence()
                value = bells[bell_index]
                if done():
                    return
                if on_socket is not None:
                    on_socket()
                else:
                    undo: list[Any] = []
                    try:
                        if self.release is not None:
                            self.release(undo)
                        bell = ctypes.c_uint32(value)
                        syscall(_SYS_FUTEX, addr, _FUTEX_WAIT, bell, timeout, None, 0)  # type: ignore[misc]
                    finally:
                        if self.retake is not None:
                            self.retake(list(*undo))
                flags[me] = 0
                if done():
                    return
                idle()
        finally:
            flags[me] = 0
            words[how] = 0
