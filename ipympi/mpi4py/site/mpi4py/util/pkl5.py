"""``mpi4py.util.pkl5``: :mod:`ipympi.mpi4py.util.pkl5`."""

from ipympi.mpi4py import alias

alias(__name__, "ipympi.mpi4py.util.pkl5")
