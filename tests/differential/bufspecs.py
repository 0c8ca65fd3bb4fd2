"""Every buffer specification form of every kind of call, and the errors of bad ones (any ranks).

Point-to-point forms go to this rank itself through Sendrecv; the vector forms go
through Scatterv, Gatherv, Allgatherv and Alltoallv (the send and the receive side),
Alltoallw's forms through Alltoallw, and the neighbourhood forms over a periodic ring.
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


def out(*words):
    """Print one canonical line prefixed by this rank."""
    sys.stdout.write(" ".join(map(str, (rank, *words))) + "\n")


def error(key, call, *args, message=True):
    """Print the Python error ``call(*args)`` raises (its type, and its text if ``message``)."""
    try:
        call(*args)
    except MPI.Exception as exc:
        out(key, "MPI.Exception", MPI.Get_error_class(exc.Get_error_code()) != MPI.SUCCESS)
    except Exception as exc:
        out(key, type(exc).__name__, str(exc) if message else "")
    else:
        out(key, "no error")


# --- point-to-point forms, to this rank itself ----------------------------------------

P2P_FORMS = {
    "buf": lambda b: b,
    "buf_dt": lambda b: [b, MPI.INT],
    "buf_dt_tuple": lambda b: (b, MPI.INT),
    "buf_code": lambda b: [b, "i"],
    "buf_count": lambda b: [b, 3],
    "buf_pair": lambda b: [b, (2, 1)],
    "buf_pair_list": lambda b: [b, [2, 1]],
    "buf_count_dt": lambda b: [b, 3, MPI.INT],
    "buf_pair_dt": lambda b: [b, (2, 3), MPI.INT],
    "buf_listpair_dt": lambda b: [b, [2, 3], MPI.INT],
    "buf_count_displ_dt": lambda b: [b, 2, 4, MPI.INT],
    "buf_none_count": lambda b: [b, None],
    "buf_nones": lambda b: [b, None, None, MPI.INT],
    "buf_count_none_dt": lambda b: [b, 2, None, None],
}
for key, form in P2P_FORMS.items():
    sbuf = np.arange(10, 16, dtype="i") + 100 * rank
    rbuf = np.full(6, -1, "i")
    st = MPI.Status()
    comm.Sendrecv(form(sbuf), rank, 1, form(rbuf), rank, 1, st)
    out("p2p", key, st.Get_count(MPI.INT), rbuf.tolist())

st = MPI.Status()
comm.Sendrecv([None, MPI.INT], rank, 2, [None, 0, MPI.INT], rank, 2, st)
out("p2p_none", st.Get_count(MPI.INT))
comm.Sendrecv([None, 0, 0, "d"], rank, 3, [None, (0, 0), MPI.DOUBLE], rank, 3, st)
out("p2p_none_pair", st.Get_count(MPI.DOUBLE))

# BOTTOM: a datatype holding absolute addresses
first, second = np.array([7, 8], "i"), np.array([9.5])
absolute = MPI.Datatype.Create_struct(
    [2, 1], [MPI.Get_address(first), MPI.Get_address(second)], [MPI.INT, MPI.DOUBLE]
).Commit()
rints, rdbl = np.zeros(2, "i"), np.zeros(1)
relative = MPI.Datatype.Create_struct(
    [2, 1], [MPI.Get_address(rints), MPI.Get_address(rdbl)], [MPI.INT, MPI.DOUBLE]
).Commit()
comm.Sendrecv([MPI.BOTTOM, 1, absolute], rank, 4, [MPI.BOTTOM, 1, relative], rank, 4, st)
out("p2p_bottom", st.Get_count(absolute), rints.tolist(), rdbl.tolist())
absolute.Free()
relative.Free()

# PROC_NULL takes anything as its buffer
comm.Send(object(), MPI.PROC_NULL)
comm.Recv([object(), 1, 2, 3, 4, 5], MPI.PROC_NULL)
comm.Sendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0)
comm.Sendrecv_replace(None, MPI.PROC_NULL, 0, MPI.PROC_NULL, 0)
comm.Isendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0).Wait()
MPI.Message(MPI.MESSAGE_NO_PROC).Recv(None)
out("p2p_proc_null", "ok")
error("err_replace_none", comm.Sendrecv_replace, None, rank, 0, MPI.PROC_NULL, 0, message=False)

# --- errors of point-to-point forms -------------------------------------------------------


def p2p(spec):
    comm.Sendrecv(spec, rank, 9, np.zeros(64, "i"), rank, 9)


ints = np.arange(6, dtype="i")
error("err_one_item", p2p, [ints])
error("err_five_items", p2p, [ints, 1, 0, MPI.INT, None])
error("err_empty_list", p2p, [])
error("err_not_a_buffer", p2p, object(), message=False)
error("err_pair_in_four", p2p, [ints, (1, 2), 0, MPI.INT])
error("err_triple_pair", p2p, [ints, (1, 2, 3), MPI.INT])
error("err_single_pair", p2p, [ints, (1,)], message=False)  # Python's own words
error("err_count_float", p2p, [ints, 1.5, MPI.INT])
error("err_negative_count", p2p, [ints, -1, MPI.INT])
error("err_negative_displ", p2p, [ints, (1, -1), MPI.INT])
error("err_displ_out", p2p, [ints, (0, 7), MPI.INT])
error("err_unknown_code", p2p, [ints, "not-a-code"])
error("err_datatype_int", p2p, [ints, 2, 5])
error("err_none_no_type", p2p, [None, None])
error("err_none_count", p2p, [None, 3, MPI.INT])
error("err_bottom_no_type", p2p, [MPI.BOTTOM, 0, None])
error("err_infer_count", p2p, [np.zeros(3, "b"), MPI.INT])
error("err_readonly_recv", comm.Recv, [b"abcd", MPI.BYTE], MPI.PROC_NULL)
error(
    "err_readonly_recv_real",
    comm.Sendrecv,
    b"x",
    rank,
    9,
    [b"abcd", MPI.BYTE],
    rank,
    9,
    message=False,
)

# --- vector collectives: every form ---------------------------------------------------------

counts = tuple(r + 1 for r in range(size))  # rank r's block has r + 1 elements
displs = tuple(sum(counts[:r]) + r for r in range(size))  # one gap after each block
total = displs[-1] + counts[-1] + 1


def vector_forms(buf, c=counts, d=displs):
    """The v-variant forms of ``buf`` with counts ``c`` and displacements ``d``."""
    return {
        "counts_tuple_displs_tuple_dt": [buf, c, d, MPI.INT],
        "counts_list_displs_list_dt": [buf, list(c), list(d), MPI.INT],
        "pair_dt": [buf, (c, d), MPI.INT],
        "pair_lists_dt": [buf, (list(c), list(d)), MPI.INT],
        "pair": [buf, (c, d)],
        "counts_list": [buf, list(c)],
        "counts_list_dt": [buf, list(c), MPI.INT],
        "counts_tuple_none_dt": [buf, c, None, MPI.INT],
        "counts_array_displs_array": [buf, np.array(c), np.array(d), "i"],
    }


for key in vector_forms(None):
    # Scatterv: the root sends rank r's block r + 1 elements long at displs[r]
    send = np.arange(total, dtype="i") * 10
    recv = np.full(size, -1, "i")
    root_spec = vector_forms(send)[key] if rank == 0 else None
    comm.Scatterv(root_spec, [recv, counts[rank], MPI.INT], root=0)
    out("scatterv", key, recv.tolist())
    # Gatherv: back to the root in the same places
    back = np.full(total, -1, "i")
    comm.Gatherv([recv, counts[rank], MPI.INT], vector_forms(back)[key], root=0)
    if rank == 0:
        out("gatherv", key, back.tolist())
    # Allgatherv
    mine = np.full(counts[rank], rank, "i")
    every = np.full(total, -1, "i")
    comm.Allgatherv([mine, MPI.INT], vector_forms(every)[key])
    out("allgatherv", key, every.tolist())
    # Alltoallv: rank r sends (p + 1) elements to p, receives (r + 1) from each
    sc = tuple(p + 1 for p in range(size))
    sd = tuple(sum(sc[:p]) for p in range(size))
    sbuf = np.arange(sum(sc), dtype="i") + 1000 * rank
    rc = tuple(rank + 1 for _ in range(size))
    rd = tuple(p * (rank + 2) for p in range(size))
    rbuf = np.full(size * (rank + 2), -1, "i")
    comm.Alltoallv(vector_forms(sbuf, sc, sd)[key], vector_forms(rbuf, rc, rd)[key])
    out("alltoallv", key, rbuf.tolist())

# the inferred forms: counts dealt out (unevenly), scalar counts, strided displacements
send = np.arange(2 * size + 1, dtype="i")
recv = np.full(3, -1, "i")
share = (2 * size + 1) // size + (rank < (2 * size + 1) % size)
comm.Scatterv([send, MPI.INT] if rank == 0 else None, [recv, share, MPI.INT], root=0)
out("scatterv_dealt", share, recv.tolist())
comm.Scatterv(send if rank == 0 else None, [recv, share, MPI.INT], root=0)
out("scatterv_bare", recv.tolist())
every = np.full(3 * size, -1, "i")
comm.Allgatherv(np.array([rank, rank], "i"), [every, 2, 3, MPI.INT])
out("allgatherv_scalar_strided", every.tolist())
every = np.full(2 * size, -1, "i")
comm.Allgatherv(np.array([rank, rank], "i"), [every, 2])
out("allgatherv_scalar", every.tolist())
every = np.full(2 * size, -1, "i")
comm.Allgatherv(np.array([rank, rank], "i"), [every, (2, None)])
out("allgatherv_scalar_pair", every.tolist())

# IN_PLACE on the receive side of Scatterv and the send side of Gatherv and Allgatherv
send = np.arange(total, dtype="i")
if rank == 0:
    comm.Scatterv([send, counts, displs, MPI.INT], MPI.IN_PLACE, root=0)
    comm.Gatherv(MPI.IN_PLACE, [send, counts, displs, MPI.INT], root=0)
    out("in_place_root", send.tolist())
else:
    recv = np.zeros(counts[rank], "i")
    comm.Scatterv(None, recv, root=0)
    comm.Gatherv(recv * 2, None, root=0)
every = np.full(total, -1, "i")
every[displs[rank] : displs[rank] + counts[rank]] = rank
comm.Allgatherv(MPI.IN_PLACE, [every, (counts, displs), MPI.INT])
out("allgatherv_in_place", every.tolist())

# --- vector errors ------------------------------------------------------------------------
buf = np.zeros(total + size, "i")
error("verr_counts_length", comm.Allgatherv, [ints, 1, MPI.INT], [buf, [1] * (size + 1), MPI.INT])
error("verr_pair_three", comm.Allgatherv, [ints, 1, MPI.INT], [buf, (counts, displs, 0), MPI.INT])
error("verr_one_item", comm.Allgatherv, [ints, 1, MPI.INT], [buf])
error("verr_five_items", comm.Allgatherv, [ints, 1, MPI.INT], [buf, 1, 0, MPI.INT, 0])
error("verr_none_no_type", comm.Allgatherv, [ints, 0, MPI.INT], [None, [0] * size])
error("verr_counts_floats", comm.Allgatherv, [ints, 1, MPI.INT], [buf, [1.0] * size, MPI.INT])

# --- Alltoallw ----------------------------------------------------------------------------
types = [MPI.INT] * size
sbuf = np.arange(size, dtype="i") + 10 * rank
for key, make in {
    "four": lambda b: [b, [1] * size, [4 * p for p in range(size)], types],
    "pair": lambda b: [b, ([1] * size, [4 * p for p in range(size)]), types],
    "tuples": lambda b: [b, (1,) * size, tuple(4 * p for p in range(size)), tuple(types)],
}.items():
    rbuf = np.full(size, -1, "i")
    comm.Alltoallw(make(sbuf), make(rbuf))
    out("alltoallw", key, rbuf.tolist())
rbuf = np.full(size, -1, "i")
comm.Alltoallw([sbuf, types], [rbuf, [1] * size, [4 * p for p in range(size)], types])
out("alltoallw_types_only", rbuf.tolist())  # [buf, datatypes]: every block at byte 0
rbuf = np.full(size, -1, "i")
comm.Alltoallw(MPI.IN_PLACE, [rbuf, [1] * size, [4 * p for p in range(size)], types])
out("alltoallw_in_place", rbuf.tolist())
error("werr_bare", comm.Alltoallw, [sbuf, types], np.zeros(size, "i"), message=False)
error("werr_none", comm.Alltoallw, [None, types], [rbuf, types])
error("werr_none_displs", comm.Alltoallw, [sbuf, types], [None, [1] * size, None, types])
error("werr_types_length", comm.Alltoallw, [sbuf, [MPI.INT] * (size + 1)], [rbuf, types])
error("werr_code", comm.Alltoallw, [sbuf, ["i"] * size], [rbuf, types], message=False)
error("werr_one_item", comm.Alltoallw, [sbuf], [rbuf, types])

# --- neighbourhood collectives over a periodic ring -------------------------------------
ring = comm.Create_cart([size], periods=[True])
# to the left 2 elements, to the right 1; from the left 1 element, from the right 2
sc, sd, rc, rd = (2, 1), (0, 2), (1, 2), (0, 2)
mine = np.array([rank, rank], "i")
for key, spec in {
    "four_tuples": lambda b, c, d: [b, c, d, MPI.INT],
    "pair_dt": lambda b, c, d: [b, (c, d), MPI.INT],
    "pair": lambda b, c, d: [b, (c, d)],
}.items():
    got = np.full(4, -1, "i")
    sent = np.array([10 * rank, 10 * rank + 1, 10 * rank + 2, -9], "i")
    ring.Neighbor_alltoallv(spec(sent, sc, sd), spec(got, rc, rd))
    out("neighbor_alltoallv", key, got.tolist())
    got = np.full(5, -1, "i")
    ring.Neighbor_allgatherv([mine, 2, MPI.INT], spec(got, (2, 2), (0, 3)))
    out("neighbor_allgatherv", key, got.tolist())
got = np.full(2, -1, "i")
ring.Neighbor_alltoallw(
    [mine, [1, 1], [0, 4], [MPI.INT] * 2], [got, ([1, 1], [0, 4]), [MPI.INT] * 2]
)
out("neighbor_alltoallw", got.tolist())
ring.Free()
out("done")
