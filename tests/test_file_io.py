"""Parallel I/O with real ranks: views, the three positionings, shared pointers, split
collectives, consistency, errors and error handlers of ``MPI.File``."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

PRELUDE = (
    MPI_PRELUDE
    + """
import os
import tempfile

folder = comm.bcast(tempfile.mkdtemp(prefix="fileio-", dir=".") if rank == 0 else None, 0)
name = os.path.join(folder, "data.bin")
RW = MPI.MODE_CREATE | MPI.MODE_RDWR


def read_all_bytes():
    with open(name, "rb") as f:
        return f.read()
"""
)


def test_file_has_every_method_of_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    from ipympi import MPI

    theirs = {n for n in dir(mpi.File) if not n.startswith("_")}
    assert theirs - set(dir(MPI.File)) == set()
    assert MPI.FILE_NULL.Get_errhandler() == MPI.ERRORS_RETURN


def run(run_mpi, n: int, body: str, timeout: float = 30, prelude: str = PRELUDE) -> None:
    proc = run_mpi(n, mpi_program(prelude, body), timeout=timeout)
    assert_ok(proc, n)


@pytest.mark.parametrize("n", [1, 3])
def test_explicit_individual_and_shared_positionings(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        with MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE) as fh:
            st = MPI.Status()
            fh.Write_at(rank * 16, np.full(4, rank, "i"), st)
            assert st.Get_count(MPI.INT) == 4
            comm.Barrier()
            back = np.zeros(4 * size, "i")
            fh.Read_at_all(0, back, st)
            assert back.tolist() == [r for r in range(size) for _ in range(4)], back
            assert st.Get_count(MPI.INT) == 4 * size
            # individual pointer: each rank its own place, nonblocking
            fh.Seek(rank * 16 + 100)
            fh.Iwrite(np.full(2, 7 + rank, "i")).Wait()
            fh.Iwrite_all(np.full(2, 9 + rank, "i")).Wait()
            assert fh.Get_position() == rank * 16 + 116
            fh.Seek(-16, MPI.SEEK_CUR)
            got = np.zeros(4, "i")
            req = fh.Iread_all(got)
            req.Wait(st)
            assert got.tolist() == [7 + rank] * 2 + [9 + rank] * 2 and st.Get_count(MPI.INT) == 4
            comm.Barrier()
            fh.Seek(0, MPI.SEEK_END)
            assert fh.Get_position() == fh.Get_size() == 100 + 16 * size
            # reading past the end: a short count
            fh.Read_at(fh.Get_size() - 4, got, st)
            assert st.Get_count(MPI.INT) == 1
            comm.Barrier()
            # shared pointer: every rank's record lands once, whole
            fh.Seek_shared(0)
            for i in range(3):
                fh.Write_shared(np.full(8, rank * 10 + i, "i"))
            comm.Barrier()
            assert fh.Get_position_shared() == 3 * 8 * 4 * size
            comm.Barrier()
            if rank == 0:
                data = np.frombuffer(read_all_bytes(), "i")[: 24 * size].reshape(-1, 8)
                assert sorted(row[0] for row in data) == sorted(
                    r * 10 + i for r in range(size) for i in range(3))
                assert all(len(set(row)) == 1 for row in data)
            comm.Barrier()
            fh.Seek_shared(0)
            fh.Iwrite_shared(np.zeros(1, "i")).Wait()
            comm.Barrier()
            assert fh.Get_position_shared() == 4 * size
        comm.Barrier()
        assert not os.path.exists(name)
        """,
    )


def test_ordered_and_split_collectives(run_mpi):
    run(
        run_mpi,
        3,
        """
        fh = MPI.File.Open(comm, name, RW)
        fh.Set_view(0, MPI.SHORT, MPI.SHORT)
        fh.Write_ordered(np.full(rank + 1, rank, "h"))
        fh.Write_ordered_begin(np.full(2, 10 + rank, "h"))
        fh.Write_ordered_end(np.zeros(0, "h"))
        comm.Barrier()
        expect = [r for r in range(size) for _ in range(r + 1)]
        expect += [10 + r for r in range(size) for _ in range(2)]
        assert np.frombuffer(read_all_bytes(), "h").tolist() == expect
        fh.Seek_shared(0)
        mine = np.zeros(rank + 1, "h")
        st = MPI.Status()
        fh.Read_ordered_begin(mine)
        fh.Read_ordered_end(mine, st)
        assert mine.tolist() == [rank] * (rank + 1) and st.Get_count(MPI.SHORT) == rank + 1
        # split collectives on explicit offsets and the individual pointer
        fh.Write_at_all_begin(100 + rank, np.full(1, 50 + rank, "h"))
        raises(MPI.ERR_OTHER, fh.Write_all_begin, np.zeros(1, "h"))
        fh.Write_at_all_end(None, st)
        raises(MPI.ERR_OTHER, fh.Read_all_end, None)
        comm.Barrier()
        got = np.zeros(size, "h")
        fh.Read_at_all_begin(100, got)
        fh.Read_at_all_end(got, st)
        assert got.tolist() == [50 + r for r in range(size)] and st.Get_count(MPI.SHORT) == size
        fh.Seek(100)
        fh.Read_all_begin(got)
        fh.Read_all_end(got)
        fh.Write_all_begin(got)
        fh.Write_all_end(got)
        assert fh.Get_position() == 100 + 2 * size
        fh.Close()
        comm.Barrier()
        if rank == 0:
            MPI.File.Delete(name)
        """,
    )


def test_subarray_darray_struct_and_resized_views(run_mpi):
    run(
        run_mpi,
        4,
        """
        # a 2x2 process grid, each rank owning a 3x5 block of a 6x10 global array
        gshape, lshape = (6, 10), (3, 5)
        coords = divmod(rank, 2)
        start = [c * l for c, l in zip(coords, lshape)]
        local = np.arange(15, dtype="d").reshape(lshape) + 100 * rank
        sub = MPI.DOUBLE.Create_subarray(gshape, lshape, start).Commit()
        fh = MPI.File.Open(comm, name, RW)
        fh.Set_view(8, MPI.DOUBLE, sub)
        fh.Write_all(local)
        comm.Barrier()
        whole = np.frombuffer(read_all_bytes()[8:], "d").reshape(gshape)
        assert (whole[start[0]:start[0] + 3, start[1]:start[1] + 5] == local).all()
        back = np.zeros(lshape)
        fh.Seek(0)
        fh.Read_all(back)
        assert (back == local).all()
        # the same layout as a block distributed array
        darr = MPI.DOUBLE.Create_darray(4, rank, gshape, [MPI.DISTRIBUTE_BLOCK] * 2,
                                         [MPI.DISTRIBUTE_DFLT_DARG] * 2, [2, 2]).Commit()
        fh.Set_view(8, MPI.DOUBLE, darr)
        back[:] = 0
        fh.Read_all(back)
        assert (back == local).all()
        disp, et, ft, rep = fh.Get_view()
        assert (disp, et, rep) == (8, MPI.DOUBLE, "native") and ft.Get_extent() == darr.Get_extent()
        ft.Free()
        # a struct filetype resized so that the ranks interleave
        st_type = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.INT, MPI.INT])
        ftype = st_type.Create_resized(0, 16 * size).Commit()
        fh.Set_size(0)
        fh.Set_view(16 * rank, MPI.INT, ftype)
        fh.Write_all(np.arange(6, dtype="i") + 10 * rank)
        assert fh.Get_byte_offset(1) == 16 * rank + 8
        assert fh.Get_byte_offset(2) == 16 * (rank + size)
        comm.Barrier()
        raw = np.frombuffer(read_all_bytes().ljust(48 * size, b"\\0"), "i").reshape(-1, 4)
        assert raw[rank::size, 0].tolist() == [10 * rank + i for i in (0, 2, 4)], raw
        assert raw[rank::size, 2].tolist() == [10 * rank + i for i in (1, 3, 5)], raw
        for t in (sub, darr, st_type, ftype):
            t.Free()
        fh.Close()
        comm.Barrier()
        if rank == 0:
            MPI.File.Delete(name)
        """,
    )


def test_external32_is_big_endian_and_reads_back(run_mpi):
    run(
        run_mpi,
        2,
        """
        fh = MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE)
        fh.Set_view(0, MPI.INT, MPI.INT, "external32")
        fh.Write_at_all(rank, np.array([0x01020304 + rank], "i"))
        assert fh.Get_type_extent(MPI.LONG) == 4 and fh.Get_type_extent(MPI.DOUBLE) == 8
        comm.Barrier()
        assert read_all_bytes() == bytes([1, 2, 3, 4, 1, 2, 3, 5])
        got = np.zeros(2, "i")
        fh.Read_at_all(0, got)
        assert got.tolist() == [0x01020304, 0x01020305]
        # LONG takes 4 bytes in the file, 8 in memory
        fh.Set_view(0, MPI.LONG, MPI.LONG, "external32")
        fh.Write_at_all(2 + rank, np.array([-2 - rank], "l"))
        comm.Barrier()
        assert read_all_bytes()[8:16] == (b"\\xff\\xff\\xff\\xfe\\xff\\xff\\xff\\xfd")
        back = np.zeros(2, "l")
        fh.Read_at(2, back)
        assert back.tolist() == [-2, -3]
        raises(MPI.ERR_UNSUPPORTED_DATAREP, fh.Set_view, 0, MPI.INT, MPI.INT, "no-such-rep")
        fh.Close()
        """,
    )


def test_consistency_sync_barrier_sync(run_mpi):
    run(
        run_mpi,
        2,
        """
        fh = MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE)
        assert not fh.Get_atomicity()
        for atomic in (False, True):
            fh.Set_atomicity(atomic)
            assert fh.atomicity is atomic
            for step in range(5):
                if rank == step % 2:
                    fh.Write_at(0, np.full(64, step, "i"))
                fh.Sync()
                comm.Barrier()
                fh.Sync()
                got = np.zeros(64, "i")
                fh.Read_at(0, got)
                assert (got == step).all(), (atomic, step, got)
                comm.Barrier()
        fh.Close()
        """,
    )


def test_open_modes_and_errors(run_mpi):
    run(
        run_mpi,
        2,
        """
        raises(MPI.ERR_NO_SUCH_FILE, MPI.File.Open, comm, name)
        raises(MPI.ERR_AMODE, MPI.File.Open, comm, name, MPI.MODE_RDONLY | MPI.MODE_CREATE)
        raises(MPI.ERR_AMODE, MPI.File.Open, comm, name, MPI.MODE_RDWR | MPI.MODE_SEQUENTIAL)
        raises(MPI.ERR_NOT_SAME, MPI.File.Open, comm, name, RW if rank else MPI.MODE_RDONLY)
        raises(MPI.ERR_NO_SUCH_FILE, MPI.File.Delete, name)
        fh = MPI.File.Open(comm, name, RW | MPI.MODE_EXCL)
        assert fh.Get_errhandler() == MPI.ERRORS_RETURN
        assert fh.group_size == size and fh.group_rank == rank
        assert MPI.Group.Compare(fh.group, comm.Get_group()) == MPI.IDENT
        fh.Close()
        assert fh == MPI.FILE_NULL
        raises(MPI.ERR_FILE_EXISTS, MPI.File.Open, comm, name, RW | MPI.MODE_EXCL)
        raises(MPI.ERR_FILE, fh.Get_size)
        # read-only and write-only files
        fh = MPI.File.Open(comm, name, MPI.MODE_RDONLY | MPI.MODE_UNIQUE_OPEN)
        raises(MPI.ERR_READ_ONLY, fh.Write_at, 0, b"x")
        raises(MPI.ERR_READ_ONLY, fh.Set_size, 10)
        fh.Close()
        fh = MPI.File.Open(comm, name, MPI.MODE_WRONLY)
        raises(MPI.ERR_ACCESS, fh.Read_at, 0, bytearray(1))
        fh.Close()
        # sequential files have only the shared pointer
        fh = MPI.File.Open(comm, name, MPI.MODE_WRONLY | MPI.MODE_SEQUENTIAL)
        raises(MPI.ERR_UNSUPPORTED_OPERATION, fh.Write_at, 0, b"x")
        raises(MPI.ERR_UNSUPPORTED_OPERATION, fh.Seek, 0)
        fh.Write_ordered(bytes([65 + rank]))
        fh.Close()
        comm.Barrier()
        assert read_all_bytes() == b"AB"
        # a user error handler: FILE_NULL's handles Open's errors; a file opened gets
        # ERRORS_RETURN whatever FILE_NULL's, as mpi4py gives it under its default
        # rc.errors, "exception" (with "default", FILE_NULL's: test_session.py)
        seen = []
        eh = MPI.File.Create_errhandler(lambda f, code: seen.append(MPI.Get_error_class(code)))
        MPI.FILE_NULL.Set_errhandler(eh)
        raises(MPI.ERR_NO_SUCH_FILE, MPI.File.Open, comm, name + ".none")
        fh = MPI.File.Open(comm, name, MPI.MODE_RDONLY)
        assert fh.Get_errhandler() == MPI.ERRORS_RETURN
        fh.Set_errhandler(eh)
        raises(MPI.ERR_READ_ONLY, fh.Write, b"x")
        assert seen == [MPI.ERR_NO_SUCH_FILE, MPI.ERR_READ_ONLY], seen
        MPI.FILE_NULL.Set_errhandler(MPI.ERRORS_RETURN)
        fh.Close()
        eh.Free()
        comm.Barrier()
        if rank == 0:
            MPI.File.Delete(name)
        """,
    )


def test_a_failed_rank_does_not_hang_the_others(run_mpi):
    run(
        run_mpi,
        3,
        """
        fh = MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE)
        fh.Write_at_all(rank * 4, np.full(1, rank, "i"))
        fh.Seek_shared(200)
        # rank 1's collective write fails (a negative offset); the others' land
        if rank == 1:
            raises(MPI.ERR_ARG, fh.Write_at_all, -8, np.full(1, 99, "i"))
            try:  # a bad buffer: mpi4py's ValueError
                fh.Write_ordered([b"abc", MPI.INT])
            except ValueError:
                pass
            else:
                raise AssertionError("no ValueError")
        else:
            fh.Write_at_all(100 + rank * 4, np.full(1, 50 + rank, "i"))
            fh.Write_ordered(np.full(1, 7, "i"))
        comm.Barrier()
        got = np.zeros(3, "i")
        fh.Read_at(0, got)
        assert got.tolist() == [0, 1, 2]
        fh.Close()
        """,
    )


def test_size_preallocate_info_and_datarep(run_mpi):
    run(
        run_mpi,
        2,
        """
        fh = MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE,
                           MPI.Info.Create({"access_style": "write_once"}))
        fh.Preallocate(1000)
        assert fh.Get_size() == 1000
        fh.Set_size(10)
        assert fh.size == 10
        info = fh.Get_info()
        assert info.Get("access_style") == "write_once" and info.Get("cb_nodes") == str(size)
        fh.info = MPI.Info.Create({"cb_buffer_size": "4096"})
        assert fh.info.Get("cb_buffer_size") == "4096"
        raises(MPI.ERR_ARG, fh.Set_size, -1)
        assert fh.Get_amode() == RW | MPI.MODE_DELETE_ON_CLOSE
        # a registered representation: the file holds each int doubled
        def write_fn(userbuf, datatype, count, filebuf, position):
            np.frombuffer(filebuf, "i")[:count] = np.frombuffer(userbuf, "i")[:count] * 2
        def read_fn(userbuf, datatype, count, filebuf, position):
            np.frombuffer(userbuf, "i")[:count] = np.frombuffer(filebuf, "i")[:count] // 2
        if rank == 0:
            MPI.Register_datarep("doubled", read_fn, write_fn, lambda t: t.extent)
        raises(MPI.ERR_DUP_DATAREP, MPI.Register_datarep, "native", None, None, len)
        if rank == 1:
            MPI.Register_datarep("doubled", read_fn, write_fn, lambda t: t.extent)
        fh.Set_view(0, MPI.INT, MPI.INT, "doubled")
        fh.Write_at_all(rank, np.array([21 + rank], "i"))
        comm.Barrier()
        assert np.frombuffer(read_all_bytes()[:8], "i").tolist() == [42, 44]
        got = np.zeros(2, "i")
        fh.Read_at(0, got)
        assert got.tolist() == [21, 22]
        fh.Close()
        """,
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_device_errors_have_their_classes(run_mpi, tmp_path):
    # /dev/full refuses every write with ENOSPC, and reading /proc/self/mem at an
    # address nothing maps fails with EIO: the standard's ERR_NO_SPACE and ERR_IO, on
    # one rank and in a collective, where every rank gets the class and none hangs.
    # A running program's file, opened for writing, is busy (ETXTBSY): ERR_FILE_IN_USE.
    busy = tmp_path / "busy"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", busy)
    with subprocess.Popen([str(busy), "30"]) as sleeper:
        try:
            try:
                os.close(os.open(busy, os.O_WRONLY))
                in_use = "None"
            except OSError as exc:
                in_use = "MPI.ERR_FILE_IN_USE" if exc.errno == errno.ETXTBSY else "None"
            run(
                run_mpi,
                2,
                f"""
                fh = MPI.File.Open(comm, "/dev/full", MPI.MODE_WRONLY)
                raises(MPI.ERR_NO_SPACE, fh.Write_at, 0, np.zeros(4))
                raises(MPI.ERR_NO_SPACE, fh.Write_at_all, 8 * rank, np.zeros(4))
                fh.Close()
                fh = MPI.File.Open(MPI.COMM_SELF, "/proc/self/mem", MPI.MODE_RDONLY)
                raises(MPI.ERR_IO, fh.Read_at, 0, bytearray(8))
                fh.Close()
                if {in_use} is not None:
                    raises({in_use}, MPI.File.Open, comm, {str(busy)!r}, MPI.MODE_WRONLY)
                """,
            )
        finally:
            sleeper.kill()


TWO_PHASE_PRELUDE = """
calls = {"pwrite": 0, "preadv": 0}
for _name in calls:
    def _counted(*args, _real=getattr(os, _name), _name=_name):
        calls[_name] += 1
        return _real(*args)
    setattr(os, _name, _counted)


def interleaved(fh, width, blocks):
    # rank r sees blocks r, r + size, r + 2 size... of `width` bytes
    vector = MPI.BYTE.Create_vector(blocks, width, width * size).Commit()
    fh.Set_view(rank * width, MPI.BYTE, vector)
    vector.Free()


def expected(width, blocks, total_ranks):
    return b"".join(bytes([65 + r]) * width for _ in range(blocks) for r in range(total_ranks))
"""


@pytest.mark.parametrize(
    "hints",
    [
        {},  # every rank an aggregator, one round
        {"cb_nodes": "2", "cb_buffer_size": "65536"},  # fewer aggregators, many rounds
        {"romio_cb_write": "disable", "romio_cb_read": "disable"},  # each rank alone
    ],
)
def test_interleaved_collective_access_goes_through_aggregators(run_mpi, hints):
    # 3 ranks, 3000 blocks of 100 bytes each: independently 3000 pwrites a rank; through
    # aggregators one per contiguous run a round. Bytes must be the same either way,
    # with hints that force several rounds and fewer aggregators than ranks.
    alone = "disable" in hints.values()
    run(
        run_mpi,
        3,
        f"""
        info = MPI.Info.Create()
        for key, value in {hints!r}.items():
            info.Set(key, value)
        width, blocks = 100, 3000
        with MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE, info) as fh:
            interleaved(fh, width, blocks)
            st = MPI.Status()
            fh.Write_all(np.full(width * blocks, 65 + rank, np.uint8), st)
            assert st.Get_count(MPI.BYTE) == width * blocks
            assert fh.Get_position() == width * blocks
            writes = comm.allreduce(calls["pwrite"])
            assert writes >= 9000 if {alone} else writes < 60, writes
            fh.Sync()
            comm.Barrier()
            if rank == 0:
                assert read_all_bytes() == expected(width, blocks, size)
            comm.Barrier()
            fh.Sync()
            back = np.zeros(width * blocks, np.uint8)
            fh.Read_at_all(0, back, st)
            assert (back == 65 + rank).all()
            assert st.Get_count(MPI.BYTE) == width * blocks
            reads = comm.allreduce(calls["preadv"])
            assert reads >= 9000 if {alone} else reads < 60, reads
            # the same through split collectives and explicit offsets
            fh.Write_at_all_begin(0, np.full(width * blocks, 97 + rank, np.uint8))
            fh.Write_at_all_end(np.empty(0, np.uint8))
            fh.Sync()
            comm.Barrier()
            if rank == 0:
                assert read_all_bytes() == expected(width, blocks, size).lower()
        """,
        prelude=PRELUDE + TWO_PHASE_PRELUDE,
    )


def test_two_phase_reads_stop_at_the_end_of_the_file(run_mpi):
    # The file ends 25 bytes into the 51st row of blocks (10 bytes a rank): rank 2's
    # 51st block is cut short; each rank's read gets what precedes the end.
    run(
        run_mpi,
        3,
        """
        width, blocks = 10, 100
        if rank == 0:
            with open(name, "wb") as f:
                f.write(expected(width, blocks, size)[: width * size * 50 + 25])
        comm.Barrier()
        with MPI.File.Open(comm, name, MPI.MODE_RDONLY) as fh:
            interleaved(fh, width, blocks)
            back = np.zeros(width * blocks, np.uint8)
            st = MPI.Status()
            fh.Read_all(back, st)
            got = st.Get_count(MPI.BYTE)
            assert got == [510, 510, 505][rank], got
            assert (back[:got] == 65 + rank).all()
            assert fh.Get_position() == width * blocks  # the etypes asked for
        comm.Barrier()
        if rank == 0:
            os.unlink(name)
        """,
        prelude=PRELUDE + TWO_PHASE_PRELUDE,
    )


def test_a_wrong_rank_in_an_interleaved_collective_loses_nothing(run_mpi):
    run(
        run_mpi,
        3,
        """
        width, blocks = 8, 500
        with MPI.File.Open(comm, name, RW | MPI.MODE_DELETE_ON_CLOSE) as fh:
            interleaved(fh, width, blocks)
            data = np.full(width * blocks, 65 + rank, np.uint8)
            if rank == 1:
                raises(MPI.ERR_ARG, fh.Write_at_all, -1, data)
                try:
                    fh.Write_all(object())
                except TypeError:
                    pass
                else:
                    raise AssertionError("no TypeError")
            else:
                fh.Write_at_all(0, data)
                fh.Write_all(data)
            fh.Sync()
            comm.Barrier()
            if rank == 0:
                content = read_all_bytes()
                assert content[:16] == b"A" * 8 + b"\\0" * 8, content[:24]
                assert content[16:24] == b"C" * 8
        """,
        prelude=PRELUDE + TWO_PHASE_PRELUDE,
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_an_aggregator_s_failed_write_fails_the_collective_everywhere(run_mpi):
    run(
        run_mpi,
        2,
        """
        fh = MPI.File.Open(comm, "/dev/full", MPI.MODE_WRONLY)
        interleaved(fh, 16, 100)
        exc = raises(MPI.ERR_NO_SPACE, fh.Write_all, np.zeros(1600, np.uint8))
        assert "aggregator" in str(exc), exc
        fh.Close()
        """,
        prelude=PRELUDE + TWO_PHASE_PRELUDE,
    )
