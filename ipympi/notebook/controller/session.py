"""The session's cluster: one per controller process, reachable as ``ipympi.current()``.

Also the pieces of the Python API that move data between the controller and
the ranks (``push``, ``pull``, ``scatter``, ``gather``, ``apply``), kept
here as plain functions over a :class:`~ipympi.notebook.controller.cluster.Cluster`.
"""

from __future__ import annotations

import os
from typing import Any

from ...launch.hosts import HostError, parse_hosts
from .cluster import DEFAULT_NP, Cluster, ClusterError
from .launchers import BACKENDS, LAUNCHERS

__all__ = [
    "BACKEND_ENV",
    "LAUNCHER_ENV",
    "NP_ENV",
    "current",
    "default_backend",
    "default_launcher",
    "default_placement",
    "default_size",
    "last_trace",
    "new_cluster",
    "set_current",
    "set_last_trace",
    "set_start_error",
]

NP_ENV = "IPYMPI_NP"
BACKEND_ENV = "IPYMPI_BACKEND"
LAUNCHER_ENV = "IPYMPI_LAUNCHER"
HOSTS_ENV = "IPYMPI_HOSTS"
IFACE_ENV = "IPYMPI_IFACE"
LAUNCHER_EXEC_ENV = "IPYMPI_LAUNCHER_EXEC"

_current: Cluster | None = None
_start_error: str | None = None  # why the kernel could not start its session
_last_trace: Any = None  # the Trace of the last traced cell


def default_size() -> int:
    """Ranks of a new session: ``IPYMPI_NP`` if set, else 4."""
    text = os.environ.get(NP_ENV, "").strip()
    if not text:
        return DEFAULT_NP
    try:
        n = int(text)
    except ValueError:
        raise ClusterError(f"{NP_ENV}={text!r} is not a number of ranks") from None
    if n < 1:
        raise ClusterError(f"{NP_ENV}={n}: a session needs at least one rank")
    return n


def default_backend() -> str:
    """The backend of a new session: ``IPYMPI_BACKEND`` if set, else ``"builtin"``."""
    backend = os.environ.get(BACKEND_ENV, "").strip() or "builtin"
    if backend not in BACKENDS:
        raise ClusterError(f"{BACKEND_ENV}={backend!r}: choose from {', '.join(BACKENDS)}")
    return backend


def default_launcher() -> str | None:
    """The launcher of a new session: ``IPYMPI_LAUNCHER`` if set (else the backend's own)."""
    launcher = os.environ.get(LAUNCHER_ENV, "").strip() or None
    if launcher is not None and launcher not in LAUNCHERS:
        raise ClusterError(f"{LAUNCHER_ENV}={launcher!r}: choose from {', '.join(LAUNCHERS)}")
    return launcher


def default_placement() -> dict[str, Any]:
    """Where a new session's ranks run: ``IPYMPI_HOSTS`` (``a:4,b:4``), ``IPYMPI_IFACE``
    and ``IPYMPI_LAUNCHER_EXEC``, as the options of ``%mpi start``."""
    text = os.environ.get(HOSTS_ENV, "").strip()
    try:
        hosts = parse_hosts(text) if text else None
    except HostError as exc:
        raise ClusterError(f"{HOSTS_ENV}={text!r}: {exc}") from None
    return {
        "hosts": hosts,
        "iface": os.environ.get(IFACE_ENV, "").strip() or None,
        "launcher_exec": os.environ.get(LAUNCHER_EXEC_ENV, "").strip() or None,
    }


def new_cluster(
    n: int | None = None, backend: str | None = None, launcher: str | None = None, **placement: Any
) -> Cluster:
    """A cluster as asked, the environment (``IPYMPI_*``) filling in what is not.

    ``IPYMPI_LAUNCHER=mpiexec`` is left aside for the built-in MPI, whose
    engines mpiexec does not start.
    """
    backend = backend or default_backend()
    if launcher is None:
        launcher = default_launcher()
        if backend == "builtin" and launcher == "mpiexec":
            launcher = None
    chosen = default_placement()
    chosen.update({key: value for key, value in placement.items() if value is not None})
    return Cluster(n or default_size(), backend=backend, launcher=launcher, **chosen)


def prestart() -> None:
    """Start the engine supervisor of the session the environment describes, early.

    For the ``ipympi`` kernel, before its own imports: the session made later
    (:func:`current`) takes it over if nothing has changed meanwhile. Only the
    built-in MPI on this machine has such a supervisor; a setting that does
    not parse is left for :func:`current` to report.
    """
    from .supervisor import start_early

    try:
        backend, launcher, placement = default_backend(), default_launcher(), default_placement()
        if backend == "builtin" and launcher in (None, "local") and not placement["hosts"]:
            start_early(os.environ, default_size())
    except (ClusterError, OSError):
        pass


def current(*, start: bool = False) -> Cluster:
    """The session's cluster (``start=True``: make one as the environment says, if none)."""
    global _current
    if _current is None:
        if not start:
            why = f" ({_start_error})" if _start_error else ""
            raise ClusterError(f"no MPI session{why}: run %mpi start (or use the ipympi kernel)")
        _current = new_cluster()
    return _current


def set_current(cluster: Cluster | None) -> None:
    global _current
    _current = cluster


def set_start_error(reason: str | None) -> None:
    """Remember why the session could not be started, for the cells that need it."""
    global _start_error
    _start_error = reason


def last_trace() -> Any:
    """The :class:`~ipympi.teach.trace.Trace` of the last cell run with ``--trace``."""
    if _last_trace is None:
        raise LookupError("no traced cell yet: run a cell with %%px --trace, or %mpi trace on")
    return _last_trace


def set_last_trace(trace: Any) -> None:
    global _last_trace
    _last_trace = trace
