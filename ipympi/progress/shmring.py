"""Shared rings: one rank's frames to another rank of its host, without the kernel.

A frame sent as a Unix datagram costs a system call on each side (some 1.6 us to send
and as much to look and read, in a ping-pong on this machine type); written into
memory that both ranks map, it costs a copy on each side. So a rank that sends many
frames to a peer of its host (:data:`RING_AFTER`) makes a ring for them: a shared
segment (:class:`~ipympi.progress.shm.Segment`) that it alone writes and the peer alone
reads, and announces it with a ``RING`` frame on the socket, which carries the name
(``core.wire``). From then on every frame to that peer that fits goes into the ring;
the rest (the ring is full) still go by socket.

Layout (all words native int64, each written with one store): the *writer's line*
(``head``: bytes written since the start), the *reader's line* (``tail``: bytes read;
``seen``: how many flagged socket frames the reader has taken, -1 until it mapped the
ring; ``looking``: 1 while it looks at its rings before any sleep, 0 when it may sleep),
then the records (:func:`capacity` bytes, which the ``RING`` frame tells the reader): a
length word and the frame, padded to 8 bytes; a length of :data:`_SKIP` sends the reader
back to the start.

Order. MPI's non-overtaking rule holds per pair of ranks, and frames of one pair now
travel two ways. The writer flags (``RINGED``) every frame it sends by socket once
it made the ring, and writes into the ring only while the reader has taken every
flagged frame it sent (``seen`` equals the writer's count). The reader, when it takes
a flagged frame off its socket, first takes what the ring holds (written before that
frame: after it, the writer waits for ``seen``), then the frame, and counts it.
Frames sent before the ``RING`` frame come before it on the socket, hence before
everything in the ring, which the reader reads only once it handled ``RING``.

Waking. A reader asleep in ``poll`` on its socket wakes for frames only; a writer
therefore sends a ``WAKE`` frame after each record unless the reader is ``looking``.
Before any sleep the reader clears ``looking``, fences, and only then looks at its rings
a last time; the writer writes its record, fences, then reads ``looking``: of the two,
at least one sees the other (``shm.fence``), so no record waits unseen while the reader
sleeps. One ``WAKE`` per record, as one datagram per frame without rings: another
thread of the reader may take a ``WAKE`` off the socket (and the record with it) while
one sleeps there, and the sleeper still needs a wake-up of its own for the next record.
Everything that sleeps on a rank's socket therefore keeps working as it did (the
progress thread, waits of several threads, a board's wait on the socket), as long as
it asks ``Transport.may_sleep`` first.

Lifetime. The writer notes the ring's name in the job's directory as it creates it,
so that it goes with the job however the job ends; the reader removes the name as soon
as it has mapped the ring (and closes the file: a mapping needs no descriptor).
Linux on x86-64 only (``shm.total_store_order``), and ``IPYMPI_SHM_P2P=0`` turns
rings off (every rank sees the same environment).
"""

from __future__ import annotations

import os

from .shm import Segment, fence, is_segment, total_store_order

__all__ = [
    "CAPACITY",
    "CAPACITY_MANY",
    "MANY",
    "RING_AFTER",
    "RingIn",
    "RingOut",
    "capacity",
    "ring_after",
]

# Frames a rank sends to a peer by socket before it makes a ring to it: a ring costs a
# segment and some 100 us to make, worth it for a peer that is talked to again and
# again, not for the few frames of a set-up.
RING_AFTER = 64
# Bytes of records: two frames of the largest size (64 KiB of data, a header and a
# length word: under 65,800 bytes each), or many small ones; with more than MANY ranks
# on the host (each may have rings to a dozen peers), enough for many small ones.
CAPACITY = 136 * 1024
CAPACITY_MANY = 32 * 1024
MANY = 16
_LINE = 64
_HEAD = 0  # word index of the writer's head
_TAIL = _LINE // 8  # the reader's line: tail, seen, looking
_SEEN = _TAIL + 1
_LOOKING = _TAIL + 2
_DATA = 2 * _LINE  # byte offset of the records
_SKIP = -1  # a record's length word: the next record is at the start
_PREFIX = "ipympi-ring"  # of the rings' names


def capacity(ranks_here: int) -> int:
    """The bytes of records of a ring between two of ``ranks_here`` ranks on a host."""
    return CAPACITY if ranks_here <= MANY else CAPACITY_MANY


def ring_after() -> int:
    """How many frames to a peer make a ring to it (0: never): :data:`RING_AFTER`,
    ``IPYMPI_SHM_P2P_AFTER=n`` for n, none with ``IPYMPI_SHM_P2P=0`` or where plain
    stores cannot serve as a protocol."""
    if os.environ.get("IPYMPI_SHM_P2P", "1") == "0" or not total_store_order():
        return 0
    return max(1, int(os.environ.get("IPYMPI_SHM_P2P_AFTER") or RING_AFTER))


class _Ring:
    """One mapped ring (either end), of ``size`` bytes of records (a multiple of 8)."""

    def __init__(self, segment: Segment, size: int) -> None:
        self.segment = segment
        self.name = segment.name
        self.size = size
        self.mem = segment.view()
        self.words = self.mem.cast("q")

    def close(self) -> None:
        self.words.release()
        self.mem.release()
        self.segment.close()


class RingOut(_Ring):
    """The writing end: this rank's frames to one peer."""

    def __init__(self, segment: Segment, size: int) -> None:
        super().__init__(segment, size)
        self.head = 0  # bytes written (the writer's own copy of its head word)
        self.sent = 0  # flagged frames sent by socket since the ring was made

    @classmethod
    def create(cls, job_dir: str | None, size: int = CAPACITY) -> RingOut:
        """A new ring of ``size`` bytes of records, noted in ``job_dir`` (when given:
        see :meth:`Segment.create`); the reader has not mapped it yet (``seen`` is -1),
        so nothing goes into it before it has."""
        ring = cls(Segment.create(_DATA + size, _PREFIX, job_dir), size)
        ring.segment.drop_fd()
        ring.words[_SEEN] = -1
        return ring

    def put(self, frame: bytes) -> bool:
        """Write ``frame`` as the next record; False (nothing written) when the reader
        has not taken every flagged socket frame yet, or the ring has no room."""
        words = self.words
        if words[_SEEN] != self.sent:
            return False
        nbytes = len(frame)
        need = (nbytes + 15) & ~7  # the length word, the frame, padding to 8
        head, size = self.head, self.size
        at = head % size
        skip = size - at if at + need > size else 0
        if head + skip + need - words[_TAIL] > size:
            return False
        if skip:
            words[(_DATA + at) // 8] = _SKIP
            head += skip
            at = 0
        start = _DATA + at
        words[start // 8] = nbytes
        self.mem[start + 8 : start + 8 + nbytes] = frame
        self.head = head = head + need
        words[_HEAD] = head  # after the record: a reader that sees the head sees it
        return True

    def must_wake(self) -> bool:
        """Whether the reader must be woken (after :meth:`put`): it may be asleep."""
        fence()
        return not self.words[_LOOKING]


class RingIn(_Ring):
    """The reading end: one peer's frames to this rank."""

    def __init__(self, segment: Segment, size: int) -> None:
        super().__init__(segment, size)
        self.tail = 0  # bytes read (the reader's own copy of its tail word)

    @classmethod
    def open(cls, name: str, size: int) -> RingIn:
        """Map the ring of ``size`` bytes of records a peer announced, remove its name,
        and tell the writer it may write. ``ValueError`` for a name that is not a
        ring's."""
        if size <= 0 or size % 8 or not is_segment(name, _PREFIX):
            raise ValueError(f"not a ring: {name!r} of {size} bytes")
        segment = Segment.open(name, _DATA + size)
        segment.unlink()
        segment.drop_fd()
        ring = cls(segment, size)
        ring.words[_SEEN] = 0
        return ring

    def take(self) -> bytes | None:
        """The next frame, or None when the ring is empty."""
        words, size = self.words, self.size
        tail = self.tail
        while words[_HEAD] != tail:
            at = tail % size
            nbytes = words[(_DATA + at) // 8]
            if nbytes == _SKIP:
                tail += size - at
                continue
            start = _DATA + at + 8
            frame = bytes(self.mem[start : start + nbytes])
            self.tail = tail = tail + ((nbytes + 15) & ~7)
            words[_TAIL] = tail  # after the copy: the writer may reuse the room now
            return frame
        if tail != self.tail:  # only a skip mark was left
            self.tail = tail
            words[_TAIL] = tail
        return None

    def holds(self) -> bool:
        """Whether a record waits."""
        return self.words[_HEAD] != self.tail

    def took_flagged(self) -> None:
        """Count a flagged frame of the writer's taken off the socket."""
        self.words[_SEEN] += 1

    def look(self, looking: bool) -> None:
        """Say whether this rank looks at its rings before any sleep (writers need not
        wake it)."""
        self.words[_LOOKING] = looking
