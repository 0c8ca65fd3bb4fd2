"""``mpi4py.typing``: :mod:`ipympi.mpi4py.typing`."""

from ipympi.mpi4py import alias

alias(__name__, "ipympi.mpi4py.typing")
