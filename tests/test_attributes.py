"""Attribute caching on communicators, on real ranks.

Keyvals with copy and delete callbacks (mpi4py's conventions: the copy callback
returns the new value, ``NotImplemented`` leaves the attribute out, ``None`` never
copies, ``True`` copies unchanged); delete callbacks on Free, Delete_attr and
overwrite; a failing copy fails the Dup; invalid, freed and predefined keys;
attributes spread only through Dup; COMM_SELF's delete callbacks at Finalize in
reverse order of setting; the predefined attributes of COMM_WORLD. Rules:
INVENTORY §5.2 G-25..G-33.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 3]


def run(run_mpi, n, body, ok=True, timeout=60):
    proc = run_mpi(n, mpi_program(MPI_PRELUDE, body, ok), timeout=timeout)
    assert_ok(proc, n if ok else None)
    return proc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_set_get_delete_and_callbacks(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        log = []

        def copy_plus(old, key, value):
            log.append(("copy", key, value))
            return value + 1

        def delete(c, key, value):
            assert isinstance(c, MPI.Comm) and c  # still valid in the callback
            log.append(("delete", key, value))

        k_plus = MPI.Comm.Create_keyval(copy_plus, delete)
        k_never = MPI.Comm.Create_keyval(None, delete)
        k_same = MPI.Comm.Create_keyval(True, delete)
        k_skip = MPI.Comm.Create_keyval(lambda o, k, v: NotImplemented, delete)
        keys = [k_plus, k_never, k_same, k_skip]
        assert len(set(keys)) == 4 and MPI.KEYVAL_INVALID not in keys

        c = comm.Dup()
        for k in keys:
            assert c.Get_attr(k) is None
        obj = [rank]
        c.Set_attr(k_plus, 10)
        c.Set_attr(k_never, "never")
        c.Set_attr(k_same, obj)
        c.Set_attr(k_skip, 3.5)
        assert c.Get_attr(k_same) is obj and c.Get_attr(k_plus) == 10
        # attributes are per communicator
        assert comm.Get_attr(k_plus) is None

        d = c.Dup()
        assert log == [("copy", k_plus, 10)], log
        assert d.Get_attr(k_plus) == 11
        assert d.Get_attr(k_never) is None
        assert d.Get_attr(k_same) is obj
        assert d.Get_attr(k_skip) is None
        log.clear()

        # overwrite deletes the old value first; Delete_attr deletes; absent is fine
        d.Set_attr(k_plus, 20)
        assert log == [("delete", k_plus, 11)], log
        d.Delete_attr(k_plus)
        assert log[-1] == ("delete", k_plus, 20) and d.Get_attr(k_plus) is None
        d.Delete_attr(k_plus)
        assert len(log) == 2
        log.clear()

        # Free deletes every attribute
        d.Free()
        assert log == [("delete", k_same, obj)], log
        log.clear()
        c.Free()
        assert sorted(e[1] for e in log) == sorted(keys), log
        assert {e[1]: e[2] for e in log} == {k_plus: 10, k_never: "never", k_same: obj,
                                            k_skip: 3.5}
        log.clear()

        # Split, Create and Create_group carry no attributes
        comm.Set_attr(k_plus, 1)
        for new in (comm.Split(0, 0), comm.Create(comm.Get_group()),
                    comm.Create_group(comm.Get_group())):
            assert new.Get_attr(k_plus) is None
            new.Free()
        assert log == []
        comm.Delete_attr(k_plus)
        log.clear()

        # a freed keyval is invalid at once, but attributes set keep their callbacks
        e = comm.Dup()
        e.Set_attr(k_never, "kept")
        assert MPI.Comm.Free_keyval(k_never) == MPI.KEYVAL_INVALID
        raises(MPI.ERR_KEYVAL, e.Get_attr, k_never)
        raises(MPI.ERR_KEYVAL, e.Set_attr, k_never, 1)
        raises(MPI.ERR_KEYVAL, MPI.Comm.Free_keyval, k_never)
        e.Free()
        assert log == [("delete", k_never, "kept")], log

        # invalid keys
        for bad in (MPI.KEYVAL_INVALID, 12345):
            raises(MPI.ERR_KEYVAL, comm.Get_attr, bad)
            raises(MPI.ERR_KEYVAL, comm.Set_attr, bad, 1)
            raises(MPI.ERR_KEYVAL, comm.Delete_attr, bad)
        raises(MPI.ERR_COMM, MPI.COMM_NULL.Set_attr, k_plus, 1)
        raises(MPI.ERR_COMM, MPI.COMM_NULL.Get_attr, k_plus)

        # the nopython flag is accepted
        k_raw = MPI.Comm.Create_keyval(nopython=True)
        comm.Set_attr(k_raw, 42)
        assert comm.Get_attr(k_raw) == 42
        comm.Delete_attr(k_raw)
        MPI.Comm.Free_keyval(k_raw)
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 3])
def test_failing_callbacks(run_mpi, n):
    proc = run(
        run_mpi,
        n,
        """
        deleted = []

        def bad_copy(old, key, value):
            raise ValueError("no copy")

        def mpi_copy(old, key, value):
            raise MPI.Exception(MPI.ERR_ARG)

        def bad_delete(c, key, value):
            raise RuntimeError("no delete")

        k_bad = MPI.Comm.Create_keyval(bad_copy, lambda c, k, v: deleted.append(v))
        k_ok = MPI.Comm.Create_keyval(True, lambda c, k, v: deleted.append(v))
        c = comm.Dup()
        c.Set_attr(k_ok, "ok")  # copied first, then deleted again when the Dup fails
        c.Set_attr(k_bad, "bad")
        exc = raises(MPI.ERR_OTHER, c.Dup)
        assert "no copy" in str(exc) and isinstance(exc.__cause__, ValueError)
        assert deleted == ["ok"], deleted
        deleted.clear()
        # the communicator still works, and so does the next Dup without the bad key
        c.Delete_attr(k_bad)
        d = c.Dup()
        assert d.allreduce(1) == size and d.Get_attr(k_ok) == "ok"
        d.Free()
        # an MPI.Exception from the callback keeps its class
        k_mpi = MPI.Comm.Create_keyval(mpi_copy)
        c.Set_attr(k_mpi, 0)
        raises(MPI.ERR_ARG, c.Dup)
        c.Delete_attr(k_mpi)

        # a failing delete callback fails Delete_attr, which removes the attribute
        # all the same; Set_attr (overwrite) and Free go on, as with MPICH
        k_del = MPI.Comm.Create_keyval(None, bad_delete)
        c.Set_attr(k_del, 1)
        exc = raises(MPI.ERR_OTHER, c.Delete_attr, k_del)
        assert "no delete" in str(exc)
        assert c.Get_attr(k_del) is None
        c.Set_attr(k_del, 1)
        c.Set_attr(k_del, 2)
        assert c.Get_attr(k_del) == 2
        e = c.Dup()
        e.Set_attr(k_del, 3)
        e.Free()
        assert e == MPI.COMM_NULL

        # errors go through the communicator's error handler
        codes = []
        c.Set_errhandler(MPI.Comm.Create_errhandler(lambda cc, code: codes.append(code)))
        raises(MPI.ERR_KEYVAL, c.Get_attr, MPI.KEYVAL_INVALID)
        assert codes == [MPI.ERR_KEYVAL], codes
        """,
    )
    # every failing callback's traceback is printed, as mpi4py prints it
    for text in ("ValueError: no copy", "RuntimeError: no delete"):
        assert text in proc.stderr, proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2])
def test_predefined_attributes(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        tag_ub = comm.Get_attr(MPI.TAG_UB)
        assert isinstance(tag_ub, int) and tag_ub >= 32767
        comm.send("top", nxt, tag_ub)
        assert comm.recv(None, prv, tag_ub) == "top"
        assert comm.Get_attr(MPI.HOST) == MPI.PROC_NULL
        io = comm.Get_attr(MPI.IO)
        assert io == MPI.ANY_SOURCE or 0 <= io < size
        assert comm.Get_attr(MPI.WTIME_IS_GLOBAL) in (0, 1, False, True)
        assert comm.Get_attr(MPI.UNIVERSE_SIZE) >= size
        assert comm.Get_attr(MPI.APPNUM) == 0
        assert comm.Get_attr(MPI.LASTUSEDCODE) >= MPI.ERR_LASTCODE
        code = MPI.Add_error_class()
        assert comm.Get_attr(MPI.LASTUSEDCODE) == code
        comm.Set_name("renamed world")
        assert comm.Get_attr(MPI.TAG_UB) == tag_ub
        for key in (MPI.TAG_UB, MPI.HOST, MPI.IO, MPI.WTIME_IS_GLOBAL, MPI.UNIVERSE_SIZE,
                    MPI.APPNUM, MPI.LASTUSEDCODE):
            raises(MPI.ERR_KEYVAL, comm.Set_attr, key, 1)
            raises(MPI.ERR_KEYVAL, comm.Delete_attr, key)
            raises(MPI.ERR_KEYVAL, MPI.Comm.Free_keyval, key)
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2])
def test_comm_self_attributes_deleted_at_finalize_in_reverse_order(run_mpi, n):
    proc = run(
        run_mpi,
        n,
        """
        def deleter(c, key, value):
            assert not MPI.Is_finalized()
            assert c.Get_size() == 1
            print(f"DELETE {rank} {value}", flush=True)

        keys = [MPI.Comm.Create_keyval(None, deleter) for _ in range(4)]
        for i, k in enumerate(keys):
            MPI.COMM_SELF.Set_attr(k, i)
        MPI.COMM_SELF.Set_attr(keys[1], 10)  # prints DELETE 1; now set last
        # COMM_WORLD's attributes are not deleted at Finalize
        kw = MPI.Comm.Create_keyval(None, lambda c, k, v: print("WORLD", flush=True))
        comm.Set_attr(kw, 1)
        print(f"OK {rank}", flush=True)
        """,
        ok=False,
    )
    for r in range(n):
        lines = [ln.split()[2] for ln in proc.stdout.splitlines() if ln.startswith(f"DELETE {r} ")]
        assert lines == ["1", "10", "3", "2", "0"], proc.stdout
        out = proc.stdout.splitlines()
        assert out.index(f"OK {r}") < out.index(f"DELETE {r} 10")
    assert "WORLD" not in proc.stdout
