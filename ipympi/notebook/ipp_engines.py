"""IPython Parallel engines that are ranks of ipympi: ``ipp.Cluster(engines="ipympi")``.

Registered in IPython Parallel's entry-point group ``ipyparallel.engine_launchers``
under the name ``ipympi``, so that ``ipp.Cluster(engines="ipympi", n=4)`` and
``ipcluster start -n 4 --engines=ipympi`` start their engines with
``python -m ipympi.run -n 4 -- python -m ipyparallel.engine --mpi ...``
instead of ``mpiexec``: no system MPI is needed, and on the engines
``from mpi4py import MPI`` is ipympi's MPI. Stopping, restarting and ``%px``
work as with ``engines="mpi"``; a signal (``cluster.signal_engines(SIGINT)``)
goes to the engines themselves, which IPython Parallel turns into a
``KeyboardInterrupt`` of what they run, where ``ipympi.run`` would end the job.

This module is imported only by IPython Parallel (an optional dependency:
``pip install ipympi[ipyparallel]``).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import psutil
from ipyparallel.cluster.launcher import MPIEngineSetLauncher
from ipyparallel.engine.app import IPEngine
from traitlets import List

from ..launch import template

__all__ = ["IpympiEngine", "IpympiEngineSetLauncher", "main"]

TEMPLATE_MODULE = template.__name__  # the command line of forked ranks too
ENGINE_MODULE = "ipympi.notebook.ipp_engines"


class IpympiEngine(IPEngine):
    """IPython Parallel's engine, which tells the controller when it is stopped.

    Its ranks stop within a second; IPython Parallel's controller would notice
    only after its heartbeat timeout (30 s), and meanwhile count them as alive
    (``restart_engines()`` followed by ``wait_for_engines(n)`` would see the old
    ones). So a stopped engine unregisters itself first, as one does that has
    lost its controller.
    """

    def _signal_stop(self, sig: int, frame: Any) -> None:
        if self.id is not None and getattr(self, "registrar", None) is not None:
            try:
                self.session.send(self.registrar, "unregistration_request", content={"id": self.id})
            except Exception:
                self.log.debug("could not unregister", exc_info=True)
        super()._signal_stop(sig, frame)


def main() -> None:
    """``python -m ipympi.notebook.ipp_engines``: one engine (one rank)."""
    IpympiEngine.launch_instance()


class IpympiEngineSetLauncher(MPIEngineSetLauncher):
    """Start engines as the ranks of one ``python -m ipympi.run`` job."""

    entrypoint_name = "ipympi"

    mpi_cmd = List(
        [sys.executable, "-m", "ipympi.run"],
        config=True,
        help="The command that starts the ranks (ipympi's launcher, in place of mpiexec).",
    )
    engine_cmd = List(
        [sys.executable, "-m", ENGINE_MODULE],
        config=True,
        help="The command of one engine (IPython Parallel's, unregistering when stopped).",
    )
    mpi_args = List(
        ["--no-deadlock-check"],
        config=True,
        help="Options of ipympi.run. By default a deadlock leaves the engines waiting, as "
        "under mpiexec, for an interrupt (cluster.signal_engines(SIGINT)) to end it.",
    )

    def find_args(self) -> list[str]:
        """``ipympi.run -n N [options] -- ENGINE-COMMAND``."""
        return [
            *self.mpi_cmd,
            "-n",
            str(self.n),
            *self.mpi_args,
            "--",
            *self.program,
            *self.program_args,
        ]

    def signal(self, sig: int) -> Any:
        """Send ``sig`` to the engines; SIGTERM to the launcher too (which then ends the
        job at once, its engines gone), SIGKILL to the launcher only (its ranks die with it)."""
        if sig == signal.SIGKILL or self.state != "running":
            return super().signal(sig)
        try:
            ranks = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            ranks = []
        for rank in ranks:
            if _is_engine(rank, self.pid):
                try:
                    os.kill(rank.pid, sig)
                except ProcessLookupError:
                    pass
        return super().signal(sig) if sig == signal.SIGTERM else None


def _is_engine(process: psutil.Process, launcher: int) -> bool:
    """Whether ``process``, one of the launcher's descendants, is an engine: started
    with an engine's command line, or forked from the launcher's rank template (its
    command line is the template's; the template itself is the launcher's child)."""
    try:
        command = " ".join(process.cmdline())
        if TEMPLATE_MODULE in command:
            return process.ppid() != launcher
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return "ipyparallel.engine" in command or ENGINE_MODULE in command


if __name__ == "__main__":
    main()
