"""mpi4py on ipympi's ranks: mpi4py's API, implemented by ipympi (see ``ipympi.mpi4py_name``).

``mpi4py.MPI`` is ``ipympi.MPI`` and ``mpi4py.rc`` is ``ipympi.rc``; ``__version__`` is the
mpi4py release whose API ipympi implements. ``MPI.get_vendor()`` and
``MPI.Get_library_version()`` say that the MPI underneath is ipympi.
"""

import sys as _sys

try:
    from ipympi import rc
except ModuleNotFoundError as _missing:  # ipympi's launcher started a Python without ipympi
    if _missing.name != "ipympi":
        raise
    raise ModuleNotFoundError(
        f"'import mpi4py' found ipympi's mpi4py name (on PYTHONPATH, set by ipympi's "
        f"launcher), but this Python ({_sys.executable}) has no ipympi installed: run the "
        "program with the Python that has ipympi, e.g. 'python -m ipympi.run -n 2 "
        "python prog.py' with that environment activated, or pass --no-mpi4py-name",
        name="ipympi",
    ) from None
from ipympi.mpi4py_name.run import MPI4PY_VERSION as __version__  # noqa: F401
from ipympi.mpi4py_name.toplevel import get_config, get_include, profile

__all__ = ["get_config", "get_include", "profile", "rc"]

_sys.modules[__name__ + ".rc"] = rc
