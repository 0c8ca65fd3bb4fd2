"""Ports and names on real ranks: Open_port/Accept/Connect between the halves of a split
COMM_WORLD (point-to-point, a collective and Merge over the intercommunicator), the name
service within a job and across two jobs, Comm.Join over a socket, and every error.

The name service keeps its files in the temp folder: each test points its ranks' TMPDIR
at the test's own directory.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program


def run(run_mpi, tmp_path, n, body, ok=True):
    proc = run_mpi(n, mpi_program(MPI_PRELUDE, body, ok), timeout=40, env={"TMPDIR": str(tmp_path)})
    if ok:
        assert_ok(proc, n)
    return proc


@pytest.mark.parametrize("n", [2, 3, 4])
def test_accept_connect_halves(run_mpi, tmp_path, n):
    run(
        run_mpi,
        tmp_path,
        n,
        """
        low = rank < size // 2 or size == 1
        half = comm.Split(0 if low else 1, rank)
        if low:
            port = MPI.Open_port() if half.rank == 0 else None
            if half.rank == 0:
                assert port.startswith("ipympi-port:") and len(port) < MPI.MAX_PORT_NAME
                comm.send(port, size // 2)
            ic = half.Accept(port, root=0)
        else:
            port = comm.recv(source=0) if half.rank == 0 else "ignored at non-roots"
            ic = half.Connect(port, MPI.INFO_NULL, 0)
        assert ic.Is_inter() and ic.size == half.size and ic.rank == half.rank
        assert ic.remote_size == size - half.size
        theirs = list(range(size // 2, size)) if low else list(range(size // 2))
        # point-to-point: each rank to every remote rank
        reqs = [ic.isend((rank, r), r, tag=5) for r in range(ic.remote_size)]
        got = sorted(ic.recv(source=r, tag=5) for r in range(ic.remote_size))
        assert got == [(w, ic.rank) for w in theirs], got
        MPI.Request.waitall(reqs)
        # a collective: allreduce gives the sum over the remote group
        assert ic.allreduce(rank) == sum(theirs)
        # a rooted collective: bcast from the low group's rank 0
        root = (MPI.ROOT if ic.rank == 0 else MPI.PROC_NULL) if low else 0
        msg = ic.bcast({"from": "acceptor"} if low else None, root)
        assert msg == (None if low else {"from": "acceptor"})
        # Merge: the low group first
        merged = ic.Merge(high=not low)
        assert merged.size == size and merged.rank == rank
        assert merged.allreduce(1) == size
        if low and half.rank == 0:
            MPI.Close_port(port)
        merged.Free(); ic.Free(); half.Free()
        comm.Barrier()
        """,
    )


def test_connect_accept_self_and_reuse(run_mpi, tmp_path):
    """COMM_SELF of two ranks, both directions, and one port accepting twice."""
    run(
        run_mpi,
        tmp_path,
        3,
        """
        if rank == 0:
            port = MPI.Open_port()
            comm.bcast(port, 0)
            ics = [MPI.COMM_SELF.Accept(port) for _ in range(2)]
            MPI.Close_port(port)
            peers = sorted(ic.recv(source=0) for ic in ics)
            assert peers == [1, 2], peers
            for ic in ics:
                ic.send("bye", 0)
                ic.Free()
        else:
            port = comm.bcast(None, 0)
            ic = MPI.COMM_SELF.Connect(port)
            assert (ic.size, ic.remote_size) == (1, 1)
            ic.send(rank, 0)
            assert ic.recv(source=0) == "bye"
            ic.Free()
        comm.Barrier()
        """,
    )


def test_names_within_a_job(run_mpi, tmp_path):
    run(
        run_mpi,
        tmp_path,
        2,
        """
        if rank == 0:
            port = MPI.Open_port()
            MPI.Publish_name("ipympi-test-service", port)
            raises(MPI.ERR_SERVICE, MPI.Publish_name, "ipympi-test-service", port)
            comm.Barrier()                      # published
            ic = MPI.COMM_SELF.Accept(port)
            assert ic.recv(source=0) == "hello"
            comm.Barrier()                      # the client has looked up again
            MPI.Unpublish_name("ipympi-test-service", port)
            raises(MPI.ERR_SERVICE, MPI.Unpublish_name, "ipympi-test-service", port)
            MPI.Close_port(port)
            comm.Barrier()                      # unpublished
        else:
            comm.Barrier()
            port = MPI.Lookup_name("ipympi-test-service", MPI.INFO_NULL)
            ic = MPI.COMM_SELF.Connect(port)
            ic.send("hello", 0)
            assert MPI.Lookup_name("ipympi-test-service") == port
            comm.Barrier()
            comm.Barrier()
            raises(MPI.ERR_NAME, MPI.Lookup_name, "ipympi-test-service")
        ic.Free()
        import os, stat, tempfile
        d = os.path.join(tempfile.gettempdir(), f"ipympi-names-{os.getuid()}")
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert os.listdir(d) == []
        """,
    )


def test_names_across_jobs(run_mpi, tmp_path):
    """A name one job publishes is found by another job of the same user, which connects
    to it (more in test_ports_jobs); Finalize withdraws the names a process left
    published; the name of a process that died unpublished is stale."""
    (tmp_path / "other.py").write_text(
        textwrap.dedent(
            """
            from ipympi import MPI
            port = MPI.Lookup_name("ipympi-cross")
            assert port.startswith("ipympi-port:")
            ic = MPI.COMM_WORLD.Connect(port)
            assert ic.remote_size == 2 and ic.bcast(None, root=0) == "from the first job"
            ic.Disconnect()
            print("OTHER OK", MPI.COMM_WORLD.rank, flush=True)
            """
        )
    )
    run(
        run_mpi,
        tmp_path,
        2,
        """
        import subprocess, sys
        port = MPI.Open_port() if rank == 0 else None
        if rank == 0:
            MPI.Publish_name("ipympi-cross", port)
            other = subprocess.Popen(
                [sys.executable, "-m", "ipympi.run", "-n", "2", "--timeout", "20", "other.py"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
        ic = comm.Accept(port)
        ic.bcast("from the first job", root=MPI.ROOT if rank == 0 else MPI.PROC_NULL)
        ic.Disconnect()
        if rank == 0:
            out, err = other.communicate(timeout=30)
            assert other.returncode == 0, out + err
            assert out.count("OTHER OK") == 2, out
        comm.Barrier()
        """,
    )
    run(
        run_mpi,
        tmp_path,
        1,
        """
        import subprocess, sys
        raises(MPI.ERR_NAME, MPI.Lookup_name, "ipympi-cross")   # withdrawn at Finalize
        died = subprocess.run(
            [sys.executable, "-c", "import os; from ipympi import MPI; "
             "MPI.Publish_name('ipympi-dead', MPI.Open_port()); os._exit(0)"],
            capture_output=True, text=True, timeout=30,
        )
        assert died.returncode == 0, died.stderr
        raises(MPI.ERR_NAME, MPI.Lookup_name, "ipympi-dead")
        port = MPI.Open_port()
        MPI.Publish_name("ipympi-dead", port)                    # free again
        MPI.Unpublish_name("ipympi-dead", port)
        """,
    )


def test_join_over_a_socket(run_mpi, tmp_path):
    run(
        run_mpi,
        tmp_path,
        3,
        """
        import os, socket
        path = "join.sock"
        if rank == 0:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(1)
        comm.Barrier()
        ic = None
        if rank == 0:
            sock = server.accept()[0]
            server.close()
        elif rank == 2:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
        if rank in (0, 2):
            sock.setblocking(False)
            ic = MPI.Comm.Join(sock.fileno())
            assert not os.get_blocking(sock.fileno())   # the caller's mode is kept
            sock.close()
            assert ic.Is_inter() and (ic.size, ic.remote_size, ic.rank) == (1, 1, 0)
            assert ic.Get_remote_group().Translate_ranks([0], comm.Get_group()) == [2 - rank]
            ic.send(rank, 0)
            assert ic.recv(source=0) == 2 - rank
            assert ic.allreduce(rank + 1) == 3 - rank
            m = ic.Merge(rank == 2)
            assert m.allgather(rank) == [0, 2]
            m.Free(); ic.Free()
        comm.Barrier()
        """,
    )


def test_errors(run_mpi, tmp_path):
    run(
        run_mpi,
        tmp_path,
        2,
        """
        import os
        port = MPI.Open_port()
        MPI.Close_port(port)
        raises(MPI.ERR_PORT, MPI.Close_port, port)           # closed twice
        raises(MPI.ERR_PORT, MPI.Close_port, "no such port")
        raises(MPI.ERR_PORT, MPI.COMM_SELF.Accept, port)      # a closed port
        raises(MPI.ERR_PORT, MPI.COMM_SELF.Connect, port)
        raises(MPI.ERR_PORT, MPI.COMM_SELF.Connect, "garbage")
        raises(MPI.ERR_PORT, MPI.COMM_SELF.Accept, "garbage")
        # the other rank's closed port: refused, not a wait
        other = comm.sendrecv(port, 1 - rank, 1, None, 1 - rank, 1)
        raises(MPI.ERR_PORT, MPI.COMM_SELF.Connect, other)
        # an error at the root reaches every rank of the group
        raises(MPI.ERR_PORT, comm.Connect, "garbage" if rank == 1 else None, MPI.INFO_NULL, 1)
        raises(MPI.ERR_ARG, comm.Accept, port, MPI.INFO_NULL, 5)  # bad root
        raises(MPI.ERR_NAME, MPI.Lookup_name, "never-published")
        raises(MPI.ERR_SERVICE, MPI.Unpublish_name, "never-published", port)
        raises(MPI.ERR_ARG, MPI.Comm.Join, -1)
        with open("plain.txt", "w") as f:
            raises(MPI.ERR_ARG, MPI.Comm.Join, f.fileno())    # not a socket
        raises(MPI.ERR_PORT, MPI.Publish_name, "svc", "not a port")
        try:
            MPI.Open_port("not an info")
        except TypeError:
            pass
        else:
            raise AssertionError("Open_port took a str as info")
        # a port closed while a Connect waits on it: the Connect is refused
        if rank == 0:
            port = MPI.Open_port()
            comm.send(port, 1)
            time.sleep(2.0)
            MPI.Close_port(port)
        else:
            exc = raises(MPI.ERR_PORT, MPI.COMM_SELF.Connect, comm.recv(source=0))
            assert "closed" in str(exc), exc
        # nothing lost: the world still works
        assert comm.allreduce(1) == size
        """,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loopback")
def test_accept_connect_across_hosts(run_mpi, tmp_path):
    """Ranks on two "hosts" (loopback addresses, each with its own session directory,
    talking over tcp): a group connects to a port of a rank on the other host."""
    body = """
        low = rank < 2
        half = comm.Split(0 if low else 1, rank)
        if low:
            port = MPI.Open_port() if rank == 0 else None
            if rank == 0:
                comm.send(port, 2)
            ic = half.Accept(port)
        else:
            ic = half.Connect(comm.recv(source=0) if rank == 2 else None)
        assert ic.allreduce(rank) == (5 if low else 1)
        if rank == 0:
            MPI.Close_port(port)
        merged = ic.Merge(not low)
        assert merged.allgather(rank) == [0, 1, 2, 3]
        merged.Free(); ic.Free()
        """
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, body),
        timeout=40,
        launcher_args=("--hosts", "127.0.0.2:2,127.0.0.3:2"),
        env={"TMPDIR": str(tmp_path)},
    )
    assert_ok(proc, 4)
