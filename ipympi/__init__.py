"""ipympi: interactive MPI for Jupyter.

``from ipympi import MPI`` gives a built-in MPI implementation with mpi4py's
API; ``python -m ipympi.run -n N prog.py`` runs a program on N ranks, like
``mpiexec``. ``ipympi.rc`` configures initialization before the first import
of ``ipympi.MPI``, like ``mpi4py.rc``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ._rc import rc as rc

__all__ = ["__version__", "rc"]
