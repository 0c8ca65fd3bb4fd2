"""The launcher's side of a job on several hosts: host agents and their ranks.

For ``ipympi.run --hosts ...`` the launcher starts one host agent
(:mod:`ipympi.launch.node`) per host and talks to it through the agent's standard
streams. :class:`AgentProcess` is that process, started

* directly, for a host that is this machine (``--launcher local``, and what
  ``auto`` picks for it);
* through ssh, ``ssh -o BatchMode=yes -x HOST 'cd CWD; exec PYTHON -m ipympi.launch.node'``
  (``--launcher-exec`` replaces ``ssh``, e.g. ``"ssh -p 2222"``);
* through srun inside a Slurm allocation, one single-task step per node
  (``srun --nodes=1 --ntasks=1 --nodelist=HOST --cpus-per-task=SLOTS ...``).

:class:`AgentRank` is a Popen-shaped handle on a rank an agent runs, so the
job drives local and remote ranks alike: its pid and return code come from
the agent's events, and signals go to the agent as commands. The launcher's
standard input goes to rank 0 through its agent (:mod:`ipympi.launch.stdinput`).
"""

from __future__ import annotations

import base64
import functools
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import zmq

from ..core import control as ctl
from .basics import LAUNCHERS
from .ctlserver import ControlServer
from .forwarding import OutputStream
from .hosts import Host, controller_address, environment_is_local, nodes_of, start_method
from .jsonlines import JsonLinesProcess
from .launcher import GRACE, Job, RankHandle, rank_environment
from .stdinput import InputSource, forwardable

__all__ = [
    "LAUNCHERS",
    "AgentProcess",
    "AgentRank",
    "HostsJob",
    "agent_argv",
    "forwarded_environment",
    "placed_rank_environment",
]

LOST = 255  # the return code of a rank whose agent went away (as ssh's own failures)
# Seconds an agent gets to answer (ssh or srun may be slow); IPYMPI_START_TIMEOUT changes it.
AGENT_START_TIMEOUT = 60.0


def agent_argv(
    host: Host,
    how: str,
    launcher_exec: str | None,
    python: str,
    cwd: str,
    module_name: str = "ipympi.launch.node",
) -> list[str]:
    """The command that starts the agent of ``host`` (or another helper, ``module_name``):
    ``how`` is local, ssh or srun."""
    module = [python, "-m", module_name]
    if how == "local":
        return module
    if how == "ssh":
        remote = f"cd {shlex.quote(cwd)} 2>/dev/null; exec {shlex.join(module)}"
        return [
            *shlex.split(launcher_exec or "ssh"),
            "-o",
            "BatchMode=yes",
            "-x",
            host.name,
            remote,
        ]
    if how == "srun":
        return [
            *shlex.split(launcher_exec or "srun"),
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={host.name}",
            f"--cpus-per-task={host.slots}",
            "--input=all",
            "--unbuffered",
            "--job-name=ipympi",
            *module,
        ]
    raise ValueError(f"unknown launcher {how!r} (expected one of {', '.join(LAUNCHERS)})")


def placed_rank_environment(
    rank: int, nodes: Sequence[int], names: Sequence[str], key: str, control: str
) -> dict[str, str]:
    """The ``IPYMPI_*`` variables of ``rank`` in a world placed on hosts: ``nodes`` gives
    each rank's host index among ``names``; its agent or supervisor adds the session
    directory and the address to bind on its host."""
    env = rank_environment({}, rank, len(nodes), "", key, None)
    del env[ctl.ENV_SESSION_DIR]
    env[ctl.ENV_CTL] = control
    env[ctl.ENV_NODES] = ctl.encode_nodes(list(nodes))
    env[ctl.ENV_HOST] = names[nodes[rank]]
    return env


def forwarded_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment as ranks on other hosts get it (as MPICH's mpiexec
    forwards it), without what describes this host or process only."""
    return {name: value for name, value in env.items() if not environment_is_local(name)}


class AgentProcess(JsonLinesProcess):
    """One running host agent, seen from the launcher: commands in, events out.

    What ssh, srun or the agent itself say on stderr is reported by the job,
    line by line, under the host's name.
    """

    def __init__(
        self,
        host: Host,
        argv: Sequence[str],
        preexec: Callable[[], None] | None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(argv, env, capture_stderr=True, preexec=preexec)
        self.host = host
        self.ready: dict[str, Any] | None = None  # the agent's ready event


class AgentRank:
    """A Popen-shaped handle on a rank that a host agent runs."""

    local = False

    def __init__(self, rank: int, agent: AgentProcess) -> None:
        self.rank = rank
        self.agent = agent
        self.pid: int | None = None  # on the agent's host
        self.returncode: int | None = None
        self.hello: dict[str, Any] | None = None
        self.pidfd: int | None = None
        self.error = ""  # why it could not start, or why it was lost

    @property
    def mpi_pid(self) -> int | None:
        if self.hello is not None:
            return int(self.hello["pid"])
        return self.pid

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The return code; the job's event loop is what learns it (no blocking here)."""
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.agent.argv, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self.agent.command({"type": "signal", "signal": int(sig), "ranks": [self.rank]})

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# -- a job on several hosts -----------------------------------------------------------
class HostsJob(Job):
    """A :class:`~ipympi.launch.launcher.Job` whose ranks are placed on several hosts.

    Ranks fill the hosts' slots in order (:func:`ipympi.launch.hosts.place`); each
    host used gets one agent. The control ROUTER listens on tcp, on the
    interface asked for (``iface``), else on the address this machine uses to
    reach the first other host (loopback when every host is this machine).
    Every rank learns each rank's host from ``IPYMPI_NODES``; ranks on one host
    exchange datagrams, others signed tcp frames, whose endpoints the job
    sends to every rank (``peers``) once all have said hello. Rank 0 reads what
    the descriptor ``stdin`` gives (the launcher's standard input by default; None:
    nothing), as rank 0 of a job on this machine inherits it.
    """

    def __init__(
        self,
        argv: Sequence[str],
        n: int,
        hosts: Sequence[Host],
        *,
        launcher: str = "auto",
        launcher_exec: str | None = None,
        iface: str | None = None,
        stdin: int | None = 0,
        **options: Any,
    ) -> None:
        super().__init__(argv, n, **options)
        if launcher not in LAUNCHERS:
            raise ValueError(f"unknown launcher {launcher!r} (expected {', '.join(LAUNCHERS)})")
        if not hosts:
            raise ValueError("a job on hosts needs at least one host")
        self.hosts = list(hosts)
        self.launcher = launcher
        self.launcher_exec = launcher_exec
        self.iface = iface
        self.node_hosts, self.nodes = nodes_of(self.hosts, n)
        self.agents: list[AgentProcess] = []
        self._peers_sent = False
        self._control_host = ""
        self._start_timeout = float(self.env.get("IPYMPI_START_TIMEOUT", AGENT_START_TIMEOUT))
        self._start_deadline = 0.0  # when agents that have not answered are given up
        if stdin == 0 and sys.stdin is None:
            stdin = None  # this process started with its stdin closed
        self._stdin = forwardable(stdin)
        self._input: InputSource | None = None  # rank 0's input, once its agent has started

    # -- starting -----------------------------------------------------------------------
    def _bind_control(self, control: ControlServer) -> str:
        used = [self.node_hosts[node].name for node in sorted(set(self.nodes))]
        self._control_host = controller_address(used, self.iface)
        host = f"[{self._control_host}]" if ":" in self._control_host else self._control_host
        if ":" in self._control_host:
            control.socket.setsockopt(zmq.IPV6, 1)
        return control.bind(f"tcp://{host}:0")

    def _start_ranks(self, preexec: Callable[[], None] | None) -> None:
        self._start_deadline = time.monotonic() + self._start_timeout
        cwd = os.getcwd()
        shared = forwarded_environment(self.env)
        for node, host in enumerate(self.node_hosts):
            ranks = [rank for rank in range(self.n) if self.nodes[rank] == node]
            if not ranks:
                continue
            how = start_method(host.name, self.launcher, self.env)
            local = how == "local"
            argv = agent_argv(host, how, self.launcher_exec, sys.executable, cwd)
            # A local agent inherits the job's environment; others get it with "start".
            agent = AgentProcess(host, argv, preexec, self.env if local else None)
            self.agents.append(agent)
            self._watch(agent.fd, functools.partial(self._read_agent, agent))
            assert agent.err_fd is not None
            self._watch(agent.err_fd, functools.partial(self._report_errors, agent))
            for rank in ranks:
                self.ranks.append(AgentRank(rank, agent))
            agent.command(
                {
                    "type": "start",
                    "host": host.name,
                    "iface": self.iface,
                    "launcher": self._control_host,
                    "argv": self.argv,
                    "cwd": cwd,
                    "env": None if local else shared,
                    "ranks": [self._rank_entry(rank) for rank in ranks],
                }
            )
            if 0 in ranks and self._stdin is not None:
                self._input = InputSource(self._stdin, 0, agent.command)
        self.ranks.sort(key=lambda handle: handle.rank)
        for handle in self.ranks:
            prefix = b"[%d] " % handle.rank if self.tag_output else None
            for fd, sink in ((1, self._stdout), (2, self._stderr)):
                self._streams[_stream_key(handle.rank, fd)] = OutputStream(None, sink, prefix)
        self._watch_input()

    def _rank_entry(self, rank: int) -> dict[str, Any]:
        """What the ``start`` command says of ``rank``: its environment, and whether
        its stdin is the launcher's."""
        assert self.ctl_address is not None
        names = [host.name for host in self.node_hosts]
        env = placed_rank_environment(rank, self.nodes, names, self.key, self.ctl_address)
        entry: dict[str, Any] = {"rank": rank, "env": env}
        if rank == 0 and self._stdin is not None:
            entry["stdin"] = True
        return entry

    # -- rank 0's standard input ----------------------------------------------------------
    def _watch_input(self) -> None:
        """Watch the launcher's stdin while rank 0's agent has room for more of it (and,
        for its controlling terminal, while the launcher is the foreground job)."""
        source = self._input
        if source is None:
            return
        if source.wants_input() and not self._ending:
            if source.fd not in self._handlers:
                self._watch(source.fd, self._read_input)
        else:
            self._unwatch(source.fd)

    def _read_input(self) -> None:
        if self._input is not None:
            self._input.read()
            self._watch_input()

    def _stop_input(self, handle: AgentRank) -> None:
        """Rank 0 exited, failed to start or was lost: read no more input for it."""
        if handle.rank == 0 and self._input is not None:
            self._input.stop()
            self._watch_input()

    # -- what the agents say --------------------------------------------------------------
    def _read_agent(self, agent: AgentProcess) -> None:
        events = agent.read()
        if events is None:
            self._unwatch(agent.fd)
            self._report_errors(agent)
            self._lose(agent)
            return
        for event in events:
            kind = event.get("type")
            if kind == "ready":
                agent.ready = event
                if event.get("note"):
                    self.report(f"host {agent.host.name}: {event['note']}")
                continue
            handle = self._handle_of(event.get("rank"), agent)
            if handle is None:
                continue
            if kind == "spawned":
                handle.pid = int(event["pid"])
            elif kind == "output":
                stream = self._streams.get(_stream_key(handle.rank, int(event["fd"])))
                if stream is not None:
                    stream.feed(base64.b64decode(event["data"]))
            elif kind == "closed":
                self._close_stream(_stream_key(handle.rank, int(event["fd"])))
            elif kind == "input":
                if handle.rank == 0 and self._input is not None:
                    self._input.on_event(event)
                    self._watch_input()
            elif kind == "exited":
                handle.returncode = int(event["returncode"])
                self._stop_input(handle)
            elif kind == "failed":
                handle.error = str(event.get("error", ""))
                self.report(f"host {agent.host.name}: rank {handle.rank}: {handle.error}")
                handle.returncode = int(event.get("status", 127))
                self._stop_input(handle)
                for fd in (1, 2):
                    self._close_stream(_stream_key(handle.rank, fd))

    def _handle_of(self, rank: Any, agent: AgentProcess) -> AgentRank | None:
        if not isinstance(rank, int) or not 0 <= rank < len(self.ranks):
            return None
        handle = self.ranks[rank]
        return handle if isinstance(handle, AgentRank) and handle.agent is agent else None

    def _lose(self, agent: AgentProcess) -> None:
        """The agent's events ended (it exited, or its ssh/srun did): its ranks are lost."""
        lost = [h for h in self.ranks if isinstance(h, AgentRank) and h.agent is agent]
        running = [h for h in lost if h.returncode is None]
        if running and not self._ending:
            status = agent.proc.poll()
            how = f" (exit status {status})" if status not in (None, 0) else ""
            self.report(f"host {agent.host.name}: lost the connection to its agent{how}")
        for handle in running:
            handle.error = f"lost with the agent of host {agent.host.name}"
            handle.returncode = LOST
        for handle in lost:
            self._stop_input(handle)
        for handle in lost:
            for fd in (1, 2):
                self._close_stream(_stream_key(handle.rank, fd))

    def _describe_failure(self, rank: RankHandle) -> str:
        if isinstance(rank, AgentRank) and rank.error:
            return f"rank {rank.rank} on host {rank.agent.host.name}: {rank.error}"
        return f"{super()._describe_failure(rank)} on host {self._host_of(rank)}"

    def _host_of(self, rank: RankHandle) -> str:
        return self.node_hosts[self.nodes[rank.rank]].name

    def _needs_tick(self) -> bool:
        paused = self._input is not None and self._input.paused()  # a background job's tty
        return super()._needs_tick() or bool(self._starting()) or paused

    def _starting(self) -> list[AgentProcess]:
        """The agents that have not answered yet."""
        return [agent for agent in self.agents if agent.ready is None and not agent.gone]

    def _reap(self) -> None:
        if self._input is not None and self._input.tty:
            self._watch_input()  # the launcher may have become the terminal's foreground job
        if not self._ending and time.monotonic() > self._start_deadline:
            for agent in self._starting():
                self.report(
                    f"host {agent.host.name}: its agent did not answer within "
                    f"{self._start_timeout:g} s ({shlex.join(agent.argv[:3])} ...)"
                )
                agent.gone = True  # its late events are ignored
                self._unwatch(agent.fd)
                for handle in self.ranks:
                    if isinstance(handle, AgentRank) and handle.agent is agent:
                        handle.error = f"its host {agent.host.name} did not start it"
                        handle.returncode = LOST
                        self._stop_input(handle)
                        for fd in (1, 2):
                            self._close_stream(_stream_key(handle.rank, fd))
        super()._reap()

    def _report_errors(self, agent: AgentProcess) -> None:
        """Report what the agent (or its ssh, srun) said on stderr, under its host's name."""
        for line in agent.new_errors():
            self.report(f"host {agent.host.name}: {line}")
        if agent.proc.stderr is not None and agent.proc.poll() is not None:
            assert agent.err_fd is not None
            self._unwatch(agent.err_fd)

    # -- signals, hellos, the end ------------------------------------------------------------
    def send_signal(self, sig: int) -> None:
        """One command per agent: every rank of its host gets ``sig``."""
        for agent in self.agents:
            agent.command({"type": "signal", "signal": int(sig)})

    def _on_hello(self, rank: RankHandle, msg: dict[str, Any]) -> None:
        super()._on_hello(rank, msg)
        if self._peers_sent or not all(handle.hello for handle in self.ranks):
            return
        endpoints = [str((handle.hello or {}).get("data", "")) for handle in self.ranks]
        if not all(endpoints):
            return  # ranks on a single host need no peer table
        self._peers_sent = True
        assert self._control is not None
        self._control.send_all(range(len(self.ranks)), {"type": ctl.PEERS, "endpoints": endpoints})

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._input is not None:
                self._input.stop()
                self._watch_input()
            super().close()
        finally:
            for agent in self.agents:
                agent.close_stdin()
            deadline = time.monotonic() + GRACE
            for agent in self.agents:
                last = agent.finish(time.monotonic() if agent.ready is None else deadline)
                for line in last:
                    self.report(f"host {agent.host.name}: {line}")


def _stream_key(rank: int, fd: int) -> int:
    """The key of a remote rank's stdout (1) or stderr (2) among the job's streams.

    Negative, so it never collides with the file descriptors of local pipes.
    """
    return -(2 * rank + fd)
