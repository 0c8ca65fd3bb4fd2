"""Environment inquiries: version, initialization, thread level, attributes, Wtime, names."""

import os
import socket
import sys
import time

if os.environ.get("DIFF_IMPL") == "mpi4py":
    from mpi4py import MPI
else:
    from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def out(*words):
    """Print one canonical line prefixed by this rank."""
    sys.stdout.write(" ".join(map(str, (rank, *words))) + "\n")


def thread_level(level):
    """The THREAD_* name of a thread support level."""
    names = ["THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED", "THREAD_MULTIPLE"]
    return [n for n in names if getattr(MPI, n) == level]


out("version", *MPI.Get_version())
out("vendor", MPI.get_vendor()[0])
out("library_version_is_str", isinstance(MPI.Get_library_version(), str))
out("initialized", MPI.Is_initialized(), "finalized", MPI.Is_finalized())
out("query_thread", *thread_level(MPI.Query_thread()))
out(
    "thread_levels_ordered",
    MPI.THREAD_SINGLE < MPI.THREAD_FUNNELED < MPI.THREAD_SERIALIZED < MPI.THREAD_MULTIPLE,
)
out("is_thread_main", MPI.Is_thread_main())
tag_ub = comm.Get_attr(MPI.TAG_UB)
out("tag_ub", type(tag_ub).__name__, tag_ub >= 32767)
out("wtime_is_global", comm.Get_attr(MPI.WTIME_IS_GLOBAL) in (0, 1, False, True))
out("processor_name", MPI.Get_processor_name() == socket.gethostname())
t0 = MPI.Wtime()
stamps = [MPI.Wtime() for _ in range(1000)]
time.sleep(0.05)
t1 = MPI.Wtime()
out("wtime_type", type(t0).__name__, type(MPI.Wtick()).__name__)
out("wtime_monotonic", all(a <= b for a, b in zip([t0, *stamps], [*stamps, t1])))
out("wtime_elapsed", 0.045 <= t1 - t0 < 5.0, abs((t1 - t0) - 0.05) < 1.0)
out("wtick", 0 < MPI.Wtick() <= 0.01)
out("world", comm.Get_name(), comm.Get_size() == size, comm.Get_rank() == rank)
out("self", MPI.COMM_SELF.Get_name(), MPI.COMM_SELF.Get_size(), MPI.COMM_SELF.Get_rank())
out("world_props", comm.size, comm.rank == rank, comm.Is_inter(), comm.Is_intra())
out("handles", comm == MPI.COMM_WORLD, comm != MPI.COMM_SELF, bool(MPI.COMM_NULL))
out(
    "errhandler",
    comm.Get_errhandler() == MPI.ERRORS_RETURN,
    MPI.COMM_SELF.Get_errhandler() == MPI.ERRORS_RETURN,
)
out("constants", MPI.ANY_SOURCE != MPI.PROC_NULL, MPI.UNDEFINED < 0, MPI.SUCCESS)
out("done")
