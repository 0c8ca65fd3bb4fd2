"""Lower-case (pickle-based) point-to-point with Python objects (any number of ranks >= 2)."""

import hashlib
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


def digest(obj):
    """A short, implementation-independent fingerprint of a received object."""
    if isinstance(obj, np.ndarray):
        text = f"ndarray {obj.dtype} {obj.shape} " + hashlib.sha1(obj.tobytes()).hexdigest()[:12]
    elif isinstance(obj, (bytes, bytearray)):
        text = f"{type(obj).__name__} {len(obj)} " + hashlib.sha1(obj).hexdigest()[:12]
    else:
        text = repr(obj)
    return text.replace(" ", "_")


def big_bytes(seed, n=300_000):
    """Deterministic pseudo-random bytes (over 100 KiB)."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


st = MPI.Status()
SMALL = {"a": 1, "b": [1, 2.5, "x"], "c": (None, True)}
ARRAY = np.arange(12, dtype="f4").reshape(3, 4)
BIG_ARRAY = np.linspace(0.0, 1.0, 200_000)
if rank == 0:
    comm.send(SMALL, dest=1, tag=1)
    comm.send(ARRAY, dest=1, tag=2)
    comm.send(big_bytes(1), dest=1, tag=3)
    comm.send({"big": BIG_ARRAY, "n": 3}, dest=1, tag=4)
    comm.send(None, dest=1, tag=5)
    reqs = [comm.isend(("obj", k), dest=1, tag=10 + k) for k in range(3)]
    reqs.append(comm.isend(big_bytes(2), dest=1, tag=13))
    MPI.Request.waitall(reqs)
    comm.send("m1", dest=1, tag=21)
    comm.send(["m2", big_bytes(3)], dest=1, tag=22)
    comm.recv(source=1, tag=30)
    comm.send({"probe": "me"}, dest=1, tag=31)
    comm.ssend("synchronous", dest=1, tag=32)
    comm.send(big_bytes(4), dest=1, tag=33)
elif rank == 1:
    out("recv_dict", digest(comm.recv(source=0, tag=1, status=st)), st.Get_source(), st.Get_tag())
    out("recv_array", digest(comm.recv(source=MPI.ANY_SOURCE, tag=2)))
    out("recv_big", digest(comm.recv(source=0, tag=MPI.ANY_TAG, status=st)), st.Get_tag())
    obj = comm.recv(source=0, tag=4)
    out("recv_big_dict", sorted(obj), digest(obj["big"]), obj["n"])
    out("recv_none", comm.recv(source=0, tag=5, status=st), st.Get_tag())
    reqs = [comm.irecv(source=0, tag=10 + k) for k in range(3)]
    out("waitall_irecv", digest(MPI.Request.waitall(reqs)), [r == MPI.REQUEST_NULL for r in reqs])
    req = comm.irecv(bytearray(1 << 20), source=0, tag=13)
    out("irecv_big_buf", digest(req.wait(st)), st.Get_tag(), req == MPI.REQUEST_NULL)
    # matched probes: take tag 22 first, then tag 21
    msg = comm.mprobe(source=0, tag=22, status=st)
    out("mprobe", st.Get_source(), st.Get_tag(), bool(msg), msg == MPI.MESSAGE_NULL)
    got = msg.recv(status=st)
    out("mprobe_recv", got[0], digest(got[1]), st.Get_tag(), msg == MPI.MESSAGE_NULL)
    msg = None
    while msg is None:
        msg = comm.improbe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
    out("improbe", st.Get_source(), st.Get_tag(), digest(msg.recv()))
    out("improbe_nothing", comm.improbe(source=0, tag=31), comm.iprobe(source=0, tag=31))
    comm.send("go", dest=0, tag=30)
    while not comm.iprobe(source=0, tag=31, status=st):
        pass
    out("iprobe", st.Get_source(), st.Get_tag())
    comm.probe(source=0, tag=31, status=st)
    out("probe", st.Get_source(), st.Get_tag())
    out("after_probe", digest(comm.recv(source=0, tag=31)))
    req = comm.irecv(source=0, tag=32)
    flag, obj = req.test()
    while not flag:
        flag, obj = req.test()
    out("test_irecv", flag, obj, req == MPI.REQUEST_NULL)
    req = comm.irecv(source=0, tag=33)  # no buffer given: mpi4py allocates only 32 KiB
    try:
        obj = req.wait()
        out("irecv_big_default", "received", len(obj), obj == big_bytes(4))
    except MPI.Exception as exc:
        names = [n for n in dir(MPI) if n.startswith("ERR_") and n != "ERR_LASTCODE"]
        out("irecv_big_default", *[n for n in names if getattr(MPI, n) == exc.Get_error_class()])

# sendrecv around a ring; isend/irecv around the ring the other way
right, left = (rank + 1) % size, (rank - 1) % size
obj = comm.sendrecv({"from": rank}, dest=right, sendtag=40, source=left, recvtag=40, status=st)
out("sendrecv_ring", obj, st.Get_source(), st.Get_tag())
req = comm.isend([rank] * 3, dest=left, tag=41)
obj = comm.irecv(source=right, tag=41).wait(st)
req.wait()
out("isend_ring", obj, st.Get_source())
obj = comm.sendrecv(big_bytes(rank), dest=right, source=left, status=st)
out("sendrecv_big", digest(obj) == digest(big_bytes(left)), st.Get_tag())
out("sendrecv_procnull", comm.sendrecv("x", dest=MPI.PROC_NULL, source=MPI.PROC_NULL))
out("recv_procnull", comm.recv(source=MPI.PROC_NULL), comm.irecv(source=MPI.PROC_NULL).wait())
out("done")
