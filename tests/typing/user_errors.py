"""Mistakes a type checker must find in an MPI program (each line ends with the error's words)."""

from ipympi import MPI

comm = MPI.COMM_WORLD
comm.Allreduce(1, 2, 3, 4, 5)  # E: Too many arguments for "Allreduce"
comm.Bcast(b"x", rooot=0)  # E: Unexpected keyword argument "rooot" for "Bcast"
comm.Send(b"x", dest="one")  # E: Argument "dest" to "Send" of "Comm" has incompatible type "str"
size: str = comm.Get_size()  # E: Incompatible types in assignment
MPI.COMM_WORLD.Alreduce(b"", b"")  # E: "Intracomm" has no attribute "Alreduce"
op: MPI.Op = MPI.DOUBLE  # E: Incompatible types in assignment
tag: str = MPI.ANY_TAG  # E: Incompatible types in assignment
