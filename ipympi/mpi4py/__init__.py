"""The ``mpi4py`` name on ipympi's ranks.

Programs, courses and notebooks written for mpi4py say ``from mpi4py import MPI``. On the
ranks of the built-in MPI (a program under ``python -m ipympi.run``, an engine of the
``ipympi`` kernel or of ``%mpi start``), that name must give ipympi, also when the real
mpi4py is installed beside it: the real one would make every rank a world of its own.

The folder :data:`SITE` holds a package named ``mpi4py`` whose modules are ipympi's
(``mpi4py.MPI`` *is* :mod:`ipympi.MPI`, ``mpi4py.rc`` *is* ``ipympi.rc``, and so on). Putting
:data:`SITE` first on a rank's module path is all it takes: :func:`rank_environment` does it
for processes the launcher starts (through ``PYTHONPATH``, so ``python -m mpi4py prog.py``
resolves too) and :func:`install` for engines forked by a supervisor. Nothing else is
shadowed: outside the ranks, ``import mpi4py`` is whatever is installed.

``IPYMPI_MPI4PY_NAME=0`` (or the launcher's ``--no-mpi4py-name``) turns it off.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, MutableMapping

__all__ = ["ENV_SWITCH", "SITE", "alias", "enabled", "install", "rank_environment"]

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
_IPYMPI = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
ENV_SWITCH = "IPYMPI_MPI4PY_NAME"
_OFF = ("0", "no", "off", "false", "n")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ranks get the ``mpi4py`` name (``IPYMPI_MPI4PY_NAME`` is not off)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_SWITCH, "1").strip().lower() not in _OFF


def rank_environment(env: MutableMapping[str, str]) -> None:
    """Put :data:`SITE` first on ``PYTHONPATH`` in ``env`` (once), if :func:`enabled`."""
    if not enabled(env):
        return
    entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    env["PYTHONPATH"] = os.pathsep.join([SITE, *(entry for entry in entries if entry != SITE)])


def install() -> None:
    """Make ``import mpi4py`` give ipympi in this process, if :func:`enabled`.

    For engines, which are forked rather than started with an environment. A real mpi4py
    imported before (by whatever ran first) is forgotten, so the next import finds ours.
    """
    if not enabled():
        return
    if SITE in sys.path:
        sys.path.remove(SITE)
    sys.path.insert(0, SITE)
    for name in [name for name in sys.modules if name == "mpi4py" or name.startswith("mpi4py.")]:
        if not (getattr(sys.modules[name], "__file__", None) or "").startswith(_IPYMPI):
            del sys.modules[name]


def alias(name: str, target: str) -> None:
    """Make the module being imported as ``name`` be the module ``target``.

    Each module of :data:`SITE`'s ``mpi4py`` package is one call of this: importing
    ``mpi4py.MPI`` then gives :mod:`ipympi.MPI` itself (the import system returns what
    ``sys.modules`` holds once the module has run), so the two names share one module,
    its classes and its state.
    """
    sys.modules[name] = importlib.import_module(target)
