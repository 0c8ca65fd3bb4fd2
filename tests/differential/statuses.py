"""Status fields of receives, probes and PROC_NULL operations (any number of ranks >= 2)."""

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


def src(v):
    """A source rank, with the wildcard and null ranks spelled out."""
    return {MPI.ANY_SOURCE: "ANY_SOURCE", MPI.PROC_NULL: "PROC_NULL"}.get(v, v)


def tag(v):
    """A tag, with the wildcard spelled out."""
    return "ANY_TAG" if v == MPI.ANY_TAG else v


def cnt(v):
    """A count, with UNDEFINED spelled out."""
    return "UNDEFINED" if v == MPI.UNDEFINED else v


def show(what, st, *types):
    """Print source, tag, error and the count (and elements) in each datatype."""
    counts = [f"{cnt(st.Get_count(t))}/{cnt(st.Get_elements(t))}" for t in types]
    out(what, src(st.Get_source()), tag(st.Get_tag()), st.Get_error(), st.Get_count(), *counts)


show("fresh", MPI.Status(), MPI.INT)

# PROC_NULL: every receive-like call completes at once with the null status.
st = MPI.Status()
comm.Recv(np.zeros(4, "i"), source=MPI.PROC_NULL, tag=5, status=st)
show("recv_procnull", st, MPI.INT, MPI.BYTE)
comm.Probe(source=MPI.PROC_NULL, tag=5, status=st)
show("probe_procnull", st, MPI.INT)
out("iprobe_procnull", comm.Iprobe(source=MPI.PROC_NULL, tag=5, status=st))
show("iprobe_procnull", st, MPI.INT)
req = comm.Irecv(np.zeros(4, "i"), source=MPI.PROC_NULL, tag=5)
req.Wait(st)
show("irecv_procnull", st, MPI.INT)
comm.Send(np.zeros(4, "i"), dest=MPI.PROC_NULL, tag=5)
comm.Sendrecv(np.ones(2, "d"), MPI.PROC_NULL, 1, np.zeros(2, "d"), MPI.PROC_NULL, 2, status=st)
show("sendrecv_procnull", st, MPI.DOUBLE)
out("iprobe_nomatch", comm.Iprobe(source=MPI.ANY_SOURCE, tag=999))
msg = comm.Mprobe(source=MPI.PROC_NULL, tag=5, status=st)
show("mprobe_procnull", st, MPI.INT)
out("mprobe_procnull", msg == MPI.MESSAGE_NO_PROC, msg == MPI.MESSAGE_NULL, bool(msg))
st.Set_tag(3)
msg.Recv(np.zeros(2, "i"), status=st)
show("mprobe_procnull_recv", st, MPI.INT)
out("mprobe_procnull_recv", msg == MPI.MESSAGE_NO_PROC, msg == MPI.MESSAGE_NULL)
msg = comm.Improbe(source=MPI.PROC_NULL, tag=5, status=st)
out("improbe_procnull", msg == MPI.MESSAGE_NO_PROC)
out("improbe_nomatch", comm.Improbe(source=MPI.ANY_SOURCE, tag=999))

if rank == 0:
    comm.Send(np.arange(4, dtype="i"), dest=1, tag=7)
    comm.Send(np.arange(3, dtype="d"), dest=1, tag=11)
    comm.Send(bytearray(b"abcde"), dest=1, tag=12)
    comm.Send(bytearray(), dest=1, tag=13)
    comm.Send(np.arange(6, dtype="i2"), dest=1, tag=14)
    comm.Send(np.arange(5, dtype="d"), dest=1, tag=15)
elif rank == 1:
    buf = np.zeros(16, "i")
    comm.Recv(buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
    show("recv_any", st, MPI.INT, MPI.BYTE, MPI.DOUBLE, MPI.SHORT)
    out("recv_any_data", *buf[:5])
    comm.Probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
    show("probe_any", st, MPI.DOUBLE, MPI.INT, MPI.FLOAT)
    flag = comm.Iprobe(source=0, tag=11, status=st)
    out("iprobe_after_probe", flag)
    show("iprobe_after_probe", st, MPI.DOUBLE)
    dbl = np.zeros(8, "d")
    comm.Recv(dbl, source=0, tag=11, status=st)
    show("recv_double", st, MPI.DOUBLE, MPI.INT)
    raw = bytearray(8)
    comm.Recv(raw, source=0, tag=MPI.ANY_TAG, status=st)
    show("recv_5_bytes", st, MPI.INT, MPI.BYTE, MPI.CHAR, MPI.SHORT)
    out("recv_5_bytes_data", bytes(raw))
    comm.Recv(raw, source=MPI.ANY_SOURCE, tag=13, status=st)
    show("recv_empty", st, MPI.INT, MPI.BYTE)
    while not comm.Iprobe(source=0, tag=14, status=st):
        pass
    show("iprobe_short", st, MPI.SHORT, MPI.INT, MPI.LONG_LONG)
    raw = bytearray(12)
    comm.Recv([raw, MPI.BYTE], source=0, tag=14)
    out("recv_short_as_bytes", bytes(raw).hex())
    msg = comm.Mprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
    show("mprobe", st, MPI.DOUBLE)
    out("mprobe", msg == MPI.MESSAGE_NULL, bool(msg))
    dbl = np.zeros(5, "d")
    st2 = MPI.Status()
    req = msg.Irecv(dbl)
    out("mprobe_irecv", msg == MPI.MESSAGE_NULL, req.Wait(st2), dbl.tolist())
    show("mprobe_irecv", st2, MPI.DOUBLE)

# Every other rank sends its rank to rank 0 with tag 100 + rank.
if rank == 0:
    for _ in range(size - 1):
        got = np.zeros(1, "i")
        comm.Recv(got, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        show("gather", st, MPI.INT)
        out("gather_data", st.Get_source(), got[0])
else:
    comm.Send(np.array([rank], "i"), dest=0, tag=100 + rank)
out("done")
