"""``mpi4py.futures`` on ipympi's ranks: the names of :mod:`ipympi.mpi4py.futures`.

A package of its own (not an alias of :mod:`ipympi.mpi4py.futures`), so that its submodules
``mpi4py.futures.server`` and ``python -m mpi4py.futures`` resolve here.
"""

from ipympi.mpi4py.futures import *  # noqa: F403
from ipympi.mpi4py.futures import __all__ as __all__
