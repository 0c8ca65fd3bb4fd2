"""Which launcher starts a session's engines: from the backend, the launcher's name and hosts.

The built-in MPI's engines come from one engine supervisor on this host
(:class:`~.launchers.SupervisorLauncher`) or from one per host
(:class:`~.hosts.HostsLauncher`, over ssh or srun); ranks on a real MPI through mpi4py
come from ``mpiexec`` or ``srun`` (:class:`~.launchers.MPILauncher`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...launch.hosts import Host, HostError, slurm_hosts
from .hosts import HostsLauncher
from .launchers import (
    BACKENDS,
    LAUNCHERS,
    MPI_LAUNCHERS,
    ClusterError,
    Launcher,
    MPILauncher,
    SupervisorLauncher,
)

__all__ = ["make_launcher"]


def make_launcher(
    backend: str,
    launcher: str | None,
    env: Mapping[str, str],
    *,
    hosts: Sequence[Host] | None = None,
    launcher_exec: str | None = None,
    iface: str | None = None,
) -> Launcher:
    """The launcher for ``backend`` with ``launcher`` (see below) on ``hosts``.

    The built-in MPI on this machine: a supervisor (``launcher`` None or
    ``local``); on ``hosts``, or the nodes of the Slurm allocation with
    ``srun``: one supervisor per host, started as ``launcher`` says (``auto``,
    ``local``, ``ssh``, ``srun``). mpi4py: ``mpiexec`` (the default) or
    ``srun``, given the hosts. ``launcher_exec`` replaces the ssh, srun or
    mpiexec command; ``iface`` is the interface (or address) to bind.
    """
    if backend not in BACKENDS:
        raise ClusterError(f"unknown backend {backend!r}: choose from {', '.join(BACKENDS)}")
    if launcher is not None and launcher not in LAUNCHERS:
        raise ClusterError(f"unknown launcher {launcher!r}: choose from {', '.join(LAUNCHERS)}")
    if backend == "mpi4py":
        if launcher not in (None, *MPI_LAUNCHERS):
            raise ClusterError(
                f"--launcher {launcher} starts the built-in MPI's engines: ranks on mpi4py "
                f"are started by {' or '.join(MPI_LAUNCHERS)}"
            )
        return MPILauncher(launcher or "mpiexec", env, hosts, launcher_exec, iface)
    if launcher == "mpiexec":
        raise ClusterError(
            "--launcher mpiexec starts ranks on mpi4py (--backend mpi4py); the built-in "
            "MPI's engines are started by ipympi itself, on hosts by local, ssh or srun"
        )
    if hosts is None and launcher == "srun":
        try:
            hosts = slurm_hosts(env)
        except HostError as exc:
            raise ClusterError(str(exc)) from None
    if hosts is None:
        if launcher not in (None, "local") or launcher_exec or iface:
            raise ClusterError(
                "--launcher, --launcher-exec and --iface place ranks on hosts: give --hosts "
                "(or --hostfile)"
            )
        return SupervisorLauncher(env)
    return HostsLauncher(hosts, env, launcher or "auto", launcher_exec, iface)
