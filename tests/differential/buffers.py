"""Buffer specifications, bytearrays, Sendrecv and Sendrecv_replace (any ranks >= 2)."""

import os
import sys

import numpy as np

if os.environ.get("DIFF_IMPL") == "mpi4py":
    from mpi4py import MPI
else:
    from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def out(*words):
    """Print one canonical line prefixed by this rank."""
    sys.stdout.write(" ".join(map(str, (rank, *words))) + "\n")


def cnt(v):
    """A count, with UNDEFINED spelled out."""
    return "UNDEFINED" if v == MPI.UNDEFINED else v


def show(what, st, buf, *types):
    """Print tag, counts in each datatype and the receive buffer's contents."""
    values = bytes(buf).hex() if isinstance(buf, bytearray) else buf.tolist()
    out(what, st.Get_tag(), *[cnt(st.Get_count(t)) for t in types], values)


st = MPI.Status()
if rank == 0:
    ints = np.arange(10, 16, dtype="i")
    dbls = np.arange(6, dtype="d") / 4
    comm.Send([ints, MPI.INT], dest=1, tag=1)
    comm.Send([dbls, 3, MPI.DOUBLE], dest=1, tag=2)
    comm.Send([ints, (2, 1), MPI.INT], dest=1, tag=3)
    comm.Send((dbls, MPI.DOUBLE), dest=1, tag=4)
    comm.Send(bytearray(b"hello"), dest=1, tag=5)
    comm.Send([bytearray(b"0123456789"), 4, MPI.BYTE], dest=1, tag=6)
    comm.Send(b"read-only bytes", dest=1, tag=7)
    comm.Send(memoryview(b"abcdef")[2:], dest=1, tag=8)
    comm.Send(np.arange(4, dtype="f4"), dest=1, tag=9)
    comm.Send(np.zeros(0, "d"), dest=1, tag=10)
    comm.Send([np.arange(8, dtype="i8"), (3, 5), MPI.INT64_T], dest=1, tag=11)
    comm.Send(np.array([1 + 2j, 3 - 4j]), dest=1, tag=12)
    comm.Send([np.arange(6, dtype="i"), 2, MPI.DOUBLE], dest=1, tag=13)
elif rank == 1:
    r = np.zeros(6, "i")
    comm.Recv([r, MPI.INT], source=0, tag=1, status=st)
    show("int_spec", st, r, MPI.INT, MPI.BYTE)
    r = np.zeros(6, "d")
    comm.Recv([r, 3, MPI.DOUBLE], source=0, tag=2, status=st)
    show("count_spec", st, r, MPI.DOUBLE)
    r = np.zeros(6, "i")
    comm.Recv([r, (2, 3), MPI.INT], source=0, tag=3, status=st)
    show("count_disp_spec", st, r, MPI.INT)
    r = np.zeros(6, "d")
    comm.Recv((r, MPI.DOUBLE), source=0, tag=4, status=st)
    show("tuple_spec", st, r, MPI.DOUBLE)
    b = bytearray(8)
    comm.Recv(b, source=0, tag=5, status=st)
    show("bytearray", st, b, MPI.BYTE, MPI.CHAR)
    b = bytearray(8)
    comm.Recv([b, MPI.BYTE], source=0, tag=6, status=st)
    show("bytearray_count", st, b, MPI.BYTE)
    b = bytearray(20)
    comm.Recv(b, source=0, tag=7, status=st)
    show("from_bytes", st, b, MPI.BYTE)
    b = bytearray(6)
    comm.Recv(memoryview(b)[1:], source=0, tag=8, status=st)
    show("memoryview", st, b, MPI.BYTE)
    r = np.zeros(4, "f4")
    comm.Recv(r, source=0, tag=9, status=st)
    show("float32", st, r, MPI.FLOAT, MPI.DOUBLE)
    r = np.full(2, 9.0)
    comm.Recv(r, source=0, tag=10, status=st)
    show("empty", st, r, MPI.DOUBLE, MPI.BYTE)
    r = np.zeros(8, "i8")
    comm.Recv([r, (3, 0), MPI.INT64_T], source=0, tag=11, status=st)
    show("int64_disp", st, r, MPI.INT64_T)
    r = np.zeros(2, "D")
    comm.Recv(r, source=0, tag=12, status=st)
    out("complex", st.Get_count(MPI.C_DOUBLE_COMPLEX), st.Get_count(MPI.DOUBLE), r.tolist())
    r = np.zeros(4, "i")
    comm.Recv([r, 2, MPI.DOUBLE], source=0, tag=13, status=st)
    show("ints_as_doubles", st, r, MPI.DOUBLE, MPI.INT)

# Sendrecv around the ring, both directions, and Sendrecv_replace
right, left = (rank + 1) % size, (rank - 1) % size
sbuf = np.array([rank, rank * 10, rank * 100], "i")
rbuf = np.zeros(3, "i")
comm.Sendrecv(sbuf, dest=right, sendtag=20, recvbuf=rbuf, source=left, recvtag=20, status=st)
out("sendrecv_ring", st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT), rbuf.tolist())
rbuf = np.zeros(5, "d")
comm.Sendrecv([np.full(2, rank + 0.5), MPI.DOUBLE], left, 21, [rbuf, 4, MPI.DOUBLE], right, 21, st)
out("sendrecv_spec", st.Get_source(), st.Get_count(MPI.DOUBLE), rbuf.tolist())
buf = np.array([rank] * 4, "i")
comm.Sendrecv_replace(buf, dest=right, sendtag=22, source=left, recvtag=22, status=st)
out("replace", st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT), buf.tolist())
buf = np.arange(6, dtype="d") + 10 * rank
comm.Sendrecv_replace([buf, (2, 3), MPI.DOUBLE], dest=left, source=right, status=st)
out("replace_spec", st.Get_source(), st.Get_count(MPI.DOUBLE), buf.tolist())
big = np.full(300_000, rank, "i")
comm.Sendrecv_replace(big, dest=right, source=MPI.ANY_SOURCE, recvtag=MPI.ANY_TAG, status=st)
out("replace_big", st.Get_source(), st.Get_count(MPI.INT), int(big.min()), int(big.max()))
b = bytearray(b"rank%d" % rank)
comm.Sendrecv_replace(b, dest=MPI.PROC_NULL, source=MPI.PROC_NULL, status=st)
out("replace_procnull", st.Get_source() == MPI.PROC_NULL, st.Get_count(MPI.BYTE), bytes(b))
out("done")
