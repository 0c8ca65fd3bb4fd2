"""``mpi4py.util.dtlib``: :mod:`ipympi.mpi4py.util.dtlib`."""

from ipympi.mpi4py import alias

alias(__name__, "ipympi.mpi4py.util.dtlib")
