"""``mpi4py.util.dtlib``: :mod:`ipympi.util.dtlib`."""

from ipympi.mpi4py_name import alias

alias(__name__, "ipympi.util.dtlib")
