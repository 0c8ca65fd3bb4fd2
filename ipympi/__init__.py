"""ipympi: interactive MPI for Jupyter.

``from ipympi import MPI`` gives a built-in MPI implementation with mpi4py's
API; ``python -m ipympi.run -n N prog.py`` runs a program on N ranks, like
``mpiexec``. ``ipympi.rc`` configures initialization before the first import
of ``ipympi.MPI``, like ``mpi4py.rc``.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__ as __version__
from .mpi.rc import rc as rc

__all__ = [
    "Cluster",
    "__version__",
    "current",
    "last_trace",
    "load_ipython_extension",
    "on_error",
    "rc",
]


def current() -> Any:
    """The notebook session's cluster of ranks (``push``, ``pull``, ``execute``, ...)."""
    from .notebook.controller.session import current as _current

    return _current()


def last_trace() -> Any:
    """The messages of the last cell run with ``%%px --trace`` (or ``%mpi trace on``).

    A :class:`~ipympi.teach.trace.Trace`: its ``records`` are every rank's
    sends, receives and collective calls; it draws itself as a diagram.
    """
    from .notebook.controller.session import last_trace as _last_trace

    return _last_trace()


def on_error(callback: Any) -> Any:
    """Call ``callback(report)`` whenever a parallel cell fails.

    See :mod:`ipympi.notebook.controller.hooks`.
    """
    from .notebook.controller.hooks import on_error as _on_error

    return _on_error(callback)


def load_ipython_extension(shell: Any) -> Any:
    """``%load_ext ipympi``: the ``%mpi``, ``%%px`` and ``%autopx`` magics."""
    from .magics import load_ipython_extension as load

    return load(shell)


def unload_ipython_extension(shell: Any) -> None:
    from .magics import unload_ipython_extension as unload

    unload(shell)


def __getattr__(name: str) -> Any:
    """``ipympi.Cluster``: IPython Parallel's cluster API on ipympi's session (imported
    when first used, so that ``import ipympi`` stays cheap)."""
    if name == "Cluster":
        from .notebook.controller.client import Cluster

        return Cluster
    raise AttributeError(f"module 'ipympi' has no attribute {name!r}")
