"""Request completion: Wait/Test families with null, completed and pending requests.

Rank 1 drives: before each step it sends rank 0 a "go" number, so a request
that must still be pending is one whose message has not been sent yet.
"""

import os
import sys

import numpy as np

if os.environ.get("DIFF_IMPL") == "mpi4py":
    from mpi4py import MPI
else:
    from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
NULL = MPI.REQUEST_NULL


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
    """A count or index, with UNDEFINED spelled out."""
    return "UNDEFINED" if v == MPI.UNDEFINED else v


def stat(st):
    """Source, tag, error and int count of a status as one word."""
    return f"{src(st.Get_source())}/{tag(st.Get_tag())}/{st.Get_error()}/{st.Get_count(MPI.INT)}"


def nulls(reqs):
    """Which requests are null, as a string of 0/1."""
    return "".join("1" if r == NULL else "0" for r in reqs)


def done_irecv():
    """A request that has already completed (a receive from PROC_NULL)."""
    return comm.Irecv(np.zeros(1, "i"), source=MPI.PROC_NULL, tag=1)


def ints(n=1):
    """A fresh receive buffer of n ints holding -1."""
    return np.full(n, -1, "i")


def go(step):
    """Tell rank 0 to perform its part of ``step``."""
    comm.Send(np.array([step], "i"), dest=0, tag=90)


def send(value, tag):
    """Rank 0: send one int to rank 1."""
    comm.Send(np.array([value], "i"), dest=1, tag=tag)


# --- every rank: only null requests ------------------------------------------------
st = MPI.Status()
st.Set_source(5)
out("waitany_nulls", cnt(MPI.Request.Waitany([NULL, NULL], st)), stat(st))
out("testany_nulls", *map(cnt, MPI.Request.Testany([NULL, NULL], st)), stat(st))
sts = [MPI.Status() for _ in range(2)]
out("waitall_nulls", MPI.Request.Waitall([NULL, NULL], sts), *map(stat, sts))
out("testall_nulls", MPI.Request.Testall([NULL, NULL]))
out("waitsome_nulls", MPI.Request.Waitsome([NULL, NULL]))
out("testsome_nulls", MPI.Request.Testsome([NULL, NULL]))
out("waitany_empty", cnt(MPI.Request.Waitany([])), MPI.Request.Testall([]))
out("null_wait", NULL.Wait(st), stat(st), NULL.Test(), NULL.Get_status(), bool(NULL))
req = done_irecv()
out("done_irecv", bool(req), req == NULL, req.Test(st), stat(st), req == NULL, bool(req))


def issend_before_match():
    """Rank 0: a synchronous send cannot complete before rank 1 posts its receive."""
    req = comm.Issend(np.array([6], "i"), dest=1, tag=50)
    flags = [req.Test(), MPI.Request.Testany([req])[1], MPI.Request.Testall([req])]
    flags.append(MPI.Request.Testsome([req]))
    comm.Send(np.zeros(1, "i"), dest=1, tag=92)
    out("G_issend", *flags, req.Wait(), req == NULL)


if rank == 0:
    actions = {
        1: lambda: send(11, 1),
        2: lambda: (send(33, 3), send(22, 2)),
        3: lambda: send(55, 5),
        4: lambda: (send(44, 4), send(66, 6)),
        5: lambda: send(1010, 10),
        6: issend_before_match,
    }
    step = np.zeros(1, "i")
    while True:
        comm.Recv(step, source=1, tag=90)
        if step[0] == 0:
            break
        if step[0] == 99:  # persistent sends
            sbuf = np.zeros(1, "i")
            psend = comm.Send_init(sbuf, dest=1, tag=7)
            for k in range(3):
                sbuf[0] = 5 * k
                psend.Start()
                psend.Wait()
            out("psend_inactive", psend == NULL, psend.Wait(st), stat(st), psend.Test())
            psend.Free()
            out("psend_freed", psend == NULL)
            bufs = [ints(), ints()]
            psends = [comm.Send_init(b, dest=1, tag=8 + i) for i, b in enumerate(bufs)]
            for k in range(2):
                bufs[0][0], bufs[1][0] = 80 + k, 90 + k
                MPI.Prequest.Startall(psends)
                MPI.Request.Waitall(psends)
            for p in psends:
                p.Free()
        else:
            actions[int(step[0])]()
elif rank == 1:
    # A: Testany / Testall / Testsome / Waitany over null, completed and pending
    b = ints()
    reqs = [NULL, done_irecv(), comm.Irecv(b, source=0, tag=1)]
    out("A_testany", *map(cnt, MPI.Request.Testany(reqs, st)), stat(st), nulls(reqs))
    index, flag = MPI.Request.Testany(reqs, st)
    out("A_testany_pending", cnt(index), flag, nulls(reqs))
    out("A_testall_pending", MPI.Request.Testall(reqs), nulls(reqs))
    out("A_testsome_pending", MPI.Request.Testsome(reqs), nulls(reqs))
    go(1)
    out("A_waitany", cnt(MPI.Request.Waitany(reqs, st)), stat(st), nulls(reqs), b[0])
    out("A_waitany_again", cnt(MPI.Request.Waitany(reqs, st)), stat(st))

    # B: Waitall over pending, null and completed, statuses in request order
    b2, b3 = ints(), ints()
    reqs = [comm.Irecv(b2, 0, 2), NULL, done_irecv(), comm.Irecv(b3, 0, 3)]
    go(2)
    sts = [MPI.Status() for _ in reqs]
    out("B_waitall", MPI.Request.Waitall(reqs, sts), *map(stat, sts), nulls(reqs), b2[0], b3[0])

    # C: Waitsome returns only what has arrived; Testsome until the rest arrives
    bs = [ints() for _ in range(3)]
    reqs = [comm.Irecv(bs[i], 0, 4 + i) for i in range(3)] + [NULL]
    out("C_testsome_none", MPI.Request.Testsome(reqs), nulls(reqs))
    go(3)
    sts = []
    out("C_waitsome", MPI.Request.Waitsome(reqs, sts), stat(sts[0]), nulls(reqs), bs[1][0])
    go(4)
    got = []
    while len(got) < 2:
        got += MPI.Request.Testsome(reqs)
    out("C_testsome", sorted(got), nulls(reqs), bs[0][0], bs[2][0])
    out("C_all_null", MPI.Request.Testsome(reqs), MPI.Request.Waitsome(reqs))

    # D: persistent requests are reused, and stay non-null after completion
    go(99)
    rbuf = ints()
    precv = comm.Recv_init(rbuf, source=0, tag=7)
    out("D_inactive", precv == NULL, bool(precv), precv.Test(st), stat(st))
    for _ in range(3):
        precv.Start()
        out("D_wait", precv.Wait(st), stat(st), rbuf[0], precv == NULL, bool(precv))
    out("D_inactive_wait", precv.Wait(st), stat(st), precv.Test(), precv == NULL)
    out("D_inactive_waitany", cnt(MPI.Request.Waitany([precv, NULL], st)), stat(st))
    precv.Free()
    out("D_freed", precv == NULL)
    rbufs = [ints(), ints()]
    precvs = [comm.Recv_init(rb, source=0, tag=8 + i) for i, rb in enumerate(rbufs)]
    for _ in range(2):
        MPI.Prequest.Startall(precvs)
        sts = [MPI.Status(), MPI.Status()]
        MPI.Request.Waitall(precvs, sts)
        out("D_startall", *map(stat, sts), rbufs[0][0], rbufs[1][0], nulls(precvs))
    for p in precvs:
        p.Free()

    # E: Get_status leaves the request active
    b10 = ints()
    req = comm.Irecv(b10, source=0, tag=10)
    out("E_get_status_pending", req.Get_status(), req == NULL)
    go(5)
    while not req.Get_status(st):
        pass
    out("E_get_status", stat(st), req == NULL, req.Get_status(), b10[0])
    st2 = MPI.Status()
    out("E_wait", req.Wait(st2), stat(st2), req == NULL, req.Get_status(st2), stat(st2))

    # F: a cancelled receive completes as cancelled
    req = comm.Irecv(ints(), source=0, tag=11)
    req.Cancel()
    req.Wait(st)
    out("F_cancelled", st.Is_cancelled(), req == NULL)
    reqs = [comm.Irecv(ints(), source=0, tag=12), NULL, done_irecv()]
    out("F_waitany_completed", cnt(MPI.Request.Waitany(reqs, st)), stat(st), nulls(reqs))
    reqs[0].Cancel()
    sts = [MPI.Status() for _ in reqs]
    MPI.Request.Waitall(reqs, sts)
    out("F_waitall_cancelled", [s.Is_cancelled() for s in sts], nulls(reqs))

    # G: Issend stays pending until the receive is posted
    go(6)
    comm.Recv(ints(), source=0, tag=92)
    b50 = ints()
    comm.Recv(b50, source=0, tag=50, status=st)
    out("G_recv", stat(st), b50[0])
    go(0)
out("done")
