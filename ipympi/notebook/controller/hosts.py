"""A notebook session on several hosts: one engine supervisor per host.

``%mpi start -n 8 --hosts a:4,b:4`` places the ranks as ``ipympi.run --hosts``
does (:mod:`ipympi.launch.hosts`) and starts one supervisor
(:mod:`ipympi.notebook.engine.supervisor`) per host: directly on this machine, through
ssh or as a Slurm step on the others (:func:`ipympi.launch.agents.agent_argv`).
Each supervisor forks its host's engines, as the single supervisor of a
session on one host does, and makes the world's directory on its host. The
engines reach the controller over tcp (its engine and control ROUTERs bind
the address :func:`ipympi.launch.hosts.controller_address` picks), and each other
over signed tcp between hosts (:mod:`ipympi.progress.tcp`).

The controller cannot signal a process on another host: interrupts go to the
engines through their supervisor (``signal`` command). A supervisor that is
lost (its ssh connection dropped, its host went down) ends the world: the
others' ranks could not progress without the lost ones.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...launch.agents import LAUNCHERS, agent_argv, forwarded_environment, placed_rank_environment
from ...launch.hosts import Host, controller_address, nodes_of, start_method
from .launchers import Event, Launcher, World
from .supervisor import SupervisorProcess, engine_environment

__all__ = ["HostsLauncher"]


class HostsLauncher(Launcher):
    """Engines of the built-in MPI on ``hosts``, one supervisor per host (see the module).

    ``how`` is how supervisors start: ``auto``, ``local``, ``ssh`` or
    ``srun`` (as ``ipympi.run --launcher``); ``launcher_exec`` replaces the
    ssh or srun command; ``iface`` is the network interface (or address) every
    tcp socket binds, on every host.
    """

    backend = "builtin"
    library = "ipympi's own MPI"
    remote = True

    def __init__(
        self,
        hosts: Sequence[Host],
        env: Mapping[str, str],
        how: str = "auto",
        launcher_exec: str | None = None,
        iface: str | None = None,
    ) -> None:
        if how not in LAUNCHERS:
            raise ValueError(f"unknown launcher {how!r}: choose from {', '.join(LAUNCHERS)}")
        self.hosts = list(hosts)
        self.env = dict(env)
        self.how = how
        self.launcher_exec = launcher_exec
        self.iface = iface
        self.distinct, _ = nodes_of(self.hosts, 1)
        count = len(self.distinct)
        self.name = "the supervisors"
        self.started_by = f"forked by supervisors on {count} host{'s' * (count != 1)}"
        self.supervisors: dict[int, SupervisorProcess] = {}  # host index -> its supervisor
        self._nodes: list[int] = []  # the host index of each rank of the current world
        self._pids: dict[int, int] = {}  # rank -> pid, engines of the current world
        self._address = ""

    def describe_hosts(self) -> str:
        """``a:4,b:4``: the hosts as given."""
        return ",".join(f"{host.name}:{host.slots}" for host in self.hosts)

    def address(self) -> str:
        if not self._address:
            self._address = controller_address([h.name for h in self.distinct], self.iface)
        return self._address

    # -- starting ----------------------------------------------------------------------
    def start(self, world: World) -> list[Event]:
        _, self._nodes = nodes_of(self.hosts, world.n)
        self._pids = {}
        for node, host in enumerate(self.distinct):
            ranks = [rank for rank in range(world.n) if self._nodes[rank] == node]
            if not ranks:
                continue
            how = start_method(host.name, self.how, self.env)
            supervisor = self.supervisors.get(node)
            if supervisor is None or supervisor.gone or not supervisor.alive:
                supervisor = self._start_supervisor(host, how, world.n)
                self.supervisors[node] = supervisor
            # A local supervisor has the session's environment; others get it with "spawn",
            # with the engines' defaults (inline figures) where it does not say otherwise.
            shared = {} if how == "local" else engine_environment(world.env, 1)
            shared = forwarded_environment(shared)
            envs = {str(rank): {**shared, **self._engine_env(world, rank)} for rank in ranks}
            supervisor.command(
                {
                    "type": "spawn",
                    "ranks": ranks,
                    "address": world.address,
                    "gen": world.gen,
                    "key": world.key.hex(),
                    "env": envs,
                    "host": host.name,
                    "iface": self.iface,
                    "controller": self.address(),
                }
            )
        # Every rank is under way: a supervisor that never starts ends them all.
        return [{"type": "spawned", "rank": rank, "pid": None} for rank in range(world.n)]

    def _start_supervisor(self, host: Host, how: str, n: int) -> SupervisorProcess:
        argv = agent_argv(
            host, how, self.launcher_exec, sys.executable, os.getcwd(), "ipympi.notebook.engine"
        )
        env = engine_environment(self.env, 1) if how == "local" else self.env
        return SupervisorProcess(env, n, argv)

    def _engine_env(self, world: World, rank: int) -> dict[str, str]:
        """An engine's ``IPYMPI_*`` variables (its supervisor adds the directory and address)."""
        names = [host.name for host in self.distinct]
        key = world.control_key.hex()
        return placed_rank_environment(rank, self._nodes, names, key, world.control)

    # -- what the supervisors say ------------------------------------------------------------
    def fds(self) -> list[int]:
        fds = []
        for supervisor in self.supervisors.values():
            if not supervisor.gone:
                fds.append(supervisor.fd)
            if supervisor.err_fd is not None and not supervisor.gone:
                fds.append(supervisor.err_fd)
        return fds

    def read(self, fd: int) -> list[Event]:
        for node, supervisor in list(self.supervisors.items()):
            if fd == supervisor.err_fd:
                supervisor.read_errors()
                return []
            if fd == supervisor.fd:
                return self._events_of(node, supervisor)
        return []

    def _events_of(self, node: int, supervisor: SupervisorProcess) -> list[Event]:
        events = supervisor.read()
        if events is None:
            del self.supervisors[node]
            if node not in self._nodes:
                return []  # it had no rank of this world
            self.end(signal.SIGKILL)
            host = self.distinct[node].name
            return [
                {
                    "type": "ended",
                    "reason": f"host {host}: lost the connection to its supervisor"
                    f"{supervisor.exit_note()}",
                    "known": True,
                }
            ]
        current = []
        for event in events:
            rank: Any = event.get("rank")  # JSON values
            pid: Any = event.get("pid")
            if not isinstance(rank, int) or not 0 <= rank < len(self._nodes):
                continue
            if event.get("type") == "spawned":
                self._pids[rank] = int(pid)
                current.append(event)
            elif event.get("type") == "exited" and (
                self._pids.get(rank) == pid or (pid is None and rank not in self._pids)
            ):
                self._pids.pop(rank, None)
                current.append(event)
        return current

    def diagnosis(self) -> str:
        lines = [
            f"host {self.distinct[node].name}: {line}"
            for node, supervisor in self.supervisors.items()
            for line in supervisor.errors
        ]
        return "\n".join(lines[-5:])

    # -- signals and the end --------------------------------------------------------------
    def signal(self, rank: int, pid: int | None, sig: int) -> bool:
        supervisor = self.supervisors.get(self._nodes[rank]) if rank < len(self._nodes) else None
        if supervisor is None or supervisor.gone:
            return False
        supervisor.command({"type": "signal", "ranks": [rank], "signal": int(sig)})
        return True

    def end(self, sig: int) -> None:
        for node, supervisor in self.supervisors.items():
            ranks = [rank for rank in self._pids if self._nodes[rank] == node]
            if ranks:
                supervisor.command({"type": "signal", "ranks": ranks, "signal": int(sig)})

    def close(self, grace: float) -> None:
        for supervisor in self.supervisors.values():
            supervisor.close_stdin()
        deadline = time.monotonic() + grace
        for supervisor in self.supervisors.values():
            supervisor.finish(deadline)
        self.supervisors.clear()

    def __repr__(self) -> str:
        return f"HostsLauncher({self.describe_hosts()!r}, how={self.how!r})"
