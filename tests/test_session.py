"""The sessions model (MPI 4 §11.3) on real ranks: sessions with and without ``MPI.Init``,
process sets, communicators from their groups, hints, error handlers and handles.

Rank-agnostic programs at 1, 2 and 4 ranks.
"""

from __future__ import annotations

import pickle

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi import MPI

NPROCS = [1, 2, 4]

# A program that never calls MPI.Init: ipympi.rc.initialize is off before the import.
NO_INIT_PRELUDE = """
import time
import numpy as np
import ipympi
ipympi.rc.initialize = False
from ipympi import MPI
"""


@pytest.mark.parametrize("n", NPROCS)
def test_sessions_only_program(run_mpi, n: int) -> None:
    """A program that uses sessions only: no MPI.Init, COMM_WORLD stays unusable."""
    body = """
    assert not MPI.Is_initialized()
    session = MPI.Session.Init()
    assert not MPI.Is_initialized() and not MPI.Is_finalized()
    assert session.Get_num_psets() == 2
    assert [session.Get_nth_pset(i) for i in range(2)] == ["mpi://WORLD", "mpi://SELF"]
    group = session.Create_group("mpi://WORLD")
    rank, size = group.Get_rank(), group.Get_size()
    info = session.Get_pset_info("mpi://WORLD")
    assert info.Get("mpi_size") == str(size)
    info.Free()
    comm = MPI.Intracomm.Create_from_group(group, "org.example.app")
    assert comm.Get_rank() == rank and comm.Get_size() == size
    assert comm.Get_errhandler() == MPI.ERRORS_RETURN
    # point to point and collectives on it
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    got = comm.sendrecv(rank, nxt, 3, None, prv, 3)
    assert got == prv
    buf = np.zeros(1, "i")
    comm.Allreduce(np.array([rank], "i"), buf)
    assert buf[0] == size * (size - 1) // 2
    assert comm.bcast("x" if rank == 0 else None) == "x"
    # a second communicator from the same group with another tag: its own context
    other = MPI.Intracomm.Create_from_group(group, "org.example.other")
    assert other.Compare(comm) == MPI.CONGRUENT
    req = other.isend("other", nxt, 3)
    comm.send("comm", nxt, 3)
    assert comm.recv(None, prv, 3) == "comm"
    assert other.recv(None, prv, 3) == "other"
    req.wait()
    try:
        MPI.COMM_WORLD.Get_rank()
        raise AssertionError("COMM_WORLD worked without MPI.Init")
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_OTHER
    other.Free(); comm.Free(); group.Free()
    self_group = session.Create_group("mpi://SELF")
    me = MPI.Intracomm.Create_from_group(self_group)
    assert me.Get_size() == 1 and me.allgather(rank) == [rank]
    me.Free()
    session.Finalize()
    # another session later works the same
    again = MPI.Session.Init()
    comm = MPI.Intracomm.Create_from_group(again.Create_group("mpi://WORLD"))
    comm.Barrier()
    comm.Free()
    again.Finalize()
    print(f"OK {rank}", flush=True)
    """
    assert_ok(run_mpi(n, NO_INIT_PRELUDE + __import__("textwrap").dedent(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_sessions_beside_the_world_model(run_mpi, n: int) -> None:
    body = """
    session = MPI.Session.Init()
    assert session and session != MPI.SESSION_NULL and MPI.Session(session) == session
    assert not MPI.Session() and MPI.Session() == MPI.SESSION_NULL
    group = session.Create_group("mpi://WORLD")
    assert group.Get_rank() == rank and group.Get_size() == size
    assert MPI.Group.Compare(group, comm.Get_group()) == MPI.IDENT
    g2 = MPI.Group.Create_from_session_pset(session, "mpi://SELF")
    assert g2.Get_size() == 1 and g2.Get_rank() == 0
    scomm = MPI.Intracomm.Create_from_group(group, "tag.a", errhandler=MPI.ERRORS_RETURN)
    # its context is distinct from COMM_WORLD's: messages do not cross
    comm.send("world", nxt, 7)
    scomm.send("session", nxt, 7)
    assert scomm.recv(None, prv, 7) == "session"
    assert comm.recv(None, prv, 7) == "world"
    assert scomm.allreduce(1) == size
    scomm.Free()
    # the session's hints
    info = MPI.Info.Create()
    info.Set("mpi_thread_support_level", "MPI_THREAD_SINGLE")
    info.Set("example_hint", "yes")
    s2 = MPI.Session.Init(info)
    used = s2.Get_info()
    assert used.Get("example_hint") == "yes"
    assert used.Get("mpi_thread_support_level") is not None
    used.Free(); info.Free()
    s2.Finalize(); session.Finalize()
    assert session == MPI.SESSION_NULL
    """
    assert_ok(run_mpi(n, mpi_program(MPI_PRELUDE, body)), n)


@pytest.mark.parametrize("n", [1, 2])
def test_errors_and_errhandlers(run_mpi, n: int) -> None:
    body = """
    session = MPI.Session.Init()
    assert session.Get_errhandler() == MPI.ERRORS_RETURN
    raises(MPI.ERR_ARG, session.Create_group, "mpi://NOWHERE")
    raises(MPI.ERR_ARG, session.Get_pset_info, "nothing")
    raises(MPI.ERR_ARG, session.Get_nth_pset, 2)
    raises(MPI.ERR_ARG, session.Get_nth_pset, -1)
    seen = []
    eh = MPI.Session.Create_errhandler(lambda s, code: seen.append((s, code)))
    session.Set_errhandler(eh)
    assert session.Get_errhandler() == eh
    raises(MPI.ERR_ARG, session.Create_group, "mpi://NOWHERE")
    assert len(seen) == 1 and seen[0][0] == session
    assert MPI.Get_error_class(seen[0][1]) == MPI.ERR_ARG
    session.Call_errhandler(MPI.ERR_OTHER)
    assert seen[-1][1] == MPI.ERR_OTHER
    raises(MPI.ERR_ERRHANDLER, session.Set_errhandler, MPI.ERRHANDLER_NULL)
    eh.Free()
    # Init's errhandler argument applies from the start
    s2 = MPI.Session.Init(errhandler=MPI.ERRORS_RETURN)
    s2.Finalize()
    session.Finalize()
    # a finalized or null session: ERR_SESSION
    raises(MPI.ERR_SESSION, session.Finalize)
    raises(MPI.ERR_SESSION, session.Get_num_psets)
    raises(MPI.ERR_SESSION, MPI.SESSION_NULL.Create_group, "mpi://WORLD")
    """
    assert_ok(run_mpi(n, mpi_program(MPI_PRELUDE, body)), n)


def test_handles_subclassing_and_pickling() -> None:
    session = MPI.Session.Init()
    try:
        assert MPI.Session.fromhandle(session.handle) == session
        assert MPI.Session.f2py(session.py2f()) == session
        assert MPI.Session.fromint(session.toint()) == session
        assert MPI.SESSION_NULL.handle == 0 or not MPI.Session.fromhandle(MPI.SESSION_NULL.handle)
        with pytest.raises(ValueError):
            pickle.dumps(session)
        assert pickle.loads(pickle.dumps(MPI.SESSION_NULL)) is MPI.SESSION_NULL
        with pytest.raises(TypeError):
            hash(session)
    finally:
        session.Finalize()

    freed = MPI.Session.Init()
    freed.free()  # free() finalizes a session, and leaves null handles alone
    assert freed == MPI.SESSION_NULL
    MPI.SESSION_NULL.free()
    assert MPI.Session() == MPI.SESSION_NULL

    class MySession(MPI.Session):
        pass

    mine = MySession.Init()
    try:
        assert type(mine) is MySession and isinstance(mine, MPI.Session)
        assert MySession(mine) == mine and type(MySession(mine)) is MySession
        assert mine.Get_num_psets() == 2
    finally:
        mine.Finalize()
    assert not mine


@pytest.mark.parametrize("n", [1, 2])
def test_init_after_a_session(run_mpi, n: int) -> None:
    """MPI.Init after the first session: the world model joins the running engine, and
    the session's communicator keeps working beside COMM_WORLD."""
    body = """
    s = MPI.Session.Init()
    c = MPI.Intracomm.Create_from_group(s.Create_group("mpi://WORLD"))
    assert not MPI.Is_initialized()
    MPI.Init()
    assert MPI.Is_initialized()
    w = MPI.COMM_WORLD
    rank, size = w.Get_rank(), w.Get_size()
    assert c.allreduce(1) == w.allreduce(1) == size
    assert c.Get_rank() == rank
    c.Free()
    s.Finalize()
    print(f"OK {rank}", flush=True)
    """
    assert_ok(run_mpi(n, NO_INIT_PRELUDE + __import__("textwrap").dedent(body)), n)


@pytest.mark.parametrize(
    ("errors", "handler"),
    [
        ("exception", "ERRORS_RETURN"),
        ("default", "ERRORS_ARE_FATAL"),  # MPI's default (files: FILE_NULL's)
        ("fatal", "ERRORS_ARE_FATAL"),
        ("abort", "ERRORS_ABORT"),
    ],
)
def test_rc_errors_gives_sessions_and_files_their_default_handler(
    run_mpi, errors: str, handler: str
) -> None:
    # as mpi4py does: a session opened without a handler and the predefined
    # communicators get the handler mpi4py.rc.errors asks for, and so does every file
    # opened, whatever FILE_NULL's, but with "default", where files get FILE_NULL's
    # (ERRORS_RETURN unless set); FILE_NULL's own stays ERRORS_RETURN until set
    opened = "ERRORS_ARE_FATAL" if errors == "default" else handler  # after the Set below
    body = f"""
    session = MPI.Session.Init()
    assert session.Get_errhandler() == MPI.{handler}, session.Get_errhandler()
    session.Finalize()
    assert comm.Get_errhandler() == MPI.{handler}
    assert MPI.FILE_NULL.Get_errhandler() == MPI.ERRORS_RETURN
    f = MPI.File.Open(MPI.COMM_SELF, os.devnull, MPI.MODE_WRONLY)
    first = MPI.ERRORS_RETURN if "{errors}" == "default" else MPI.{handler}
    assert f.Get_errhandler() == first, f.Get_errhandler()
    f.Close()
    MPI.FILE_NULL.Set_errhandler(MPI.ERRORS_ARE_FATAL)
    f = MPI.File.Open(MPI.COMM_SELF, os.devnull, MPI.MODE_WRONLY)
    assert f.Get_errhandler() == MPI.{opened}
    f.Close()
    MPI.FILE_NULL.Set_errhandler(MPI.ERRORS_RETURN)
    """
    prelude = "import os\n" + MPI_PRELUDE
    proc = run_mpi(2, mpi_program(prelude, body), env={"IPYMPI_RC_ERRORS": errors})
    assert_ok(proc, 2)
