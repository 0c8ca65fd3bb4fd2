"""Error classes raised under ERRORS_RETURN by invalid point-to-point calls (2 or more ranks)."""

import os
import sys

import numpy as np

if os.environ.get("DIFF_IMPL") == "mpi4py":
    from mpi4py import MPI
else:
    from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
comm.Set_errhandler(MPI.ERRORS_RETURN)
TAG_UB = comm.Get_attr(MPI.TAG_UB)
ERR_NAMES = sorted(n for n in dir(MPI) if n.startswith("ERR_") and n != "ERR_LASTCODE")


def out(*words):
    """Print one canonical line prefixed by this rank."""
    sys.stdout.write(" ".join(map(str, (rank, *words))) + "\n")


def class_name(code):
    """The ERR_* name(s) of the class of an error code, looked up in the module."""
    errorclass = MPI.Get_error_class(code)
    names = [n for n in ERR_NAMES if getattr(MPI, n) == errorclass]
    if errorclass == MPI.SUCCESS:
        names = ["SUCCESS"]
    return "|".join(names) or f"class{errorclass}"


def outcome(call):
    """What ``call()`` does: OK, the MPI error class name, or the Python exception type."""
    try:
        call()
    except MPI.Exception as exc:
        return class_name(exc.Get_error_class())
    except Exception as exc:  # a non-MPI exception is an outcome too
        return type(exc).__name__
    return "OK"


def check(what, call):
    """Print the outcome of one call."""
    out(what, outcome(call))


buf = np.zeros(4, "i")
check("send_dest_size", lambda: comm.Send(buf, dest=size))
check("send_dest_negative", lambda: comm.Send(buf, dest=-7))
check("isend_dest_size", lambda: comm.Isend(buf, dest=size).Wait())
check("ssend_dest_size", lambda: comm.Ssend(buf, dest=size + 3))
check("send_obj_dest_size", lambda: comm.send("x", dest=size))
check("recv_source_size", lambda: comm.Recv(buf, source=size))
check("recv_source_negative", lambda: comm.Recv(buf, source=-7))
check("irecv_source_size", lambda: comm.Irecv(buf, source=size).Wait())
check("probe_source_size", lambda: comm.Probe(source=size))
check("iprobe_source_size", lambda: comm.Iprobe(source=size))
check("send_tag_negative", lambda: comm.Send(buf, dest=rank, tag=-5))
check("send_tag_any", lambda: comm.Send(buf, dest=rank, tag=MPI.ANY_TAG))
check("isend_tag_negative", lambda: comm.Isend(buf, dest=rank, tag=-5).Wait())
check("send_tag_above_ub", lambda: comm.Send(buf, dest=rank, tag=TAG_UB + 1))
check("send_tag_ub", lambda: comm.Isend(buf, dest=MPI.PROC_NULL, tag=TAG_UB).Wait())
check("recv_tag_negative", lambda: comm.Recv(buf, source=MPI.ANY_SOURCE, tag=-5))
check("recv_tag_above_ub", lambda: comm.Recv(buf, source=MPI.ANY_SOURCE, tag=TAG_UB + 1))
check("send_procnull_bad_tag", lambda: comm.Send(buf, dest=MPI.PROC_NULL, tag=-5))
check("sendrecv_dest_size", lambda: comm.Sendrecv(buf, size, 0, buf.copy(), MPI.PROC_NULL, 0))
check("probe_tag_negative", lambda: comm.Iprobe(source=MPI.ANY_SOURCE, tag=-5))
check("mprobe_source_size", lambda: comm.Improbe(source=size))
check("send_init_dest_size", lambda: comm.Send_init(buf, dest=size))
check("recv_init_source_size", lambda: comm.Recv_init(buf, source=size))
check("send_init_tag_negative", lambda: comm.Send_init(buf, dest=rank, tag=-5))
check("set_errhandler_null", lambda: comm.Set_errhandler(MPI.ERRHANDLER_NULL))
check("comm_world_free", lambda: MPI.COMM_WORLD.Free())
check("comm_self_free", lambda: MPI.COMM_SELF.Free())
check("comm_null_send", lambda: MPI.COMM_NULL.Send(buf, dest=0))
check("comm_null_recv", lambda: MPI.COMM_NULL.Recv(buf, source=0))
check("comm_null_get_size", lambda: MPI.COMM_NULL.Get_size())
check("comm_null_get_rank", lambda: MPI.COMM_NULL.Get_rank())
check("comm_null_probe", lambda: MPI.COMM_NULL.Iprobe())
check("comm_null_send_obj", lambda: MPI.COMM_NULL.send(1, dest=0))
check("request_null_start", lambda: MPI.Prequest().Start())
check("request_null_free", lambda: MPI.Request().Free())
check("request_null_cancel", lambda: MPI.REQUEST_NULL.Cancel())
check("message_null_recv", lambda: MPI.MESSAGE_NULL.Recv(buf))
check("status_count_datatype_null", lambda: MPI.Status().Get_count(MPI.DATATYPE_NULL))


def irecv_self(spec):
    """Post a receive from this rank with ``spec`` and cancel it (no message is sent)."""
    req = comm.Irecv(spec, source=rank, tag=77)
    req.Cancel()
    req.Wait()


check("recv_count_negative", lambda: irecv_self([buf, -1, MPI.INT]))
check("recv_count_too_big", lambda: irecv_self([buf, 5, MPI.INT]))
check("recv_datatype_null", lambda: irecv_self([buf, 1, MPI.DATATYPE_NULL]))
check("recv_read_only", lambda: irecv_self(b"abcd"))

st = MPI.Status()
if rank == 0:
    comm.Send(np.arange(8, dtype="i"), dest=1, tag=3)
    comm.Send(np.arange(8, dtype="i"), dest=1, tag=4)
    comm.Send(np.arange(8, dtype="i"), dest=1, tag=5)
    comm.send(list(range(100)), dest=1, tag=6)
    for t in (7, 8, 9, 10, 11, 12, 13):
        comm.Send(np.arange(8, dtype="i"), dest=1, tag=t)
elif rank == 1:
    small = np.full(4, -1, "i")
    check("recv_truncate", lambda: comm.Recv(small, source=MPI.ANY_SOURCE, tag=3, status=st))
    out("recv_truncate_status", st.Get_source(), st.Get_tag(), class_name(st.Get_error()))
    out("recv_truncate_count", st.Get_count(MPI.INT))
    out("recv_truncate_data", small.tolist())
    req = comm.Irecv(small, source=0, tag=MPI.ANY_TAG)
    check("irecv_truncate", lambda: req.Wait(st))
    out("irecv_truncate_status", st.Get_source(), st.Get_tag(), req == MPI.REQUEST_NULL)
    reqs = [comm.Irecv(small, source=0, tag=5), MPI.REQUEST_NULL]
    sts = [MPI.Status(), MPI.Status()]
    check("waitall_truncate", lambda: MPI.Request.Waitall(reqs, sts))
    out("waitall_truncate_status", sts[0].Get_tag(), class_name(sts[0].Get_error()))
    out("waitall_truncate_status1", class_name(sts[1].Get_error()))
    big = np.zeros(8, "i")
    check("waitall_nostatus_truncate", lambda: MPI.Request.Waitall([comm.Irecv(small, 0, 7)]))
    reqs = [MPI.REQUEST_NULL, comm.Irecv(small, 0, 8)]
    check("waitany_truncate", lambda: MPI.Request.Waitany(reqs, st))
    out("waitany_truncate_status", st.Get_tag(), reqs[1] == MPI.REQUEST_NULL)
    comm.Probe(source=0, tag=13)  # tags 9 and 10 were sent before 13: both complete at once
    reqs = [comm.Irecv(big, 0, 9), comm.Irecv(small, 0, 10)]
    sts = []
    check("waitsome_truncate", lambda: MPI.Request.Waitsome(reqs, sts))
    errs = [f"{s.Get_tag()}/{class_name(s.Get_error())}" for s in sts]
    out("waitsome_truncate_status", *errs, reqs[0] == reqs[1] == MPI.REQUEST_NULL)
    msg = comm.Mprobe(source=0, tag=11)
    check("message_recv_truncate", lambda: msg.Recv(small, status=st))
    out("message_recv_truncate_status", st.Get_tag(), msg == MPI.MESSAGE_NULL)
    check("sendrecv_truncate", lambda: comm.Sendrecv(big, MPI.PROC_NULL, 0, small, 0, 12, st))
    out("sendrecv_truncate_status", st.Get_source(), st.Get_tag())
    comm.Recv(big, source=0, tag=13)
    check("recv_obj_truncate", lambda: comm.recv(bytearray(10), source=0, tag=6))
out("done")
