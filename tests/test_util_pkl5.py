"""``mpi4py.util.pkl5``: objects with out-of-band buffers, point to point and collective."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import RunMPI

from ipympi import MPI


def test_dumps_oob_keeps_large_buffers_out_of_band() -> None:
    from ipympi.mpi4py.util.pkl5 import Pickle

    pickle = Pickle()
    pickle.THRESHOLD = 64
    small, large = np.arange(4, dtype="i"), np.arange(100, dtype="i")
    data, buffers = pickle.dumps_oob({"small": small, "large": large})
    assert type(data) is bytes and len(buffers) == 1
    assert type(buffers[0]) is MPI.buffer and buffers[0].nbytes == large.nbytes
    back = pickle.loads_oob(data, buffers)
    assert np.array_equal(back["small"], small) and np.array_equal(back["large"], large)
    pickle.THRESHOLD = None
    assert pickle.THRESHOLD == 256 * 1024


def test_big_buffers_are_described_in_blocks() -> None:
    from ipympi.mpi4py.util.pkl5 import _BigMPI

    with _BigMPI() as big:
        big.blocksize = 64
        buf = bytearray(1000)
        spec = big(buf)
        assert spec[1] == 1 and spec[2].Get_size() == 1000
        assert big(bytearray(64))[1:] == [64, MPI.BYTE]


POINT_TO_POINT = """
import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

comm = pkl5.Intracomm(MPI.COMM_WORLD)
rank, size = comm.Get_rank(), comm.Get_size()
dest, source = (rank + 1) % size, (rank - 1) % size
big = np.full(1 << 20, rank, dtype="i8")

# send / recv, with a status
request = comm.isend((rank, big), dest, tag=7)
status = MPI.Status()
who, data = comm.recv(None, source, 7, status)
request.wait()
assert who == source and data.flags.writeable and np.all(data == source)
assert status.Get_source() == source and status.Get_tag() == 7

# matched probe, then a nonblocking receive of the message
request = comm.issend([big, big[:10]], dest, tag=3)
message = comm.mprobe(MPI.ANY_SOURCE, 3)
received = message.irecv().wait()
request.wait()
assert not message and np.all(received[0] == source) and len(received[1]) == 10

# a receive that would have to match its buffers blindly is refused
try:
    comm.irecv(None, source, 0)
except RuntimeError:
    pass
else:
    raise AssertionError("irecv did not raise")
print(f"rank {rank} p2p ok")
"""


@pytest.mark.timeout(60)
def test_point_to_point(run_mpi: RunMPI) -> None:
    result = run_mpi(3, POINT_TO_POINT)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split("\n"))[-3:] == [f"rank {r} p2p ok" for r in range(3)]


COLLECTIVES = """
import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

comm = pkl5.Intracomm(MPI.COMM_WORLD)
rank, size = comm.Get_rank(), comm.Get_size()
array = lambda r: np.full(100_000, r, dtype="f8")
pkl5.pickle.THRESHOLD = 1024

assert np.all(comm.bcast(array(rank), root=1) == 1)
gathered = comm.gather(array(rank), root=2)
assert gathered is None if rank != 2 else [a[0] for a in gathered] == list(range(size))
assert comm.scatter([array(r) for r in range(size)] if rank == 0 else None, root=0)[0] == rank
assert [a[-1] for a in comm.allgather(array(rank))] == list(range(size))
received = comm.alltoall([(rank, array(rank * size + r)) for r in range(size)])
assert [(s, a[0]) for s, a in received] == [(s, s * size + rank) for s in range(size)]
for bad in (-1, size):
    try:
        comm.gather(None, root=bad)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_ROOT
    else:
        raise AssertionError("no error for root %d" % bad)
try:
    comm.alltoall([None] * (size + 1))
except ValueError:
    pass
else:
    raise AssertionError("alltoall took a list of the wrong length")

# an intercommunicator: each group broadcasts in turn, to the other group
color = rank % 2
local = MPI.COMM_WORLD.Split(color, rank)
inter = pkl5.Intercomm(local.Create_intercomm(0, MPI.COMM_WORLD, 1 - color, 7))
for root_color in (0, 1):
    if color == root_color:
        root = MPI.ROOT if local.Get_rank() == 0 else MPI.PROC_NULL
        assert inter.bcast(array(7) if root == MPI.ROOT else None, root=root) is None
    else:
        assert np.all(inter.bcast(None, root=0) == 7)
print(f"rank {rank} collectives ok")
"""


@pytest.mark.timeout(60)
def test_collectives(run_mpi: RunMPI) -> None:
    result = run_mpi(3, COLLECTIVES)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("collectives ok") == 3
