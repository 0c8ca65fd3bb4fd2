"""Non-overtaking order and tag selection (any number of ranks >= 2)."""

import os
import sys

import numpy as np

if os.environ.get("DIFF_IMPL") == "mpi4py":
    from mpi4py import MPI
else:
    from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
BIG = 1 << 20  # bytes: above any eager threshold


def out(*words):
    """Print one canonical line prefixed by this rank."""
    sys.stdout.write(" ".join(map(str, (rank, *words))) + "\n")


def recv_int(source, tag, status):
    """Receive one int and return it."""
    buf = np.zeros(1, "i")
    comm.Recv(buf, source=source, tag=tag, status=status)
    return int(buf[0])


st = MPI.Status()
if rank == 0:
    # tags 1, 2, 3 in this order; the receiver asks for 3 first
    reqs = [comm.Isend(np.array([10 * t], "i"), dest=1, tag=t) for t in (1, 2, 3)]
    MPI.Request.Waitall(reqs)
    # five messages with one tag: they arrive in order
    for k in range(5):
        comm.Send(np.array([k], "i"), dest=1, tag=4)
    # a large message then a small one with the same tag: the small one cannot overtake
    comm.Send(np.full(BIG // 8, 7.0), dest=1, tag=5)
    comm.Send(np.array([1.5]), dest=1, tag=5)
    # a small message, then a large one, then a small one, all matched by ANY_TAG
    comm.Send(np.array([1.0]), dest=1, tag=61)
    comm.Send(np.full(BIG // 8, 2.0), dest=1, tag=62)
    comm.Send(np.array([3.0]), dest=1, tag=63)
    # wait until rank 1 has posted its receives, then send: the first posted matches first
    comm.Recv(np.zeros(1, "i"), source=1, tag=70)
    for k in range(3):
        comm.Send(np.array([k], "i"), dest=1, tag=71)
elif rank == 1:
    out("tag3_first", recv_int(0, 3, st), st.Get_tag())
    for _ in range(2):
        out("then_any_tag", recv_int(0, MPI.ANY_TAG, st), st.Get_tag())
    out("same_tag", *[recv_int(MPI.ANY_SOURCE, MPI.ANY_TAG, st) for _ in range(5)])
    comm.Probe(source=0, tag=5, status=st)
    out("probe_big_first", st.Get_count(MPI.DOUBLE))
    big = np.zeros(BIG // 8)
    comm.Recv(big, source=0, tag=5, status=st)
    out("big", st.Get_count(MPI.DOUBLE), big.min(), big.max())
    small = np.zeros(1)
    comm.Recv(small, source=0, tag=5, status=st)
    out("small_after_big", st.Get_count(MPI.DOUBLE), small[0])
    for _ in range(3):
        comm.Probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        buf = np.zeros(st.Get_count(MPI.DOUBLE))
        comm.Recv(buf, source=st.Get_source(), tag=st.Get_tag(), status=st)
        out("mixed", st.Get_tag(), len(buf), buf[0])
    bufs = [np.full(1, -1, "i") for _ in range(3)]
    reqs = [comm.Irecv(b, source=0, tag=MPI.ANY_TAG) for b in bufs]
    comm.Send(np.zeros(1, "i"), dest=0, tag=70)
    MPI.Request.Waitall(reqs)
    out("posted_order", *[int(b[0]) for b in bufs])

# Every rank sends three tagged messages to rank 0; rank 0 receives them by tag
# (reverse order) from each source, then checks per-source order under ANY_SOURCE.
if rank != 0:
    for t in (1, 2, 3):
        comm.Send(np.array([100 * rank + t], "i"), dest=0, tag=200 + t)
    for k in range(4):
        comm.Send(np.array([k], "i"), dest=0, tag=300)
else:
    for source in range(1, size):
        got = [recv_int(source, 200 + t, st) for t in (3, 2, 1)]
        out("by_tag_reverse", source, *got)
    seen = {}
    for _ in range(4 * (size - 1)):
        value = recv_int(MPI.ANY_SOURCE, 300, st)
        seen.setdefault(st.Get_source(), []).append(value)
    for source in sorted(seen):
        out("any_source_order", source, *seen[source])
out("done")
