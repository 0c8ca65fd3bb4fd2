"""The host agent of a job on several hosts: ``python -m ipympi.launch.node``.

``ipympi.run --hosts ...`` starts one agent per host: itself for this
machine, through ssh or srun for the others. The agent makes the host's
private session directory (its ranks' data sockets live there), starts the
host's ranks in their own process groups, and tells the launcher everything
about them: pids, output, exits. It dies with the launcher: end of file on its
stdin (the ssh or srun connection is gone) kills its ranks, and on Linux a
locally started agent also gets the parent-death signal.

It speaks one JSON object per line, commands on stdin and events on stdout:

=========  ==========  ==============================================================
type       direction   keys
=========  ==========  ==============================================================
start      L → agent   ``host`` (its name in the host list), ``iface`` (or null),
                       ``launcher`` (the launcher's address), ``argv``, ``cwd``,
                       ``env`` (variables to set for every rank, or null),
                       ``ranks``: ``[{"rank": r, "env": {...}}, ...]``, with
                       ``"stdin": true`` for the rank whose stdin is fed by ``input``
                       commands (others read /dev/null); once, first
input      L → agent   ``rank``, ``data`` (base64) or ``eof`` (true): the launcher's
                       stdin for that rank (:mod:`ipympi.launch.stdinput`)
signal     L → agent   ``signal`` (int), ``ranks`` (optional list): signal those
                       ranks' process groups (all of this host's by default)
exit       L → agent   end every rank (SIGKILL), remove the session, exit
ready      agent → L   ``host`` (this machine's name), ``pid``, ``bind`` (address
                       the ranks' tcp sockets bind), ``note`` (optional warning)
spawned    agent → L   ``rank``, ``pid``
failed     agent → L   ``rank``, ``status`` (126/127), ``error``: could not start it
output     agent → L   ``rank``, ``fd`` (1 or 2), ``data`` (base64)
closed     agent → L   ``rank``, ``fd``: that stream reached end of file
exited     agent → L   ``rank``, ``returncode`` (Popen style: -n after signal n)
input      agent → L   ``rank``, ``taken`` (bytes of input written into its stdin or
                       dropped), ``closed`` (optional true: it takes no more input)
=========  ==========  ==============================================================

The session key travels inside the ranks' environment in the ``start``
command, on the agent's stdin: never on a command line.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Callable

from ..core import control as ctl
from .hosts import HostError, bind_address_for
from .jsonlines import CommandLoop
from .launcher import THREAD_VARS, _die_with_parent
from .sessiondir import make_session_dir, remove_session_dir
from .stdinput import InputSink

__all__ = ["Agent", "main"]

_CHUNK = 1 << 16
_KILL_WAIT = 2.0  # seconds to reap ranks after SIGKILL at exit


class Agent(CommandLoop):
    """Starts one host's ranks and reports on them (see the module docstring)."""

    def __init__(self, commands: int = 0, events: int = 1) -> None:
        super().__init__(commands, events)
        self.session_dir: str | None = None
        self.ranks: dict[int, subprocess.Popen[bytes]] = {}  # rank -> process
        self.exited: set[int] = set()
        self.pipes: dict[int, tuple[int, int]] = {}  # fd -> (rank, 1 or 2)
        self.inputs: dict[int, InputSink] = {}  # rank -> its stdin, fed by the launcher

    def handle(self, command: dict[str, Any]) -> bool:
        kind = command.get("type")
        if kind == "start":
            self.start(command)
        elif kind == "signal":
            self.signal(int(command["signal"]), command.get("ranks"))
        elif kind == "input":
            rank = command.get("rank")
            if isinstance(rank, int) and rank in self.inputs:
                self.inputs[rank].feed(command)
        elif kind == "exit":
            return False
        else:
            print(f"ipympi agent: unknown command {kind!r}", file=sys.stderr, flush=True)
        return True

    # -- starting ranks -------------------------------------------------------------
    def start(self, spec: dict[str, Any]) -> None:
        note = ""
        cwd = spec.get("cwd")
        if cwd and not os.path.isdir(cwd):
            note = f"{cwd} does not exist on {socket.gethostname()}; ranks start in $HOME"
            cwd = os.path.expanduser("~")
        try:
            bind = bind_address_for(str(spec["host"]), spec.get("iface"), str(spec["launcher"]))
        except HostError as exc:
            self.emit({"type": "ready", "host": socket.gethostname(), "pid": os.getpid()})
            for entry in spec["ranks"]:
                self.emit({"type": "failed", "rank": entry["rank"], "status": 1, "error": str(exc)})
            return
        self.session_dir = make_session_dir()
        ready = {"type": "ready", "host": socket.gethostname(), "pid": os.getpid(), "bind": bind}
        if note:
            ready["note"] = note
        self.emit(ready)
        base = dict(os.environ)
        base.update(spec.get("env") or {})
        base[ctl.ENV_SESSION_DIR] = self.session_dir
        base[ctl.ENV_BIND] = bind
        cpus = os.cpu_count()
        if cpus is not None and len(spec["ranks"]) >= cpus:
            for var in THREAD_VARS:  # oversubscribed BLAS/OpenMP pools are slow
                base.setdefault(var, "1")
        preexec = _rank_preexec(_die_with_parent())
        for entry in spec["ranks"]:
            rank = int(entry["rank"])
            env = dict(base, **entry["env"])
            stdin_r = stdin_w = None
            if entry.get("stdin"):
                stdin_r, stdin_w = os.pipe()
            try:
                proc = subprocess.Popen(
                    spec["argv"],
                    stdin=subprocess.DEVNULL if stdin_r is None else stdin_r,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=cwd or None,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            except OSError as exc:
                status = 126 if isinstance(exc, PermissionError) else 127
                error = f"cannot run {spec['argv'][0]!r}: {exc.strerror or exc}"
                self.emit({"type": "failed", "rank": rank, "status": status, "error": error})
                if stdin_w is not None:
                    os.close(stdin_w)
                continue
            finally:
                if stdin_r is not None:
                    os.close(stdin_r)
            self.ranks[rank] = proc
            if stdin_w is not None:
                self.inputs[rank] = InputSink(rank, stdin_w, self.emit)
            assert proc.stdout is not None and proc.stderr is not None
            for fd, stream in ((proc.stdout.fileno(), 1), (proc.stderr.fileno(), 2)):
                self.pipes[fd] = (rank, stream)
            self.emit({"type": "spawned", "rank": rank, "pid": proc.pid})

    # -- what the ranks do -----------------------------------------------------------
    def watched(self) -> list[int]:
        return list(self.pipes)

    def on_readable(self, fd: int) -> None:
        self.forward(fd)

    def watched_writable(self) -> list[int]:
        fds = (sink.fd for sink in self.inputs.values() if sink.wants_write())
        return [fd for fd in fds if fd is not None]

    def on_writable(self, fd: int) -> None:
        for sink in self.inputs.values():
            if sink.fd == fd:
                sink.flush()

    def forward(self, fd: int) -> None:
        rank, stream = self.pipes[fd]
        try:
            data = os.read(fd, _CHUNK)
        except OSError:
            data = b""
        if data:
            text = base64.b64encode(data).decode()
            self.emit({"type": "output", "rank": rank, "fd": stream, "data": text})
            return
        del self.pipes[fd]
        os.close(fd)
        self.emit({"type": "closed", "rank": rank, "fd": stream})

    def reap(self) -> None:
        for rank, proc in self.ranks.items():
            if rank not in self.exited and proc.poll() is not None:
                self.exited.add(rank)
                if rank in self.inputs:
                    self.inputs[rank].gone()
                self.emit({"type": "exited", "rank": rank, "returncode": proc.returncode})

    def signal(self, signum: int, ranks: list[int] | None) -> None:
        for rank, proc in self.ranks.items():
            if (ranks is None or rank in ranks) and rank not in self.exited:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signum)

    def end(self) -> None:
        """Kill every rank still running, reap them, and remove the session directory."""
        self.signal(signal.SIGKILL, None)
        deadline = time.monotonic() + _KILL_WAIT
        for proc in self.ranks.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        self.reap()
        for fd in list(self.pipes):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pipes.clear()
        for sink in self.inputs.values():
            sink.gone()
        remove_session_dir(self.session_dir)


def _rank_preexec(die_with_parent: Callable[[], None] | None) -> Callable[[], None]:
    """Set up a rank's process after fork: default signal handling (the agent ignores
    SIGINT, and an ignored signal would stay ignored across exec), then die with the agent."""

    def preexec() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        if die_with_parent is not None:
            die_with_parent()

    return preexec


def main() -> int:
    return Agent().run()


if __name__ == "__main__":
    sys.exit(main())
