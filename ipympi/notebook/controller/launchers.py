"""How a cluster's engines are started, signalled and stopped: its launcher.

A :class:`~ipympi.notebook.controller.cluster.Cluster` keeps the requests, the output
and the interrupts; its launcher starts the engines of each world, says what
becomes of their processes, delivers the signals it can deliver itself, and
ends a world. Two launchers exist:

- :class:`SupervisorLauncher` (backend ``builtin``): engines of ipympi's own
  MPI, forked on this host by a warm supervisor process
  (:mod:`ipympi.notebook.engine.supervisor`).
- :class:`MPILauncher` (backend ``mpi4py``): ``mpiexec -n N`` or ``srun -n N``
  starting ``python -m ipympi.notebook.engine.mpi4py_engine`` once per rank, on
  whatever hosts the launcher chooses.

What a launcher says about the processes is a list of events (dicts), from
:meth:`Launcher.start` and :meth:`Launcher.read`:

=========  ===================================================================
spawned    ``rank``, ``pid`` (None until the engine's hello tells it): the
           rank's engine process exists
exited     ``returncode`` (Popen style) and ``rank``, or ``pid`` and ``host``
           when the launcher does not know the rank: that engine has exited
ended      ``reason`` (str): every engine of the world has gone with the
           process that started them (an MPI launcher ends the whole job when
           one rank fails); optionally ``said``, the line of the launcher's
           output that tells why, and ``abort``, the ``abort`` control
           message the launcher's output showed
=========  ===================================================================

Engines may run on other hosts (:attr:`Launcher.remote`): the cluster then
binds tcp addresses on one interface, has the engines signal themselves
through the control channel when the launcher cannot signal them, and reads
nothing about them from ``/proc``.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...core import control as ctl
from ...launch.basics import job_environment
from ...launch.hosts import Host, interface_address
from ...launch.launcher import _die_with_parent, rank_environment
from ..engine import mpi4py_engine
from ..engine.keeper import parse_report
from .hydraout import HydraOutput
from .outpipes import PipeReader
from .supervisor import SupervisorProcess, engine_environment, take_early

__all__ = [
    "BACKENDS",
    "HOST_LAUNCHERS",
    "LAUNCHERS",
    "MPI_LAUNCHERS",
    "ClusterError",
    "Launcher",
    "MPILauncher",
    "SupervisorLauncher",
    "World",
    "routable_address",
]

BACKENDS = ("builtin", "mpi4py")
MPI_LAUNCHERS = ("mpiexec", "srun")
# Set inside a batch allocation, where mpiexec may start ranks on other hosts.
ALLOCATION_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "COBALT_JOBID", "HYDRA_HOST_FILE")
TAIL_LINES = 20  # lines of an MPI launcher's own output kept for error messages
# Lines of mpiexec's failure banner that say nothing about the failure.
_NOISE = ("=", "YOU CAN IGNORE", "CLEANING UP", "This typically", "Please see")

Event = dict[str, Any]


class ClusterError(RuntimeError):
    """The session cannot do what was asked (no engines, a world that did not start, ...)."""


@dataclass(frozen=True)
class World:
    """What a launcher needs to start the engines of one world."""

    n: int
    gen: int
    directory: str  # the world's private directory on this host
    address: str  # the engine-protocol ROUTER the engines connect to
    control: str  # the world's control ROUTER
    key: bytes  # signs the engine protocol
    control_key: bytes  # signs the world's control messages (and exit reports)
    env: Mapping[str, str]  # the session's environment


class Launcher:
    """Starts, signals and ends the engines of a cluster's worlds (one world at a time)."""

    backend = ""
    name = ""
    library = ""  # the MPI the engines run, as far as the launcher knows
    started_by = ""  # how the engines were started, in words
    remote = False  # engines may live on other hosts
    interrupts_mpi_calls = True  # SIGINT reaches a rank blocked in an MPI call

    @property
    def active(self) -> bool:
        """A process that started this world's engines is still running."""
        return False

    def start(self, world: World) -> list[Event]:
        """Start ``world.n`` engines; the events known at once (``spawned``)."""
        raise NotImplementedError

    def fds(self) -> list[int]:
        """File descriptors to watch: :meth:`read` has news when one is readable."""
        return []

    def read(self, fd: int) -> list[Event]:
        """The events that readable ``fd`` brought."""
        return []

    def signal(self, rank: int, pid: int | None, sig: int) -> bool:
        """Send ``sig`` to one rank's engine; False when only the engine itself can."""
        return False

    def end(self, sig: int) -> None:
        """Send ``sig`` to every engine of the world (SIGTERM, then SIGKILL, ends it)."""

    def close(self, grace: float) -> None:
        """End everything this launcher started, waiting at most about ``grace`` s a step."""

    def diagnosis(self) -> str:
        """What the launcher itself last printed that may explain a failure ("" if nothing)."""
        return ""

    def process_environment(self, index: int, size: int) -> dict[str, str] | None:
        """The environment of a process the current world's ranks spawn, at process index
        ``index`` in a world of ``size`` (:mod:`ipympi.notebook.controller.children`); None
        when this launcher's worlds start no processes."""
        return None

    def address(self) -> str:
        """The address the cluster binds for engines on other hosts (:attr:`remote`)."""
        return routable_address()


# -- the built-in MPI: engines forked by a supervisor ---------------------------------------
class SupervisorLauncher(Launcher):
    """Engines of the built-in MPI, forked by a supervisor process on this host."""

    backend = "builtin"
    name = "the supervisor"
    library = "ipympi's own MPI"
    started_by = "forked by the supervisor"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.supervisor: SupervisorProcess | None = None
        # What the engines need on top of the supervisor's environment: set when
        # the supervisor was started early (supervisor.start_early).
        self._missing: dict[str, str] = {}
        self._pids: dict[int, int] = {}  # rank -> pid, engines of the current world
        self._world: World | None = None

    def start(self, world: World) -> list[Event]:
        if self.supervisor is None or not self.supervisor.alive:
            self.close(0.5)  # what is left of one that died
            early = take_early(self.env, world.n)
            if early is not None:
                self.supervisor, self._missing = early
            else:
                self.supervisor, self._missing = SupervisorProcess(self.env, world.n), {}
        self._pids = {}
        self._world = world
        envs = {
            str(rank): self._mpi_environment(self._missing, rank, world.n)
            for rank in range(world.n)
        }
        self.supervisor.command(
            {
                "type": "spawn",
                "ranks": list(range(world.n)),
                "address": world.address,
                "gen": world.gen,
                "key": world.key.hex(),
                "env": envs,
            }
        )
        return []

    def _mpi_environment(self, base: Mapping[str, str], rank: int, size: int) -> dict[str, str]:
        """``base`` with what makes process ``rank`` of the current world, in a world of
        ``size``: its MPI variables, and ``Comm.Spawn`` served by the controller."""
        world = self._world
        assert world is not None
        key = world.control_key.hex()
        env = rank_environment(base, rank, size, world.directory, key, os.cpu_count())
        env[ctl.ENV_SPAWN] = "1"
        return env

    def process_environment(self, index: int, size: int) -> dict[str, str] | None:
        """A spawned process runs on the engines' environment, where ``import mpi4py``
        gives ipympi as it does on the ranks of ``ipympi.run``."""
        if self._world is None:
            return None
        base = job_environment(engine_environment(self._world.env, self._world.n))
        return self._mpi_environment(base, index, size)

    def fds(self) -> list[int]:
        return [self.supervisor.fd] if self.supervisor is not None else []

    def read(self, fd: int) -> list[Event]:
        assert self.supervisor is not None
        supervisor = self.supervisor
        events = supervisor.read()
        if events is None:  # the supervisor died: so did its engines (PDEATHSIG)
            self.supervisor = None
            died: list[Event] = [
                {"type": "exited", "rank": rank, "pid": pid, "returncode": -int(signal.SIGKILL)}
                for rank, pid in self._pids.items()
            ]
            self._pids = {}
            # Ranks it had not forked yet would never say hello: the world ends now,
            # saying why, instead of when the start-up timeout runs out.
            reason = f"the engine supervisor ended{supervisor.exit_note()}"
            return [*died, {"type": "ended", "reason": reason, "known": True}]
        current = []  # events about engines of the current world
        for event in events:
            rank: Any = event.get("rank")  # a JSON value
            if event.get("type") == "spawned" and rank is not None:
                self._pids[int(rank)] = int(event["pid"])
                current.append(event)
            elif event.get("type") == "exited" and self._pids.get(rank) == event.get("pid"):
                del self._pids[rank]
                current.append(event)
        return current

    def signal(self, rank: int, pid: int | None, sig: int) -> bool:
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)  # the engine leads its own process group
        return True

    def end(self, sig: int) -> None:
        for rank, pid in list(self._pids.items()):
            self.signal(rank, pid, sig)

    def close(self, grace: float) -> None:
        if self.supervisor is not None:
            self.supervisor.stop(grace)
            self.supervisor = None


# -- a real MPI: engines started by mpiexec or srun -----------------------------------------
class MPILauncher(Launcher):
    """``mpiexec -n N`` or ``srun -n N`` running mpi4py engines (see the module docstring).

    The job's own standard output carries the keepers' exit reports
    (:mod:`ipympi.notebook.engine.keeper`); whatever else the launcher prints is kept
    (the last :data:`TAIL_LINES` lines) to explain a failure.
    """

    backend = "mpi4py"
    library = "a real MPI"  # until the engines name it
    interrupts_mpi_calls = False

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        hosts: Sequence[Host] | None = None,
        program: str | None = None,
        iface: str | None = None,
    ) -> None:
        """``hosts`` go to the MPI launcher (``mpiexec -hosts``, ``srun --nodelist``);
        ``program`` replaces the ``mpiexec``/``srun`` found on PATH; engines on other
        hosts reach the controller at ``iface``'s address."""
        if name not in MPI_LAUNCHERS:
            raise ClusterError(f"unknown launcher {name!r}: choose from {', '.join(MPI_LAUNCHERS)}")
        if importlib.util.find_spec("mpi4py") is None:
            raise ClusterError(
                "the mpi4py backend needs mpi4py and an MPI library: "
                "pip install mpi4py (and, without a system MPI, pip install mpich)"
            )
        self.name = name
        self.started_by = f"started by {name}"
        self.program = program or _find_program(name, env)
        self.hosts = list(hosts or [])
        self._hosts_flag = ""  # how this mpiexec is given hosts, once asked
        self.iface = iface
        self.remote = (
            name == "srun"
            or bool(hosts)
            or iface is not None
            or any(var in env for var in ALLOCATION_VARIABLES)
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self._key = b""
        self._pidfd: int | None = None
        # open output pipe -> each rank's unfinished line (group 0 of ``_marks``)
        self._pipes: dict[int, dict[int, bytes]] = {}
        self._marks: HydraOutput | None = None  # MPICH's marks on each chunk, if it takes them
        self._decoders: dict[tuple[int, int, int], Any] = {}  # (pipe, group, rank) -> decoder
        # Reads the pipes also between cells: a spawned process that prints much then never
        # stalls on a full pipe. Nothing is left out: the keepers' reports come this way.
        self._reader = PipeReader(limit=None)
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._reported = False  # some rank's keeper reported its exit

    @property
    def active(self) -> bool:
        return self.proc is not None

    def command(self, n: int) -> list[str]:
        """The command line of a world of ``n`` ranks."""
        engine = [sys.executable, "-m", mpi4py_engine.__name__]
        if self.name == "srun":
            nodes = [f"--nodelist={','.join(h.name for h in self.hosts)}"] if self.hosts else []
            # End the step when a task fails, as mpiexec ends the job.
            return [self.program, f"--ntasks={n}", "--kill-on-bad-exit=1", *nodes, *engine]
        placement = []
        if self.hosts:
            self._hosts_flag = self._hosts_flag or _hosts_option(self.program)
            placement = [self._hosts_flag, ",".join(f"{h.name}:{h.slots}" for h in self.hosts)]
        marks = self._marks.option() if self._marks is not None else []
        return [self.program, "-n", str(n), *placement, *marks, *engine]

    def address(self) -> str:
        return interface_address(self.iface) if self.iface else routable_address()

    def start(self, world: World) -> list[Event]:
        self.close(0.5)  # whatever is left of the previous world
        env = engine_environment(world.env, world.n)
        for name in (ctl.ENV_RANK, ctl.ENV_SESSION_DIR):
            env.pop(name, None)  # these would make ipympi's own MPI think it runs
        env.update(
            {
                mpi4py_engine.ENV_ENGINES: world.address,
                mpi4py_engine.ENV_ENGINE_KEY: world.key.hex(),
                mpi4py_engine.ENV_GEN: str(world.gen),
                ctl.ENV_CTL: world.control,
                ctl.ENV_KEY: world.control_key.hex(),
                ctl.ENV_SIZE: str(world.n),
                mpi4py_engine.ENV_WORLD_DIR: world.directory,
            }
        )
        self._key = world.control_key
        self._tail.clear()
        self._reported = False
        self._decoders = {}
        if self.name == "mpiexec" and _prepends_pattern(self.program):
            self._marks = HydraOutput(world.n)  # the spawned processes' output, labelled
        try:
            self.proc = subprocess.Popen(
                self.command(world.n),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: ended as one
                preexec_fn=_die_with_parent(),
            )
        except OSError as exc:
            raise ClusterError(f"cannot start {self.name} ({self.program}): {exc}") from None
        for pipe in (self.proc.stdout, self.proc.stderr):
            assert pipe is not None
            self._pipes[pipe.fileno()] = {}
            name = "stdout" if pipe is self.proc.stdout else "stderr"
            self._reader.add(pipe.fileno(), pipe.fileno(), name)
        with contextlib.suppress(AttributeError, OSError):  # without pidfd: end of output
            self._pidfd = os.pidfd_open(self.proc.pid)
        return [{"type": "spawned", "rank": rank, "pid": None} for rank in range(world.n)]

    def fds(self) -> list[int]:
        output = [self._reader.fd] if self._pipes else []
        return [*output, *([self._pidfd] if self._pidfd is not None else [])]

    def read(self, fd: int) -> list[Event]:
        if fd == self._reader.fd:
            events = self._take()
            if self._pipes or self._pidfd is not None:
                return events
        else:
            events = []
        # The launcher has exited (or closed its output): the world is over.
        events += self._take(now=True)
        for pipe in list(self._pipes):  # what is not closed yet will say no more
            events += self._read_pipe(pipe, b"", True)
        return events + self._reap()

    def _take(self, now: bool = False) -> list[Event]:
        """Events in what the reader has read from the pipes (``now``: and what they hold)."""
        events: list[Event] = []
        for chunk in self._reader.take(now):
            if chunk.key in self._pipes:
                events += self._read_pipe(chunk.key, chunk.data, chunk.ended)
        return events

    def _read_pipe(self, fd: int, data: bytes, ended: bool) -> list[Event]:
        """Events in ``data`` read from ``fd`` (``ended``: all it will say; it is closed)."""
        pieces = self._marks.split(fd, data, ended) if self._marks else [(0, 0, data)]
        events: list[Event] = []
        partial = self._pipes[fd]
        for group, rank, piece in pieces:
            if group:  # a spawned process's output
                events.append(self._child_output(fd, group, rank, piece, ended))
                continue
            lines = (partial.get(rank, b"") + piece).split(b"\n")
            partial[rank] = lines.pop()
            for line in lines:
                self._line(line, events)
        if ended:
            for line in partial.values():
                self._line(line, events)
            del self._pipes[fd]
            self._close_pipe(fd)
        return events

    def _line(self, line: bytes, events: list[Event]) -> None:
        """A line of the engines' world: a keeper's exit report, or kept for diagnosis."""
        report = parse_report(line, self._key) if line else None
        if report is not None:
            self._reported = True
            events.append({"type": "exited", **report})
        elif line.strip():
            self._tail.append(line.decode(errors="replace").rstrip())

    def _child_output(self, fd: int, group: int, rank: int, chunk: bytes, ended: bool) -> Event:
        """The ``output`` event of what ``rank`` of spawned ``group`` wrote (see hydraout)."""
        assert self._marks is not None and self.proc is not None
        key = (fd, group, rank)
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = self._decoders[key] = codecs.getincrementaldecoder("utf-8")("replace")
        stdout = self.proc.stdout is not None and self.proc.stdout.fileno() == fd
        return {
            "type": "output",
            "index": self._marks.index(group, rank),
            "name": "stdout" if stdout else "stderr",
            "text": decoder.decode(chunk, final=ended),
        }

    def _close_pipe(self, fd: int) -> None:
        assert self.proc is not None
        self._reader.forget(fd)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed and pipe.fileno() == fd:
                pipe.close()

    def _reap(self) -> list[Event]:
        """The ``ended`` event of a launcher that has exited (or whose output has ended)."""
        proc = self.proc
        if proc is None:
            return []
        try:
            returncode = proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
        self._forget_process()
        event: Event = {"type": "ended"}
        if self._reported:
            event["reason"] = f"{self.name} then ended the other ranks"
        elif returncode == 0:
            event["reason"] = f"{self.name} ended every rank of the world"
        else:
            what = ctl.describe_exit(returncode)
            event["reason"] = f"{self.name} {what} and ended every rank of the world"
            event["said"] = (self.diagnosis().splitlines() or [""])[-1]
        abort = self._abort_in_output()
        if abort is not None:
            event["abort"] = abort
        return [event]

    def _abort_in_output(self) -> dict[str, Any] | None:
        """An ``abort`` message for the ``Abort`` line of a rank, if the output shows one."""
        for line in self._tail:
            found = mpi4py_engine.abort_in(line.encode())
            marker = " (rank "
            if found is None or marker not in line:
                continue
            rank_text = line.split(marker, 1)[1].split()[0]
            if not rank_text.isdigit() or " in comm 0)" not in line:
                continue  # only a rank of MPI_COMM_WORLD (comm 0) can be named
            code, reason = found
            return {"type": ctl.ABORT, "rank": int(rank_text), "code": code, "reason": reason}
        return None

    def diagnosis(self) -> str:
        lines = [line for line in self._tail if not line.lstrip().startswith(_NOISE)]
        return "\n".join(lines[-5:])

    def signal(self, rank: int, pid: int | None, sig: int) -> bool:
        return False  # an engine may be on another host: it signals itself

    def end(self, sig: int) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if sig == signal.SIGKILL:
                os.killpg(proc.pid, sig)  # the launcher and its agents on this host
            else:
                proc.send_signal(sig)  # mpiexec and srun pass it on to every rank

    def close(self, grace: float) -> None:
        proc = self.proc
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            self.end(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        self._forget_process()

    def _forget_process(self) -> None:
        for fd in list(self._pipes):
            self._close_pipe(fd)
        self._reader.take()  # what it read of them is the ended world's
        self._pipes = {}
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(1.0)
        self.proc = None


def _find_program(name: str, env: Mapping[str, str]) -> str:
    """The launcher's executable: on ``PATH``, or (mpiexec) next to this Python."""
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if name == "mpiexec" and os.access(beside, os.X_OK):
        return beside  # the mpich wheel installs it there
    if name == "srun":
        raise ClusterError(
            "--launcher srun: there is no srun on PATH (srun comes with Slurm: "
            "run the notebook on a node of a Slurm cluster, inside an allocation)"
        )
    raise ClusterError(
        f"--launcher {name}: there is no {name} on PATH nor next to {sys.executable} "
        "(install an MPI, e.g. pip install mpich)"
    )


_PREPENDS: dict[str, bool] = {}  # mpiexec -> whether it takes -prepend-pattern (Hydra)


def _prepends_pattern(program: str) -> bool:
    """Whether ``program`` (an mpiexec) marks its processes' output chunks: MPICH's
    Hydra does (``-prepend-pattern``), Open MPI's does not."""
    if program not in _PREPENDS:
        try:
            said = subprocess.run(
                [program, "-h"], capture_output=True, text=True, timeout=10, check=False
            )
            _PREPENDS[program] = "-prepend-pattern" in said.stdout + said.stderr
        except (OSError, subprocess.TimeoutExpired):
            _PREPENDS[program] = False
    return _PREPENDS[program]


def _hosts_option(program: str) -> str:
    """How ``program`` (an mpiexec) is given hosts: Open MPI's ``--host``, else MPICH's
    (and Intel MPI's) ``-hosts``."""
    try:
        said = subprocess.run(
            [program, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "-hosts"
    text = said.stdout + said.stderr
    return "--host" if "Open MPI" in text or "OpenRTE" in text else "-hosts"


# -- choosing one ---------------------------------------------------------------------------
HOST_LAUNCHERS = ("auto", "local", "ssh", "srun")  # start supervisors of the built-in MPI
LAUNCHERS = tuple(dict.fromkeys((*MPI_LAUNCHERS, *HOST_LAUNCHERS)))


def routable_address() -> str:
    """The IP address of this host that engines on other hosts can connect to.

    The address of the interface of the default route (a UDP socket is
    connected, nothing is sent); else the address of the host name; loopback
    only as a last resort. (``--iface``/``IPYMPI_IFACE`` choose another.)
    """
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never contacted
        address = probe.getsockname()[0]
        if not address.startswith("127."):
            return address
    with contextlib.suppress(OSError):
        address = socket.gethostbyname(socket.gethostname())
        if not address.startswith("127."):
            return address
    return "127.0.0.1"
