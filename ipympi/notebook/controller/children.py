"""The processes a notebook session's ranks start with ``Comm.Spawn``: the controller's side.

A rank's ``Comm.Spawn`` sends a ``spawn`` control message (:mod:`ipympi.core.control`)
to the world's control socket, which the :class:`~ipympi.notebook.controller.cluster.Cluster`
owns. It hands the message to :class:`Children`, which checks the programs with
:func:`ipympi.launch.spawning.plan_apps` (nothing starts unless all can), starts them as
plain processes at the world's next free process indexes, with the environment the
launcher gives a rank of that index (:meth:`Launcher.process_environment
<ipympi.notebook.controller.launchers.Launcher.process_environment>`) plus
:func:`~ipympi.launch.spawning.child_environment`, so that the transport and the control
channel reach them as they reach the engines, and returns the ``spawned`` answer.

The children's standard output and error are read always, also between cells, by a
thread of their own (:class:`~ipympi.notebook.controller.outpipes.PipeReader`: a child
never stalls on a full pipe), and become ``stream`` messages of their process index,
fed to the cell that is running (else the next one), where the renderer labels them as
it labels the ranks' (``[stdout:2]``). A child that exits with a non-zero status
adds a line on its stderr (``spawned process 3 exited with status 1``) and the ranks
are told (``peer_exit``), so that what waits on it fails instead of hanging. Children
never outlive their world: :meth:`Children.close` ends them (TERM, then KILL, each in
its own process group) when the world stops, restarts or the kernel shuts down, and
Linux kills them if the controller dies first.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from ...core import control as ctl
from ...launch import spawning
from ...launch.basics import _die_with_parent
from ...launch.watch import with_cpu
from .outpipes import PipeReader

if TYPE_CHECKING:
    from ...launch.ctlserver import ControlServer
    from .launchers import Launcher
    from .records import EngineRecord, Submission

__all__ = ["Child", "Children", "ServesSpawn", "SpawnHost"]

Item = tuple[int, str, dict[str, Any]]  # (process index, msg_type, content), as engines send
#: ``environment(index, size)``: a rank's environment for process ``index`` in a world of
#: ``size``; None when the launcher's worlds start no processes.
Environment = Callable[[int, int], "dict[str, str] | None"]


@dataclass
class Child:
    """One spawned process: its index, its process and its open output pipes."""

    index: int
    popen: subprocess.Popen[bytes]
    pipes: set[str] = field(default_factory=set)  # the names of its open output pipes
    decoders: dict[str, Any] = field(default_factory=dict)  # stream name -> its decoder
    returncode: int | None = None


class Children:
    """The spawned processes of one world (see the module docstring)."""

    def __init__(self) -> None:
        self.next_index = 0  # the next free process index of the world
        self.procs: dict[int, Child] = {}  # index -> child, until its exit is reported
        self.output = PipeReader()  # reads the children's pipes, also between cells
        self.ending = False  # the world is being ended: exits are not failures
        self.states: dict[int, dict[str, Any]] = {}  # index -> answer to the last query
        self.dead: dict[int, str] = {}  # index -> how a child that failed ended

    def reset(self, first: int) -> None:
        """A new world whose ranks have indexes below ``first``."""
        self.close(0.0)
        self.next_index = first
        self.ending = False
        self.dead = {}

    @property
    def running(self) -> bool:
        return any(child.popen.poll() is None for child in self.procs.values())

    def note_state(self, index: int, state: dict[str, Any]) -> None:
        """A child's answer to a state query, with the CPU time it has used."""
        child = self.procs.get(index)
        if child is not None:
            self.states[index] = with_cpu(state, child.popen.pid)

    @property
    def fd(self) -> int:
        """Readable when the children have said something: a poller watches it."""
        return self.output.fd

    # -- starting ------------------------------------------------------------------------
    def spawn(self, msg: Mapping[str, Any], environment: Environment) -> dict[str, Any]:
        """Start the programs of the ``spawn`` message ``msg``; the ``spawned`` answer."""
        try:
            parents = msg.get("parents")
            if not isinstance(parents, list) or not parents:
                raise spawning.Refused("the request names no parents")
            if not all(isinstance(p, int) for p in parents):
                raise spawning.Refused("the request names no parents")
            return spawning.accepted(msg, self._start(msg, environment))
        except spawning.Refused as exc:
            return spawning.refusal(msg, str(exc))

    def _start(self, msg: Mapping[str, Any], environment: Environment) -> list[int]:
        if self.ending:
            raise spawning.Refused("the world is ending")
        first = self.next_index
        probe = environment(first, 1)
        if probe is None:
            raise spawning.Refused("the ranks of this session start no processes")
        starts = spawning.plan_apps(msg["apps"], probe)
        started: list[Child] = []

        def rank_environment(index: int, size: int) -> dict[str, str]:
            env = environment(index, size)
            assert env is not None
            return env

        def launch(index: int, start: spawning.Start, env: dict[str, str]) -> None:
            started.append(self._popen(index, start, env))

        def undo() -> None:
            for child in started:
                self._forget(child, kill=True)

        indexes = spawning.start_each(msg, starts, first, rank_environment, launch, undo)
        self.next_index = first + len(indexes)
        return indexes

    def _popen(self, index: int, start: spawning.Start, env: dict[str, str]) -> Child:
        popen = subprocess.Popen(
            start.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=start.cwd,
            start_new_session=True,  # its own process group: ended as one
            preexec_fn=_die_with_parent(),
        )
        child = Child(index, popen)
        self.procs[index] = child
        for pipe, name in ((popen.stdout, "stdout"), (popen.stderr, "stderr")):
            assert pipe is not None
            child.pipes.add(name)
            child.decoders[name] = codecs.getincrementaldecoder("utf-8")(errors="replace")
            self.output.add(pipe.fileno(), index, name)
        return child

    # -- output and exits ----------------------------------------------------------------
    def take(self, now: bool = False) -> tuple[list[Item], list[tuple[int, int]]]:
        """What the children said since the last take (output items), and ``(index,
        returncode)`` of children whose output has ended and that have exited; with
        ``now``, also what their pipes hold at this moment."""
        items: list[Item] = []
        exits: list[tuple[int, int]] = []
        for chunk in self.output.take(now):
            child = self.procs.get(chunk.key)
            decoder = child.decoders.get(chunk.name) if child is not None else None
            if decoder is None:  # a note of the reader's, or a child already forgotten
                text = chunk.data.decode(errors="replace")
            else:
                text = decoder.decode(chunk.data, final=chunk.ended)
            if text:
                items.append((chunk.key, "stream", {"name": chunk.name, "text": text}))
            if chunk.ended and child is not None:
                self._close_pipe(child, chunk.name)
                exits += self._reap(child)
        return _merged(items), exits

    def _close_pipe(self, child: Child, name: str) -> None:
        pipe = child.popen.stdout if name == "stdout" else child.popen.stderr
        child.pipes.discard(name)
        if pipe is not None and not pipe.closed:
            self.output.forget(pipe.fileno())
            pipe.close()

    def _reap(self, child: Child) -> list[tuple[int, int]]:
        """``[(index, returncode)]`` once the child's output has ended and it has exited."""
        if child.pipes:
            return []
        try:
            returncode = child.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # closed its output but lives on: end it
            self._signal(child, signal.SIGKILL)
            returncode = child.popen.wait()
        child.returncode = returncode
        self.procs.pop(child.index, None)
        return [(child.index, returncode)]

    def failure_notice(self, index: int, returncode: int) -> Item:
        """The stderr line that reports a failed child in the cell."""
        text = f"spawned process {index} {ctl.describe_exit(returncode)}\n"
        return (index, "stream", {"name": "stderr", "text": text})

    # -- ending --------------------------------------------------------------------------
    @staticmethod
    def _signal(child: Child, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.popen.pid, sig)

    def end(self, sig: int) -> None:
        """Send ``sig`` to every running child (and whatever it started)."""
        for child in self.procs.values():
            if child.popen.poll() is None:
                self._signal(child, sig)

    def close(self, grace: float) -> None:
        """End every child (TERM, then KILL after ``grace`` s) and forget them."""
        self.ending = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.running:
                break
            self.end(sig)
            deadline = time.monotonic() + grace
            while self.running and time.monotonic() < deadline:
                time.sleep(0.02)
        for child in list(self.procs.values()):
            self._forget(child, kill=True)
        self.output.take()  # what they said last goes with their world

    def _forget(self, child: Child, kill: bool) -> None:
        if kill and child.popen.poll() is None:
            self._signal(child, signal.SIGKILL)
        for name in list(child.pipes):
            self._close_pipe(child, name)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(5.0)
        self.procs.pop(child.index, None)


class SpawnHost(Protocol):
    """What :class:`ServesSpawn` needs of the cluster it is a part of."""

    _ctl: ControlServer | None  # the world's control socket
    _held: list[Item]  # their output no running cell has taken yet
    children: Children
    launcher: Launcher
    engines: list[EngineRecord]
    requests: dict[str, Submission]

    @property
    def ending(self) -> bool: ...


class ServesSpawn:
    """What a :class:`~ipympi.notebook.controller.cluster.Cluster` does for its world's
    spawned processes: serve ``spawn`` requests, watch the children's output, show it.
    What it needs of the cluster is :class:`SpawnHost`."""

    def _on_spawn(self, rank: int, msg: dict[str, Any]) -> None:
        """Start what a rank's ``Comm.Spawn`` asks for and answer it."""
        cluster = cast("SpawnHost", self)
        assert cluster._ctl is not None
        if cluster.ending:
            answer = spawning.refusal(msg, "the world is ending")
        else:
            answer = cluster.children.spawn(msg, cluster.launcher.process_environment)
        cluster._ctl.nranks = max(cluster._ctl.nranks, cluster.children.next_index)
        cluster._ctl.send(rank, answer)

    def _on_child_error(self, rank: int, msg: dict[str, Any]) -> None:
        """A spawned process's uncaught exception: its traceback, on its stderr."""
        if rank >= len(cast("SpawnHost", self).engines):  # engines report theirs in replies
            text = str(msg.get("text", ""))
            self._children_said([(rank, "stream", {"name": "stderr", "text": text})], [])

    def _on_child_hello(self, rank: int) -> None:
        """A child has connected: tell it of the children that died before it could hear."""
        self._tell_of_dead([rank], cast("SpawnHost", self).children.dead)

    def _tell_of_dead(self, ranks: list[int], dead: Mapping[int, str]) -> None:
        """Send ``ranks`` a ``peer_exit`` per dead child: what waits on one fails."""
        control = cast("SpawnHost", self)._ctl
        if control is None:
            return
        for index, reason in dead.items():
            control.send_all(ranks, {"type": ctl.PEER_EXIT, "rank": index, "reason": reason})

    def _children_said(self, items: list[Item], exits: list[tuple[int, int]]) -> None:
        """Show the children's output in the running cell (else the next); report a child
        that failed, and tell the ranks, so that what waits on it fails."""
        cluster = cast("SpawnHost", self)
        children = cluster.children
        for index, returncode in exits:
            if returncode and not (cluster.ending or children.ending):
                items.append(children.failure_notice(index, returncode))
                children.dead[index] = ctl.describe_exit(returncode)
                peers = [e.rank for e in cluster.engines if e.alive] + list(children.procs)
                self._tell_of_dead(peers, {index: children.dead[index]})
        if not items:
            return
        running = [
            req
            for req in cluster.requests.values()
            if req.kind == "execute" and req.shown and not req.done
        ]
        if running:
            running[-1].add_output(*items)
        else:
            cluster._held.extend(items)


def _merged(items: list[Item]) -> list[Item]:
    """``items`` with the text of successive items of one stream of one process joined."""
    out: list[Item] = []
    for index, kind, content in items:
        last = out[-1] if out else None
        if last is not None and last[0] == index and last[2]["name"] == content["name"]:
            out[-1] = (index, kind, {**last[2], "text": last[2]["text"] + content["text"]})
        else:
            out.append((index, kind, content))
    return out
