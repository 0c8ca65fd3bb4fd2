"""``mpi4py.util.sync``: :mod:`ipympi.mpi4py.util.sync`."""

from ipympi.mpi4py import alias

alias(__name__, "ipympi.mpi4py.util.sync")
