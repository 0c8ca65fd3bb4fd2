"""Blocking collective data access of ``MPI.File``: two-phase I/O where ranks interleave.

When the ranks' accesses interleave in the file (each rank's view strided between the
others', the usual way to write a distributed array into one file), an independent
access costs each rank one system call per contiguous piece. Where some rank's view
has holes (``Set_view`` tells every rank), the ranks first agree on how the access
looks (one small allgather: each rank's byte range and piece count). If it
interleaves, the aggregators (``cb_nodes`` of them, every rank by default) each take
one contiguous file domain, and the access runs in rounds of at most
``cb_buffer_size`` bytes per aggregator (the hints ROMIO takes, with its
``romio_cb_read``/``romio_cb_write`` = ``enable``/``disable``/``automatic``): in a
round, one ``Alltoallv`` brings an aggregator the pieces of its round that the ranks
write (or takes to the ranks the pieces they read), and the aggregator moves them with
one ``pwritev``/``preadv`` per contiguous run of the file, straight from the message
buffer (:mod:`ipympi.core.twophase` computes domains, rounds and pieces).

Otherwise every rank does its own access (:func:`~ipympi.mpi.file_move.move`), as do
atomic mode (byte-range locks) and the nonblocking collectives (which must not wait
for the other ranks). A rank whose own call is wrong still takes part in the exchange
with no bytes, so the others' data lands and no rank waits; an aggregator's failed
system call fails the access on every rank, with the error's class.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

from ..core import twophase as tp
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from .datatype import BYTE
from .file_move import Access, move, traced
from .file_view import os_error

__all__ = ["collective_transfer"]

# Collective accesses whose pieces average fewer bytes go through aggregators unless
# the hints say otherwise (see _two_phase).
SMALL_PIECES = 512
# Pieces of at least this many bytes on average move without a copy (see _cell_io).
_BIG_PIECES = 4096
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16)


def collective_transfer(
    impl: Any, write: bool, prepare: Callable[[], Access], call: str
) -> tuple[int, int]:
    """A blocking collective access: ``prepare`` checks this rank's arguments and plans
    its part. Returns (bytes of memory moved, etypes asked for)."""
    t0 = time.perf_counter()
    access: Access | None = None
    problem: BaseException | None = None
    try:
        access = prepare()
    except Exception as exc:  # raised after this rank took its part in the exchange
        problem = exc
    parts = [m for m in impl.comm.allgather(_describe(access)) if m is not None]
    if not _two_phase(impl, write, parts):
        if problem is not None:
            raise problem
        assert access is not None
        return move(impl, access, call, t0), access.etypes
    got, failure = _exchange(impl, write, access, parts, call)
    failures = [f for f in impl.comm.allgather(failure) if f is not None]
    if problem is not None:
        raise problem
    assert access is not None
    if failures:
        error_class, text = failures[0]
        raise MPIException(error_class, text)
    if write:
        impl.dirty = True
    traced(impl, call, access.offs, got, t0)
    return access.finish(impl, got), access.etypes


def _describe(access: Access | None) -> tuple[int, int, int, int, bool] | None:
    """What the others need of this rank's part: (low, high, bytes, pieces, whether
    the pieces are in file order)."""
    if access is None or not access.fbytes:
        return None
    offs, lens = access.offs, access.lens
    ordered = bool((offs[1:] >= offs[:-1] + lens[:-1]).all())
    return int(offs.min()), int((offs + lens).max()), access.fbytes, len(offs), ordered


def _two_phase(impl: Any, write: bool, parts: list[Any]) -> bool:
    """Whether this access goes through aggregators (the same answer on every rank);
    ``parts``: the ranks' :func:`_describe` that have bytes to move.

    ``automatic``: where the ranks' ranges interleave and their pieces average less
    than :data:`SMALL_PIECES` bytes. On one host, with the file in the page cache, a
    system call per larger piece costs less than taking the piece to an aggregator
    (measured: 4 ranks, 64 B pieces 2.7x faster through aggregators, 256 B 2x, 512 B
    even, 1-4 KiB 1.3-2.5x slower).
    """
    hint = impl.hints.get("romio_cb_write" if write else "romio_cb_read", "automatic")
    if impl.size == 1 or impl.atomic or hint == "disable" or not parts:
        return False
    if not all(m[4] for m in parts):  # pieces out of file order: each rank alone
        return False
    if hint == "enable":
        return True
    pieces = sum(m[3] for m in parts)
    return sum(m[2] for m in parts) < SMALL_PIECES * pieces and tp.interleaved(
        [(m[0], m[1]) for m in parts]
    )


def _int_hint(impl: Any, key: str, default: int) -> int:
    try:
        return max(1, int(impl.hints.get(key, default)))
    except ValueError:
        return default


Failure = tuple[int, str]  # an aggregator's failed system call: (error class, message)
if TYPE_CHECKING:
    # An aggregator's pieces of a round: file offsets, lengths and places in the message.
    Cell = tuple[np.ndarray, np.ndarray, np.ndarray]


def _exchange(
    impl: Any, write: bool, access: Access | None, parts: list[Any], call: str
) -> tuple[int, Failure | None]:
    """Run the rounds; return (bytes this rank's read got, this aggregator's failure)."""
    comm, size, me = impl.comm, impl.size, impl.rank
    low, high = min(m[0] for m in parts), max(m[1] for m in parts)
    aggregators = min(size, _int_hint(impl, "cb_nodes", size))
    bounds, rounds = tp.cell_bounds(
        low, high, aggregators, _int_hint(impl, "cb_buffer_size", 1 << 24)
    )
    if access is not None:
        mine = tp.split(access.offs, access.lens, bounds)
        mem = np.frombuffer(access.data if write else access.target, np.uint8)
    else:
        nothing = np.zeros(0, np.int64)
        mine = tp.split(nothing, nothing, bounds)
        mem = np.zeros(0, np.uint8)
    owner, rnd = mine.cell // rounds, mine.cell % rounds
    # Every aggregator learns, once, which pieces of its domain each rank moves.
    outgoing: list[Any] = [None] * size
    for a in np.unique(owner).tolist():
        sel = owner == a
        outgoing[a] = (rnd[sel], mine.start[sel], mine.length[sel])
    incoming = comm.alltoall(outgoing)
    failure: Failure | None = None
    for k in range(rounds):
        # this rank's side: its pieces of round k, one contiguous stretch per aggregator
        counts = np.zeros(size, np.int64)
        displs = np.zeros(size, np.int64)
        sel = rnd == k
        if sel.any():
            agg = owner[sel]
            np.add.at(counts, agg, mine.length[sel])
            firsts, at = np.unique(agg, return_index=True)
            displs[firsts] = mine.data[sel][at]
        # the aggregator's side: every rank's pieces of its cell in round k
        starts, lens, pos, peer_counts = _cell_pieces(incoming, k)
        peer_displs = np.cumsum(peer_counts) - peer_counts
        cell = me * rounds + k
        lo, hi = (int(bounds[cell]), int(bounds[cell + 1])) if me < aggregators else (0, 0)
        box = np.zeros(int(peer_counts.sum()), np.uint8)
        if write:
            comm.Alltoallv([mem, (counts, displs), BYTE], [box, (peer_counts, peer_displs), BYTE])
        if len(starts) and failure is None:
            failure = _cell_io(impl, write, lo, hi, (starts, lens, pos), box, call)
        if not write:
            comm.Alltoallv([box, (peer_counts, peer_displs), BYTE], [mem, (counts, displs), BYTE])
    if access is None or write:
        return (access.fbytes if access is not None else 0), failure
    eof = os.fstat(impl.fd).st_size
    return tp.bytes_before_eof(access.offs, access.lens, eof), failure


def _cell_pieces(
    incoming: list[Any], k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An aggregator's pieces of round ``k``, rank after rank: file offsets, lengths,
    places in the round's message buffer, and the bytes of each rank."""
    starts, lens = [], []
    counts = np.zeros(len(incoming), np.int64)
    for rank, pieces in enumerate(incoming):
        if pieces is None:
            continue
        sel = pieces[0] == k
        starts.append(pieces[1][sel])
        lens.append(pieces[2][sel])
        counts[rank] = int(lens[-1].sum())
    if not starts:
        nothing = np.zeros(0, np.int64)
        return nothing, nothing, nothing, counts
    start, length = np.concatenate(starts), np.concatenate(lens)
    return start, length, np.cumsum(length) - length, counts


def _cell_io(
    impl: Any, write: bool, lo: int, hi: int, pieces: Cell, box: np.ndarray, call: str
) -> Failure | None:
    """Write an aggregator's pieces of one round from ``box`` (or read them into it).

    Large pieces that do not overlap move straight between the file and ``box``, one
    vectored system call per contiguous run of the file (and per ``IOV_MAX`` pieces);
    small ones (a Python object per piece would cost more than the copy) and
    overlapping ones (two ranks accessing the same bytes) through a buffer of the
    cell, copied in one numpy operation where the pieces are regular.
    """
    order = np.argsort(pieces[0], kind="stable")
    starts, lens, at = (column[order] for column in pieces)
    ends = starts + lens
    try:
        if int(lens.sum()) < _BIG_PIECES * len(lens) or bool((starts[1:] < ends[:-1]).any()):
            _through_cell(impl, write, lo, hi, pieces, box)
            return None
        view = box.data
        runs = np.flatnonzero(np.append(True, starts[1:] != ends[:-1]))
        heads = np.union1d(runs, np.arange(0, len(starts), _IOV_MAX))
        for first, stop in zip(heads.tolist(), np.append(heads[1:], len(starts)).tolist()):
            bufs = [
                view[a : a + n] for a, n in zip(at[first:stop].tolist(), lens[first:stop].tolist())
            ]
            _vectored(impl.fd, write, bufs, int(starts[first]))
    except OSError as exc:
        return _failure(impl, exc, call)
    return None


def _vectored(fd: int, write: bool, bufs: list[memoryview], offset: int) -> None:
    """``pwritev``/``preadv`` of pieces contiguous in the file, to the end: a short
    write goes on with the rest, a short read stops at the end of the file."""
    total = sum(len(b) for b in bufs)
    done = os.pwritev(fd, bufs, offset) if write else os.preadv(fd, bufs, offset)
    while 0 < done < total:
        k = 0
        skip = done
        while skip >= len(bufs[k]):
            skip -= len(bufs[k])
            k += 1
        rest = [bufs[k][skip:], *bufs[k + 1 :]]
        more = os.pwritev(fd, rest, offset + done) if write else os.preadv(fd, rest, offset + done)
        if more == 0:
            return
        done += more


def _through_cell(impl: Any, write: bool, lo: int, hi: int, pieces: Cell, box: np.ndarray) -> None:
    """The cell through a buffer of its own: pieces copied in and one write per
    covered run, or one read of the covered span and the pieces copied out."""
    cell = np.zeros(hi - lo, np.uint8)
    starts, lens, at = pieces
    head, tail = int(starts.min()), int((starts + lens).max())
    if write:
        tp.copy_pieces(cell, starts - lo, box, at, lens)
        covered, sizes = tp.runs(starts, lens)
        for first, n in zip(covered.tolist(), sizes.tolist()):
            _vectored(impl.fd, True, [cell.data[first - lo : first - lo + n]], first)
        return
    _vectored(impl.fd, False, [cell.data[head - lo : tail - lo]], head)
    tp.copy_pieces(box, at, cell, starts - lo, lens)


def _failure(impl: Any, exc: OSError, call: str) -> Failure:
    error_class = os_error(exc, call).Get_error_class()
    return error_class, f"{call}: on rank {impl.rank}, an aggregator: {exc.strerror or exc}"
