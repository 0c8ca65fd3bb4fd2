"""Environment management and error handling on real ranks, through the launcher.

Init/Finalize and the queries allowed around them, timers, names and versions,
thread queries, predefined attributes, error handlers (predefined and user),
user error classes, unsupported classes, and the ways a job ends: Abort,
ERRORS_ARE_FATAL, an uncaught exception, Ctrl-C (in test_p2p_progress.py). A
singleton program (no launcher) is a world of one. Rules: INVENTORY §7.3
E-1..E-4, E-6..E-16, E-19, E-20.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, ROOT, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = (
    MPI_PRELUDE
    + '''
import sys
import threading


def raises(cls, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except MPI.Exception as exc:
        assert cls is None or exc.Get_error_class() == cls, (exc, cls)
        return exc
    raise AssertionError(f"{fn} did not raise MPI.Exception of class {cls}")


def same_everywhere(value):
    """value equals prv's value (so, around the ring, everyone's)."""
    return comm.sendrecv(value, nxt, 900, None, prv, 900) == value
'''
)


def program(body: str, ok: bool = True) -> str:
    return mpi_program(PRELUDE, body, ok)


@pytest.mark.parametrize("n", NPROCS)
def test_queries_attributes_and_finalize(run_mpi, n: int) -> None:
    body = """
    import socket
    assert MPI.Is_initialized() and not MPI.Is_finalized()
    assert 0 <= rank < size and comm.size == size and MPI.COMM_SELF.Get_size() == 1

    # version and library (E-1, E-2)
    version = MPI.Get_version()
    assert version == (MPI.VERSION, MPI.SUBVERSION) and version >= (3, 0)
    lib = MPI.Get_library_version()
    assert isinstance(lib, str) and lib and len(lib) < MPI.MAX_LIBRARY_VERSION_STRING
    vendor, vversion = MPI.get_vendor()
    assert isinstance(vendor, str) and vendor and isinstance(vversion, tuple)
    assert all(isinstance(v, int) for v in vversion)

    # processor name (E-4): one host, one name
    name = MPI.Get_processor_name()
    assert isinstance(name, str) and 0 < len(name) < MPI.MAX_PROCESSOR_NAME
    assert same_everywhere(name)

    # Wtime never decreases, advances with real time; Wtick is its resolution (E-14)
    t = [MPI.Wtime() for _ in range(20_000)]
    assert all(b >= a for a, b in zip(t, t[1:])) and isinstance(t[0], float)
    t0 = MPI.Wtime()
    time.sleep(0.05)
    assert 0.04 <= MPI.Wtime() - t0 < 5
    assert 0 < MPI.Wtick() <= 0.01

    # threads: any thread may call MPI (mpi4py asks for THREAD_MULTIPLE by default),
    # and only the Init thread is the main one
    level = MPI.Query_thread()
    assert level == MPI.THREAD_MULTIPLE
    assert MPI.THREAD_SINGLE < MPI.THREAD_FUNNELED < MPI.THREAD_SERIALIZED < MPI.THREAD_MULTIPLE
    assert MPI.Is_thread_main()
    seen = []
    th = threading.Thread(target=lambda: seen.append(MPI.Is_thread_main()))
    th.start()
    th.join()
    assert seen == [False]

    # predefined attributes of COMM_WORLD (E-3)
    tag_ub = comm.Get_attr(MPI.TAG_UB)
    assert isinstance(tag_ub, int) and tag_ub >= 32767 and same_everywhere(tag_ub)
    host = comm.Get_attr(MPI.HOST)
    assert (host == MPI.PROC_NULL or 0 <= host < size) and same_everywhere(host)
    io = comm.Get_attr(MPI.IO)
    assert io in (MPI.ANY_SOURCE, MPI.PROC_NULL) or 0 <= io < size
    wtime_global = comm.Get_attr(MPI.WTIME_IS_GLOBAL)
    assert wtime_global in (None, 0, 1, False, True) and same_everywhere(wtime_global)
    assert comm.Get_attr(MPI.LASTUSEDCODE) >= MPI.ERR_LASTCODE
    # a message to the largest tag goes through
    req = comm.Isend(np.array([rank], "i"), nxt, tag_ub)
    got = np.zeros(1, "i")
    comm.Recv(got, prv, tag_ub)
    req.Wait()
    assert got[0] == prv

    # user error classes and codes (E-10..E-12), from a real rank
    last = MPI.ERR_LASTCODE
    cls = MPI.Add_error_class()
    code = MPI.Add_error_code(cls)
    code2 = MPI.Add_error_code(MPI.ERR_TAG)
    assert cls > MPI.ERR_LASTCODE == last and code != cls
    assert MPI.Get_error_class(code) == cls and MPI.Get_error_class(cls) == cls
    assert MPI.Get_error_class(code2) == MPI.ERR_TAG
    assert comm.Get_attr(MPI.LASTUSEDCODE) >= max(cls, code, code2)
    assert MPI.Get_error_string(code) == ""
    MPI.Add_error_string(code, "first")
    MPI.Add_error_string(code, "my own error")
    assert MPI.Get_error_string(code) == "my own error"
    assert MPI.Get_error_string(MPI.ERR_RANK) and MPI.Get_error_class(MPI.ERR_RANK) == MPI.ERR_RANK
    exc = MPI.Exception(code)
    assert exc.Get_error_code() == code and exc.Get_error_class() == cls

    # Alloc_mem / Free_mem (E-5): message memory, INFO_NULL always valid
    mem = MPI.Alloc_mem(64, MPI.INFO_NULL)
    assert len(mem) == 64 and not memoryview(mem).readonly
    mem[:8] = bytes(range(8))
    req = comm.Isend([mem, 8, MPI.BYTE], nxt, 5)
    got = MPI.Alloc_mem(8)
    comm.Recv(got, prv, 5)
    req.Wait()
    assert bytes(got) == bytes(range(8))
    MPI.Attach_buffer(MPI.Alloc_mem(100 + MPI.BSEND_OVERHEAD))
    comm.Bsend(np.zeros(10), nxt, 6)
    comm.Recv(np.zeros(10), prv, 6)
    MPI.Free_mem(MPI.Detach_buffer())
    MPI.Free_mem(mem)
    MPI.Free_mem(got)
    raises(MPI.ERR_BASE, MPI.Free_mem, bytearray(8))
    raises(MPI.ERR_BASE, MPI.Free_mem, mem)  # freed already
    raises(None, MPI.Alloc_mem, -1)

    # Init again: erroneous, reported (E-15)
    raises(None, MPI.Init)
    raises(None, MPI.Init_thread, MPI.THREAD_SINGLE)
    assert MPI.Is_initialized() and not MPI.Is_finalized()

    # Finalize: collective; then only the four queries are allowed (E-16, E-19)
    MPI.Finalize()
    assert MPI.Is_finalized() and MPI.Is_initialized()
    assert MPI.Get_version() == version and MPI.Get_library_version() == lib
    raises(None, comm.Send, np.zeros(1), 0)
    raises(None, comm.Recv, np.zeros(1), 0)
    raises(None, comm.Get_rank)
    raises(None, comm.send, 1, 0)
    raises(None, MPI.Finalize)
    raises(None, MPI.Init)
    """
    proc = run_mpi(n, program(body))
    assert_ok(proc, n)
    assert "Finalize at exit" not in proc.stderr


@pytest.mark.parametrize("n", [1, 2])
def test_error_handlers(run_mpi, n: int) -> None:
    body = """
    a = np.zeros(3, "i")
    # the default is ERRORS_RETURN: errors raise MPI.Exception (README)
    for c in (comm, MPI.COMM_SELF):
        eh = c.Get_errhandler()
        assert eh == MPI.ERRORS_RETURN
        eh.Free()  # Get_errhandler gives a new handle to free (E-9)
        assert eh == MPI.ERRHANDLER_NULL
    assert comm.Get_errhandler() == MPI.ERRORS_RETURN
    raises(MPI.ERR_RANK, comm.Send, a, size + 1)
    assert comm.Call_errhandler(MPI.ERR_OTHER) is None  # handler returns (E-13)

    # a user handler is called with (comm, errorcode), then the exception is raised
    calls = []
    eh = MPI.Comm.Create_errhandler(lambda c, code: calls.append((c, code)))
    assert isinstance(eh, MPI.Errhandler) and eh != MPI.ERRORS_RETURN
    comm.Set_errhandler(eh)
    got = comm.Get_errhandler()
    assert got == eh
    got.Free()
    raises(MPI.ERR_RANK, comm.Send, a, size + 1)
    assert len(calls) == 1 and calls[0][0] == comm
    assert MPI.Get_error_class(calls[0][1]) == MPI.ERR_RANK
    raises(MPI.ERR_TAG, comm.Irecv, a, 0, -7)
    assert MPI.Get_error_class(calls[-1][1]) == MPI.ERR_TAG
    # errors found when a request completes go through the handler too
    rreq = comm.Irecv(np.zeros(1, "i"), prv, 5)
    sreq = comm.Isend(a, nxt, 5)
    raises(MPI.ERR_TRUNCATE, rreq.Wait)
    sreq.Wait()
    assert MPI.Get_error_class(calls[-1][1]) == MPI.ERR_TRUNCATE
    # ERR_IN_STATUS: the handler gets the failing request's code (E-9, 004 §2.3.1)
    rreq = comm.Irecv(np.zeros(1, "i"), prv, 6)
    sreq = comm.Isend(a, nxt, 6)
    n_calls = len(calls)
    raises(MPI.ERR_IN_STATUS, MPI.Request.Waitall, [rreq, sreq])
    assert len(calls) == n_calls + 1, calls
    assert MPI.Get_error_class(calls[-1][1]) == MPI.ERR_TRUNCATE, calls[-1]
    # calls tied to no object use COMM_WORLD's handler (E-6)
    MPI.Attach_buffer(bytearray(100))
    raises(MPI.ERR_BUFFER, MPI.Attach_buffer, bytearray(100))
    assert MPI.Get_error_class(calls[-1][1]) == MPI.ERR_BUFFER and calls[-1][0] == comm
    MPI.Detach_buffer()
    raises(MPI.ERR_BASE, MPI.Free_mem, bytearray(3))
    assert MPI.Get_error_class(calls[-1][1]) == MPI.ERR_BASE
    # Call_errhandler invokes it with any code, even a user code (E-13)
    code = MPI.Add_error_code(MPI.Add_error_class())
    comm.Call_errhandler(code)
    assert calls[-1] == (comm, code)
    # handlers are local to a communicator: COMM_SELF still raises without calling
    n_calls = len(calls)
    raises(MPI.ERR_RANK, MPI.COMM_SELF.Send, a, 5)
    assert len(calls) == n_calls
    # freeing the handle does not remove the handler from the communicator (E-9)
    eh.Free()
    assert eh == MPI.ERRHANDLER_NULL and not eh
    raises(MPI.ERR_RANK, comm.Send, a, -9)
    assert len(calls) == n_calls + 1
    raises(None, comm.Set_errhandler, MPI.ERRHANDLER_NULL)
    # back to ERRORS_RETURN
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    n_calls = len(calls)
    raises(MPI.ERR_RANK, comm.Send, a, -9)
    assert len(calls) == n_calls
    # a handler on COMM_SELF; the handler may look at the communicator it gets
    names = []
    MPI.COMM_SELF.Set_errhandler(MPI.Comm.Create_errhandler(
        lambda c, code: names.append((c.Get_name(), MPI.Get_error_class(code)))))
    raises(MPI.ERR_TAG, MPI.COMM_SELF.Send, a, 0, -3)
    assert names == [("MPI_COMM_SELF", MPI.ERR_TAG)]
    MPI.COMM_SELF.Set_errhandler(MPI.ERRORS_RETURN)
    # the ranks still talk
    assert comm.sendrecv(rank, nxt, 1, None, prv, 1) == prv
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("init", ["MPI.Init()", "MPI.Init_thread(MPI.THREAD_FUNNELED)"])
def test_init_by_hand(run_mpi, init: str) -> None:
    source = f"""
    import numpy as np
    import ipympi
    ipympi.rc.initialize = False
    from ipympi import MPI
    assert not MPI.Is_initialized() and not MPI.Is_finalized()
    assert MPI.Get_version() >= (3, 0) and MPI.Get_library_version()  # allowed before Init
    try:
        MPI.COMM_WORLD.Get_rank()
    except MPI.Exception:
        pass
    else:
        raise AssertionError("COMM_WORLD works before Init")
    provided = {init}
    assert MPI.Is_initialized() and not MPI.Is_finalized()
    if provided is not None:
        assert provided == MPI.THREAD_FUNNELED == MPI.Query_thread()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    assert size == 2
    got = np.zeros(3)
    comm.Sendrecv(np.full(3, rank, "d"), 1 - rank, 0, got, 1 - rank, 0)
    assert (got == 1 - rank).all()
    for again in (MPI.Init, lambda: MPI.Init_thread(MPI.THREAD_SINGLE)):
        try:
            again()
        except MPI.Exception:
            pass
        else:
            raise AssertionError("a second Init succeeded")
    print(f"OK {{rank}}", flush=True)
    """
    proc = run_mpi(2, source)
    assert_ok(proc, 2)
    assert "Finalize at exit" not in proc.stderr


def test_abort_ends_every_rank_with_its_code(run_mpi) -> None:
    body = """
    print(f"started {rank}", flush=True)
    if rank == 1:
        time.sleep(0.3)  # the others are blocked in Recv by now
        comm.Abort(42)
    comm.Recv(np.zeros(1), MPI.ANY_SOURCE, 77)
    print(f"unreachable {rank}", flush=True)
    """
    t0 = time.monotonic()
    proc = run_mpi(3, program(body, ok=False), timeout=20)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 42, (proc.returncode, proc.stderr)
    assert "unreachable" not in proc.stdout
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("started")) == [
        "started 0",
        "started 1",
        "started 2",
    ]
    assert "rank 1" in proc.stderr and "42" in proc.stderr, proc.stderr
    assert elapsed < 12, elapsed


@pytest.mark.parametrize(
    ("trigger", "call", "words"),
    [
        ("comm.Send(np.zeros(1), size + 7)", "Send", ["rank"]),
        ("comm.Isend(np.zeros(1), 0, -4)", "Isend", ["tag"]),
        ("comm.Call_errhandler(MPI.ERR_OTHER)", "Call_errhandler", []),
        (
            "MPI.Attach_buffer(bytearray(9)); MPI.Attach_buffer(bytearray(9))",
            "Attach_buffer",
            ["buffer"],
        ),
    ],
)
def test_errors_are_fatal_ends_the_job_naming_rank_call_and_error(
    run_mpi, trigger: str, call: str, words: list[str]
) -> None:
    body = f"""
    if rank == 1:
        comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
        assert comm.Get_errhandler() == MPI.ERRORS_ARE_FATAL
        time.sleep(0.2)
        {trigger}
        print("survived", flush=True)
    else:
        comm.Recv(np.zeros(1), MPI.ANY_SOURCE, 77)
    """
    t0 = time.monotonic()
    proc = run_mpi(3, program(body, ok=False), timeout=20)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0 and "survived" not in proc.stdout, proc.stderr
    assert "rank 1" in proc.stderr and call in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr.lower(), proc.stderr
    assert elapsed < 12, elapsed


def test_uncaught_exception_ends_the_job_promptly(run_mpi) -> None:
    body = """
    if rank == 2:
        time.sleep(0.3)  # the others are blocked in Recv by now
        raise ValueError("boom on rank two")
    comm.Recv(np.zeros(1), MPI.ANY_SOURCE, 77)
    """
    t0 = time.monotonic()
    proc = run_mpi(4, program(body, ok=False), timeout=20)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "ValueError: boom on rank two" in proc.stderr
    assert "rank 2" in proc.stderr, proc.stderr
    assert elapsed < 10, elapsed


def test_singleton_is_a_world_of_one(tmp_path: Path) -> None:
    """No launcher: ``python prog.py`` works as a world of one rank."""
    body = """
    import os
    assert not any(k.startswith("IPYMPI_") for k in os.environ)
    assert (rank, size) == (0, 1) and MPI.Is_initialized()
    # self-messages on COMM_WORLD and COMM_SELF
    req = comm.Isend(np.arange(5.0), 0, 3)
    got = np.zeros(5)
    st = MPI.Status()
    comm.Recv(got, 0, 3, st)
    req.Wait()
    assert (got == np.arange(5)).all() and (st.source, st.tag) == (0, 3)
    big = np.arange(300_000.0)
    req = comm.Isend(big, 0, 4)
    gbig = np.zeros_like(big)
    comm.Recv(gbig, MPI.ANY_SOURCE, MPI.ANY_TAG)
    req.Wait()
    assert (gbig == big).all()
    assert comm.sendrecv({"a": 1}, 0, 0, None, 0, 0) == {"a": 1}
    MPI.COMM_SELF.Sendrecv(np.ones(2), 0, 1, got[:2], 0, 1)
    assert (got[:2] == 1).all()

    # nothing to receive: a clear MPI.Exception instead of a hang, every blocking form
    def nothing(fn, *args):
        t0 = time.monotonic()
        exc = raises(None, fn, *args)
        assert time.monotonic() - t0 < 2
        text = str(exc).lower()
        assert "deadlock" in text or "no other rank" in text, text
    nothing(comm.Recv, got, 0, 9)
    nothing(comm.Recv, got, MPI.ANY_SOURCE, MPI.ANY_TAG)
    nothing(comm.recv)
    nothing(comm.Probe, 0, 9)
    nothing(comm.Mprobe)
    nothing(comm.Sendrecv, np.ones(1), 0, 1, got, 0, 2)
    req = comm.Irecv(got, 0, 9)
    nothing(req.Wait)
    nothing(MPI.Request.Waitall, [req])
    nothing(MPI.Request.Waitany, [req])
    req.Cancel()
    req.Wait()
    sreq = comm.Issend(np.ones(1), 0, 10)
    nothing(sreq.Wait)
    comm.Recv(got[:1], 0, 10)
    sreq.Wait()
    # still usable afterwards; the send half of the failed Sendrecv may have gone out
    if comm.Iprobe(0, 1):
        comm.Recv(got[:1], 0, 1)
    assert not comm.Iprobe()
    comm.Isend(np.full(5, 7.0), 0, 11).Wait()
    comm.Recv(got, 0, 11)
    assert (got == 7).all()
    """
    path = tmp_path / "single.py"
    path.write_text(program(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=str(tmp_path),
    )
    assert_ok(proc, 1)
