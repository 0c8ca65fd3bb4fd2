"""Blocking collective data access of ``MPI.File``: two-phase I/O when it pays.

When the ranks' accesses interleave in the file (each rank's view strided between the
others', the usual way to write a distributed array into one file), an independent
access costs each rank one system call per contiguous piece. Where some rank's view
has holes (``Set_view`` tells every rank), the ranks first agree on how the access
looks (one small allgather: each rank's byte range and piece count); if it interleaves, the aggregators (``cb_nodes`` of them, every rank by
default) each take one contiguous file domain, and the access runs in rounds of at
most ``cb_buffer_size`` bytes per aggregator (the hints ROMIO takes, with its
``romio_cb_read``/``romio_cb_write`` = ``enable``/``disable``/``automatic``): in a
round, one ``Alltoallv`` brings an aggregator the pieces of its round that the ranks
write (or takes to the ranks the pieces they read), and the aggregator moves them with
one ``pwrite``/``preadv`` per contiguous run (:mod:`ipympi.core.twophase` computes
domains, rounds and pieces).

Otherwise every rank does its own access (:func:`~ipympi.mpi.file_access.move`), as do
atomic mode (byte-range locks) and the nonblocking collectives (which must not wait
for the other ranks). A rank whose own call is wrong still takes part in the exchange
with no bytes, so the others' data lands and no rank waits; an aggregator's failed
system call fails the access on every rank, with the error's class.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from ..core import twophase as tp
from ..core.errors import Exception as MPIException
from .datatype import BYTE
from .file_move import Access, move, traced
from .file_view import os_error

__all__ = ["collective_transfer"]

_EMPTY = np.zeros(0, np.int64)


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
    metas = impl.comm.allgather(_describe(access))
    if not _two_phase(impl, write, metas):
        if problem is not None:
            raise problem
        assert access is not None
        return move(impl, access, call, t0), access.etypes
    got, failure = _exchange(impl, write, access, metas, call)
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


def _describe(access: Access | None) -> tuple[int, int, int, bool] | None:
    """What the others need of this rank's part: (low, high, pieces, in file order)."""
    if access is None or not access.fbytes:
        return None
    offs, lens = access.offs, access.lens
    ordered = bool((offs[1:] >= offs[:-1] + lens[:-1]).all())
    return int(offs.min()), int((offs + lens).max()), len(offs), ordered


def _two_phase(impl: Any, write: bool, metas: list[Any]) -> bool:
    """Whether this access goes through aggregators (the same answer on every rank)."""
    parts = [m for m in metas if m is not None]
    hint = impl.hints.get("romio_cb_write" if write else "romio_cb_read", "automatic")
    if impl.size == 1 or impl.atomic or hint == "disable" or not parts:
        return False
    if not all(m[3] for m in parts):  # pieces out of file order: each rank alone
        return False
    if hint == "enable":
        return True
    return max(m[2] for m in parts) > 1 and tp.interleaved([(m[0], m[1]) for m in parts])


def _int_hint(impl: Any, key: str, default: int) -> int:
    try:
        return max(1, int(impl.hints.get(key, default)))
    except ValueError:
        return default


Failure = tuple[int, str]  # an aggregator's failed system call: (error class, message)


def _exchange(
    impl: Any, write: bool, access: Access | None, metas: list[Any], call: str
) -> tuple[int, Failure | None]:
    """Run the rounds; return (bytes this rank's read got, this aggregator's failure)."""
    comm, size, me = impl.comm, impl.size, impl.rank
    parts = [m for m in metas if m is not None]
    low, high = min(m[0] for m in parts), max(m[1] for m in parts)
    aggregators = min(size, _int_hint(impl, "cb_nodes", size))
    bounds, rounds = tp.cell_bounds(
        low, high, aggregators, _int_hint(impl, "cb_buffer_size", 1 << 24)
    )
    if access is not None:
        mine = tp.split(access.offs, access.lens, bounds)
        mem = np.frombuffer(access.data if write else access.target, np.uint8)
    else:
        mine = tp.split(_EMPTY, _EMPTY, bounds)
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
        box = np.empty(int(peer_counts.sum()), np.uint8)
        if write:
            comm.Alltoallv([mem, (counts, displs), BYTE], [box, (peer_counts, peer_displs), BYTE])
            if len(starts) and failure is None:
                failure = _write_cell(impl, lo, hi, starts, lens, box, pos, call)
        else:
            if len(starts):
                domain = np.zeros(hi - lo, np.uint8)
                if failure is None:
                    failure = _read_cell(impl, lo, domain, starts, lens, call)
                tp.copy_pieces(box, pos, domain, starts - lo, lens)
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
        return _EMPTY, _EMPTY, _EMPTY, counts
    start, length = np.concatenate(starts), np.concatenate(lens)
    return start, length, np.cumsum(length) - length, counts


def _write_cell(
    impl: Any, lo: int, hi: int, starts: np.ndarray, lens: np.ndarray, box: np.ndarray,
    pos: np.ndarray, call: str,
) -> Failure | None:  # fmt: skip
    """Write an aggregator's pieces of one round: one ``pwrite`` per contiguous run."""
    domain = np.empty(hi - lo, np.uint8)
    tp.copy_pieces(domain, starts - lo, box, pos, lens)
    view = domain.data
    try:
        for at, n in zip(*(r.tolist() for r in tp.runs(starts, lens))):
            done = 0
            while done < n:
                done += os.pwrite(impl.fd, view[at - lo + done : at - lo + n], at + done)
    except OSError as exc:
        return _failure(impl, exc, call)
    return None


def _read_cell(
    impl: Any, lo: int, domain: np.ndarray, starts: np.ndarray, lens: np.ndarray, call: str
) -> Failure | None:
    """Read the runs an aggregator's pieces of one round cover (up to the file's end)."""
    view = domain.data
    try:
        for at, n in zip(*(r.tolist() for r in tp.runs(starts, lens))):
            done = 0
            while done < n:
                got = os.preadv(impl.fd, [view[at - lo + done : at - lo + n]], at + done)
                if got == 0:
                    break
                done += got
    except OSError as exc:
        return _failure(impl, exc, call)
    return None


def _failure(impl: Any, exc: OSError, call: str) -> Failure:
    error_class = os_error(exc, call).Get_error_class()
    return error_class, f"{call}: on rank {impl.rank}, an aggregator: {exc.strerror or exc}"
