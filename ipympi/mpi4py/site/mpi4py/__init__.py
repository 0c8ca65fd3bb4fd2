"""mpi4py on ipympi's ranks: mpi4py's API, implemented by ipympi (see ``ipympi.mpi4py``).

``mpi4py.MPI`` is ``ipympi.MPI`` and ``mpi4py.rc`` is ``ipympi.rc``; ``__version__`` is the
mpi4py release whose API ipympi implements. ``MPI.get_vendor()`` and
``MPI.Get_library_version()`` say that the MPI underneath is ipympi.
"""

import sys as _sys

try:
    from ipympi import rc
except ModuleNotFoundError as _exc:  # a rank run with a Python that has no ipympi
    if _exc.name != "ipympi":
        raise
    raise ModuleNotFoundError(
        f"No module named 'ipympi': this Python ({_sys.executable}) runs a rank of ipympi, "
        "where `mpi4py` is ipympi's, but cannot import ipympi. `python -m ipympi.run -n N "
        "prog.py` runs prog.py with the launcher's own Python; `... python prog.py` runs the "
        "`python` found on PATH.",
        name="ipympi",
    ) from None
from ipympi.mpi4py.run import MPI4PY_VERSION as __version__  # noqa: F401
from ipympi.mpi4py.toplevel import get_config, get_include, profile

__all__ = ["get_config", "get_include", "profile", "rc"]

_sys.modules[__name__ + ".rc"] = rc
