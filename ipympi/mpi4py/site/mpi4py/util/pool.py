"""``mpi4py.util.pool``: :mod:`ipympi.mpi4py.util.pool`."""

from ipympi.mpi4py import alias

alias(__name__, "ipympi.mpi4py.util.pool")
