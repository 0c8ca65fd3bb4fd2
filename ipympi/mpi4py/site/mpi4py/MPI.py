"""``mpi4py.MPI``: ipympi's MPI module."""

from ipympi.mpi4py import alias

alias(__name__, "ipympi.MPI")
