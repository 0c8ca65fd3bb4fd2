"""``mpi4py.futures`` on ipympi's ranks: the names of :mod:`ipympi.futures`.

A package of its own (not an alias of :mod:`ipympi.futures`), so that its submodules
``mpi4py.futures.server`` and ``python -m mpi4py.futures`` resolve here.
"""

from ipympi.futures import *  # noqa: F403
from ipympi.futures import __all__ as __all__
