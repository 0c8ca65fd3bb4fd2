"""Parallel I/O: the bytes each data representation writes, and what reads return
(any number of ranks >= 2)."""

import hashlib
import os
import shutil
import sys
import tempfile

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


ERROR_NAMES = {getattr(MPI, n): n for n in sorted(dir(MPI), reverse=True) if n.startswith("ERR_")}


def error_class(fn, *args):
    try:
        fn(*args)
    except MPI.Exception as exc:
        return ERROR_NAMES.get(exc.Get_error_class(), exc.Get_error_class())
    return "OK"


folder = comm.bcast(tempfile.mkdtemp(prefix="fileio-") if rank == 0 else None, 0)
name = os.path.join(folder, "data.bin")
mode = MPI.MODE_CREATE | MPI.MODE_RDWR

TYPES = [("i", MPI.INT), ("d", MPI.DOUBLE), ("h", MPI.SHORT), ("f", MPI.FLOAT),
         ("q", MPI.LONG_LONG)]  # fmt: skip
# (LONG is left out: the standard gives it 4 bytes in external32, MPICH writes 8.)
for datarep in ("native", "internal", "external32"):
    for code, mpitype in TYPES:
        fh = MPI.File.Open(comm, name, mode)
        fh.Set_size(0)
        fh.Set_view(0, mpitype, mpitype, datarep)
        data = (np.arange(5) * 3 + rank * 100 - 7).astype(code)
        fh.Write_at_all(rank * 5, data)
        fh.Sync()
        comm.Barrier()
        fh.Sync()
        back = np.zeros(5 * size, dtype=code)
        st = MPI.Status()
        fh.Read_at_all(0, back, st)
        out(f"{datarep}_{code}_read", back.tolist(), st.Get_count(mpitype))
        out(f"{datarep}_{code}_extent", fh.Get_type_extent(mpitype))
        fh.Close()
        comm.Barrier()
        if rank == 0:
            with open(name, "rb") as f:
                raw = f.read()
            out(f"{datarep}_{code}_bytes", len(raw), hashlib.sha256(raw).hexdigest()[:16])
        comm.Barrier()

# A strided view: each rank's blocks interleaved with the others'.
fh = MPI.File.Open(comm, name, mode)
fh.Set_size(0)
ftype = MPI.INT.Create_vector(3, 2, 2 * size).Create_resized(0, 4 * 6 * size).Commit()
fh.Set_view(rank * 8, MPI.INT, ftype)
fh.Write_all(np.arange(12, dtype="i") + 1000 * rank)
fh.Sync()
comm.Barrier()
fh.Sync()
st = MPI.Status()
fh.Seek(0)
back = np.zeros(14, dtype="i")
fh.Read_all(back, st)
out("strided_read", back.tolist(), st.Get_count(MPI.INT), fh.Get_position())
out("strided_byte_offset", [fh.Get_byte_offset(i) for i in range(5)])
out("strided_size", fh.Get_size())
ftype.Free()
fh.Close()

# Shared and ordered access.
fh = MPI.File.Open(comm, name, mode | MPI.MODE_DELETE_ON_CLOSE)
fh.Set_size(0)
fh.Write_ordered(np.full(rank + 1, rank, dtype="b"))
comm.Barrier()
position = fh.Get_position_shared()
if rank == 0:  # (MPICH's other ranks report 0 here)
    out("ordered_pos", position)
fh.Seek_shared(0)
back = np.zeros(rank + 1, dtype="b")
fh.Read_ordered(back)
out("ordered_read", back.tolist())
fh.Close()
out("exists_after_delete_on_close", os.path.exists(name))

# Errors.
out("err_no_such_file", error_class(MPI.File.Open, comm, name, MPI.MODE_RDONLY))
out("err_amode", error_class(MPI.File.Open, comm, name, MPI.MODE_RDONLY | MPI.MODE_CREATE))
fh = MPI.File.Open(comm, name, MPI.MODE_CREATE | MPI.MODE_WRONLY)
out("err_read_wronly", error_class(fh.Read_at, 0, np.zeros(1, "i")))
fh.Close()
exists = error_class(MPI.File.Open, comm, name, mode | MPI.MODE_EXCL)
if rank == 0:  # (MPICH gives the other ranks ERR_OTHER)
    out("err_exists", exists)
comm.Barrier()
if rank == 0:
    MPI.File.Delete(name)
out("err_delete_missing", error_class(MPI.File.Delete, name + ".none"))
comm.Barrier()
if rank == 0:
    shutil.rmtree(folder)
out("done")
