"""The floor of a shared-memory collective in Python: a communicator of bare board traffic.

``benchmarks/collectives.py --floor`` runs the rows of ``_coll_rank.py`` once more with
:class:`FloorComm` in place of the communicator: each collective does only the stores and
loads that move its data through one shared segment and say that it is there, written in
plain Python with the standard library and numpy, as the issue's probe was. It is a lower
bound for any pure-Python implementation of these calls on one host, not a
communicator one could use:

- no argument parsing (each buffer's bytes are looked up once, by the buffer's id), no
  datatypes, SUM of float64 and of Python ints only, no error checks of any kind;
- no flow control: a root that runs ahead may overwrite a slot a reader has not read
  yet (every call of a row moves the same data, so the results still check);
- no locks, no call numbering, no mismatch detection, no sleeping: a wait only spins on
  the awaited word (giving the core away with ``sched_yield`` when ranks outnumber
  cores, as ipympi's board does).

Layout: per rank, :data:`DEPTH` slots of ``slot`` bytes; a slot is a flag word (the
number of the call that last wrote it), a length word (of a pickle) and the data. A
writer stores the data, then the flag (one aligned 8-byte store; x86 keeps stores in
order, and loads); a reader waits until the flag reaches its call's number, then reads.
"""

from __future__ import annotations

import mmap
import os
import pickle
import tempfile
from typing import Any

import numpy as np

DEPTH = 16  # slots per rank (a power of two)
HEADER = 16  # flag word, length word
SLOT_DATA = 16384  # the largest row's data (a 1 Ki float64 buffer: 8 KiB) fits
FOLDER = "/dev/shm" if os.path.isdir("/dev/shm") else None


def fits(kind: str, count: int, size: int) -> bool:
    """Whether a row of ``kind`` moving ``count`` float64 values fits in a slot."""
    blocks = size if kind in ("Scatter", "Alltoall") else 1
    return 8 * count * blocks <= SLOT_DATA


class FloorComm:
    """The bare board traffic of the collectives ``_coll_rank.py`` times, on ``comm``'s
    ranks (which must share one host); ``comm`` only hands out the segment."""

    def __init__(self, comm: Any) -> None:
        rank, size = comm.Get_rank(), comm.Get_size()
        self.rank, self.size = rank, size
        slot = -(-(HEADER + SLOT_DATA) // 64) * 64
        total = size * DEPTH * slot
        name = None
        if rank == 0:
            fd, name = tempfile.mkstemp(prefix="ipympi-floor-", dir=FOLDER)
            os.ftruncate(fd, total)
            os.close(fd)
        name = comm.bcast(name, root=0)
        with open(name, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), total)
        comm.Barrier()
        if rank == 0:
            os.unlink(name)
        mem = memoryview(self._map)
        self.words = mem.cast("q")
        offsets = [[(r * DEPTH + i) * slot for i in range(DEPTH)] for r in range(size)]
        # per slot number i: each rank's flag and length word indexes, and its data
        self.flag = [[offsets[r][i] // 8 for r in range(size)] for i in range(DEPTH)]
        self.data = [
            [mem[o + HEADER : o + HEADER + SLOT_DATA] for o in (offsets[r][i] for r in range(size))]
            for i in range(DEPTH)
        ]
        self.others = [r for r in range(size) if r != rank]
        self.give = os.sched_yield if size > len(os.sched_getaffinity(0)) else None
        self.seq = 0
        self._bytes: dict[int, memoryview] = {}
        self._arrays: dict[tuple[int, int, int], np.ndarray] = {}

    # -- helpers -----------------------------------------------------------------------
    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def _mem(self, buf: np.ndarray) -> memoryview:
        """``buf``'s bytes (looked up by its id: the rows keep their buffers)."""
        mem = self._bytes.get(id(buf))
        if mem is None:
            mem = self._bytes[id(buf)] = memoryview(buf).cast("B")
        return mem

    def _array(self, rank: int, i: int, count: int) -> np.ndarray:
        """``rank``'s slot number ``i`` as ``count`` float64 values."""
        key = (rank, i, count)
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = np.frombuffer(self.data[i][rank], np.float64, count)
        return array

    def _next(self) -> tuple[int, int]:
        s = self.seq = self.seq + 1
        return s, s & (DEPTH - 1)

    def _await(self, rank: int, i: int, s: int) -> None:
        """Spin until ``rank`` has written slot ``i`` in call ``s`` (or later)."""
        words, k, give = self.words, self.flag[i][rank], self.give
        while words[k] < s:
            if give is not None:
                give()

    # -- the collectives -----------------------------------------------------------------
    def Barrier(self) -> None:
        s, i = self._next()
        self.words[self.flag[i][self.rank]] = s
        for r in self.others:
            self._await(r, i, s)

    def Bcast(self, buf: np.ndarray, root: int = 0) -> None:
        s, i = self._next()
        mem = self._mem(buf)
        n = mem.nbytes
        if self.rank == root:
            self.data[i][root][:n] = mem
            self.words[self.flag[i][root]] = s
        else:
            self._await(root, i, s)
            mem[:] = self.data[i][root][:n]

    def Reduce(self, sbuf: np.ndarray, rbuf: np.ndarray, op: Any = None, root: int = 0) -> None:
        s, i = self._next()
        me = self.rank
        if me != root:
            mem = self._mem(sbuf)
            self.data[i][me][: mem.nbytes] = mem
            self.words[self.flag[i][me]] = s
            return
        self._combine(sbuf, rbuf, i, s)

    def Allreduce(self, sbuf: np.ndarray, rbuf: np.ndarray, op: Any = None) -> None:
        s, i = self._next()
        me = self.rank
        mem = self._mem(sbuf)
        self.data[i][me][: mem.nbytes] = mem
        self.words[self.flag[i][me]] = s
        self._combine(sbuf, rbuf, i, s)

    def _combine(self, sbuf: np.ndarray, rbuf: np.ndarray, i: int, s: int) -> None:
        """Every rank's values summed in rank order into ``rbuf`` (this rank's: ``sbuf``)."""
        count, me = sbuf.size, self.rank
        for r in range(self.size):
            if r == me:
                values = sbuf
            else:
                self._await(r, i, s)
                values = self._array(r, i, count)
            if r == 0:
                np.copyto(rbuf, values)
            else:
                np.add(rbuf, values, out=rbuf)

    def allreduce(self, obj: Any, op: Any = None) -> Any:
        s, i = self._next()
        me, words = self.rank, self.words
        data = pickle.dumps(obj)
        self.data[i][me][: len(data)] = data
        words[self.flag[i][me] + 1] = len(data)
        words[self.flag[i][me]] = s
        total = None
        for r in range(self.size):
            if r == me:
                value = obj
            else:
                self._await(r, i, s)
                value = pickle.loads(self.data[i][r][: words[self.flag[i][r] + 1]])
            total = value if r == 0 else total + value
        return total

    def Gather(self, sbuf: np.ndarray, rbuf: np.ndarray, root: int = 0) -> None:
        s, i = self._next()
        me, mem = self.rank, self._mem(sbuf)
        n = mem.nbytes
        if me != root:
            self.data[i][me][:n] = mem
            self.words[self.flag[i][me]] = s
            return
        out = self._mem(rbuf)
        out[me * n : (me + 1) * n] = mem
        for r in self.others:
            self._await(r, i, s)
            out[r * n : (r + 1) * n] = self.data[i][r][:n]

    def Scatter(self, sbuf: np.ndarray, rbuf: np.ndarray, root: int = 0) -> None:
        s, i = self._next()
        me, mem = self.rank, self._mem(rbuf)
        n = mem.nbytes
        if me == root:
            src = self._mem(sbuf)
            self.data[i][me][: src.nbytes] = src
            self.words[self.flag[i][me]] = s
            mem[:] = src[me * n : (me + 1) * n]
        else:
            self._await(root, i, s)
            mem[:] = self.data[i][root][me * n : (me + 1) * n]

    def Allgather(self, sbuf: np.ndarray, rbuf: np.ndarray) -> None:
        s, i = self._next()
        me, mem, out = self.rank, self._mem(sbuf), self._mem(rbuf)
        n = mem.nbytes
        self.data[i][me][:n] = mem
        self.words[self.flag[i][me]] = s
        out[me * n : (me + 1) * n] = mem
        for r in self.others:
            self._await(r, i, s)
            out[r * n : (r + 1) * n] = self.data[i][r][:n]

    def Alltoall(self, sbuf: np.ndarray, rbuf: np.ndarray) -> None:
        s, i = self._next()
        me, src, out = self.rank, self._mem(sbuf), self._mem(rbuf)
        n = out.nbytes // self.size
        self.data[i][me][: src.nbytes] = src
        self.words[self.flag[i][me]] = s
        out[me * n : (me + 1) * n] = src[me * n : (me + 1) * n]
        for r in self.others:
            self._await(r, i, s)
            out[r * n : (r + 1) * n] = self.data[i][r][me * n : (me + 1) * n]
